"""The suite's two budgets (``tests/budget.py``): hypothesis' default example count for this run, and the
tests marked ``full`` left to ``make test-full``."""
from hypothesis import settings

from budget import FULL, examples

settings.register_profile("npu-sim", max_examples=examples(100))
settings.load_profile("npu-sim")
