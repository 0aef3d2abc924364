"""hypothesis' default example count for this run of the suite (``tests/budget.py``; the tests marked ``full`` are
left out by ``make test`` itself: ``-m "not full"``), compiling ahead off and one thread a batch (below)."""
import os

from hypothesis import settings

from budget import examples

settings.register_profile("npu-sim", max_examples=examples(100))
settings.load_profile("npu-sim")

# The command line compiles ahead in a forked process on a cold kernel cache (npu_sim/runtime/ahead.py): off for the
# suite's commands and the processes they start (their CPU time is the suite's); tests/test_compile_ahead.py turns
# it on where it tests it.
os.environ.setdefault("NPU_SIM_COMPILE_AHEAD", "0")
# A batch runs on every CPU (npu_sim/runtime/batch.py): one thread in the suite, whose workers use the CPUs already;
# tests/test_batch.py sets more where it tests the threads.
os.environ.setdefault("NPU_SIM_THREADS", "1")
