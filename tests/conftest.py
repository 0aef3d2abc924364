"""hypothesis' default example count for this run of the suite (``tests/budget.py``); the tests marked ``full`` are
left out by ``make test`` itself (``-m "not full"``)."""
from hypothesis import settings

from budget import examples

settings.register_profile("npu-sim", max_examples=examples(100))
settings.load_profile("npu-sim")
