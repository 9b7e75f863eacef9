"""Where compile time goes: a profile per compiled kernel and phase, and the progress lines.

Every compile numbarules starts (a gradient's first call, a generic function's new types, an
``nr.jit`` function) runs inside a *session*. While one is open, Numba's compile events are
observed (``numba.core.event``: one per dispatcher compile and one per compiler pass) and our
own steps (normalising the source, typing the primal, the analyses, code generation, checking a
rule's types) are timed. Time is *self* time: a phase's seconds exclude the compiles nested in
it (typing a kernel compiles its callees first), so the phases of a session add up to its wall
time. Each kernel's record also says how much machine code its library generated and how many
other libraries' code was linked into it (Numba re-optimises and re-generates linked code in
every caller: docs/numba-internals.md, "What compiling costs").

``nr.compile_stats()`` returns the records of this process; ``numbarules profile`` prints them
for one call. The listener is installed only while a session is open: other Numba code in the
process is neither observed nor slowed down.
"""

import collections
import contextlib
import os
import sys
import threading
import time

from . import numba_glue

# Phase names as reported. Numba's passes are grouped: typing, lowering (LLVM IR, then LLVM's
# optimisation and machine code, which Numba runs inside its lowering pass), everything else.
NORMALISE = "ad: normalise source"
TYPE_PRIMAL = "ad: type the primal"
ANALYSE = "ad: analyse"
GENERATE = "ad: generate kernels"
CHECK_RULE = "ad: check rule types"
NUMBA_TYPING = "numba: typing"
NUMBA_LOWERING = "numba: lowering + LLVM + machine code"
NUMBA_OTHER = "numba: other passes"
NUMBA_OUTSIDE = "numba: outside passes (start-up: registries)"
OTHER = "other"

# (our located lowering, numba_glue/located.py, replaces Numba's pass under a name of its own)
_PASSES = {"nopython_type_inference": NUMBA_TYPING, "native_lowering": NUMBA_LOWERING,
           "numbarules_native_lowering": NUMBA_LOWERING}

_MAX_RECORDS = 10000
_records = collections.deque(maxlen=_MAX_RECORDS)
_local = threading.local()


class KernelRecord:
    """One compile: ``label`` (what was compiled), ``signature``, ``seconds`` (self time, its
    nested compiles excluded), ``total`` (wall time, nested compiles included), ``phases``
    ({phase: self seconds}), ``functions`` (functions its library turned into machine code, its
    own and those linked in), ``linked`` (libraries linked into it)."""

    __slots__ = ("label", "signature", "seconds", "total", "phases", "functions", "linked",
                 "started")

    def __init__(self, label, signature):
        self.label, self.signature = label, signature
        self.seconds = self.total = 0.0
        self.phases = collections.Counter()
        self.functions = self.linked = 0
        self.started = time.perf_counter()

    def as_dict(self):
        return {"label": self.label, "signature": self.signature, "seconds": self.seconds,
                "total": self.total, "phases": dict(self.phases), "functions": self.functions,
                "linked": self.linked}

    def __repr__(self):
        return f"<compile {self.label} {self.signature}: {self.seconds:.3f} s>"


class CompileStats:
    """The compile records of this process (``nr.compile_stats()``), newest last.

    ``kernels``: the KernelRecords; ``seconds``: their self times summed (the wall time spent
    compiling); ``by_phase``: {phase: seconds}; ``str(stats)``: a table, slowest first.
    """

    def __init__(self, records):
        self.kernels = list(records)
        self.seconds = sum(r.seconds for r in self.kernels)
        by_phase = collections.Counter()
        for r in self.kernels:
            by_phase.update(r.phases)
        self.by_phase = dict(by_phase.most_common())

    def __len__(self):
        return len(self.kernels)

    def __str__(self):
        return report(self)

    def __repr__(self):
        return f"<nr.CompileStats: {len(self.kernels)} compiles, {self.seconds:.2f} s>"


def compile_stats(reset=False):
    """What compiling cost in this process, kernel by kernel and phase by phase (see
    ``CompileStats``). ``reset=True`` forgets the records after returning them."""
    stats = CompileStats(_records)
    if reset:
        _records.clear()
    return stats


def report(stats, top=25):
    lines = [f"{len(stats.kernels)} compiles, {stats.seconds:.2f} s"]
    if not stats.kernels:
        return lines[0]
    lines.append("by phase:")
    for phase, s in stats.by_phase.items():
        lines.append(f"  {phase:40s} {s:7.3f} s  {100 * s / max(stats.seconds, 1e-9):5.1f}%")
    lines.append("slowest compiles (self time; machine code: functions generated, libraries "
                 "linked in):")
    for r in sorted(stats.kernels, key=lambda r: -r.seconds)[:top]:
        main = ", ".join(f"{p.split(': ')[-1]} {s:.2f}" for p, s in r.phases.most_common(2))
        lines.append(f"  {r.seconds:7.3f} s  {r.label} {r.signature}  [{main}; "
                     f"{r.functions} fn, {r.linked} linked]")
    return "\n".join(lines)


# --- sessions, frames and phases -----------------------------------------------------------------

class _Frame:
    __slots__ = ("record", "phase", "start", "nested")

    def __init__(self, record, phase):
        self.record, self.phase = record, phase
        self.start = time.perf_counter()
        self.nested = 0.0


