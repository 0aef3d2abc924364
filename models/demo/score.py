"""Score the demo: the board's integer result on the 360 held-out digits, against the labels and the float model.

Run by `make demo` after `npu-sim run`; uses only npu-sim's Python API (no onnxruntime needed).
"""
from pathlib import Path

import numpy as np
import onnx

import npu_sim

HERE = Path(__file__).parent
MODEL = HERE / "digits_cnn.qdq.onnx"

data = np.load(HERE / "digits_test.npz")
x, y = data["x"], data["y"]
meta = {p.key: p.value for p in onnx.load(str(MODEL), load_external_data=False).metadata_props}
print(f"\ndemo: {MODEL.name} on {len(y)} held-out digits (batch {len(y)})")
for board in ("default", "onnx"):
    sim = npu_sim.load(MODEL, board=board, input_shapes={"input": x.shape})
    logits = sim.run({"input": x})["logits"]
    acc = float((logits.argmax(1) == y).mean())
    print(f"  board {board:8s} integer accuracy {acc:.2%}")
print(f"  float model accuracy {float(meta['float_test_accuracy']):.2%} "
      f"(onnxruntime QDQ: {float(meta['ort_qdq_test_accuracy']):.2%})")
