"""``numbarules demo``: the story of the discussion this project answers, end to end.

Julia's ``my_sum(::AbstractMatrix)`` and ``my_sum(::Diagonal)``: two methods, compile-time
dispatch from compiled callers, a method added later that an already-compiled caller picks up
(only what the new method affects is recompiled); then a reverse rule for the AbstractMatrix
*method* that does not hide the Diagonal method, a rule added after the first gradient, an
opt-out, and a new method that stops the rule for its types.
"""

import time

import numpy as np

import numbarules as nr


def build():
    """Define the types and functions of the story (fresh objects each time)."""

    @nr.struct
    class Diagonal(nr.AbstractMatrix):
        diag: nr.Vector[nr.Float64]

    def vsum(v):                      # a plain Python helper, compiled alongside
        s = 0.0
        for i in range(v.shape[0]):
            s += v[i]
        return s

    @nr.generic
    def my_sum(x: nr.AbstractMatrix):
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                s += x[i, j]
        return s

    @my_sum.method
    def my_sum(x: Diagonal):          # noqa: F811 - a second method, not a redefinition
        return vsum(x.diag)

    @nr.jit
    def mean_entry(x, n):             # compiled code calling the generic function
        return my_sum(x) / (n * n)

    return Diagonal, my_sum, mean_entry


def run(out=print):
    Diagonal, my_sum, mean_entry = build()
    A = np.arange(16.0).reshape(4, 4)
    D = Diagonal(np.array([1.0, 2.0, 3.0, 4.0]))

    out("Two methods of one generic function:")
    for m in my_sum.methods:
        out(f"  {m!r}    ({m.where()})")
    out("")
    out(f"my_sum.which(A)  -> {my_sum.which(A)!r}      A = 4x4 float64 matrix")
    out(f"my_sum.which(D)  -> {my_sum.which(D)!r}            D = Diagonal([1, 2, 3, 4])")
    out(f"my_sum(A) = {my_sum(A)}   my_sum(D) = {my_sum(D)}")
    t0 = time.perf_counter()
    out(f"mean_entry(A, 4) = {mean_entry(A, 4)}   mean_entry(D, 4) = {mean_entry(D, 4)}"
        f"   (nr.jit caller, dispatched at compile time)")
    out(f"  first calls compiled in {time.perf_counter() - t0:.2f} s; "
        f"cache_info: {_counts()}")
    out("")
    out("Now add a more specific method for float64 matrices, after the caller was compiled:")

    @my_sum.method
    def my_sum(x: nr.Matrix[nr.Float64]):   # noqa: F811
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i, i]                     # (say it only needs the trace)
        return s

    before = nr.cache_info()
    out(f"  my_sum.which(A) -> {my_sum.which(A)!r}")
    out(f"  invalidated: {before['invalidations']} specializations "
        f"(the float64-matrix paths; the Diagonal paths are untouched)")
    out(f"mean_entry(A, 4) = {mean_entry(A, 4)}   (picked up the new method)")
    out(f"mean_entry(D, 4) = {mean_entry(D, 4)}   (unchanged, not recompiled)")
    after = nr.cache_info()
    rebuilt = (after["compiles"] + after["disk_hits"]) - (before["compiles"] + before["disk_hits"])
    out(f"  recompiled {rebuilt} specializations (or loaded them from the disk cache); "
        f"cache_info: {_counts()}")
    out("")
    try:
        my_sum(np.ones(3))
    except nr.NoMethodError as exc:
        out("my_sum(np.ones(3)) raises NoMethodError:")
        out("  " + str(exc).replace("\n", "\n  "))


def rules_story(out=print):
    Diagonal, my_sum, _ = build()
    A = np.arange(6.0).reshape(2, 3)
    D = Diagonal(np.array([1.0, 2.0, 3.0]))
    g = nr.grad(my_sum)
    out("Gradients before any rule: both methods are differentiated from their source.")
    out(f"  grad(my_sum)(A) = {g(A).tolist()}")
    out(f"  grad(my_sum)(D) = {g(D)!r}")
    out("")
    out("Now a reverse rule for the method my_sum(x::AbstractMatrix), added after the first")
    out("gradient. It is a marker rule: its pullback returns 100 * dy for every entry (the true")
    out("gradient is dy), so the numbers below show which code ran; a real rule returns the true")
    out("gradient, and nr.testing.check_rrule would refuse this one.")

    @nr.rrule(my_sum)
    def _(x: nr.AbstractMatrix):
        y = my_sum(x)
        m, n = x.shape

        def my_sum_pullback(dy):
            return (np.full((m, n), 100.0 * dy),)
        return y, my_sum_pullback

    out(f"  nr.rule_for(my_sum, A) -> {nr.rule_for(my_sum, A)!r}")
    out(f"  nr.rule_for(my_sum, D) -> {nr.rule_for(my_sum, D)!r}   "
        f"(D runs the Diagonal method: the rule is not for it)")
    out(f"  grad(my_sum)(A) = {g(A).tolist()}   (the same gradient object: the rule ran)")
    out(f"  grad(my_sum)(D) = {g(D)!r}   (the Diagonal body, differentiated)")
    out("  In Zygote + ChainRules this rule would also answer for D: 100s there too.")

    def loss(A, D):
        return my_sum(A) * my_sum(D)

    out("")
    out("nr.explain(loss, A, D), loss(A, D) = my_sum(A) * my_sum(D):")
    out("  " + str(nr.explain(loss, A, D)).replace("\n", "\n  "))
    out("")
    nr.opt_out(my_sum, nr.Matrix[nr.Float64])
    out("nr.opt_out(my_sum, nr.Matrix[nr.Float64]): float64 matrices are differentiated again:")
    out("  " + str(nr.explain(loss, A, D)).splitlines()[1].strip())
    out(f"  grad(my_sum)(A) = {g(A).tolist()}")
    out("")

    @my_sum.method
    def my_sum(x: nr.Matrix[nr.Float32]):     # noqa: F811 - a new, more specific method
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i, i]
        return s

    A32 = A.astype(np.float32)
    out("A new method my_sum(x::Matrix[Float32]) (a trace): the rule stops applying to its types:")
    out(f"  nr.rule_for(my_sum, A32) -> {nr.rule_for(my_sum, A32)!r}")
    out(f"  grad(my_sum)(A32) = {g(A32).tolist()}")
    info = nr.cache_info()
    out(f"cache_info: compiles {info['compiles']}, invalidations {info['invalidations']}")


def _counts():
    info = nr.cache_info()
    return {k: info[k] for k in ("compiles", "hits", "invalidations", "disk_hits")}


if __name__ == "__main__":
    run()
    print()
    rules_story()
