"""The text buffer kernels are emitted into, and the naming of adjoint variables.

Shared by the code generator (codegen.py) and its schedules (fused_schedule.py, device.py,
checkpointing.py) and adjoint templates (adjoints.py).
"""

import re


class _Names:
    """One naming scheme: ``d_x`` for the adjoint of user variable ``x``, ``_dN`` for ``_tN``."""

    def __init__(self, taken):
        self.taken = set(taken)
        self.adj = {}
        self.counts = {}

    def fresh(self, prefix):
        """A name of its own for a temporary of one statement's adjoint (``_r1``: a callee's
        tangents, ``_p1``: partials, ``_g1``: a saved adjoint). Each name then holds one type
        wherever it is bound, which is what lets a kernel type without Numba's SSA
        reconstruction (numba_glue.ssa_optional)."""
        while True:
            self.counts[prefix] = self.counts.get(prefix, 0) + 1
            name = f"{prefix}{self.counts[prefix]}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def primal_of(self, adjoint):
        return next(v for v, a in self.adj.items() if a == adjoint)

    def d(self, v):
        name = self.adj.get(v)
        if name is None:
            name = self.adj[v] = derivative_name(v, self.taken)
        return name


def derivative_name(v, taken):
    """The name of ``v``'s adjoint or tangent, ``d_x`` (``_d5`` for the temporary ``_t5``), not
    in ``taken`` (added there): the reverse and forward kernels name them alike."""
    name = f"_d{v[2:]}" if v.startswith("_t") and v[2:].isdigit() else f"d_{v.lstrip('_')}"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _element_update(text):
    """``d_w[1] += g`` written ``d_w[1] = d_w[1] + (g)``. Numba 0.68's bytecode frontend (Python
    3.11's COPY/SWAP sequence for an augmented assignment to a subscript) can lose the loaded
    right-hand side in a long kernel: "Type of variable '$_d41906.34.1' cannot be determined"
    (fuzz seed 20261321 #119; docs/numba-internals.md). The plain form compiles to the same code.
    A whole-array ``d_x += g`` stays: it must update the array in place (views share it)."""
    for op in ("+", "-"):
        lhs, sep, rhs = text.partition(f" {op}= ")
        if sep and lhs.endswith("]") and "[" in lhs and lhs.split("[", 1)[0].isidentifier():
            simple = not re.search(r"[-+<>=]|\b(if|or|and|not|lambda)\b", rhs)
            return f"{lhs} = {lhs} {op} {rhs if simple else f'({rhs})'}"
    return text


class _Out:
    """Lines of one kernel, and (for the pullback) the primal names it reads before it sets
    them: those become residuals."""

    def __init__(self):
        self.lines = []
        self.reads = set()
        self.indent = 1
        self.last_line = None
        self.pending = None
        self.local = [set()]     # names the reverse sweep has set in the current loop scope
        self.fresh = set()       # adjoints whose single contribution the current statement makes
        self.casts = {}          # adjoint arrays of a dtype other than float64 -> their dtype

    def add(self, text):
        if self.pending:
            self.lines.append("    " * self.indent + self.pending)
            self.pending = None
        if self.fresh:
            name, _, rest = text.partition(" ")
            if name in self.fresh and rest[:3] in ("+= ", "-= "):
                # The one contribution this adjoint gets: assign it (no 0.0 + g to keep).
                self.fresh.discard(name)
                expr = rest[3:] if rest[0] == "+" else f"-({rest[3:]})"
                if name in self.casts:
                    # Accumulating into an array keeps its dtype; an assignment must keep it too
                    # (a float32 adjoint would otherwise turn float64 through a float constant).
                    expr = f"_cast({expr}, _np.{self.casts[name]})"
                text = f"{name} = {expr}"
        text = _element_update(text)
        self.lines.append("    " * self.indent + text)

    def read(self, name):
        if not any(name in scope for scope in self.local):
            self.reads.add(name)

    def comment(self, fn, line):
        # Emitted lazily, with the first line of code it explains.
        if line and line != self.last_line:
            self.last_line = line
            k = line - fn.firstline
            text = fn.source_lines[k].strip() if 0 <= k < len(fn.source_lines) else ""
            self.pending = f"# line {line}: {text}"
