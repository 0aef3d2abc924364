"""hypothesis' default example count for this run of the suite (``tests/budget.py``; the tests marked ``full`` are
left out by ``make test`` itself: ``-m "not full"``), and compiling ahead off (below)."""
import os

from hypothesis import settings

from budget import examples

settings.register_profile("npu-sim", max_examples=examples(100))
settings.load_profile("npu-sim")

# The command line compiles ahead in a forked process on a cold kernel cache (npu_sim/runtime/ahead.py): off for the
# suite's commands and the processes they start (their CPU time is the suite's); tests/test_compile_ahead.py turns
# it on where it tests it.
os.environ.setdefault("NPU_SIM_COMPILE_AHEAD", "0")
