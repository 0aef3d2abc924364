"""How much each run of the suite draws and repeats: ``make test`` (the README's command, a few minutes) runs every
test with an eighth of the random examples of each property test; each kernel property test draws its arrays of
one dtype (int8, uint8 or int16, picked by its name: ``tests/naive.this_tests``), a second operand and the output
of the first operand's dtype (or int32) (each dtype combination is one more Numba compile); ``make test-full`` (CI runs both) sets ``NPU_SIM_TESTS=full`` and runs
every test, each property test with its full count and every dtype combination, uint16 too, and the tests marked
``full`` (the Ray cluster runs and the other minute-long ones) that ``make test`` leaves out.

A property test states its full count as ``@settings(max_examples=examples(N))``; one that states none gets
hypothesis' 100 in a full run and 1/:data:`QUICK` of it otherwise (the profile ``tests/conftest.py`` loads). The
explicit ``@example`` cases (saturation, extreme scales, the bounds) run in both.
"""
import os

FULL = os.environ.get("NPU_SIM_TESTS", "").strip().lower() == "full"
QUICK = 8  # make test draws 1/QUICK of the examples


def examples(n: int) -> int:
    """The number of random examples a property test of full count ``n`` draws in this run (at least 5)."""
    return n if FULL else max(5, n // QUICK)
