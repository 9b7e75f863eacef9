"""Outcomes of checks: ``Result`` (one program; also what a worker answers, as JSON), the README
refusal class a refusal message belongs to, and ``Summary`` (a run's results: counts, failures
grouped by a normalised error ``signature``, the table and report ``numbarules fuzz`` prints,
``describe`` of one failure with how to reproduce it). What each outcome means: check.py.
"""

import json
import re
from dataclasses import dataclass, field

from .generator import REFUSAL_CLASSES

OUTCOMES = ("ok", "wrong", "refused", "internal", "invalid", "skipped")


# --- one program ----------------------------------------------------------------------------------

@dataclass
class Result:
    seed: int
    index: int
    outcome: str
    features: tuple = ()
    used: tuple = ()
    error: str = ""
    detail: str = ""
    source: str = ""
    repro: str = ""
    refusal_class: str = ""
    expected: bool = False       # refused, in a class the program may legitimately get
    skipped_points: int = 0
    skipped_coordinates: int = 0
    checked_coordinates: int = 0
    seconds: float = 0.0
    stream: list = None          # generate()'s features argument: reproduce with it
    stages: dict = field(default_factory=dict)   # seconds per stage (fd, grad, pullback, ...)
    disk_hits: int = 0       # specializations loaded from numbarules' disk cache by the check
    loaded: bool = False     # the check of ``run(disk_cache=True)``'s second process
    jvp: str = ""            # forward mode: "ok", "refused: <why>", "" (not reached)
    hvp: str = ""            # the Hessian-vector product: the same (every third program)

    def to_json(self):
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text):
        d = json.loads(text)
        known = cls.__dataclass_fields__
        d = {k: v for k, v in d.items() if k in known}
        d["features"] = tuple(d.get("features", ()))
        d["used"] = tuple(d.get("used", ()))
        return cls(**d)


def refusal_class(message):
    for name, pattern in REFUSAL_CLASSES.items():
        if re.search(pattern, message):
            return name
    return "unlisted"


# --- the summary ----------------------------------------------------------------------------------

