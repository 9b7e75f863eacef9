"""Small differentiable scalar programs run on the CUDA target (simulator and PTX tests).

Each case: the function, how to make its argument arrays (n elements), argnums, the per-thread
tape it needs (0: none), and the element types of its arguments. The CPU gradient (nr.grad) is
the reference; tests/test_cuda_zoo_cpu.py checks it against finite differences.
"""

import math
from dataclasses import dataclass

import numpy as np

import numbarules as nr


# --- generic functions with several methods, and rules -----------------------------------------

@nr.generic
def act(x: nr.Real):
    return math.tanh(x)


@act.method
def act(x: nr.Float64):                 # more specific: the one float64 calls run
    return x / (1.0 + abs(x))


@act.method
def act(x: nr.Integer):
    return 0.5 * x


@nr.generic
def ste_round(x: nr.Float64):
    """Rounding with a straight-through rule: the derived gradient would be 0."""
    return float(math.floor(x + 0.5))


@nr.scalar_rule(ste_round, nr.Float64)
def _ste_round_partials(x):
    return (1.0,)


@nr.generic
def smooth_abs(x: nr.Float64, eps: nr.Float64):
    return math.sqrt(x * x + eps)


@nr.rrule(smooth_abs, nr.Float64, nr.Float64)
def _smooth_abs_rule(x, eps):
    # Deliberately reads a local of the rule in its pullback, and scales by 2 so that a test
    # can tell that the rule (not the derived body) ran: 2 * true gradient.
    y = smooth_abs(x, eps)
    inv = 1.0 / y

    def smooth_abs_pullback(dy):
        return (2.0 * dy * x * inv, dy * 0.5 * inv)
    return y, smooth_abs_pullback


def softclip(x, lo, hi):
    """A plain Python helper (compiled alongside), with a branch."""
    if x < lo:
        return lo + math.exp(x - lo) - 1.0
    if x > hi:
        return hi - math.exp(hi - x) + 1.0
    return x


# --- the programs --------------------------------------------------------------------------

def poly(x):
    return x * x * x - 2.0 * x + 1.0 / (1.0 + x * x)


def branchy(x):
    if x > 0.5:
        y = math.sin(x) * x
    else:
        y = math.exp(x) - x
    return y * y


def reduction(x, n):
    s = 0.0
    for i in range(n):
        s += math.sin(x * i) / (1.0 + i)
    return s


def recurrence(x):
    y = x
    for i in range(6):
        y = y * math.cos(y) + 0.5
    return y


def spin(x, n):
    y = x
    for i in range(n):
        y = y * math.cos(y) + 0.5
    return y


def newton_sqrt(a):
    x = a
    k = 0
    while abs(x * x - a) > 1e-10 * a and k < 50:
        x = 0.5 * (x + a / x)
        k += 1
    return x


def early_break(x, n):
    s = 0.0
    for i in range(n):
        s = s + x * math.cos(s + i)
        if s > 2.0:
            break
    return s


def nested(x, y):
    acc = 0.0
    for i in range(3):
        t = x
        for j in range(i + 1):
            t = t * y + 1.0
        acc = acc + math.log(1.0 + t * t)
    return acc


def generic_caller(x, n):
    return act(x) * act(n) + act(x * x)


def rule_caller(x):
    return ste_round(3.0 * x) + x * x


def rrule_caller(x, eps):
    return smooth_abs(x, eps) * x


def helper_caller(x):
    s = 0.0
    for i in range(4):
        s += softclip(x * (i + 1), -1.0, 1.0)
    return s


def two_args(x, y):
    return math.atan2(y, x) + x ** 3 * y + math.hypot(x, y) + (x + y) ** 2.5


def ode_checkpointed(x, n):
    """A time loop marked for checkpointing: its device tape holds one step (3 entries), its
    slots 3 states, whatever n (each thread runs its own schedule)."""
    v = 0.0
    for t in nr.checkpointed(range(n), snapshots=3):
        a = -math.sin(x) - 0.25 * v
        v = v + 0.1 * a
        x = x + 0.1 * v
    return 0.5 * v * v + (1.0 - math.cos(x))


