"""Programs with a ``numba.prange`` loop: a reduction over an array whose iterations read
neighbours (``v0[i - 1]``, ``v0[i + 2]``), gather (``v1[(3 * i) % m]``) or run an inner loop over
the other elements, with accumulators added and subtracted and values computed before the loop,
sometimes from a start known only at run time (negative: an index from the end), sometimes with
the scalars held fixed (then a stencil's reverse is a gather in chunks); or a loop over
a matrix's rows with inner loops along each row (a running value, a sum); or a loop writing an
array at its own index (the two-pass schedule, its math calls' values saved in each iteration's
slots), sometimes in a time loop, sometimes followed by a serial loop that saves.
Their gradient runs in parallel chunks where ad/parallel.py's rule holds (even and odd chunks for
a stencil, a chunk per thread with its own adjoint arrays otherwise), serially where it does not.

The group draws whole programs from a random stream of its own (``generator.PRANGE_CHANCE``): a
prange program is that loop alone, the shape the parallel schedule takes, and every other
program of a seed is what it was before the group existed. Arrays are long enough (12-40) for
several chunks on two threads.
"""

from .program import Arg, Program


class PrangeLoops:
    def prange_program(self):
        r = self.prange_r
        pick = r.random()
        if pick < 0.25:
            return self._prange_rows(r)
        if pick < 0.5:
            return self._prange_map(r)
        if pick < 0.6:
            return self._prange_nested(r)
        if pick < 0.72:
            return self._prange_row_map(r)
        n = r.randint(12, 40)
        # scalars held fixed (not differentiated): no scalar adjoint is summed, so a stencil's
        # reverse becomes a gather in chunks (ad/gather.py, parallel)
        held = r.random() < 0.25
        args = [Arg("x0", "f", diff=not held), Arg("v0", "v", (n,), "C", diff=True)]
        gather = r.random() < 0.35
        if gather:
            args.append(Arg("v1", "v", (r.randint(3, 9),), "C", diff=True))
        if r.random() < 0.4:
            args.append(Arg("x1", "f", diff=not held))
        r.shuffle(args)
        names = {a.name for a in args}
        lo, hi = r.randint(0, 2), r.randint(0, 2)
        used = {"prange loop"} | ({"scalars held fixed"} if held else set())
        lines = ["    s = 0.0"]
        scalars = ["x0"] + (["x1"] if "x1" in names else [])
        if r.random() < 0.6:
            lines.append(f"    c = {self._prange_const(r)} * x0 * x0 + {self._prange_const(r)}")
            scalars.append("c")
            used.add("value before the loop")
        sub = r.random() < 0.4
        if sub:
            lines.append("    u = 0.0")
        stop = f"v0.shape[0] - {hi}" if hi else "v0.shape[0]"
        start = f"{lo}, " if lo else ""
        if r.random() < 0.15:
            # a start known at run time, possibly negative (an index from the end)
            args.append(Arg("k0", "i", int_value=r.choice([-2, -1, 0, 1]) + lo))
            start = "k0, "
            used.add("start at run time")
        lines.append(f"    for i in numba.prange({start}{stop}):")
        reads = [f"v0[i - {o}]" if o > 0 else f"v0[i + {-o}]" if o < 0 else "v0[i]"
                 for o in range(-hi, lo + 1)]
        used.add(f"neighbours {-lo}..{hi}")
        if r.random() < 0.5:
            lines.append(f"        t = {self._prange_term(r, reads, scalars)}")
            reads.append("t")
            used.add("iteration-local")
        if gather:
            reads.append("v1[(3 * i + 1) % v1.shape[0]]")
            used.add("gather")
        if r.random() < 0.08:
            # not a sum: each iteration needs the one before (serial; Numba refuses it in a
            # parallel primal)
            lines.append(f"        s = {self._prange_const(r)} * s + "
                         f"{self._prange_term(r, reads, scalars)}")
            used.add("recurrence")
        else:
            lines.append(f"        s += {self._prange_term(r, reads, scalars)} + "
                         f"{self._prange_term(r, reads, scalars)}")
        if sub:
            lines.append(f"        u -= {self._prange_term(r, reads, scalars)}")
            used.add("subtracted accumulator")
        if r.random() < 0.3:
            lines.append("        for j in range(i + 1, v0.shape[0]):")
            lines.append(f"            s += {self._prange_const(r)} * v0[i] * v0[j] + "
                         f"{self._prange_const(r)} * math.sin(v0[j] - v0[i])")
            used.add("inner loop over the others")
        ret = f"    return s * {self._prange_const(r)}" + (f" + {self._prange_const(r)} * u" if sub else "")
        lines.append(ret)
        return self._prange_finish(args, used, lines)

    def _prange_nested(self, r):
        """A prange loop over a matrix's rows with a prange (or range) loop along each row
        inside: a map writing ``out[i, j]`` (or ``out[i, j] += ...`` into a matrix of values
        from before the loops), a reduction, or both. The inner loop's iterations write their
        own column of a row whose index is the outer loop's (found by review, 2026-12-06: its
        reverse split into chunks with zeroed private copies of an adjoint it reads)."""
        rows, cols = r.randint(3, 9), r.randint(8, 24)
        args = [Arg("x0", "f", diff=True), Arg("m0", "m", (rows, cols), "C", diff=True)]
        r.shuffle(args)
        c = self._prange_const
        used = {"prange loop", "nested prange"}
        inner = r.choice(["numba.prange", "numba.prange", "range"])
        mapped, summed = r.choice([(True, False), (True, True), (False, True)])
        init = r.choice(["np.zeros_like(m0)", "m0 * 0.5"])
        lines = [f"    out = {init}", "    s = 0.0",
                 "    for i in numba.prange(m0.shape[0]):",
                 f"        for j in {inner}(m0.shape[1]):"]
        reads = ["m0[i, j]", "x0", "m0[i, 0]"]
        lines.append(f"            a = {self._prange_term(r, reads[:1], ['x0'])}")
        reads.append("a")
        if r.random() < 0.5:
            lines.append(f"            b = math.tanh({self._prange_term(r, reads, ['x0'])})")
            reads.append("b")
            used.add("two values saved")
        if mapped:
            op = r.choice(["=", "=", "+="]) if init != "np.zeros_like(m0)" else "="
            lines.append(f"            out[i, j] {op} {self._prange_term(r, reads, ['x0'])} * "
                         f"{self._prange_term(r, reads, ['x0'])}")
            used.add("nested map" + (" adding" if op == "+=" else ""))
        if summed:
            lines.append(f"            s += {self._prange_term(r, reads, ['x0'])}")
            used.add("nested accumulator")
        lines.append(f"    return np.sum(out * out) * {c(r)} + s * x0")
        return self._prange_finish(args, used, lines)

    def _prange_row_map(self, r):
        """A loop over a matrix's rows writing each row through inner loops (the row-wise map,
        whose chunks keep tapes of their own: ad/chunk_tapes.py): a value per row first (a
        running max, a sum of exponentials), a map along the row (over all of it, or over a
        triangle ``range(min(i + 1, k))``), a while loop along the row, a branch per row, per-column weights (adjoints
        written away from the row: a copy per chunk), an accumulator; sometimes a value from
        before the loop that the loop overwrites and the reverse reads again, sometimes inside
        a time loop whose steps swap, copy or rebind the buffers; sometimes the row's own
        elements read again where they are written (``out[i, j] += ...``)."""
        rows, cols = r.randint(4, 12), r.randint(3, 9)
        args = [Arg("x0", "f", diff=True), Arg("m0", "m", (rows, cols), "C", diff=True)]
        weights = r.random() < 0.5
        if weights:
            args.append(Arg("w0", "v", (cols,), "C", diff=True))
        r.shuffle(args)
        c, term = self._prange_const, self._prange_term
        used = {"prange loop", "row-wise map"}
        timed = r.random() < 0.25
        src = "u" if timed else "m0"
        pad = "    " * (2 if timed else 1)
        lines = ["    out = np.zeros_like(m0)", "    s = 0.0"]
        restore = r.random() < 0.2
        if restore:
            lines += ["    a = x0 * 0.5", "    y = math.sin(a) * x0"]
            used.add("value before the loop overwritten")
        if timed:
            lines.insert(0, "    u = m0 * 1.0")
            lines.append(f"    for t in range({r.randint(2, 3)}):")
            used.add("prange in a time loop")
        lines.append(f"{pad}for i in numba.prange({src}.shape[0]):")
        reads, scalars = [f"{src}[i, j]"], ["x0"]
        first = r.choice(["max", "sum", "while", None])
        if first == "while":
            lines += [f"{pad}    r = 0.0", f"{pad}    q = 0", f"{pad}    while q < {src}.shape[1]:",
                      f"{pad}        r += math.sin({src}[i, q]) * x0", f"{pad}        q += 1"]
        elif first == "max":
            lines += [f"{pad}    r = {src}[i, 0]", f"{pad}    for j in range(1, {src}.shape[1]):",
                      f"{pad}        r = max(r, {src}[i, j])"]
        elif first == "sum":
            lines += [f"{pad}    r = 0.0", f"{pad}    for j in range({src}.shape[1]):",
                      f"{pad}        r += math.exp(0.3 * {src}[i, j])"]
        if first:
            reads.append("r")
            used.add(f"row {first} first")
        trip = r.choice([f"{src}.shape[1]", f"{src}.shape[1]", f"min(i + 1, {src}.shape[1])"])
        if trip.startswith("min"):
            used.add("triangular inner loop")
        lines.append(f"{pad}    for j in range({trip}):")
        lines.append(f"{pad}        a = {term(r, reads, scalars)}")
        reads.append("a")
        if weights:
            reads.append("w0[j]")
            used.add("column weights")
        if r.random() < 0.4:
            lines.append(f"{pad}        b = math.tanh({term(r, reads, scalars)})")
            reads.append("b")
            used.add("two values saved")
        lines.append(f"{pad}        out[i, j] = {term(r, reads, scalars)} * {term(r, reads, scalars)}")
        own = r.random()
        if own < 0.3:
            # the row's own elements read again where the loop writes them: a sum into the
            # element, the one before it (at j = 0 the row's last, from before the write)
            lines.append(f"{pad}        out[i, j] += {c(r)} * out[i, j - 1]" if own < 0.15 else
                         f"{pad}        out[i, j] += {term(r, reads, scalars)}")
            used.add("own row read back")
        if r.random() < 0.3:
            row = [x for x in reads if "[i, j]" not in x and x not in ("a", "b", "w0[j]")]
            v = r.choice(row + [f"{src}[i, 0]"])
            lines += [f"{pad}    if {src}[i, 0] > 0.0:",
                      f"{pad}        out[i, 0] = {c(r)} * {v} * x0",
                      f"{pad}    else:", f"{pad}        out[i, 0] = math.sin({v})"]
            used.add("branch per row")
        if r.random() < 0.4:
            lines.append(f"{pad}    s += {c(r)} * {src}[i, 0] * x0")
            used.add("accumulator")
        if timed:
            step = r.choice(["        u, out = out, u", "        u[:] = out",
                             "        u = out.copy()"])
            used.add("time loop: " + ("swap" if "," in step else "rebinding" if "copy" in step
                                      else "copy in place"))
            lines.append(step)
        result = "u" if timed else "out"
        tail = " + y" if restore else ""
        lines.append(f"    return np.sum({result} * {result}) * {c(r)} + s * x0{tail}")
        return self._prange_finish(args, used, lines)

    def _prange_rows(self, r):
        """A loop over the rows of a matrix with inner loops along each row (a running value
        carried within the row, a sum), writing only its own row's adjoint."""
        rows, cols = r.randint(6, 24), r.randint(2, 7)
        args = [Arg("x0", "f", diff=True), Arg("m0", "m", (rows, cols), "C", diff=True)]
        r.shuffle(args)
        used = {"prange loop", "rows with inner loops"}
        c = self._prange_const
        lines = ["    s = 0.0", "    for i in numba.prange(m0.shape[0]):", "        a = m0[i, 0]",
                 "        for j in range(1, m0.shape[1]):"]
        carry = r.choice(["max", "lin", "sin"])
        lines.append({"max": "            a = max(a, m0[i, j])",
                      "lin": f"            a = {c(r)} * a + m0[i, j] * x0",
                      "sin": "            a = 0.5 * a + math.sin(m0[i, j])"}[carry])
        used.add(f"row carry {carry}")
        lines.append("        t = 0.0")
        lines.append("        for j in range(m0.shape[1]):")
        lines.append(r.choice(["            t += math.exp(0.3 * (m0[i, j] - a))",
                               f"            t += x0 * m0[i, j] * m0[i, j] + {c(r)}",
                               f"            t -= {c(r)} * math.cos(m0[i, j] + x0)"]))
        lines.append(r.choice(["        s += a + math.log(1.0 + t * t)",
                               f"        s += {c(r)} * a * t + x0",
                               "        s += a * x0 - t"]))
        lines.append(f"    return s * {c(r)}")
        return self._prange_finish(args, used, lines)

    def _prange_map(self, r):
        """A loop writing an array at its own index (the two-pass schedule), reading neighbours,
        sometimes with an accumulator, a value read after the loop or the written array read
        in the loop (those two keep it serial); sometimes inside a time loop whose steps swap
        or copy the buffers, sometimes followed by a serial loop saving floats on the same tape
        (its first save overwrites the slot of the map's last iteration)."""
        n = r.randint(12, 40)
        args = [Arg("x0", "f", diff=True), Arg("v0", "v", (n,), "C", diff=True)]
        r.shuffle(args)
        c = self._prange_const
        lo, hi = r.randint(0, 2), r.randint(0, 2)
        used = {"prange loop", "array written at its own index"}
        timed = r.random() < 0.4
        src = "u" if timed else "v0"
        pad = "    " * (2 if timed else 1)
        # (np.empty_like only where the loop writes every element: the rest is garbage)
        init = "np.zeros_like(v0)" if timed else r.choice(
            ["np.zeros_like(v0)", "np.empty_like(v0)" if lo == hi == 0 else "np.zeros_like(v0)",
             "v0 * 0.5"])
        lines = [f"    out = {init}", "    s = 0.0", "    a = 0.0"]
        if timed:
            used.add("prange in a time loop")
            lines.insert(0, "    u = v0 * 1.0")
            lines.append(f"    for t in range({r.randint(2, 3)}):")
        stop = f"v0.shape[0] - {hi}" if hi else "v0.shape[0]"
        lines.append(f"{pad}for i in numba.prange({lo}, {stop}):")
        reads = [f"{src}[i - {o}]" if o > 0 else f"{src}[i + {-o}]" if o < 0 else f"{src}[i]"
                 for o in range(-hi, lo + 1)]
        lines.append(f"{pad}    a = {self._prange_term(r, reads, ['x0'])}")
        reads.append("a")
        if r.random() < 0.35:
            # a second value saved per iteration (a math call's: each iteration's slots)
            lines.append(f"{pad}    b = math.{r.choice(['tanh', 'exp', 'sin'])}("
                         f"{self._prange_term(r, reads, ['x0'])})")
            reads.append("b")
            used.add("two values saved")
        if r.random() < 0.15 and init == "v0 * 0.5":
            reads.append("out[i]")
            used.add("written array read")
        lines.append(f"{pad}    out[i] = {self._prange_term(r, reads, ['x0'])} * "
                     f"{self._prange_term(r, reads, ['x0'])}")
        if r.random() < 0.4:
            if r.random() < 0.2:
                lines.append(f"{pad}    s = {c(r)} * s + {self._prange_term(r, reads, ['x0'])}")
                used.add("recurrence")
            else:
                lines.append(f"{pad}    s += {self._prange_term(r, reads, ['x0'])}")
                used.add("accumulator")
        if timed:
            # a swap binds u and out to both arrays in turn, a copy binds u to a new one: the
            # chunks run as functions of their own then (ad/outline.py), whose arguments are not
            # rebound
            step = r.choice(["        u, out = out, u", "        u[:] = out",
                             "        for j in numba.prange(v0.shape[0]):\n"
                             "            u[j] = out[j]", "        u = out.copy()"])
            used.add("time loop: " + ("swap" if "," in step else "rebinding" if "copy" in step
                                      else "copy in place"))
            lines.append(step)
        result = "u" if timed else "out"
        then = ""
        if r.random() < 0.2:
            used.add("serial loop saving after")
            lines += ["    s2 = 0.0", f"    for j in range({result}.shape[0]):",
                      f"        e = math.tanh(0.5 * {result}[j])", "        s2 += e * e"]
            then = f" + {c(r)} * s2"
        tail = f" + {c(r)} * a" if r.random() < 0.15 else ""
        if tail:
            used.add("last value read after")
        lines.append(f"    return np.sum({result} * {result}) * {c(r)} + s * x0{then}{tail}")
        return self._prange_finish(args, used, lines)

    def _prange_finish(self, args, used, lines):
        from .generator import _HEADER
        params = ", ".join(a.name for a in args)
        source = (f"# numbarules fuzz program: seed {self.seed}, index {self.index}\n"
                  f"# features: prange\n" + _HEADER + "\n\n"
                  f"def f({params}):\n" + "\n".join(lines) + "\n")
        argnums = tuple(k for k, a in enumerate(args) if a.diff)
        self.args = args
        return Program(self.seed, self.index, ("prange",), tuple(sorted(used)), source,
                       tuple(args), argnums, frozenset(), stream=self.stream)

    @staticmethod
    def _prange_const(r):
        return repr(round(r.uniform(-1.5, 1.5), 3))

    def _prange_term(self, r, reads, scalars):
        a = r.choice(reads)
        form = r.choice(["lin", "lin", "prod", "sin", "param", "exp"])
        if form == "prod":
            return f"{self._prange_const(r)} * {a} * {r.choice(reads)}"
        if form == "sin":
            return f"math.sin({a})"
        if form == "exp":
            return f"math.exp(0.3 * {a})"
        if form == "param":
            return f"{r.choice(scalars)} * {a}"
        return f"{self._prange_const(r)} * {a}"
