"""Run the mutants of tests/mutants.py through every command and board, one forked process per mutant.

The parent imports npu_sim and runs every command on every base (so numba's kernels are compiled or loaded
once), then forks one child per mutant (``WORKERS`` at a time). The child writes the mutant, asks the front door
(``open_model(path).graph()``), calls ``npu_sim.cli.main.main(argv)`` for ``run``, ``check``, ``lower`` and
``estimate`` on every preset board with stdout and stderr sent to files, then asks onnx's full checker and
onnxruntime (tests/mutant_oracle.py) and writes what it saw as JSON. The parent kills a child that outlives
``TIMEOUT`` and classifies each mutant (tests/mutant_verdict.py).

``python -m tests.mutant_runner --count 1000 --seed 1`` runs 1,000 mutants and prints the class counts and
every finding (docs/TESTING.md).
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import onnx

import npu_sim  # noqa: F401  (imported before the fork: the children inherit it warm)
from npu_sim.boards import load_board, presets
from npu_sim.cli.main import main
from npu_sim.errors import NpuSimError
from npu_sim.frontend.reader import open_model
from tests import mutant_oracle, mutants
from tests.mutant_verdict import FINDINGS, classify

BOARDS = sorted(presets())
COSTED = [b for b in BOARDS if load_board(b).cost is not None]
TIMEOUT = 60.0      # seconds per mutant (every command on every board); a child past it is a hang
WORKERS = max(1, min(2, os.cpu_count() or 1))
MAX_FEED = 10 ** 6  # elements of a fed input (larger or odd inputs: the CLI's own seeded random input)


def feeds_for(model: onnx.ModelProto) -> dict | None:
    """Seeded float inputs at the model's declared shapes (a symbolic dim: 1), None where that is not possible."""
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for x in model.graph.input:
        if x.name in inits:
            continue
        tt = x.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        if tt.elem_type != onnx.TensorProto.FLOAT or not tt.HasField("shape") or not dims or \
                min(dims) < 1 or math.prod(dims) > MAX_FEED:
            return None
        feeds[x.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def commands(path: Path, folder: Path, inputs: list[str]) -> dict[str, list[str]]:
    cmds = {}
    for b in BOARDS:
        cmds[f"run/{b}"] = ["run", str(path), "--board", b, "--out", str(folder / f"out-{b}"), *inputs]
        cmds[f"check/{b}"] = ["check", str(path), "--board", b]
        cmds[f"lower/{b}"] = ["lower", str(path), "--board", b]
        if b in COSTED:
            cmds[f"estimate/{b}"] = ["estimate", str(path), "--board", b]
    return cmds


def call(argv: list[str], stem: Path) -> tuple:
    """``main(argv)`` with fds 1 and 2 sent to ``stem``.out/.err: (exit code, stderr, stdout)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(f"{stem}.out", "w") as out, open(f"{stem}.err", "w") as err, \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # pytest's capture replaces sys.std*
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # main lets nothing out but KeyboardInterrupt: a crash if it does
            traceback.print_exc()
            code = "exception"
        finally:
            out.flush()
            err.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return code, Path(f"{stem}.err").read_text(errors="replace")[:20000], Path(f"{stem}.out").read_text(
        errors="replace")[:20000]


def child(mutant, model, folder: Path, kinds: dict) -> None:
    """Everything one mutant goes through (in the forked child); the result in ``folder``/result.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "progress").write_text("build")
    path = mutants.build(mutant, model, folder / "m.onnx")
    mutated = onnx.load(str(path))
    feeds = feeds_for(mutated)
    inputs = []
    if feeds:
        for k, (name, value) in enumerate(feeds.items()):
            np.save(folder / f"in{k}.npy", value)
            inputs += ["--input", f"{name}={folder / f'in{k}.npy'}"]
    result = {"front": None, "cmds": {}}
    try:
        open_model(str(path)).graph()
    except NpuSimError as exc:  # a dynamic input: the commands fix it (batch 1), the bare front door cannot
        result["front"] = None if "has a dynamic shape" in str(exc) else str(exc)
    except Exception as exc:  # the front door itself broke: a crash, as in every command
        result["front_crash"] = f"{type(exc).__name__}: {exc}"
    for key, argv in commands(path, folder, inputs).items():
        (folder / "progress").write_text(key)
        code, err, out = call(argv, folder / key.replace("/", "-"))
        result["cmds"][key] = {"code": code, "err": err, "out": out if key == "run/onnx" else ""}
    (folder / "progress").write_text("oracle")
    oracle = mutant_oracle.judge(mutated, feeds, folder / "out-onnx", result["cmds"]["run/onnx"], kinds)
    if mutant_oracle.differs(oracle):  # explained when check --run finds board onnx's accumulator overflowing
        code, _, out = call(["check", str(path), "--board", "onnx", *inputs], folder / "check-run-onnx")
        if code == 1 and "accumulator.observed" in out:
            oracle["diff_skipped"] = (f"board onnx's accumulator overflows on this input (check --run: "
                                      f"accumulator.observed, not deployable); differences {oracle['diff']}")
            oracle["diff"] = None
    result["oracle"] = oracle
    (folder / "result.json").write_text(json.dumps(result))


