"""The backedge oracle: a long-lived cache, mutated step by step, agrees with a fresh one.

Hypothesis draws a short sequence of operations over a family of generic functions that call
each other (``top -> f2 -> f1 -> f0``): add a method, replace a method, add a (deliberately
scaled) rrule, add an opt_out, call a gradient. Gradient objects created once at the start of an
example are kept across all steps, so every step exercises the backedges: whatever the step
changed must be dropped, and nothing else.

After every step, for every (gradient object, argument type) the example has called so far:

1. **fresh cache**: the live gradient equals the gradient of brand-new generic functions and
   gradient objects built by replaying the same definitions (they share nothing compiled with
   the live ones), to ``rtol=1e-12``;
2. **precision**: the live gradient object recompiled iff a decision it relies on changed (the
   method each level runs at that type, the rule entry each differentiated level consults),
   computed by a small model of the rule rule, independently of the library;
3. **model**: the value equals the derivative the model computes in NumPy, so live and fresh
   cannot agree on a wrong answer for the same reason;
4. a gradient over an untouched family never recompiles, and calling everything again after a
   check compiles nothing.

Dispatch stays unambiguous by construction: every signature has one argument and lies on one of
two disjoint chains (``Real > AbstractFloat > Float64`` and ``AbstractVector > Vector[Real] >
Vector[Float64]``), so applicable methods are always totally ordered. AmbiguityError is covered
by tests/test_backedges.py.
"""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numbarules as nr

CHAINS = {
    "scalar": (nr.Real, nr.AbstractFloat, nr.Float64),
    "vector": (nr.AbstractVector, nr.Vector[nr.Real], nr.Vector[nr.Float64]),
}
SIGS = tuple((chain, depth) for chain in CHAINS for depth in range(3))
LEVELS = 3
BASE_C = (1.0, 2.0, 3.0)              # body constant of f0, f1, f2's first methods
BODY_CS = (0.5, 1.25, 2.5, 3.5)       # constants of added / replacing bodies
RULE_FACTORS = (2.0, 3.0, 5.0)
X = {"scalar": 0.37, "vector": np.array([0.3, -0.8, 1.1, 0.05])}
ROOTS = {"g": (2, 2.0), "g1": (1, 1.0)}   # gradient object -> (level it enters, outer factor)


def compiles(obj):
    return nr.cache_info(obj)["compiles"]


def lattice(sig):
    chain, depth = sig
    return CHAINS[chain][depth]


# --- method bodies and rules ---------------------------------------------------------------------
# One def per level because the AD frontend finds a body in its source by the function's name,
# and the generic function takes its name from its first method. Each body is
# a * lower(x) + own(x): its derivative composes, which is what lets the model below compute it.

def scalar_body(level, c, lower):
    a = 1.0 + 0.25 * c

    def f0(x):
        s = 0.0
        for i in range(3):
            s += c * math.sin(x * (i + 1.0)) / (i + 1.0)
        return s

    def f1(x):
        s = a * lower(x)
        for i in range(3):
            s += c * math.sin(x * (i + 1.0)) / (i + 1.0)
        return s

    def f2(x):
        s = a * lower(x)
        for i in range(3):
            s += c * math.sin(x * (i + 1.0)) / (i + 1.0)
        return s

    return (f0, f1, f2)[level]


