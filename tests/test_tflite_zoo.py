"""npu-sim on the TFLite zoo's two smallest networks, every tensor against LiteRT, the .tflite and its twin.

The zoo (``models/tflite_zoo.py``: Keras applications through the TFLite converter, their tf2onnx twins and
LiteRT's every-tensor oracle, built in the Vela virtualenv into ``~/.cache/npu-sim/tflite-zoo/``) is too big to
commit, so these tests skip when it is absent. ``benchmarks/tflite_zoo.py`` measures the whole zoo; this runs its
comparison on MobileNetV3Small int8 (hard-swish, squeeze-excite) and MobileNet V1 16x8.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import npu_sim
from benchmarks.tflite_zoo import ZOO, compare_optimized_dump, compare_runs, tally

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


@pytest.mark.parametrize("stem, op", [("mobilenet_v1_int8", "Mean"), ("mobilenet_v3_large_minimalistic_16x8", "Add"),
                                      ("xception_16x8", "Add")])
def test_a_litert_optimized_dump_is_explained_on_its_whole_first_divergent_tensor(stem, op, tmp_path):
    """LiteRT's optimized kernels (the zoo's STEM.optimized.npz, every op output that differs from the reference
    kernels) against the .tflite: the first divergent node is the MEAN / the 16-bit ADD, and one catalogued cause
    reproduces every element of it (MobileNet V1's global average pool: 289-313 elements; the first ADDs: 1-3).
    Which networks the optimized kernels change depends on the build's weights (docs/DUMPS.md)."""
    try:
        _, first = compare_optimized_dump(stem, tmp_path)
    except FileNotFoundError as missing:
        if not str(missing).endswith(".optimized.npz"):
            pytest.skip(f"the TFLite zoo is not built ({missing} absent): run models/tflite_zoo.py in the Vela "
                        f"virtualenv")
        pytest.skip(f"LiteRT's optimized kernels give {stem}'s reference integers in this zoo build (no "
                    f"{Path(str(missing)).name}): nothing to explain")
    assert first.op == ("ReduceMean" if op == "Mean" else op), first
    assert "unexplained" not in first.causes and sum(first.causes.values()) == first.differing > 0, first.causes
    cause = next(iter(first.causes))
    assert first.reproduces[cause] == [first.total, first.total]
    assert "LiteRT optimized" in cause