def kicked_checkpointed(x, n):
    """A checkpointed step with a branch, an inner loop of constant length and an int state;
    one slot, so the schedule also takes its quadratic (no free slot) path."""
    k = 0
    for t in nr.checkpointed(range(n), snapshots=1):
        if x > 0.5:
            x = x - 0.3 * x * x
            k += 1
        else:
            x = x + 0.2 * math.cos(x + k)
        for j in range(2):
            x = x * 0.9 + 0.05 * math.sin(x)
    return x * (1.0 + 0.1 * k)


def settle_checkpointed(x, n):
    """A checkpointed step with a loop of unknown length inside: its turns save during the
    reverse sweep, and a per-thread tape bound is needed for one step."""
    for t in nr.checkpointed(range(n), snapshots=2):
        k = 0
        while x > 1.0 and k < 8:
            x = 0.7 * x + 0.1 * math.sin(x)
            k += 1
        x = x * 1.9 + 0.05
    return x


@dataclass(frozen=True)
class Case:
    f: object
    make: object           # n -> tuple of host arrays
    argnums: object = 0
    tape: int = 0


def _lin(n, lo, hi, shift=0.0):
    return np.linspace(lo, hi, n) + shift


CASES = [
    Case(poly, lambda n: (_lin(n, -2.0, 2.0, 0.013),)),
    Case(branchy, lambda n: (_lin(n, -1.0, 2.0, 0.011),)),
    Case(reduction, lambda n: (_lin(n, 0.1, 1.5), np.arange(n, dtype=np.int64) % 9)),
    # a loop of constant length: its tape is sized at compile time, no tape= needed
    Case(recurrence, lambda n: (_lin(n, -1.0, 1.0, 0.007),)),
    Case(spin, lambda n: (_lin(n, -1.0, 1.0, 0.003), np.arange(n, dtype=np.int64) % 7), tape=12),
    Case(newton_sqrt, lambda n: (_lin(n, 0.5, 9.0),), tape=64),
    Case(early_break, lambda n: (_lin(n, 0.2, 1.2), 3 + np.arange(n, dtype=np.int64) % 6),
         tape=32),
    Case(nested, lambda n: (_lin(n, -0.5, 0.5), _lin(n, 0.3, 0.9)), argnums=(0, 1), tape=16),
    Case(generic_caller, lambda n: (_lin(n, -2.0, 2.0, 0.017), np.arange(n, dtype=np.int64) % 5)),
    Case(rule_caller, lambda n: (_lin(n, -1.0, 1.0, 0.013),)),
    Case(rrule_caller, lambda n: (_lin(n, -1.0, 1.0, 0.019), _lin(n, 0.1, 0.2)), argnums=(0, 1)),
    Case(helper_caller, lambda n: (_lin(n, -1.5, 1.5, 0.021),)),
    Case(two_args, lambda n: (_lin(n, 0.5, 2.0), _lin(n, 0.2, 1.0)), argnums=(0, 1)),
    # checkpointed time loops: a tape of one step and slots, no tape= (n from 0 to 40 steps)
    Case(ode_checkpointed, lambda n: (_lin(n, -1.0, 1.2, 0.01),
                                      np.arange(n, dtype=np.int64) * 7 % 41)),
    Case(kicked_checkpointed, lambda n: (_lin(n, -0.8, 1.4, 0.003),
                                         np.arange(n, dtype=np.int64) * 5 % 17)),
]

IDS = [c.f.__name__ for c in CASES]


def cpu_gradients(case, arrays):
    """The reference: nr.grad on the CPU, element by element, as arrays per argnum."""
    g = nr.grad(case.f, case.argnums)
    rows = [g(*(a[i].item() for a in arrays)) for i in range(len(arrays[0]))]
    if isinstance(case.argnums, int):
        return (np.array(rows),)
    return tuple(np.array([r[k] for r in rows]) for k in range(len(case.argnums)))


# --- non_differentiable and opt_out --------------------------------------------------------

@nr.generic
def clamp01(x: nr.Float64):
    return min(max(x, 0.0), 1.0)


nr.non_differentiable(clamp01, nr.Float64)


@nr.generic
def square(x: nr.Float64):
    return x * x


@nr.scalar_rule(square, nr.Float64)
def _square_partials(x):
    return (100.0,)              # wrong on purpose: opted out below, so it must not be used


nr.opt_out(square, nr.Float64)


def declared(x):
    return clamp01(x) * x + square(x)     # gradient: clamp01(x) + 2 x