def _stack():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _push(record, phase):
    stack = _stack()
    if record is None:
        record = stack[-1].record if stack else None
    frame = _Frame(record, phase)
    stack.append(frame)
    return frame


def _pop(frame):
    stack = _stack()
    while stack and stack[-1] is not frame:    # an exception skipped an inner end
        _pop(stack[-1])
    if not stack:
        return 0.0
    stack.pop()
    elapsed = time.perf_counter() - frame.start
    if frame.record is not None:
        frame.record.phases[frame.phase] += elapsed - frame.nested
        frame.record.seconds += elapsed - frame.nested
    if stack:
        stack[-1].nested += elapsed
    return elapsed


@contextlib.contextmanager
def phase(name):
    """Time one of our steps as a phase of the kernel being built (no-op outside a session)."""
    if not getattr(_local, "depth", 0):
        yield
        return
    frame = _push(None, name)
    try:
        yield
    finally:
        _pop(frame)


@contextlib.contextmanager
def kernel(label, signature):
    """A record of its own for work that is not a Numba compile (an AD transform)."""
    if not getattr(_local, "depth", 0):
        yield
        return
    record = KernelRecord(label, signature)
    frame = _push(record, OTHER)
    try:
        yield
    finally:
        record.total = _pop(frame)
        _records.append(record)


def _on_start(kind, data):
    if not getattr(_local, "depth", 0):
        return                  # another thread's compile
    if kind == "compile":
        disp = data.get("dispatcher")
        record = KernelRecord(_label(disp), readable_signature(data.get("args") or ()))
        _local.__dict__.setdefault("compile_frames", []).append(
            (_push(record, NUMBA_OUTSIDE), disp, data.get("args")))
    else:
        name = data.get("name", "").split(" [")[0]
        _local.__dict__.setdefault("pass_frames", []).append(
            _push(None, _PASSES.get(name, NUMBA_OTHER)))


def _on_end(kind, data):
    if not getattr(_local, "depth", 0):
        return
    if kind == "compile":
        frames = _local.__dict__.get("compile_frames")
        if frames:
            frame, disp, args = frames.pop()
            frame.record.total = _pop(frame)
            frame.record.functions, frame.record.linked = numba_glue.library_size(disp, args)
            _records.append(frame.record)
    else:
        frames = _local.__dict__.get("pass_frames")
        if frames:
            _pop(frames.pop())


@contextlib.contextmanager
def session(what=None):
    """Open a compile session (nested ones join the outermost). On a terminal, the outermost
    prints a summary when it took longer than a second. The garbage collector pauses for the
    outermost (numba_glue.collector_paused)."""
    depth = getattr(_local, "depth", 0)
    if depth:
        _local.depth = depth + 1
        try:
            yield
        finally:
            _local.depth -= 1
        return
    _local.depth = 1
    _local.t0 = time.perf_counter()
    first = len(_records)
    try:
        with numba_glue.collector_paused(), numba_glue.observe_compiles(_on_start, _on_end):
            yield
    finally:
        _local.depth = 0
        for frame in list(_stack()):
            _pop(frame)
        _local.__dict__.pop("compile_frames", None)
        _local.__dict__.pop("pass_frames", None)
        elapsed = time.perf_counter() - _local.t0
        if elapsed > 1.0 and what is not None:
            new = list(_records)[first - len(_records):] if first < len(_records) else []
            _summary(what, elapsed, new)


def _summary(what, elapsed, records):
    phases = collections.Counter()
    for r in records:
        phases.update(r.phases)
    ours = sum(s for p, s in phases.items() if p.startswith("ad:"))
    parts = [f"numbarules {ours:.1f} s", f"Numba typing {phases[NUMBA_TYPING]:.1f} s",
             f"lowering, LLVM and machine code {phases[NUMBA_LOWERING]:.1f} s"]
    progress(f"{what} took {elapsed:.1f} s to compile ({len(records)} compiles: "
             f"{', '.join(parts)}); nr.compile_stats() has the details")


def _label(disp):
    slot = getattr(disp, "_cache", None)
    label = getattr(slot, "label", None)
    if label is not None:
        return label
    func = getattr(disp, "py_func", None)
    name = getattr(func, "__qualname__", None) or getattr(disp, "__name__", "?")
    module = getattr(func, "__module__", "") or ""
    return f"{module.split('.')[0]}: {name}" if module else name


def readable_signature(argtypes):
    return "(" + ", ".join(numba_glue.readable_type(t) for t in argtypes) + ")"


# --- progress on a terminal ------------------------------------------------------------------------

def progress(line):
    """Progress on a terminal (compiles take seconds); silent when stderr is not one.
    ``NUMBARULES_PROGRESS=1`` forces it on, ``0`` off."""
    setting = os.environ.get("NUMBARULES_PROGRESS", "auto")
    if setting == "0":
        return
    stream = sys.stderr
    if setting == "1" or (hasattr(stream, "isatty") and stream.isatty()):
        t0 = getattr(_local, "t0", None)
        stamp = f"[{time.perf_counter() - t0:5.1f} s] " if getattr(_local, "depth", 0) and t0 else ""
        print(f"numbarules: {stamp}{line}", file=stream, flush=True)
