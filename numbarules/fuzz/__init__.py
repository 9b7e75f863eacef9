"""A differential fuzzer for the AD engine.

``generate(seed, index, features)`` writes a random program over the differentiable language
(numbarules/fuzz/generator.py); ``run(n, seed, features, timeout, verbose)`` checks programs in
worker processes: ``nr.grad``, ``nr.pullback`` and ``nr.value_and_grad`` against each other,
against central finite differences and against the program run as Python
(numbarules/fuzz/runner.py). From the shell: ``numbarules fuzz --n 200 --seed 0``.
"""

from .generator import FEATURES, REFUSAL_CLASSES, Program, generate
from .runner import Result, Summary, check_program, run

__all__ = ["FEATURES", "REFUSAL_CLASSES", "Program", "Result", "Summary", "check_program",
           "generate", "run"]
