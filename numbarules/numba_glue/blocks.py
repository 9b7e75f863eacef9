"""Blocks of our own for the kernels' large arrays, and the pool that keeps them between calls
(LLVM functions compiled once per process and called by symbol from the kernels, so that kernels
loaded from the disk cache find them too).

Part of the CPU door into ``numba.core`` (the ``numba_glue`` package).
"""

import ctypes

import llvmlite.binding as llvm_binding
from llvmlite import ir as llvm_ir
from numba.core import cgutils
from numba.core.compiler_lock import global_compiler_lock

# Large arrays reuse large blocks freed before. glibc hands every block of more than 32 MB to
# the kernel on free and maps a fresh one on the next malloc, whose pages the kernel zeroes as
# they are first written: a gradient whose tape holds a state per step (reaction-diffusion's
# swap form: 105 MB) paid that on every call (writing a fresh 105 MB block: 24 ms with huge
# pages, 90 ms without, against 11 ms into a block written before; docs/numba-internals.md). The
# kernels' arrays of 4 MB or more therefore live in blocks of our own: freed, a block joins the
# process's pool of spare blocks (at most 8, of 1 GB in all, the oldest given back first), and
# the next large array takes the smallest one that fits, its pages in place. A gradient whose
# arena grows by several blocks a call (the slices form's kept arrays: 10 blocks, 323 MB) finds
# them all again on the next call. What the process holds beyond NumPy's and Numba's own is
# at most the pool. ``BLOCKS.release`` (``nr.clear_cache``) gives it back. Only arrays of the
# kernels' own (tapes, adjoints, arena blocks) are allocated this way; nothing else changes.
BLOCK_BYTES = 1 << 22
_SPARE_CAP = 1 << 29            # the largest block kept
_POOL_BYTES = 1 << 30           # the most the pool holds
_POOL_SLOTS = 8
TAKE_SYMBOL, _GIVE = "numbarules_block_take", "numbarules_block_give"
_RELEASE, _SPARE_BYTES = "numbarules_release_spare", "numbarules_spare_bytes"


