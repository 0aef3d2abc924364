"""Where the time goes: npu-sim's per-node seconds against onnxruntime's own profile, summed per op class.

    python benchmarks/op_profile.py MODEL [--repeat 20]      # MODEL: a name of vs_onnxruntime.py's list

One thread each (pinned like vs_onnxruntime.py's children), board ``default``. npu-sim: the executor's per-step
seconds (``RunResult.seconds``: an elementwise chain run as table lookups counts each lookup under the node whose
output it gives, its other nodes not at all; ``NPU_SIM_CHAINS=0`` times every node on its own); onnxruntime: ``SessionOptions.enable_profiling``'s node events (its fused
QLinearConv / QGemm / float nodes). Each node is put in a class by the QDQ model's op it comes from (Conv split
into 1x1, depthwise and other kernels; Q/DQ pairs of onnxruntime's unfused path under "Q/DQ"), and the classes'
per-run medians of the summed microseconds are printed side by side, largest first.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[var] = "1"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _classes(path) -> dict[str, str]:
    """ONNX node name -> op class of the QDQ model."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(path))
    shapes = {t.name: numpy_helper.to_array(t).shape for t in model.graph.initializer}
    by_out = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for n in model.graph.node:
        op = n.op_type
        if op == "Conv":
            w = n.input[1]
            w = by_out[w].input[0] if w in by_out else w  # the weight behind its DequantizeLinear
            oc, icg, *k = shapes.get(w, (0, 0, 0, 0))
            group = next((a.i for a in n.attribute if a.name == "group"), 1)
            op = "Conv depthwise" if group > 1 and icg == 1 else ("Conv 1x1" if k == [1, 1] else "Conv kxk")
        elif op in ("QuantizeLinear", "DequantizeLinear"):
            op = "Q/DQ"
        out[n.name] = op
    return out


def _class(name: str, op: str, classes: dict[str, str]) -> str:
    for cand in (name, name.removesuffix("_quant"), name.split("_token")[0]):
        if cand in classes:
            return classes[cand]
    conv = {"QLinearConv": "Conv (fused)", "QGemm": "Gemm", "QLinearMatMul": "MatMul"}
    return conv.get(op, op)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    import numpy as np
    import onnxruntime as ort

    import npu_sim
    from benchmarks.vs_onnxruntime import model_path
    from models import build, trained
    path = model_path(args.model)
    if args.model in trained.NAMES:
        feeds = trained.sample_inputs(args.model, 1)[0]
    else:
        feeds = build.sample_inputs(args.model.replace("efficientnet_lite0", "mobilenetv2")
                                    .replace("a16w8", "float"), 1)[0]
    classes = _classes(path)
    sim = npu_sim.load(path, board="default")
    ops = {n.name: n for n in sim.program.nodes}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    opts.enable_profiling = True
    opts.profile_file_prefix = "/tmp/npu_sim_op_profile"
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sim.run(feeds)
        sess.run(None, feeds)
    runs_sim, runs_ort = [], []
    for _ in range(args.repeat):
        sess.run(None, feeds)
        per = collections.Counter()
        result = sim.run_batch(feeds)
        for name, dt in result.seconds.items():
            per[_class(name, ops[name].op, classes)] += dt * 1e6
        runs_sim.append(per)
    profile = sess.end_profiling()
    with open(profile) as f:
        events = json.load(f)
    os.remove(profile)
    runs = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    for run in runs[3:]:  # the timed runs (after the warm-ups)
        per = collections.Counter()
        for e in nodes:
            if run["ts"] <= e["ts"] <= run["ts"] + run["dur"]:
                per[_class(e["name"].removesuffix("_kernel_time"), e["args"].get("op_name", ""), classes)] += e["dur"]
        runs_ort.append(per)
    keys = sorted(set().union(*runs_sim, *runs_ort), key=lambda k: -np.median([r[k] for r in runs_sim]))
    med = {k: (np.median([r[k] for r in runs_ort]), np.median([r[k] for r in runs_sim])) for k in keys}
    total_ort, total_sim = (np.median([sum(r.values()) for r in rs]) for rs in (runs_ort, runs_sim))
    print(f"{args.model}: node time per run, µs (median of {args.repeat}); onnxruntime {total_ort:.0f}, "
          f"npu-sim {total_sim:.0f} ({total_sim / total_ort:.2f}×)")
    print("| op class | onnxruntime µs | npu-sim µs | npu-sim − onnxruntime µs |\n|---|---|---|---|")
    for k in sorted(keys, key=lambda k: -(med[k][1] - med[k][0])):
        o, s = med[k]
        print(f"| {k} | {o:.0f} | {s:.0f} | {s - o:+.0f} |")


if __name__ == "__main__":
    main()
