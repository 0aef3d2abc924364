"""`python -m npu_sim.cli`: the same as the `npu-sim` command."""
import sys

from npu_sim.cli.main import main

sys.exit(main())
