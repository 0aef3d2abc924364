"""Benchmark: npu-sim vs onnxruntime on the same QDQ model, same thread count, one run.

    python benchmarks/vs_onnxruntime.py [--models mobilenetv2_a8w8 ...] [--repeat 20]

For each model and thread count (1 and all cores) a fresh subprocess pins every thread pool before numpy is
imported (OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS; onnxruntime intra_op_num_threads, inter_op 1, sequential), warms
both engines up, then times them alternately (so both see the same load on a shared machine) and reports the
median latency of each and the ratio npu-sim / onnxruntime. The simulator
runs the `default` board (fixed-point). Cold start = a new process doing import + load + first run with the
Numba cache already on disk. Each configuration runs with OPENBLAS_CORETYPE unset and set to Haswell (an older
OpenBLAS kernel some machines force), so the effect of that setting is visible.
Models come from models/build.py (cached in ~/.cache/npu-sim).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def _child(model_name: str, threads: int, repeat: int) -> dict:
    import time
    t0 = time.perf_counter()
    import numpy as np
    import onnxruntime as ort

    import npu_sim
    sys.path.insert(0, str(ROOT))
    from models.build import get, sample_inputs
    path = get(model_name)
    feeds = sample_inputs(model_name, 1)[0]
    sim = npu_sim.load(path, board="default")
    sim.run(feeds)
    cold = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feeds)
        sim.run(feeds)

    # interleaved, so that both engines see the same load on a shared machine
    ort_times, sim_times = [], []
    for _ in range(repeat):
        s = time.perf_counter()
        sess.run(None, feeds)
        ort_times.append(time.perf_counter() - s)
        s = time.perf_counter()
        sim.run(feeds)
        sim_times.append(time.perf_counter() - s)
    t_ort = float(np.median(ort_times))
    t_sim = float(np.median(sim_times))
    return {"model": model_name, "threads": threads, "ort_ms": t_ort * 1e3, "sim_ms": t_sim * 1e3,
            "ratio": t_sim / t_ort, "cold_s": cold, "coretype": os.environ.get("OPENBLAS_CORETYPE", "")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mobilenetv2_a8w8"])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, nargs="+", help="thread counts to run (default: 1 and all cores)")
    ap.add_argument("--coretypes", nargs="+", default=["", "Haswell"],
                    help="OPENBLAS_CORETYPE values ('' = unset; default: unset and Haswell)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]), int(args.child[2]))))
        return
    cores = os.cpu_count() or 1
    rows = []
    for model in args.models:
        for coretype in args.coretypes:
            for threads in args.threads or sorted({1, cores}):
                env = dict(os.environ, **{v: str(threads) for v in THREAD_VARS})
                env.pop("OPENBLAS_CORETYPE", None)
                if coretype:
                    env["OPENBLAS_CORETYPE"] = coretype
                out = subprocess.run([sys.executable, __file__, "--child", model, str(threads), str(args.repeat)],
                                     env=env, capture_output=True, text=True, cwd=ROOT)
                if out.returncode:
                    sys.exit(f"benchmark child failed:\n{out.stderr}")
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                r = rows[-1]
                print(f"{r['model']:22s} threads={r['threads']} OPENBLAS_CORETYPE={r['coretype'] or '(unset)':8s} "
                      f"onnxruntime {r['ort_ms']:8.2f} ms  npu-sim {r['sim_ms']:8.2f} ms  ratio {r['ratio']:5.2f}x  "
                      f"cold start {r['cold_s']:.2f} s", flush=True)
    print("\n| model | threads | OPENBLAS_CORETYPE | onnxruntime ms | npu-sim ms | ratio | cold start s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['threads']} | {r['coretype'] or 'unset'} | {r['ort_ms']:.2f} | {r['sim_ms']:.2f} | "
              f"{r['ratio']:.2f}× | {r['cold_s']:.2f} |")


if __name__ == "__main__":
    main()
