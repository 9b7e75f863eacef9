"""What generated kernels call that compiles inline in the caller: tapes, tape growth, views
pushed and restored, zero adjoints (Numba intrinsics: their codegen runs inside the caller's
lowering and compiles nothing of its own), and trampolines (a function whose calls type and
lower as calls of another).

Part of the CPU door into ``numba.core`` (the ``numba_glue`` package).
"""

import ctypes
import sys

import llvmlite.binding as llvm_binding
from llvmlite import ir as llvm_ir

from numba.core import cgutils, types
from numba.core.cpu import CPUContext
from numba.core.imputils import lower_builtin
from numba.core.typing.templates import AbstractTemplate, infer_global
from numba.extending import intrinsic as numba_intrinsic
from numba.np.arrayobj import load_item, make_array, populate_array, store_item

from . import array_type_like
from .blocks import BLOCK_BYTES, BLOCKS, block_meminfo

# Tapes, tape growth and zero adjoints, emitted inline in the calling kernel: an intrinsic's
# codegen runs inside the caller's lowering and compiles nothing of its own, where np.empty,
# np.zeros_like (three @overloads), np.dtype(...) and max(...) were each a dispatcher compiled
# per type and per process (docs/numba-internals.md, "What compiling costs"). The arrays are
# allocated with the NRT directly: Numba's own helper (arrayobj._empty_nd_impl) goes through a
# class-method overload, `_ol_array_allocate`, compiled once per process (30-70 ms that a first
# gradient paid and the njit primal, which allocates nothing, did not).


# Large tapes on huge pages. A gradient's tape is allocated afresh by every call, and the kernel
# then writes every page of it once: with 4 KB pages a 100 MB tape is 25,000 page faults, 60-70 ms
# of system time on a 2-core VM, more than the forward's own arithmetic (perf/bench_sim.py, the
# swap form spent 13x its primal in the forward, three quarters of it in the kernel). NumPy asks
# for transparent huge pages on every array of 4 MB or more (``madvise(MADV_HUGEPAGE)``, its
# ``hugepage`` setting); the NRT does not, so the kernels ask for their own large arrays here.
# Only our arrays are advised: nothing else in the process changes. The symbol is added under
# our own name so that kernels loaded from the disk cache resolve it in a new process.
_HUGE_BYTES = 1 << 22
_MADV_HUGEPAGE = 14
_MADVISE = "numbarules_madvise"


def _find_madvise():
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return False
    llvm_binding.add_symbol(_MADVISE, ctypes.cast(fn, ctypes.c_void_p).value)
    return True


_HAS_MADVISE = _find_madvise()