def _blocks_module():
    """The LLVM module of the block functions: ``take(size) -> data`` (the smallest spare block
    that holds ``size`` bytes, else a new one; null when malloc fails), ``give(data)`` (the
    NRT's destructor of such an array: the block joins the pool as its newest, the oldest ones
    freed to keep it within 8 blocks and 1 GB), ``release()`` and ``spare_bytes()``. A block is
    malloc'ed with 80 bytes more than its data: the data starts at the first 64-byte boundary
    16 bytes or more in, preceded by its capacity and the address malloc returned. The pool
    (slots newest first, no holes, and the bytes they hold) is guarded by a spin lock: threads
    of a parallel gradient free arrays too, and the lock is held for a few loads and stores (a
    free of an evicted block at most)."""
    i8p, i64, i32 = llvm_ir.IntType(8).as_pointer(), llvm_ir.IntType(64), llvm_ir.IntType(32)
    mod = llvm_ir.Module("numbarules_blocks")

    def global_(name, ty, init):
        g = llvm_ir.GlobalVariable(mod, ty, name)
        g.initializer, g.linkage = init, "internal"
        return g

    null = llvm_ir.Constant(i8p, None)
    slots = global_("numbarules_spare_blocks", llvm_ir.ArrayType(i8p, _POOL_SLOTS),
                    llvm_ir.Constant(llvm_ir.ArrayType(i8p, _POOL_SLOTS), [None] * _POOL_SLOTS))
    held = global_("numbarules_spare_bytes_held", i64, i64(0))
    lock = global_("numbarules_spare_lock", i32, i32(0))
    # an empty slot's stand-in: a "block" whose header says it holds 0 bytes
    no_block = global_("numbarules_no_block", llvm_ir.ArrayType(i64, 2),
                       llvm_ir.Constant(llvm_ir.ArrayType(i64, 2), [0, 0]))
    malloc = llvm_ir.Function(mod, llvm_ir.FunctionType(i8p, [i64]), "malloc")
    free = llvm_ir.Function(mod, llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p]), "free")

    def header(b, data, k):
        """The k-th 8-byte word before ``data`` (k = 1: the address malloc returned, 2: the
        capacity), as an i64*."""
        return b.bitcast(b.gep(data, [i64(-8 * k)]), i64.as_pointer())

    def free_block(b, data):
        raw = b.inttoptr(b.load(header(b, data, 1)), i8p)
        b.call(free, [raw])

    def slot(b, i):
        return b.gep(slots, [i32(0), i if isinstance(i, llvm_ir.Value) else i32(i)])

    def acquire(b):
        fn = b.function
        spin, done = fn.append_basic_block("spin"), fn.append_basic_block("locked")
        b.branch(spin)
        b.position_at_end(spin)
        won = b.extract_value(b.cmpxchg(lock, i32(0), i32(1), "acquire", "monotonic"), 1)
        b.cbranch(won, done, spin)
        b.position_at_end(done)

    def unlock(b):
        b.store_atomic(i32(0), lock, "release", 4)

    def function(name, ret, args):
        f = llvm_ir.Function(mod, llvm_ir.FunctionType(ret, args), name)
        return f, llvm_ir.IRBuilder(f.append_basic_block("entry"))

    take, b = function(TAKE_SYMBOL, i8p, [i64])
    no_block = b.bitcast(b.gep(no_block, [i32(0), i32(2)]), i8p)
    size = take.args[0]
    acquire(b)
    # the smallest block that fits: its slot, -1 where none does
    best, best_cap = i32(-1), i64(-1)         # (-1: the largest unsigned capacity)
    for i in range(_POOL_SLOTS):
        p = b.load(slot(b, i))
        held_here = b.icmp_unsigned("!=", p, null)
        cap = b.load(header(b, b.select(held_here, p, no_block), 2))
        better = b.and_(held_here, b.and_(b.icmp_unsigned(">=", cap, size),
                                          b.icmp_unsigned("<", cap, best_cap)))
        best = b.select(better, i32(i), best)
        best_cap = b.select(better, cap, best_cap)
    with b.if_then(b.icmp_signed(">=", best, i32(0))):
        data = b.load(slot(b, best))
        # close the hole: the older slots move up one
        for j in range(_POOL_SLOTS - 1):
            move = b.icmp_signed("<=", best, i32(j))
            b.store(b.select(move, b.load(slot(b, j + 1)), b.load(slot(b, j))), slot(b, j))
        b.store(null, slot(b, _POOL_SLOTS - 1))
        b.store(b.sub(b.load(held), best_cap), held)
        unlock(b)
        b.ret(data)
    unlock(b)
    raw = b.call(malloc, [b.add(size, i64(80))])
    with b.if_then(b.icmp_unsigned("==", raw, null), likely=False):
        b.ret(null)
    start = b.add(b.ptrtoint(raw, i64), i64(16 + 63))
    data = b.inttoptr(b.and_(start, i64(~63)), i8p)
    b.store(b.ptrtoint(raw, i64), header(b, data, 1))
    b.store(size, header(b, data, 2))
    b.ret(data)

    give, b = function(_GIVE, llvm_ir.VoidType(), [i8p])
    data = give.args[0]
    cap = b.load(header(b, data, 2))
    with b.if_then(b.icmp_unsigned(">", cap, i64(_SPARE_CAP)), likely=False):
        free_block(b, data)
        b.ret_void()
    acquire(b)
    # the newest first: the others move down one, the oldest falls out
    oldest = b.load(slot(b, _POOL_SLOTS - 1))
    for j in range(_POOL_SLOTS - 1, 0, -1):
        b.store(b.load(slot(b, j - 1)), slot(b, j))
    b.store(data, slot(b, 0))
    b.store(b.add(b.load(held), cap), held)
    with b.if_then(b.icmp_unsigned("!=", oldest, null)):
        b.store(b.sub(b.load(held), b.load(header(b, oldest, 2))), held)
        free_block(b, oldest)
    # within the pool's bytes: the oldest given back first (the newest is never more than 512 MB)
    for j in range(_POOL_SLOTS - 1, 0, -1):
        p = b.load(slot(b, j))
        with b.if_then(b.and_(b.icmp_unsigned("!=", p, null),
                              b.icmp_unsigned(">", b.load(held), i64(_POOL_BYTES)))):
            b.store(b.sub(b.load(held), b.load(header(b, p, 2))), held)
            b.store(null, slot(b, j))
            free_block(b, p)
    unlock(b)
    b.ret_void()

    # the bytes the pool holds (tests)
    spare_bytes, b = function(_SPARE_BYTES, i64, [])
    acquire(b)
    n = b.load(held)
    unlock(b)
    b.ret(n)

    release, b = function(_RELEASE, llvm_ir.VoidType(), [])
    acquire(b)
    for j in range(_POOL_SLOTS):
        p = b.load(slot(b, j))
        with b.if_then(b.icmp_unsigned("!=", p, null)):
            free_block(b, p)
        b.store(null, slot(b, j))
    b.store(i64(0), held)
    unlock(b)
    b.ret_void()
    return mod