def vector_body(level, c, lower):
    a = 1.0 + 0.25 * c

    def f0(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += c * math.cos(x[i]) * (i + 1.0)
        return s

    def f1(x):
        s = a * lower(x)
        for i in range(x.shape[0]):
            s += c * math.cos(x[i]) * (i + 1.0)
        return s

    def f2(x):
        s = a * lower(x)
        for i in range(x.shape[0]):
            s += c * math.cos(x[i]) * (i + 1.0)
        return s

    return (f0, f1, f2)[level]


def body(level, sig, c, lower):
    func = (scalar_body if sig[0] == "scalar" else vector_body)(level, c, lower)
    func.__annotations__ = {"x": lattice(sig)}
    return func


def scaled_rule(f, chain, m):
    """An rrule whose pullback is not f's derivative: a gradient shows whether it ran."""
    if chain == "scalar":
        def rule_scalar(x):
            y = f(x)

            def rule_scalar_pullback(dy):
                return (m * dy * (1.0 + x * x),)
            return y, rule_scalar_pullback
        return rule_scalar

    def rule_vector(x):
        y = f(x)

        def rule_vector_pullback(dy):
            return (m * dy * (x + 1.0),)
        return y, rule_vector_pullback
    return rule_vector


class Family:
    """Brand-new f0 <- f1 <- f2 <- top and the gradient objects over them."""

    def __init__(self):
        self.fs = []
        lower = None
        for level in range(LEVELS):
            f = nr.generic(body(level, ("scalar", 0), BASE_C[level], lower))
            f.method(body(level, ("vector", 0), BASE_C[level], lower))
            self.fs.append(f)
            lower = f
        f2 = self.fs[2]

        def top(x):
            return 2.0 * f2(x)
        self.grads = {"g": nr.grad(top), "g1": nr.grad(self.fs[1])}

    def apply(self, op):
        kind, level, sig = op[:3]
        f = self.fs[level]
        if kind == "method":
            f.method(body(level, sig, op[3], self.fs[level - 1] if level else None))
        elif kind == "rrule":
            nr.rrule(f, lattice(sig))(scaled_rule(f, sig[0], op[3]))
        elif kind == "opt_out":
            nr.opt_out(f, lattice(sig))
        else:
            raise AssertionError(op)


# --- the model: dispatch, the rule rule and derivatives in plain Python ------------------------

class Model:
    def __init__(self):
        self.version = 0
        self.methods = [{("scalar", 0): (c, 0), ("vector", 0): (c, 0)} for c in BASE_C]
        self.rules = [{} for _ in range(LEVELS)]   # sig -> (("rrule", m) | ("opt_out",), version)

    def apply(self, op):
        self.version += 1
        kind, level, sig = op[:3]
        if kind == "method":
            self.methods[level][sig] = (op[3], self.version)
        else:
            # A rule entry replaces any rrule / opt_out at the same signature.
            self.rules[level][sig] = ((kind,) + op[3:], self.version)

    def state(self):
        """Canonical definitions: equal states must give equal gradients."""
        return tuple((frozenset((s, c) for s, (c, _) in ms.items()),
                      frozenset((s, e) for s, (e, _) in rs.items()))
                     for ms, rs in zip(self.methods, self.rules))

    def resolve(self, level, chain, depth=2):
        """The most specific method at or above depth ``depth`` of ``chain`` (depth 2: the
        concrete argument type itself)."""
        best = max(d for (ch, d) in self.methods[level] if ch == chain and d <= depth)
        return (chain, best)

    def lookup(self, level, chain):
        """The rule entry a call at the concrete type uses (API section 3), or None."""
        found = [d for (ch, d) in self.rules[level] if ch == chain]
        if not found:
            return None
        sig = (chain, max(found))
        if self.resolve(level, chain) != self.resolve(level, chain, sig[1]):
            return None                  # a more specific method runs: it is differentiated
        return sig

    def tokens(self, root, chain):
        """The decisions a gradient entering at ``root`` relies on for ``chain``'s type.

        Every level's method (a rule's forward still runs the primal below it); the rule
        entry of each level that is differentiated, down to the first rrule that applies.
        """
        out, consult = [], True
        for level in range(root, -1, -1):
            msig = self.resolve(level, chain)
            out.append(("method", level, msig, self.methods[level][msig][1]))
            if consult:
                rsig = self.lookup(level, chain)
                entry = self.rules[level][rsig] if rsig else None
                out.append(("rule", level, rsig, entry and entry[1]))
                consult = not (entry and entry[0][0] == "rrule")
        return tuple(out)

    def derivative(self, level, chain, x):
        rsig = self.lookup(level, chain)
        if rsig is not None and self.rules[level][rsig][0][0] == "rrule":
            m = self.rules[level][rsig][0][1]
            return m * (1.0 + x * x) if chain == "scalar" else m * (x + 1.0)
        c = self.methods[level][self.resolve(level, chain)][0]
        if chain == "scalar":
            own = sum(c * math.cos(x * (i + 1.0)) for i in range(3))
        else:
            own = -c * np.arange(1.0, len(x) + 1.0) * np.sin(x)
        if level == 0:
            return own
        return (1.0 + 0.25 * c) * self.derivative(level - 1, chain, x) + own


# --- the reference: fresh objects per definitions state ----------------------------------------

_FRESH = {}   # Model.state() -> Family built from scratch for it, never mutated afterwards


def fresh_gradient(model, ops, name, chain):
    state = model.state()
    fam = _FRESH.get(state)
    if fam is None:
        fam = Family()
        for op in ops:
            if op[0] != "call":
                fam.apply(op)
        _FRESH[state] = fam
    return fam.grads[name](X[chain])


_UNTOUCHED = []


def untouched():
    """A gradient over functions no operation touches: it must never recompile."""
    if not _UNTOUCHED:
        @nr.generic
        def u0(x: nr.Real):
            s = 0.0
            for i in range(4):
                s += math.sin(x * i + 0.3)
            return s

        @nr.generic
        def u1(x: nr.Real):
            return u0(x) * x
        _UNTOUCHED.append(nr.grad(u1))
    return _UNTOUCHED[0]


# --- operations --------------------------------------------------------------------------------

@st.composite
def operations(draw, model):
    kind = draw(st.sampled_from(["add", "replace", "rrule", "opt_out", "call"]))
    if kind == "call":
        return ("call", draw(st.sampled_from(sorted(ROOTS))), draw(st.sampled_from(sorted(CHAINS))))
    level = draw(st.integers(0, LEVELS - 1))
    existing = sorted(model.methods[level])
    if kind == "add":
        new = [s for s in SIGS if s not in existing]
        kind = "add" if new else "replace"
    if kind in ("add", "replace"):
        sig = draw(st.sampled_from(new if kind == "add" else existing))
        current = model.methods[level].get(sig, (None,))[0]
        c = draw(st.sampled_from([c for c in BODY_CS if c != current]))
        return ("method", level, sig, c)
    sig = draw(st.sampled_from(SIGS))
    if kind == "rrule":
        return ("rrule", level, sig, draw(st.sampled_from(RULE_FACTORS)))
    return ("opt_out", level, sig)


def check(live, model, ops, called, last_tokens):
    for name, chain in sorted(called):
        obj = live.grads[name]
        root, outer = ROOTS[name]
        where = f"{name}({chain}) after {ops}"
        tokens = model.tokens(root, chain)
        before = compiles(obj)
        got = obj(X[chain])
        grew = compiles(obj) - before
        previous = last_tokens.get((name, chain))
        if previous is not None:
            if tokens == previous:
                assert grew == 0, f"{where}: recompiled although no decision it uses changed"
            else:
                assert grew > 0, f"{where}: a decision it uses changed, but it kept old code"
        last_tokens[(name, chain)] = tokens
        np.testing.assert_allclose(got, fresh_gradient(model, ops, name, chain), rtol=1e-12,
                                   err_msg=f"live cache != fresh cache: {where}")
        np.testing.assert_allclose(got, outer * model.derivative(root, chain, X[chain]),
                                   rtol=1e-10, err_msg=f"live cache != model: {where}")
    # Everything the example uses is current now: calling it all again compiles nothing.
    count = nr.cache_info()["compiles"]
    for name, chain in called:
        live.grads[name](X[chain])
    assert nr.cache_info()["compiles"] == count, f"a second call compiled again after {ops}"


@settings(max_examples=14, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_live_cache_matches_a_fresh_cache_after_every_step(data):
    h = untouched()
    h(0.4)
    h_compiles = compiles(h)          # after its first call (in any example): never grows
    live, model = Family(), Model()
    ops, called, last_tokens = [], {("g", "scalar")}, {}
    check(live, model, ops, called, last_tokens)
    for _ in range(data.draw(st.integers(3, 6), label="steps")):
        op = data.draw(operations(model), label="op")
        ops.append(op)
        if op[0] == "call":
            called.add(op[1:])
        else:
            live.apply(op)
            model.apply(op)
        check(live, model, ops, called, last_tokens)
        h(0.4)
        assert compiles(h) == h_compiles, f"an untouched gradient recompiled after {ops}"
