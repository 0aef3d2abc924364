"""The command line: argparse lives here only; one module per command, each thin: parse -> api -> render -> exit.

Exit codes: 0 ok, 1 not deployable (check) or a mismatch (compare), 2 bad input, 3 internal error."""
