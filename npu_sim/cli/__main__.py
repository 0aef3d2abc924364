"""`python -m npu_sim.cli`: the same as the `npu-sim` command."""
from npu_sim.cli.main import entry

entry()
