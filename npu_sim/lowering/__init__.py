"""QDQ graph -> integer program: problem types, the walk, the registry of lowering functions."""