def _huge_pages(context, builder, data, nbytes):
    """Advise the whole pages of ``nbytes`` at ``data`` (an i8*) for huge pages when the block
    is at least 4 MB (CPU kernels on Linux; elsewhere nothing)."""
    if not (_HAS_MADVISE and isinstance(context, CPUContext)):
        return
    intp = nbytes.type
    with builder.if_then(builder.icmp_signed(">=", nbytes, intp(_HUGE_BYTES)), likely=False):
        page = intp(4095)
        start = builder.and_(builder.add(builder.ptrtoint(data, intp), page),
                             builder.not_(page))
        end = builder.and_(builder.add(builder.ptrtoint(data, intp), nbytes), builder.not_(page))
        fnty = llvm_ir.FunctionType(llvm_ir.IntType(32),
                                    [llvm_ir.IntType(8).as_pointer(), intp, llvm_ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _MADVISE)
        # failure (no THP in this kernel) only means small pages: the result is ignored
        builder.call(fn, [builder.inttoptr(start, llvm_ir.IntType(8).as_pointer()),
                          builder.sub(end, start), llvm_ir.IntType(32)(_MADV_HUGEPAGE)])


# Arrays of 32 KB or more that a kernel allocates for adjoints get 6 KB of slack after their
# elements. glibc places blocks of one size back to back (in the heap, once it has raised its
# mmap threshold after the first large free), so a kernel's adjoint arrays of 512 KB sat
# 512 KB + 16 bytes apart; on the AMD EPYC machines this project measures on, a vectorised loop
# that stores into one and loads the neighbours of the same element from the other then ran 4x
# slower than with the arrays 2 KB or more further apart (the gathered reverse of a 256x256
# stencil: 30 against 130 us; ad/gather.py, docs/numba-internals.md). The slack moves the next
# block off that distance.
_SLACK_FROM = 1 << 15
_SLACK = 6208


def _new_array(context, builder, arrtype, shapes, slack=False):
    """A new, uninitialised NRT array of ``arrtype`` (layout C or F) with these dimension sizes
    (LLVM intp values, not negative: they come from existing arrays and tape capacities).
    ``slack``: a large array's block is 6 KB longer than its elements (see _SLACK)."""
    intp = context.get_value_type(types.intp)
    itemsize = context.get_abi_sizeof(context.get_data_type(arrtype.dtype))
    strides, step = [], intp(itemsize)
    for n in (reversed(shapes) if arrtype.layout == "C" else shapes):
        strides.append(step)
        step = builder.mul(step, n)           # after the loop: the size in bytes
    if arrtype.layout == "C":
        strides.reverse()
    align = context.get_preferred_array_alignment(arrtype.dtype)
    size = step
    if slack:
        big = builder.icmp_signed(">=", step, intp(_SLACK_FROM))
        size = builder.add(step, builder.select(big, intp(_SLACK), intp(0)))
    if isinstance(context, CPUContext):
        # a block of our own for a large array (see _blocks_module), the NRT's heap otherwise
        BLOCKS.ensure()
        slot = cgutils.alloca_once(builder, context.get_value_type(types.voidptr))
        with builder.if_else(builder.icmp_signed(">=", size, intp(BLOCK_BYTES)),
                             likely=False) as (large, small):
            with large:
                builder.store(block_meminfo(context, builder, size), slot)
            with small:
                builder.store(context.nrt.meminfo_alloc_aligned(builder, size, align), slot)
        meminfo = builder.load(slot)
    else:
        meminfo = context.nrt.meminfo_alloc_aligned(builder, size, align)
    with builder.if_then(cgutils.is_null(builder, meminfo), likely=False):
        context.call_conv.return_user_exc(builder, MemoryError, ("cannot allocate an array",))
    data = context.nrt.meminfo_data(builder, meminfo)
    _huge_pages(context, builder, data, step)
    ary = make_array(arrtype)(context, builder)
    populate_array(ary, data=builder.bitcast(data, context.get_data_type(arrtype.dtype)
                                             .as_pointer()),
                   shape=list(shapes), strides=strides, itemsize=intp(itemsize), meminfo=meminfo)
    return ary


@numba_intrinsic
def new_tape(typingctx, capacity, dtype):
    """``np.empty(capacity, dtype)``: a new tape (``dtype`` a NumPy scalar class:
    ``_np.float64``)."""
    eltype = getattr(dtype, "instance_type", None)
    if not isinstance(eltype, (types.Number, types.Boolean)):
        return None
    result = types.Array(eltype, 1, "C")

    def codegen(context, builder, sig, args):
        n = context.cast(builder, args[0], sig.args[0], types.intp)
        return _new_array(context, builder, result, [n])._getvalue()
    return result(capacity, dtype), codegen


@numba_intrinsic
def reserve_tape(typingctx, buf, used, more):
    """A tape with room for ``more`` pushes after ``used``: ``buf`` itself when it has room,
    else a copy of its first ``used`` entries in one of twice the capacity (or ``used + more``
    when that is more): grows at most once per loop entry."""
    if not (isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        value, used, more = args
        used = context.cast(builder, used, sig.args[1], types.intp)
        more = context.cast(builder, more, sig.args[2], types.intp)
        return _reserve(context, builder, sig.args[0], value, used, more)
    return buf(buf, used, more), codegen


def _reserve(context, builder, aty, value, used, more):
    """The tape ``value`` (a 1-d C array of ``aty``) with room for ``more`` entries after
    ``used`` (LLVM intp values): a new reference to it, or to a copy twice as long."""
    old = make_array(aty)(context, builder, value=value)
    capacity = builder.extract_value(old.shape, 0)
    need = builder.add(used, more)
    out = cgutils.alloca_once(builder, value.type)
    with builder.if_else(builder.icmp_signed("<=", need, capacity), likely=True) as (
            fits, grows):
        with fits:
            context.nrt.incref(builder, aty, value)     # returned: a new reference
            builder.store(value, out)
        with grows:
            doubled = builder.mul(capacity, capacity.type(2))
            size = builder.select(builder.icmp_signed(">", doubled, need), doubled, need)
            new = _new_array(context, builder, aty, [size])
            cgutils.raw_memcpy(builder, new.data, old.data, used,
                               context.get_abi_sizeof(context.get_data_type(aty.dtype)))
            builder.store(new._getvalue(), out)
    return builder.load(out)


def _copy_elements(context, builder, dty, dst, sty, src):
    """Copy the elements of the array ``src`` (Numba type ``sty``) into ``dst`` (``dty``), both
    visited in C order; ``dst`` or ``src`` may instead be ``(flat type, pointer)``: a run of
    contiguous elements (a tape's). One memcpy when both are contiguous runs of one dtype."""
    def view(ty, a):
        if isinstance(a, tuple):
            return None
        return make_array(ty)(context, builder, value=a)

    dv, sv = view(dty, dst), view(sty, src)
    arr = dv if dv is not None else sv
    aty = dty if dv is not None else sty
    intp = context.get_value_type(types.intp)
    shapes = cgutils.unpack_tuple(builder, arr.shape, count=aty.ndim)
    dtype_of = lambda ty, a: ty.dtype if a is not None else ty   # noqa: E731
    dflat = dv is None or dty.layout == "C"
    sflat = sv is None or sty.layout == "C"
    if dflat and sflat and dtype_of(dty, dv) == dtype_of(sty, sv):
        dptr = dv.data if dv is not None else dst[1]
        sptr = sv.data if sv is not None else src[1]
        cgutils.raw_memcpy(builder, dptr, sptr, arr.nitems,
                           context.get_abi_sizeof(context.get_data_type(dtype_of(sty, sv))))
        return
    k = cgutils.alloca_once_value(builder, intp(0))
    with cgutils.loop_nest(builder, shapes, intp) as idx:
        n = builder.load(k)
        pointers = []
        for ty, a, raw in ((sty, sv, src), (dty, dv, dst)):
            if a is None:
                pointers.append(builder.gep(raw[1], [n]))
            else:
                strides = cgutils.unpack_tuple(builder, a.strides, count=ty.ndim)
                pointers.append(cgutils.get_item_pointer2(context, builder, a.data, shapes,
                                                          strides, ty.layout, idx))
        sp, dp = pointers
        s_item = types.Array(sty, 1, "C") if sv is None else sty
        d_item = types.Array(dty, 1, "C") if dv is None else dty
        value = load_item(context, builder, s_item, sp)
        value = context.cast(builder, value, s_item.dtype, d_item.dtype)
        store_item(context, builder, d_item, value, dp)
        builder.store(builder.add(n, intp(1)), k)


def _tape_operands(buf, used, a):
    """Whether the types are a tape (a 1-d C array), a length on it and an array."""
    return isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C" \
        and isinstance(a, types.Array) and isinstance(used, types.Integer)


@numba_intrinsic
def push_view(typingctx, buf, used, view):
    """``buf`` (a tape) with the elements of ``view`` (any layout, C order) written after
    ``used``, grown first if they do not fit. Emitted inline: as an @njit helper it was a
    dispatcher compiled per array type (and per literal ``used``), 0.2-0.6 s each before a
    first gradient."""
    if not _tape_operands(buf, used, view):
        return None

    def codegen(context, builder, sig, args):
        bty, uty, vty = sig.args
        value, used, v = args
        used = context.cast(builder, used, uty, types.intp)
        new = _reserve(context, builder, bty, value, used,
                       make_array(vty)(context, builder, value=v).nitems)
        tape = make_array(bty)(context, builder, value=new)
        _copy_elements(context, builder, bty.dtype, (bty.dtype, builder.gep(tape.data, [used])),
                       vty, v)
        return new
    return buf(buf, used, view), codegen


@numba_intrinsic
def restore_view(typingctx, a, buf, used):
    """Write the ``a.size`` elements saved last on ``buf`` (by push_view) back into ``a``;
    the tape's new length."""
    if not _tape_operands(buf, used, a):
        return None

    def codegen(context, builder, sig, args):
        aty, bty, uty = sig.args
        v, value, used = args
        start = builder.sub(context.cast(builder, used, uty, types.intp),
                            make_array(aty)(context, builder, value=v).nitems)
        tape = make_array(bty)(context, builder, value=value)
        _copy_elements(context, builder, aty, v,
                       bty.dtype, (bty.dtype, builder.gep(tape.data, [start])))
        return start
    return types.intp(a, buf, used), codegen


@numba_intrinsic
def copy_into(typingctx, a, src):
    """Write ``src``'s elements into ``a`` (the same shape, any layouts): a checkpointed loop's
    LOAD."""
    if not (isinstance(a, types.Array) and isinstance(src, types.Array) and a.ndim == src.ndim):
        return None

    def codegen(context, builder, sig, args):
        _copy_elements(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        return context.get_dummy_value()
    return types.none(a, src), codegen


def _span(context, builder, aty, value):
    """The first and one-past-last byte addresses array ``value`` may touch (its strides may be
    negative), and whether it is empty."""
    ary = make_array(aty)(context, builder, value=value)
    intp = context.get_value_type(types.intp)
    lo = builder.ptrtoint(ary.data, intp)
    hi = builder.add(lo, ary.itemsize)
    empty = llvm_ir.Constant(llvm_ir.IntType(1), 0)   # (not cgutils.false_bit: a global
    # the disk cache's fingerprint of this intrinsic could not hash)
    shapes = cgutils.unpack_tuple(builder, ary.shape, count=aty.ndim)
    strides = cgutils.unpack_tuple(builder, ary.strides, count=aty.ndim)
    for n, st in zip(shapes, strides):
        empty = builder.or_(empty, builder.icmp_signed("<=", n, intp(0)))
        d = builder.mul(builder.sub(n, intp(1)), st)
        negative = builder.icmp_signed("<", d, intp(0))
        lo = builder.select(negative, builder.add(lo, d), lo)
        hi = builder.select(negative, hi, builder.add(hi, d))
    return lo, hi, empty


@numba_intrinsic
def apart(typingctx, a, b):
    """Whether arrays ``a`` and ``b`` share no byte of memory (any layouts; an empty array shares
    none). The gather form of a reverse loop nest reads one while it writes the other, which
    means what the scatter meant only when they are apart (ad/gather.py). Inline code, where an
    ``@njit(inline="always")`` helper was typed again at every call site."""
    if not (isinstance(a, types.Array) and isinstance(b, types.Array)):
        return None

    def codegen(context, builder, sig, args):
        alo, ahi, aempty = _span(context, builder, sig.args[0], args[0])
        blo, bhi, bempty = _span(context, builder, sig.args[1], args[1])
        disjoint = builder.or_(builder.icmp_unsigned("<=", ahi, blo),
                               builder.icmp_unsigned("<=", bhi, alo))
        return builder.or_(disjoint, builder.or_(aempty, bempty))
    return types.boolean(a, b), codegen


@numba_intrinsic
def zeros_like(typingctx, a):
    """``np.zeros_like(a)`` for an array ``a``, emitted inline in the kernel that calls it.

    Every adjoint array starts as this. ``np.zeros_like`` itself is three @overload
    implementations (zeros_like, empty_like, _zero_fill), each a dispatcher compiled on its own,
    per array type and per process: about 0.4 s before the first gradient of each new array
    type (docs/numba-internals.md, "What compiling costs"). An NRT allocation plus a memset
    here cost nothing extra to compile. The result type is ``np.zeros_like``'s: the
    same layout (C for a non-contiguous ``a``), writable.
    """
    return _array_like(a, zeroed=True)


def _array_like(a, zeroed):
    """The typing and code of ``zeros_like`` / ``empty_like``."""
    if not isinstance(a, types.Array):
        return None
    result = array_type_like(a)

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, value=args[0])
        shapes = cgutils.unpack_tuple(builder, src.shape, count=sig.args[0].ndim)
        out = _new_array(context, builder, sig.return_type, shapes, slack=True)
        if zeroed:
            cgutils.memset(builder, out.data, builder.mul(out.itemsize, out.nitems), 0)
        return out._getvalue()
    return result(a), codegen


@numba_intrinsic
def zero_part(typingctx, a, c, nch):
    """Zero part ``c`` of ``nch`` of the bytes of ``a``, an array ``empty_like`` made (contiguous,
    not empty-strided): a parallel kernel zeroes its adjoint arrays in a ``prange`` over the
    parts (ad/parallel.py ``zeroed_in_chunks``), where one memset would run on one thread."""
    if not (isinstance(a, types.Array) and a.layout in "CF" and isinstance(c, types.Integer)
            and isinstance(nch, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ary = make_array(sig.args[0])(context, builder, value=args[0])
        intp = context.get_value_type(types.intp)
        c_, n_ = (context.cast(builder, v, t, types.intp)
                  for v, t in zip(args[1:], sig.args[1:]))
        nbytes = builder.mul(ary.itemsize, ary.nitems)
        lo = builder.sdiv(builder.mul(nbytes, c_), n_)
        hi = builder.sdiv(builder.mul(nbytes, builder.add(c_, intp(1))), n_)
        start = builder.gep(builder.bitcast(ary.data, llvm_ir.IntType(8).as_pointer()), [lo])
        cgutils.memset(builder, start, builder.sub(hi, lo), 0)
        return context.get_dummy_value()
    return types.none(a, c, nch), codegen


# The thread count a parallel kernel splits its chunks by (ad/parallel.py). Numba's own
# ``numba.get_num_threads()`` in compiled code calls the threading layer through a ctypes
# function pointer, an address of this process ("dynamic globals"): code holding one cannot be
# stored, so no parallel gradient was ever kept in the disk cache. This calls the layer's
# exported ``get_num_threads`` by symbol, as Numba's parfor lowering does, which the layer
# registers with LLVM when it is launched (at this intrinsic's typing; a process loading stored
# code that calls it launches it first: persist.rebuild_result).
@numba_intrinsic
def num_threads(typingctx):
    from numba.np.ufunc.parallel import _launch_threads
    _launch_threads()

    def codegen(context, builder, sig, args):
        # (the type from the context, not cgutils.intp_t: a global the disk cache's fingerprint
        # of this function would have to hash, an LLVM type object)
        fnty = llvm_ir.FunctionType(context.get_value_type(types.intp), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, NUM_THREADS_SYMBOL)
        return builder.call(fn, [])
    return types.intp(), codegen


NUM_THREADS_SYMBOL = "get_num_threads"


@numba_intrinsic
def empty_like(typingctx, a):
    """``np.empty_like(a)`` (``zeros_like``'s array, not filled), for an adjoint array whose
    every element the code after it writes before reading (ad/gather.py's ``fresh``): the
    memset of a large array is a serial pass over memory, which a parallel gradient pays on one
    thread."""
    return _array_like(a, zeroed=False)


# --- 7. trampolines: a function whose calls compile as calls of another -------------------------

def trampoline(func, target):
    """Calls of ``func`` in compiled code type and lower as calls of ``target(args, kws)`` (a
    function of the Numba argument types returning the Python function to call instead). Unlike
    an ``@overload`` of ``func``, no compiled function stands between the caller and the target:
    the call is typed by the target's own templates and lowered by its own implementation."""
    class Trampoline(AbstractTemplate):
        key = func

        def generic(self, args, kws):
            fnty = self.context.resolve_value_type(target(args, kws))
            return fnty.get_call_type(self.context, args, kws)

    Trampoline.__name__ = f"Trampoline_{func.__name__}"
    infer_global(func)(Trampoline)

    def lower(context, builder, sig, args):
        # the signature's arguments are positional here: typing folded the keywords
        fnty = context.typing_context.resolve_value_type(target(sig.args, {}))
        impl = context.get_function(fnty, fnty.get_call_type(context.typing_context, sig.args, {}))
        return impl(builder, args)

    lower_builtin(func, types.VarArg(types.Any))(lower)