@dataclass
class Summary:
    seed: int
    features: tuple
    results: list = field(default_factory=list)
    seconds: float = 0.0

    def count(self, outcome):
        return sum(r.outcome == outcome for r in self.results)

    @property
    def ok(self):
        return self.count("ok")

    @property
    def wrong(self):
        return self.count("wrong")

    @property
    def refused(self):
        return self.count("refused")

    @property
    def internal(self):
        return self.count("internal")

    @property
    def invalid(self):
        return self.count("invalid")

    @property
    def skipped(self):
        return self.count("skipped")

    @property
    def unexpected_refusals(self):
        return [r for r in self.results if r.outcome == "refused" and not r.expected]

    @property
    def failures(self):
        """Programs the engine got wrong: wrong, internal, and refusals outside the README's
        refused classes for what the program contains (invalid: the fuzzer's own bugs)."""
        return [r for r in self.results if r.outcome in ("wrong", "internal", "invalid")
                or (r.outcome == "refused" and not r.expected)]

    @property
    def skipped_points(self):
        return sum(r.skipped_points for r in self.results)

    def feature_hits(self):
        hits = {}
        for r in self.results:
            for u in r.used:
                hits[u] = hits.get(u, 0) + 1
        return hits

    def stage_seconds(self):
        """{check: seconds summed over the programs}, slowest first (the checks after a world
        change under "world ...")."""
        total = {}
        for r in self.results:
            for k, v in (r.stages or {}).items():
                total[k] = total.get(k, 0.0) + v
        return dict(sorted(((k, v) for k, v in total.items() if v >= 0.05),
                           key=lambda kv: -kv[1]))

    def classes(self):
        """Failures grouped by a normalised error signature: {signature: [results]}."""
        groups = {}
        for r in self.failures:
            groups.setdefault(signature(r), []).append(r)
        return groups

    def table(self):
        n = len(self.results)
        lines = [f"numbarules fuzz: seed {self.seed}, {n} programs in {self.seconds:.1f} s"
                 + (f", features {', '.join(self.features)}" if self.features else "")]
        for o in OUTCOMES:
            c = self.count(o)
            extra = ""
            if o == "refused" and c:
                extra = f" ({c - len(self.unexpected_refusals)} in README refused classes)"
            lines.append(f"  {o:9s} {c}{extra}")
        lines.append(f"  skipped points (finite differences unreliable, re-drawn): "
                     f"{self.skipped_points}; coordinates left unchecked: "
                     f"{sum(r.skipped_coordinates for r in self.results)} of "
                     f"{sum(r.checked_coordinates + r.skipped_coordinates for r in self.results)}")
        checked = [r for r in self.results if r.jvp]
        if checked:
            refused = [r for r in checked if r.jvp.startswith("refused")]
            lines.append(f"  forward mode (nr.jvp against grad . v): {len(checked) - len(refused)}"
                         f" ok, {len(refused)} refused"
                         + (f" ({', '.join(sorted(set(refusal_class(r.jvp) for r in refused)))})"
                            if refused else ""))
        checked = [r for r in self.results if r.hvp]
        if checked:
            refused = [r for r in checked if r.hvp.startswith("refused")]
            lines.append(f"  second order (nr.hvp: symmetric, against differences of nr.grad): "
                         f"{len(checked) - len(refused)} ok, {len(refused)} refused")
        stages = self.stage_seconds()
        if stages:
            # where a run's time goes, compiles included: what to shorten when it is too long
            lines.append("  seconds by check, over all programs: " + ", ".join(
                f"{k} {v:.1f}" for k, v in stages.items()))
        loaded = [r for r in self.results if r.loaded]
        if loaded:
            lines.append(f"  checked again in another process from the disk cache: {len(loaded)} "
                         f"programs, {sum(r.disk_hits for r in loaded)} specializations loaded")
        return "\n".join(lines)

    def report(self, sources=True):
        out = [self.table()]
        groups = self.classes()
        if groups:
            drawn, failed = {}, {}
            for r in self.results:
                for f in r.features:
                    drawn[f] = drawn.get(f, 0) + 1
                    failed[f] = failed.get(f, 0) + (r in self.failures)
            rates = sorted(drawn, key=lambda f: -failed[f] / drawn[f])
            out.append("\nfailing programs per feature group drawn: "
                       + ", ".join(f"{f} {failed[f]}/{drawn[f]}" for f in rates))
            out.append(f"\n{len(groups)} failure classes:")
            for sig, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
                ids = ", ".join(f"{r.index}" for r in rs[:12]) + (" ..." if len(rs) > 12 else "")
                out.append(f"  [{len(rs)}x] {sig}\n      programs: {ids}")
        for r in self.results:
            if r.jvp.startswith("refused"):
                out.append(f"  program {r.index}: nr.jvp {r.jvp[:220]}")
            if r.hvp.startswith("refused"):
                out.append(f"  program {r.index}: nr.hvp {r.hvp[:220]}")
        expected = [r for r in self.results if r.outcome in ("refused", "skipped")
                    and r not in self.failures]
        if expected:
            out.append("\nrefused in a README refused class the program contains, or skipped:")
            for r in expected:
                first = r.error.splitlines()[0] if r.error else ""
                cls = f" [{r.refusal_class}]" if r.refusal_class else ""
                out.append(f"  program {r.index}: {r.outcome}{cls} {first[:140]}")
        for r in self.failures if sources else []:
            out.append(describe(r))
        return "\n".join(out)

    def __str__(self):
        return self.report()


def signature(r):
    msg = r.error.splitlines()[0] if r.error else ""
    msg = re.sub(r"nrfuzz_\d+_\d+", "M", msg)
    msg = re.sub(r"'[^']*'", "'_'", msg)
    msg = re.sub(r"\b[a-zA-Z]+\d+(\.\w+)?(\[\d+\])*", "_", msg)
    msg = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", msg)
    msg = re.sub(r"line N", "line", msg)
    msg = re.sub(r"\s+", " ", msg)[:160]
    extra = f" [{r.refusal_class}]" if r.outcome == "refused" else ""
    return f"{r.outcome}: {msg}{extra}"


def describe(r):
    bar = "=" * 78
    head = (f"{bar}\n{r.outcome.upper()}: seed {r.seed}, program {r.index} "
            f"(reproduce: numbarules.fuzz.generate({r.seed}, {r.index}"
            + (f", {list(r.stream)!r}" if r.stream else "") + "); "
            f"numbarules fuzz --seed {r.seed} --start {r.index} --n 1"
            + (f" --features {','.join(r.stream)}" if r.stream else "") + ")\n")
    body = f"error: {r.error}\n"
    if r.detail and r.detail != r.error:
        body += "detail:\n" + _indent(r.detail[-3000:]) + "\n"
    src = r.repro or r.source
    return head + body + "program:\n" + _indent(src) + "\n"


def _indent(text):
    return "\n".join("    " + line for line in text.rstrip().splitlines())


def _first_line(exc):
    text = f"{type(exc).__name__}: {exc}"
    return text
