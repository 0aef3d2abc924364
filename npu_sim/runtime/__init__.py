"""Running an integer program: the executor loop with hooks, the Simulator (load/run/trace), replay (running
part of a program on given values)."""
