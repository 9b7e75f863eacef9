"""A generated program and its arguments.

``Arg`` is one argument of the entry function (its kind, shape, layout, struct class, int value);
``Program`` is what ``generator.generate`` returns: the module source, the arguments, which of
them are differentiated and the refusal classes the program may get, with the values of each
point drawn as objects (``_value``) and as Python source for reproducers (``_value_source``),
draw for draw alike.
"""

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Arg:
    name: str
    kind: str                 # f, i, v, m, struct, tf (floats), th (float, int), ta (arrays)
    shape: tuple = ()
    layout: str = "C"
    cls: str = ""             # struct class
    int_value: int = 0        # i; th's int; Params.k
    sizes: dict = field(default_factory=dict)   # struct array field lengths
    diff: bool = False
    default: str = ""         # source of the parameter's default value ("": none)
    omit: bool = False        # left out of the checked calls (its default is its value)


@dataclass
class Program:
    seed: int
    index: int
    features: tuple           # the groups this program drew from
    used: tuple               # the constructs it contains (tags)
    source: str
    args_spec: tuple
    argnums: tuple            # differentiated arguments (nr.grad's argnums)
    may_refuse: frozenset     # README refusal classes this program may legitimately get
    entry: str = "f"
    stream: tuple = None      # the ``features`` argument of generate (None: all)
    variant: int = 0          # reductions of the program (numbarules.fuzz.reduce) count up

    @property
    def module_name(self):
        return f"nrfuzz_{self.seed}_{self.index}" + (f"_{self.variant}" if self.variant else "")

    def to_dict(self):
        d = dict(self.__dict__)
        d["args_spec"] = [dict(a.__dict__) for a in self.args_spec]
        d["may_refuse"] = sorted(self.may_refuse)
        return d

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d["args_spec"] = tuple(Arg(**a) for a in d["args_spec"])
        for k in ("features", "used", "argnums"):
            d[k] = tuple(d[k])
        d["may_refuse"] = frozenset(d["may_refuse"])
        if d.get("stream") is not None:
            d["stream"] = tuple(d["stream"])
        return cls(**d)

    def with_source(self, source, variant):
        """The same program (arguments, points) with another source: a reduction step."""
        d = self.to_dict()
        d["source"], d["variant"] = source, variant
        return Program.from_dict(d)

    def args(self, attempt=0):
        """The argument values of point ``attempt`` (fresh objects on every call)."""
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.index, attempt])
        return tuple(_value(a, rng) for a in self.args_spec)

    def args_source(self, attempt=0):
        """Python source building ``args(attempt)`` (with ``layout`` and the struct classes from
        numbarules.fuzz.pool)."""
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.index, attempt])
        return "(" + "".join(_value_source(a, rng) + ", " for a in self.args_spec) + ")"

    def omitting_call(self):
        """How the fuzzer calls ``f`` leaving out the arguments whose defaults are their values:
        (how many it passes by position, the positions it passes by name after them), or None
        when nothing is left out."""
        omitted = [k for k, a in enumerate(self.args_spec) if a.omit]
        if not omitted:
            return None
        first = omitted[0]
        return first, [k for k, a in enumerate(self.args_spec) if k > first and not a.omit]

    def _omitting_call_line(self, nums):
        call = self.omitting_call()
        if call is None:
            return ""
        first, named = call
        rest = "".join(f", {self.args_spec[k].name}=args[{k}]" for k in named)
        return (f"    print('grad, defaults left out:', nr.grad(f, argnums={nums!r})"
                f"(*args[:{first}]{rest}))\n")

    def repro(self, attempt=0):
        """A standalone script: the module source plus the calls the fuzzer checks."""
        nums = self.argnums
        return (f"{self.source}\n\nif __name__ == '__main__':\n"
                f"    # numbarules fuzz: generate({self.seed}, {self.index}"
                f"{', ' + repr(list(self.stream)) if self.stream else ''}), point {attempt}\n"
                f"    from numbarules.fuzz.pool import layout, Params, Pair, Nest, Nest2\n"
                f"    args = {self.args_source(attempt)}\n"
                f"    print('python:', f(*args))\n"
                f"    print('grad:', nr.grad(f, argnums={nums!r})(*args))\n"
                + self._omitting_call_line(nums) +
                "    y, pb = nr.pullback(f, *args)\n"
                "    print('pullback:', y, pb(1.0))\n"
                + ("" if "def world_change" not in self.source else
                   f"    world_change()\n"
                   f"    print('after world_change: python:', f(*args))\n"
                   f"    print('grad:', nr.grad(f, argnums={nums!r})(*args))\n"
                   f"    print('old pullback (its own world):', pb(1.0))\n"))


