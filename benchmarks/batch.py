"""Benchmark: per-sample time of a batch of N samples against one sample at a time (issue 19, item 1; issue 33).

    python benchmarks/batch.py [--models ppocr_cls_a8w8 efficientnet_lite0_a8w8 mobilenetv2_a8w8] [--batch 16] [--repeat 7] [--threads T] [--profile]

For each model (from models/build.py, cached in ~/.cache/npu-sim; the same models and sample inputs as
benchmarks/vs_onnxruntime.py), on the `default` board: warms up (kernels compiled, the batch programs lowered),
then alternates one ``Simulator.run`` of N stacked samples with N runs of single samples, so that both see the
same load on a shared machine, and reports the median per-sample time of each and their ratio (batch / single;
lower is better). Single runs use one thread; the batch uses ``--threads`` (``NPU_SIM_THREADS``; default: the
CPUs this process may use), each thread on its part of the samples. Other thread pools are pinned to 1.
``--profile`` adds where the time goes per op type (node time from the executor's clock, summed over the
threads, and the rest).

Measured (AMD EPYC Zen 2 class, 2 cores, default board, batch of 16, medians of 9 interleaved repetitions,
2026-12-06, the batch's threads pinned): 2 threads: PP-OCR cls A8W8 0.31-0.35x (2.10 -> 0.66-0.75 ms/sample),
MobileNetV2 A8W8 0.47-0.48x (13.0 -> 6.2), PP-OCRv4 det A8W8 0.48x (26.5 -> 12.7); 1 thread: cls 0.52x,
MobileNetV2 0.93x (its time is in the Conv kernels, which a batch does not make cheaper per sample; cls's is
per-node overhead, paid once per batch).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):  # not a batch's
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import npu_sim  # noqa: E402
from npu_sim.runtime.batch import batch_threads  # noqa: E402
from models.build import sample_inputs  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from vs_onnxruntime import model_path  # noqa: E402  (builds the EfficientNet-class models too)


def _by_op(sim, seconds: dict) -> collections.Counter:
    ops = {}
    for program in [sim.program] + [p for p, _ in sim.batch_programs.values() if p is not None]:
        ops.update({n.name: n.op for n in program.nodes})
    out = collections.Counter()
    for name, s in seconds.items():
        out[ops.get(name, "?")] += s
    return out


def measure(name: str, n: int, repeat: int, profile: bool) -> dict:
    sim = npu_sim.load(model_path(name), board="default")
    singles = sample_inputs(name.replace("efficientnet_lite0", "mobilenetv2").replace("a16w8", "float"), n)
    batch = {k: np.concatenate([f[k] for f in singles]) for k in singles[0]}
    for _ in range(2):  # warm-up: kernels, the batch program, memory
        sim.run(batch)
        for f in singles:
            sim.run(f)
    t_batch, t_single = [], []
    op_batch, op_single = collections.Counter(), collections.Counter()
    for _ in range(repeat):
        s = time.perf_counter()
        sim.run(batch)
        t_batch.append((time.perf_counter() - s) / n)
        op_batch.update(_by_op(sim, sim.last.seconds))
        s = time.perf_counter()
        for f in singles:
            sim.run(f)
            op_single.update(_by_op(sim, sim.last.seconds))
        t_single.append((time.perf_counter() - s) / n)
    threads = min(batch_threads(), n)
    row = {"model": name, "n": n, "nodes": len(sim.program.nodes), "batch_ms": float(np.median(t_batch)) * 1e3,
           "single_ms": float(np.median(t_single)) * 1e3, "threads": threads,
           "note": sim.batch_note or f"{threads} thread(s), a program each"}
    row["ratio"] = row["batch_ms"] / row["single_ms"]
    if profile:
        scale = 1e3 / (repeat * n)
        row["profile"] = [(op, op_single[op] * scale, op_batch[op] * scale)
                          for op, _ in (op_single + op_batch).most_common()]
        row["overhead"] = (row["single_ms"] - sum(op_single.values()) * scale,
                           row["batch_ms"] - sum(op_batch.values()) * scale)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["ppocr_cls_a8w8", "efficientnet_lite0_a8w8",
                                                         "mobilenetv2_a8w8"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, help="threads for the batch (NPU_SIM_THREADS; default: the CPUs)")
    ap.add_argument("--profile", action="store_true", help="time per op type, per sample")
    args = ap.parse_args()
    if args.threads:
        os.environ["NPU_SIM_THREADS"] = str(args.threads)
    rows = []
    for name in args.models:
        r = measure(name, args.batch, args.repeat, args.profile)
        rows.append(r)
        print(f"{r['model']:20s} {r['nodes']:4d} nodes  one at a time {r['single_ms']:8.2f} ms/sample  batch of "
              f"{r['n']} {r['batch_ms']:8.2f} ms/sample  ratio {r['ratio']:.2f}x  ({r['note']})", flush=True)
        for op, single, batch in r.get("profile", [])[:12]:
            print(f"    {op:22s} {single:8.3f} ms  {batch:8.3f} ms")
        if "overhead" in r:
            print(f"    {'(outside the nodes)':22s} {r['overhead'][0]:8.3f} ms  {r['overhead'][1]:8.3f} ms")
    print(f"\n| model | nodes | one at a time ms/sample | batch of {args.batch} ms/sample | threads | ratio |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['nodes']} | {r['single_ms']:.2f} | {r['batch_ms']:.2f} | {r['threads']} | "
              f"{r['ratio']:.2f}× |")


if __name__ == "__main__":
    main()