def warm(models: dict, folder: Path) -> None:
    """Every command on every base, in this process: the kernels the mutants need are compiled once, here."""
    for name, model in models.items():
        path = folder / f"base-{name}.onnx"
        onnx.save(model, str(path))
        for key, argv in commands(path, folder / f"warm-{name}", []).items():
            call(argv, folder / f"warm-{name}-{key.replace('/', '-')}")


def forked(function, *args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setpgid(0, 0)
            function(*args)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    return pid


def run_all(mutant_list, models: dict, folder: Path, workers: int = WORKERS, timeout: float = TIMEOUT) -> list:
    """Each mutant forked from this (warm) process, ``workers`` at a time: [(mutant, outcome, findings)]."""
    folder = Path(folder)
    warm(models, folder)
    kinds = mutant_oracle.exact_kinds_forked(folder / "kinds.json", forked)
    queue = list(enumerate(mutant_list))
    active: dict[int, tuple] = {}
    results: dict[int, tuple] = {}
    while queue or active:
        while queue and len(active) < workers:
            k, m = queue.pop(0)
            where = folder / f"m{k:05d}"
            active[forked(child, m, models[m.base], where, kinds)] = (k, m, where, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for p, (k, m, where, start) in list(active.items()):
                if time.monotonic() - start > timeout:
                    os.killpg(p, signal.SIGKILL)
                    os.waitpid(p, 0)
                    del active[p]
                    results[k] = (m, *classify(m, None, where, f"hang: killed after {timeout:.0f} s"))
            time.sleep(0.005)
            continue
        k, m, where, _ = active.pop(pid)
        status_text = None if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else (
            f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"child exit {os.WEXITSTATUS(status)}")
        data = json.loads((where / "result.json").read_text()) if (where / "result.json").exists() else None
        results[k] = (m, *classify(m, data, where, status_text))
    return [results[k] for k in sorted(results)]


def summary(results) -> str:
    counts = collections.Counter(outcome for _, outcome, _ in results)
    lines = [f"{len(results)} mutants: " + ", ".join(f"{counts[c]} {c}" for c in
                                                      ("clean refusal", "valid run", "refused valid", *FINDINGS)
                                                      if counts[c])]
    by_class = collections.Counter((m.cls, outcome) for m, outcome, _ in results)
    for cls in mutants.CLASSES:
        row = {o: n for (c, o), n in by_class.items() if c == cls}
        lines.append(f"  {cls:12s} " + ", ".join(f"{n} {o}" for o, n in sorted(row.items())))
    for m, outcome, findings in results:
        for f in findings:
            lines.append(f"{outcome}: {m.id} [{m.desc}]: {f}")
    return "\n".join(lines)


def cli(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutant_runner", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=WORKERS)
    p.add_argument("--no-real", action="store_true", help="the local bases only (no cached real-model cuts)")
    p.add_argument("--keep", help="folder to keep every mutant's files in (default: a temporary one)")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        models = mutants.bases(folder / "bases", real=not args.no_real)
        picked = mutants.generate(models, args.count, args.seed)
        results = run_all(picked, models, folder, workers=args.workers)
    print(summary(results))
    print(f"bases {', '.join(sorted(models))}; seed {args.seed}; {time.monotonic() - t0:.0f} s")
    return 1 if any(outcome in FINDINGS for _, outcome, _ in results) else 0


if __name__ == "__main__":
    sys.exit(cli())