# --- argument values ------------------------------------------------------------------------------

def _floats(rng, shape):
    return rng.uniform(-1.5, 1.5, size=shape)


def _struct_value(cls, sizes, k, rng, pool):
    C = pool.STRUCTS[cls]
    if cls == "Params":
        return C(float(_floats(rng, ())), pool.layout(_floats(rng, (sizes["w"],)), "C"), k)
    if cls == "Pair":
        return C(float(_floats(rng, ())), float(_floats(rng, ())))
    if cls == "Nest":
        return C(_struct_value("Params", sizes, k, rng, pool), float(_floats(rng, ())))
    if cls == "Nest2":
        q = _struct_value("Pair", sizes, k, rng, pool)
        return C(q, pool.layout(_floats(rng, (sizes["v"],)), "C"))
    raise ValueError(cls)


def _value(a, rng):
    from . import pool
    if a.kind == "f":
        return float(_floats(rng, ()))
    if a.kind == "i":
        return a.int_value
    if a.kind in ("v", "m"):
        return pool.layout(_floats(rng, a.shape), a.layout)
    if a.kind == "struct":
        return _struct_value(a.cls, a.sizes, a.int_value, rng, pool)
    if a.kind == "tf":
        return tuple(float(v) for v in _floats(rng, (a.shape[0],)))
    if a.kind == "th":
        return (float(_floats(rng, ())), a.int_value)
    if a.kind == "ta":
        return tuple(pool.layout(_floats(rng, (a.shape[1],)), "C") for _ in range(a.shape[0]))
    raise ValueError(a.kind)


def _arr_src(values, kind):
    flat = ", ".join(repr(float(v)) for v in np.ravel(values))
    shape = tuple(np.shape(values))
    return f"layout(np.array([{flat}]).reshape({shape!r}), {kind!r})"


def _value_source(a, rng):
    # Mirrors _value draw for draw, so the two stay in step.
    def struct_src(cls):
        if cls == "Params":
            x = float(_floats(rng, ()))
            w = _floats(rng, (a.sizes["w"],))
            return f"Params({x!r}, {_arr_src(w, 'C')}, {a.int_value})"
        if cls == "Pair":
            x, y = float(_floats(rng, ())), float(_floats(rng, ()))
            return f"Pair({x!r}, {y!r})"
        if cls == "Nest":
            p = struct_src("Params")
            return f"Nest({p}, {float(_floats(rng, ()))!r})"
        q = struct_src("Pair")
        return f"Nest2({q}, {_arr_src(_floats(rng, (a.sizes['v'],)), 'C')})"
    if a.kind == "f":
        return repr(float(_floats(rng, ())))
    if a.kind == "i":
        return repr(a.int_value)
    if a.kind in ("v", "m"):
        return _arr_src(_floats(rng, a.shape), a.layout)
    if a.kind == "struct":
        return struct_src(a.cls)
    if a.kind == "tf":
        return "(" + "".join(f"{float(v)!r}, " for v in _floats(rng, (a.shape[0],))) + ")"
    if a.kind == "th":
        return f"({float(_floats(rng, ()))!r}, {a.int_value})"
    if a.kind == "ta":
        return "(" + "".join(_arr_src(_floats(rng, (a.shape[1],)), "C") + ", "
                             for _ in range(a.shape[0])) + ")"
    raise ValueError(a.kind)
