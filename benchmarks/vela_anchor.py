"""Anchor benchmark (not a unit test): npu-sim's ethos-u55-128 latency estimate against Arm's Vela.

One float Keras MobileNetV2-224 (fixed-seed random weights) is exported twice:
  * as TFLite int8 and 16x8 (int16 activations, int8 weights) for Vela, compiled for Ethos-U55-128 with the
    Ethos_U55_High_End_Embedded system config in Sram_Only memory mode (`vela --verbose-performance`);
  * as float ONNX (tf2onnx), quantized by onnxruntime `quantize_static` to QDQ A8W8 and A16W8 (per channel),
    estimated by `npu-sim estimate --board ethos-u55-128 --json`.
It prints the per-network totals, per-layer-type cycles and MAC totals side by side, and the ratios.

``--memory``: Keras MobileNetV1-224 and MobileNetV2-224 int8 the same way; Vela's "Total SRAM used" and "Total
On-chip Flash used" (in Sram_Only Vela moves the constants to an on-chip flash with SRAM's timing) against
npu-sim's peak live activation bytes and constant bytes (estimate's memory section).

Needs the optional extra `vela-anchor` (tensorflow-cpu, tf2onnx, ethos-u-vela, onnxruntime) in its own
virtualenv, never the project's:

    python -m venv /work/venv-vela && /work/venv-vela/bin/pip install -e '.[vela-anchor]'
    /work/venv-vela/bin/python benchmarks/vela_anchor.py [--out DIR]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

SIZE = 224
SEED = 0
VELA_ARGS = ["--accelerator-config", "ethos-u55-128", "--system-config", "Ethos_U55_High_End_Embedded",
             "--memory-mode", "Sram_Only", "--config", "Arm/vela.ini", "--verbose-performance"]


def calibration(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, (1, SIZE, SIZE, 3)).astype(np.float32) for _ in range(count)]


def build_keras(net: str = "mobilenetv2"):
    import tensorflow as tf
    tf.keras.utils.set_random_seed(SEED)
    app = tf.keras.applications.MobileNet if net == "mobilenetv1" else tf.keras.applications.MobileNetV2
    return app(input_shape=(SIZE, SIZE, 3), alpha=1.0, weights=None, classes=1000)


def to_tflite(model, path: Path, mode: str) -> None:
    import tensorflow as tf
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    data = calibration(8, 1)
    conv.representative_dataset = lambda: ([x] for x in data)
    if mode == "int8":
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = conv.inference_output_type = tf.int8
    else:
        conv.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        conv.inference_input_type = conv.inference_output_type = tf.int16
    path.write_bytes(conv.convert())


def to_onnx(model, path: Path) -> None:
    import tensorflow as tf
    import tf2onnx
    spec = (tf.TensorSpec((1, SIZE, SIZE, 3), tf.float32, name="input"),)
    # inputs_as_nchw: the ONNX model takes NCHW like every QDQ model npu-sim reads (no leading Transpose)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, inputs_as_nchw=["input"])
    proto.ir_version = min(proto.ir_version, 9)
    path.write_bytes(proto.SerializeToString())


def quantize(float_path: Path, path: Path, activation: str) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"input": x.transpose(0, 3, 1, 2).copy()} for x in calibration(8, 1)])

        def get_next(self):
            return next(self.it, None)

    act = QuantType.QInt8 if activation == "int8" else QuantType.QInt16
    quantize_static(str(float_path), str(path), Reader(), quant_format=QuantFormat.QDQ, activation_type=act,
                    weight_type=QuantType.QInt8, per_channel=True,
                    extra_options={} if activation == "int8" else {"UseQDQContribOps": False})


def run_vela(tflite: Path, out_dir: Path) -> dict:
    exe = shutil.which("vela") or str(Path(sys.executable).with_name("vela"))
    text = subprocess.run([exe, *VELA_ARGS, "--output-dir", str(out_dir), str(tflite)], check=True,
                          capture_output=True, text=True).stdout
    memory = {key: float(m.group(1).replace(",", "")) * 1024
              for key, label in (("sram", "Total SRAM used"), ("flash", "Total (?:On|Off)-chip Flash used"))
              if (m := re.search(label + r"\s+([\d.,]+) KiB", text))}
    rows = list(csv.DictReader((out_dir / f"{tflite.stem}_per-layer.csv").open()))
    layers = []
    for r in rows:
        r = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in r.items() if k}
        layers.append({"op": r["Original Operator"], "target": r["Target"], "cycles": float(r["Op Cycles"] or 0),
                       "macs": int(float(r["MAC Count"] or 0))})
    return {"layers": layers, "total": sum(x["cycles"] for x in layers), "macs": sum(x["macs"] for x in layers),
            "memory": memory}


def vela_class(op: str) -> str:
    key = op.upper().replace("CONV2D", "CONV_2D").replace("DEPTHWISECONV_2D", "DEPTHWISE_CONV_2D")
    table = {"CONV2D": "conv", "CONV_2D": "conv", "DEPTHWISE_CONV_2D": "depthwise", "DEPTHWISECONV2D": "depthwise",
             "ADD": "add", "FULLY_CONNECTED": "fc", "FULLYCONNECTED": "fc", "MEAN": "pool",
             "AVERAGE_POOL_2D": "pool", "AVGPOOL": "pool", "SOFTMAX": "normalization", "PAD": "movement",
             "RESHAPE": "movement"}
    return table.get(key, table.get(op.upper().replace("_", ""), "other"))


def run_npu_sim(model: Path, python: str) -> dict:
    out = subprocess.run([python, "-m", "npu_sim.cli", "estimate", str(model), "--board", "ethos-u55-128", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def memory_anchor(out: Path, python: str) -> int:
    """Keras MobileNetV1/V2-224 int8: Vela's SRAM and flash against npu-sim's peak activations and constants."""
    print(f"{'network':12s} {'Vela SRAM':>12s} {'npu-sim peak':>13s} {'ratio':>6s} {'Vela flash':>12s} "
          f"{'npu-sim const':>14s} {'ratio':>6s}   (bytes; Vela: KiB x 1024)")
    for net in ("mobilenetv1", "mobilenetv2"):
        tfl, onx, flt = out / f"{net}_int8.tflite", out / f"{net}_a8w8.qdq.onnx", out / f"{net}_float.onnx"
        if not (tfl.is_file() and onx.is_file()):
            model = build_keras(net)
            to_tflite(model, tfl, "int8")
            to_onnx(model, flt)
            quantize(flt, onx, "int8")
        vela = run_vela(tfl, out / f"vela_{net}")["memory"]
        mem = run_npu_sim(onx, python)["memory"]
        peak, const = mem["peak_activation_bytes"], mem["flash_used_bytes"]
        print(f"{net:12s} {vela['sram']:12,.0f} {peak:13,d} {peak / vela['sram']:6.3f} {vela['flash']:12,.0f} "
              f"{const:14,d} {const / vela['flash']:6.3f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.expanduser("~/.cache/npu-sim/vela-anchor"), help="work folder")
    ap.add_argument("--npu-sim-python", default=sys.executable,
                    help="python that has npu_sim installed (default: this one)")
    ap.add_argument("--memory", action="store_true",
                    help="compare SRAM and flash (MobileNetV1/V2 int8) instead of cycles (MobileNetV2)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.memory:
        return memory_anchor(out, args.npu_sim_python)
    names = {"int8": ("mobilenetv2_int8.tflite", "mobilenetv2_a8w8.qdq.onnx"),
             "16x8": ("mobilenetv2_16x8.tflite", "mobilenetv2_a16w8.qdq.onnx")}
    float_onnx = out / "mobilenetv2_float.onnx"
    if not all((out / n).is_file() for pair in names.values() for n in pair):
        model = build_keras()
        to_tflite(model, out / names["int8"][0], "int8")
        to_tflite(model, out / names["16x8"][0], "16x8")
        to_onnx(model, float_onnx)
        quantize(float_onnx, out / names["int8"][1], "int8")
        quantize(float_onnx, out / names["16x8"][1], "int16")
    results = {}
    for mode, (tfl, onx) in names.items():
        vela = run_vela(out / tfl, out / f"vela_{mode}")
        ours = run_npu_sim(out / onx, args.npu_sim_python)
        results[mode] = (vela, ours)
    print(f"MobileNetV2-{SIZE}, Ethos-U55-128, High_End_Embedded, Sram_Only\n")
    print("(MACs: Vela also counts the global average pool's 62,720 and the softmax's 2,000 as MACs; npu-sim "
          "counts convolution and fully-connected MACs only)\n")
    print(f"{'precision':10s} {'Vela cycles':>13s} {'npu-sim cycles':>15s} {'ratio':>7s} {'Vela MACs':>13s} "
          f"{'npu-sim MACs':>13s}")
    for mode, (vela, ours) in results.items():
        s = ours["summary"]
        print(f"{mode:10s} {vela['total']:13,.0f} {s['total_cycles']:15,.0f} {s['total_cycles'] / vela['total']:7.3f} "
              f"{vela['macs']:13,d} {s['total_macs']:13,d}")
    for mode, (vela, ours) in results.items():
        by_v, by_o, n_v, n_o = defaultdict(float), defaultdict(float), defaultdict(int), defaultdict(int)
        for r in (r for r in vela["layers"] if r["cycles"] > 0):
            by_v[vela_class(r["op"])] += r["cycles"]
            n_v[vela_class(r["op"])] += 1
        for r in (r for r in ours["layers"] if r["cycles"] > 0):
            by_o[r["op_class"]] += r["cycles"]
            n_o[r["op_class"]] += 1
        print(f"\n{mode}: per layer type")
        print(f"{'type':13s} {'Vela n':>7s} {'Vela cycles':>13s} {'npu-sim n':>10s} {'npu-sim cycles':>15s} {'ratio':>7s}")
        for cls in sorted(set(by_v) | set(by_o), key=lambda c: -by_v.get(c, 0)):
            v, o = by_v.get(cls, 0.0), by_o.get(cls, 0.0)
            ratio = f"{o / v:7.3f}" if v else "    n/a"
            print(f"{cls:13s} {n_v.get(cls, 0):7d} {v:13,.0f} {n_o.get(cls, 0):10d} {o:15,.0f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