class _Blocks:
    """The block functions of this process, compiled once (``ensure``) and their symbols added,
    so that kernels compiled here and kernels loaded from the disk cache (numba_glue.persist)
    resolve them. Its fingerprint (fingerprints.py: what a kernel's disk-cache key covers) is
    the symbols and the size from which kernels call them, not the compiled library."""

    def __init__(self):
        self.library = None

    def _nr_fingerprint(self):
        return ("numbarules blocks", TAKE_SYMBOL, _GIVE, BLOCK_BYTES)

    def ensure(self):
        # (under Numba's compiler lock, which finalizing a library asserts: kernels call this
        # while they are lowered, which holds it already; a lock of our own beside it could
        # deadlock against a thread compiling)
        with global_compiler_lock:
            if self.library is None:
                from numba.core.registry import cpu_target
                lib = cpu_target.target_context.codegen().create_library("numbarules_blocks")
                lib.add_ir_module(_blocks_module())
                lib.finalize()
                for name in (TAKE_SYMBOL, _GIVE, _RELEASE):
                    llvm_binding.add_symbol(name, lib.get_pointer_to_function(name))
                self.library = lib

    def spare_bytes(self):
        """The bytes the pool holds (tests)."""
        if self.library is None:
            return 0
        return ctypes.CFUNCTYPE(ctypes.c_int64)(
            self.library.get_pointer_to_function(_SPARE_BYTES))()

    def release(self):
        """Free the pool's blocks (``nr.clear_cache``): the process then holds no large array of
        a gradient's after its call returns."""
        if self.library is not None:
            ctypes.CFUNCTYPE(None)(self.library.get_pointer_to_function(_RELEASE))()


BLOCKS = _Blocks()


def block_meminfo(context, builder, size):
    """A MemInfo for ``size`` bytes in a block of our own (see above), or null."""
    i8p = llvm_ir.IntType(8).as_pointer()
    intp = size.type
    take = cgutils.get_or_insert_function(builder.module, llvm_ir.FunctionType(i8p, [intp]),
                                          TAKE_SYMBOL)
    give = cgutils.get_or_insert_function(
        builder.module, llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p]), _GIVE)
    data = builder.call(take, [size])
    out = cgutils.alloca_once_value(builder, llvm_ir.Constant(i8p, None))
    with builder.if_then(cgutils.is_not_null(builder, data), likely=True):
        # the NRT's own MemInfo around our block, released through ``give`` (its
        # manage_memory, the third entry of NRT_get_api()'s table)
        api = builder.call(cgutils.get_or_insert_function(
            builder.module, llvm_ir.FunctionType(i8p, []), "NRT_get_api"), [])
        manage_ty = llvm_ir.FunctionType(i8p, [i8p, give.type])
        slot = builder.gep(builder.bitcast(api, manage_ty.as_pointer().as_pointer()),
                           [intp(2)])
        mi = builder.call(builder.load(slot), [data, give])
        builder.store(mi, out)
        # (no MemInfo, out of memory: the block goes back to the pool, the caller raises)
        with builder.if_then(cgutils.is_null(builder, mi), likely=False):
            builder.call(give, [data])
    return builder.load(out)
