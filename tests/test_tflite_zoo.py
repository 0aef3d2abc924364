"""npu-sim on the TFLite zoo's two smallest networks, every tensor against LiteRT, the .tflite and its twin.

The zoo (``models/tflite_zoo.py``: Keras applications through the TFLite converter, their tf2onnx twins and
LiteRT's every-tensor oracle, built in the Vela virtualenv into ``~/.cache/npu-sim/tflite-zoo/``) is too big to
commit, so these tests skip when it is absent. ``benchmarks/tflite_zoo.py`` measures the whole zoo; this runs its
comparison on MobileNetV3Small int8 (hard-swish, squeeze-excite) and MobileNet V1 16x8.
"""
from __future__ import annotations

import numpy as np
import pytest

import npu_sim
from benchmarks.tflite_zoo import ZOO, compare_runs, tally

SMALL = ("mobilenet_v3_small_int8", "mobilenet_v1_16x8")


@pytest.mark.parametrize("stem", SMALL)
def test_every_tensor_equals_litert_and_the_twin(stem):
    files = [ZOO / f"{stem}{ext}" for ext in (".tflite", ".tflite.onnx", ".npz")]
    if not all(f.exists() for f in files):
        pytest.skip(f"the TFLite zoo is not built ({files[0]} absent): run models/tflite_zoo.py --only "
                    f"{stem.rsplit('_', 1)[0]} in the Vela virtualenv")
    rec: dict = {}
    compare_runs(rec, ZOO, stem, npu_sim.open_model(files[0]), npu_sim.open_model(files[1]))
    errors = {k: v["error"] for k, v in rec.items() if isinstance(v, dict) and "error" in v}
    assert not errors, errors
    with np.load(files[2]) as z:
        count = sum(k.startswith("t:") for k in z.files)
    for key in ("tflite_vs_litert", "twin_vs_litert", "tflite_vs_twin"):
        t = rec[key]
        assert (t["differ"], t["missing"]) == (0, 0), f"{stem} {key}: {t['first']}"
        assert t["equal"] == count, f"{stem} {key}: {t['equal']} of {count} tensors compared"


def test_tally_counts_differing_missing_and_optimized_tensors():
    want = {"a": np.array([1, 2], np.int8), "b": np.array([3], np.int8), "c": np.array([4], np.int8),
            "d": np.zeros((1, 2), np.int16)}
    got = {"a": np.array([1, 2], np.int8), "b": np.array([5], np.int8), "d": np.zeros((2, 1), np.int16)}
    t = tally(want, got, optimized={"b": np.array([5], np.int8)})
    assert (t["equal"], t["differ"], t["missing"], t["optimized"]) == (1, 2, 1, 1)
    assert any("optimized" in line for line in t["first"]) and any("c: missing" in line for line in t["first"])
