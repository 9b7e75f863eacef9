"""The tape: what the forward saves for the reverse sweep, and how it is pushed and popped.

Typed arrays per dtype (``_tape_f8``, ...) grown by doubling, or in device code per-thread local
arrays of a fixed capacity; a pushed value is popped right after the adjoint of the statement
that overwrote it. Arrays a sweep overwrites whole are saved by reference or as one snapshot
per step. ``Saves`` is that part of the code generator (a mixin of ``codegen._Gen``).
"""

from numba import types as nbt

from ..errors import UnsupportedSyntaxError
from . import ir
from .dataflow import where as where_in

_TAPE_KEYS = {nbt.float64: "f8", nbt.float32: "f4", nbt.int64: "i8", nbt.int32: "i4",
              nbt.boolean: "b1", nbt.uint64: "u8", nbt.uint32: "u4"}
_TAPE_DTYPES = {"f8": "float64", "f4": "float32", "i8": "int64", "i4": "int32", "b1": "bool_",
                "u8": "uint64", "u4": "uint32"}


class Saves:
    """Pushes, pops, snapshots and saved references (a mixin of codegen._Gen)."""

    def tape_key(self, t, s=None):
        key = _TAPE_KEYS.get(t)
        if key is None:
            what = f"'{self.saved_name(s)}' " if s is not None else ""
            where = f"\n{where_in(self.fn, s.line)}" if s is not None and s.line else ""
            raise UnsupportedSyntaxError(
                f"overwriting the value {what}of type {t}, which the reverse pass needs (a tape "
                f"saves numbers, not arrays or tuples){where}\n"
                f"Hint: give each such value its own variable, or bind the array once outside "
                f"the loop and update its elements.")
        self.tapes.add(key)
        return key

    def saved_name(self, s):
        return s.array if isinstance(s, ir.Store) else (s.var if isinstance(s, ir.For)
                                                         else s.target)

    def pushed_type(self, s):
        if isinstance(s, ir.Store):
            return self.types[s.array].dtype
        if isinstance(s, ir.For):
            return self.types[s.var]
        return self.types[s.target]

    def tape_inits(self):
        if self.device is not None:
            # Device code cannot allocate: a per-thread local array of a fixed capacity.
            inits = [f"_tape_{k} = _cuda.local.array({self.device}, _np.{_TAPE_DTYPES[k]})"
                     for k in sorted(self.tapes)]
        else:
            # _tape(16, dtype) is np.empty, inlined (runtime.py: no compile of its own)
            inits = [f"_tape_{k} = _tape(16, _np.{_TAPE_DTYPES[k]})" for k in sorted(self.tapes)]
        if self.arena:
            inits += ["_arena_f8 = _tape(16, _np.float64)", "_ka_f8 = 0"]
        # typed by the rule's residual type, not by the first append: Numba may prune the
        # branch holding the append
        for name in sorted(self.rule_lists):
            t = self.rule_lists[name]
            if t is None:
                inits.append(f"{name} = _List()")
            else:
                self.tangent_classes[f"_T{name}"] = t
                inits.append(f"{name} = _List.empty_list(_T{name})")
        for name, t in sorted(self.chunk_lists().items()):
            # the tapes a prange loop's chunks keep for their reverse (chunk_tapes.py)
            self.tangent_classes[f"_T{name}"] = t
            inits.append(f"{name} = _List.empty_list(_T{name})")
        return inits + [f"_k_{k} = 0" for k in sorted(self.tapes)]

    def push(self, out, value, t, reserved, s=None):
        if self.fusing:
            return
        k = self.tape_key(t, s)
        if self.device is not None:
            # Past the capacity the count keeps growing but nothing is stored: the vjp then
            # returns NaN tangents and the count it needed, never a wrong gradient.
            out.add(f"if _k_{k} < {self.device}:")
            out.add(f"    _tape_{k}[_k_{k}] = {value}")
            out.add(f"_k_{k} += 1")
            return
        if not reserved:
            out.add(f"if _k_{k} == _tape_{k}.shape[0]:")
            out.add(f"    _tape_{k} = _reserve(_tape_{k}, _k_{k}, 1)")
        out.add(f"_tape_{k}[_k_{k}] = {value}")
        out.add(f"_k_{k} += 1")

    def push_view(self, out, view, t):
        """Save the elements a slice assignment overwrites (the tape grows as needed)."""
        if self.fusing:
            return
        k = self.tape_key(t)
        out.add(f"_tape_{k} = _push_view(_tape_{k}, _k_{k}, {view})")
        out.add(f"_k_{k} += {view}.size")

    def snapshots(self, loop):
        """The arrays saved whole before ``loop`` runs (CPU only: device tapes are fixed)."""
        if self.device is not None or self.fusing:
            return ()
        return (self.plan.snapshots or {}).get(id(loop), ())

    def snapshot_room(self, loop):
        """tape key -> the sizes of the arrays the loops directly in ``loop``'s body save whole
        per iteration (as source), for arrays bound before ``loop`` starts."""
        if self.device is not None or self.fusing:
            return {}
        top = next(k for k, x in enumerate(self.fn.body) if any(y is loop for y in ir.walk([x])))
        first = {}
        for k, x in enumerate(self.fn.body):
            for y in ir.walk([x]):
                if isinstance(y, ir.Assign):
                    first.setdefault(y.target, k if y is x else None)
        room = {}

        def visit(stmts):
            for x in stmts:
                if isinstance(x, ir.If):
                    visit(x.body)
                    visit(x.orelse)
                elif isinstance(x, ir.For):
                    for w in self.snapshots(x):
                        if w in self.fn.params or first.get(w) is not None and first[w] < top:
                            room.setdefault(self.tape_key(self.types[w].dtype), []).append(
                                f"{w}.size")
        visit(loop.body)
        return {k: " + ".join(v) for k, v in room.items()}

    def snapshotted(self, s):
        """Whether the store ``s`` saves nothing itself: its loop saved the array whole, or
        nothing reads what it overwrites (residuals._snapshots)."""
        return self.device is None and id(s) in self.plan.snapshot_stores

    def restore(self, out, w):
        """Write back the copy of ``w`` saved before its loop (see snapshots)."""
        self.changes_residuals = True
        k = self.tape_key(self.types[w].dtype)
        out.add(f"_k_{k} = _restore({w}, _tape_{k}, _k_{k})")
        for name in (w, f"_tape_{k}", f"_k_{k}"):
            out.read(name)

    def pop_view(self, out, view, t):
        self.changes_residuals = True
        k = self.tape_key(t)
        out.add(f"_k_{k} -= {view}.size")
        out.add(f"{view} = _tape_{k}[_k_{k}:_k_{k} + {view}.size].reshape({view}.shape)")
        out.read(f"_tape_{k}")
        out.read(f"_k_{k}")

    def reference(self, s):
        """Whether the value ``s`` overwrites is an array reference (saved on a list)."""
        return isinstance(s, ir.Assign) and isinstance(self.types.get(s.target), nbt.Array)

    def reference_unread(self, s):
        """A temporary array the reverse pass never reads (not even its shape) and whose
        adjoint its single reader assigns: the array it drops need not be kept (nor memory
        held for it)."""
        v = s.target
        return v in self.forwarded and not (self.plan.rebound or {}).get(v) \
            and v not in self.plan.needed

    def push_reference(self, out, s):
        """Save the array ``s`` rebinds its target away from: the reference, not a copy."""
        # (device gradients never get here: numbarules.cuda refuses array values first)
        v = s.target
        if id(s) in self.plan.shape_only:
            # the reverse reads its shape alone (analysis._shape_only): keep that
            self.rule_lists[f"_ls_{v}"] = nbt.UniTuple(nbt.intp, self.types[v].ndim)
            out.add(f"_ls_{v}.append({v}.shape)")
            return
        name = f"_lr_{v}"
        self.rule_lists[name] = self.types[v]
        if id(s) in (self.plan.copied or ()) and self._arena_applies(s):
            # a fresh array no other name holds: its values, in pages the next call has too
            out.add(f"# the array {v} drops, kept as a copy in the gradient's arena "
                    f"(tape.push_reference)")
            self._arena_push(out, v, f"{name}.append({{}})")
            return
        out.add(f"{name}.append({v})")

    def _arena_applies(self, s):
        """Whether ``s`` runs where the gradient's arena is kept: not in device code, fused
        loops, prange kernels or checkpointed loops (whose steps run again in the pullback,
        which has no arena)."""
        return self.device is None and not self.fusing and not self.plain \
            and not any(isinstance(x, ir.For) and (x.parallel or x.snapshots is not None
                                                   and any(y is s for y in ir.walk(x.body)))
                        for x in ir.walk(self.fn.body))

    def _arena_push(self, out, u, use):
        """Copy the float64 array ``u`` into the arena (a new block of twice the last one's
        size when it does not fit); ``use`` formats the statement that takes the copy (of
        ``u``'s shape, C order)."""
        self.arena = True
        out.add(f"if _ka_f8 + {u}.size > _arena_f8.shape[0]:")
        out.add(f"    _arena_f8 = _tape(max(2 * _arena_f8.shape[0], {u}.size), _np.float64)")
        out.add("    _ka_f8 = 0")
        out.add(f"_arena_f8 = _push_view(_arena_f8, _ka_f8, {u})")
        out.add(use.format(f"_arena_f8[_ka_f8:_ka_f8 + {u}.size].reshape({u}.shape)"))
        out.add(f"_ka_f8 += {u}.size")

    def arena_copy(self, out, s):
        """``v = u.copy()`` where each copy is kept for the reverse (the binding it replaces
        goes on a list), as a view of an arena of the gradient's own: a run of large tape-like
        blocks, each on huge pages, never reused within the call. A copy allocated per step
        (512 KB in the copy form of reaction-diffusion) was freed at the end of each call and
        faulted in again by the next: 25,000 page faults, more system time than the gradient's
        arithmetic. The arena grows by a block of twice the last one's size; the copies in
        the older blocks keep them alive. False where it does not apply (device code, fused
        loops, prange kernels, checkpointed loops)."""
        e = s.expr
        if not (isinstance(e, ir.MethodCall) and e.name == "copy" and not e.args
                and isinstance(e.obj, ir.Name)) \
                or not (id(s) in self.plan.pushes and self.reference(s)
                        and not self.reference_unread(s)) \
                or not self._arena_applies(s):
            return False
        t, src = self.types.get(s.target), self.types.get(e.obj.id)
        if not (isinstance(t, nbt.Array) and t.layout == "C" and t.dtype == nbt.float64
                and isinstance(src, nbt.Array) and src.dtype == nbt.float64
                and src.ndim == t.ndim >= 1):
            return False
        out.add("# the copy in the gradient's arena (kept for the reverse: tape.arena_copy)")
        self._arena_push(out, e.obj.id, f"{s.target} = {{}}")
        return True

    def pop_reference(self, out, s):
        """Take back the array ``s`` dropped, and its adjoint (see array_names._rebound): the
        adjoint of a name of its class holding the same array, else a fresh zero one."""
        v = s.target
        self.changes_residuals = True
        if id(s) in self.plan.shape_only:
            # an array of the shape, never written nor read (its pages are never touched)
            t = self.types[v]
            shape, tail = f"_ls_{v}.pop()", ""
            if t.layout == "F" and t.ndim > 1:
                shape, tail = f"{shape}[::-1]", ".T"
            out.add(f"{v} = _np.empty({shape}, _np.{t.dtype}){tail}")
            out.read(f"_ls_{v}")
        else:
            out.add(f"{v} = _lr_{v}.pop()")
            out.read(f"_lr_{v}")
        if v not in self.plan.active or v in self.forwarded:
            return                    # no adjoint, or one its single reader assigns
        out.add(self.adjoint_lookup(v, (self.plan.rebound or {}).get(v, ())))
        for m in (self.plan.rebound or {}).get(v, ()):
            out.read(m)

    def pop(self, out, target, t):
        if self.fusing:
            return
        if "[" in target:              # an overwritten element put back into its array
            self.changes_residuals = True
        k = self.tape_key(t)
        out.add(f"_k_{k} -= 1")
        out.add(f"{target} = _tape_{k}[_k_{k}]")
        out.read(f"_tape_{k}")
        out.read(f"_k_{k}")

    def taped_residuals(self, cp):
        """The types of a rule's residuals when they are a plain tuple of numbers: saved on the
        number tapes (pushed one by one, popped in reverse), not on a typed list per call site,
        whose methods Numba compiles for each element type (0.27 s of a 0.42 s first gradient
        of a loop calling a rule). Else None."""
        t = cp.residuals
        if type(t) not in (nbt.UniTuple, nbt.Tuple) or not len(t):
            return None
        parts = tuple(t)
        return parts if all(p in _TAPE_KEYS for p in parts) else None

    def taped(self, s):
        """Whether ``s`` saves a value on a tape: a push the plan asks for, not kept by
        reference (``reference``) or in a snapshot (``snapshotted``)."""
        return id(s) in self.plan.pushes and not self.reference(s) and not self.snapshotted(s)

    def shifted_saves(self, loop):
        """tape key -> the statements of ``loop``'s body whose pushes on that tape are saved
        shifted (see ``forward_pass.stmt_fwd``): the loop is innermost and runs on the CPU, and every
        push on that tape in its body saves a scalar variable that the body assigns once, at its
        top level (not in a branch). Then the value an iteration saves before the assignment is
        the one the previous iteration assigned, and storing each new value one iteration ahead
        lays the tape out the same, with no value carried from one iteration to the next: the
        carried copy (a first-order recurrence) stops LLVM from vectorising a loop such as
        ``e = exp(x[j] - m); t += e`` (logsumexp's forward, 30 ms against 10)."""
        if self.device is not None or self.fusing or self.plain:
            return {}
        simple, other = {}, set()
        assigned = {}
        top = {id(x) for x in loop.body}
        for s in ir.walk(loop.body):
            if isinstance(s, (ir.For, ir.While)):
                return {}
            if isinstance(s, ir.Assign):
                assigned[s.target] = assigned.get(s.target, 0) + 1
                if self.rule_site(s.expr):
                    for t in self.taped_residuals(self.calls[id(s.expr)]) or ():
                        other.add(self.tape_key(t))
            if self.taped(s):
                key = self.tape_key(self.pushed_type(s), s)
                if id(s) in top and isinstance(s, ir.Assign) and not self.rule_site(s.expr) \
                        and not self.kept.get(id(s.expr)):
                    simple.setdefault(key, []).append(s)
                else:
                    other.add(key)
        return {key: ss for key, ss in simple.items()
                if key not in other and all(assigned[x.target] == 1 for x in ss)}

    def slotted(self, loop):
        """``shifted_saves(loop)`` where those are every save ``loop``'s body makes (nothing
        else on a tape, no array kept by reference, no rule's residuals), else None. Then
        iteration ``j`` of the loop writes its values at ``base + (j + 1) * c + p`` and reads the
        ones before it at ``base + j * c + p``, places that depend on ``j`` alone: the iterations
        of a prange loop may run in parallel chunks with these saves (ad/parallel.py)."""
        shifted = self.shifted_saves(loop)
        if self.count_pushes(loop.body) != {key: len(ss) for key, ss in shifted.items()}:
            return None
        if any(id(s) in self.plan.pushes and self.reference(s) for s in ir.walk(loop.body)):
            return None
        return shifted

    def count_pushes(self, stmts):
        """Upper bound of the pushes per tape that one pass over ``stmts`` makes, not counting
        those inside nested loops (each loop reserves its own at entry)."""
        counts = {}

        def add(key, k=1):
            counts[key] = counts.get(key, 0) + k

        for s in stmts:
            if self.taped(s):
                add(self.tape_key(self.pushed_type(s), s))
            if isinstance(s, ir.Assign) and not self.fusing and self.rule_site(s.expr):
                for t in self.taped_residuals(self.calls[id(s.expr)]) or ():
                    add(self.tape_key(t))       # a rule's residuals (taped_residuals)
            if isinstance(s, ir.If):
                for part in (s.body, s.orelse):
                    for key, k in self.count_pushes(part).items():
                        add(key, k)
            elif isinstance(s, (ir.For, ir.While)) and id(s) in self.plan.in_loop \
                    and id(s) in self.plan.reverse_relevant:
                add(self.tape_key(nbt.int64))   # its trip count, saved before it runs
        return counts
