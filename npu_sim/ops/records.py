"""The typed records of a lowered node (``npu_sim.ir``: ``Requant``, ``Weights``, ``Geometry``, ``Affine``,
``Tables``, ``Accumulator``, ``Operands``, the output ``clamp``), made from the parameters its family prepared for
the run functions.

The families keep their run functions' arguments in ``Node.params`` (private keys, the kernels' layouts); this is
the one place outside a family that knows what those keys mean. The lowering walk calls ``describe`` on every node
of a program once, with the board's arithmetic, so the records hold exactly the integers the node runs with (the
multipliers the board made at its own ``multiplier_bits``, the tables it built). Other layers read the records only.
"""
from __future__ import annotations

import numpy as np

from npu_sim.ir import Accumulator, Affine, Geometry, Node, Operands, Requant, Tables, Tensor, Weights

# the families' lookup tables: params key -> the table's name in ``Tables.entries``
TABLE_KEYS = {"table": "table", "_table": "table", "_exp": "exp", "_recip": "recip", "_exp_lut": "exp",
              "_recip_lut": "recip", "_rsqrt_lut": "rsqrt"}
# the weights' output-channel axis in the kernels' layout (``ops.mac``: Gemm and MatMul weights are (K, N))
WEIGHT_AXIS = {"Conv": 0, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}
TFLITE_MULTIPLIER_BITS = 31  # kernels.tflite_fixedpoint.tfl_quantize_multiplier: Q31 multipliers


def describe(node: Node, arith) -> None:
    """Fill ``node``'s records from its prepared params (``arith``: the board's ``Arithmetic``)."""
    p = node.params
    node.requant = _requant(p, arith)
    node.accumulator = Accumulator(int(p["acc_bits"]), bool(p.get("_saturate", False))) if "acc_bits" in p else None
    w = p.get("_w")
    node.weights = (Weights(w, WEIGHT_AXIS[node.op], bool(p.get("_per_col", True)), bool(p.get("_is1d", False)))
                    if isinstance(w, np.ndarray) and node.op in WEIGHT_AXIS else None)
    node.geometry = _geometry(node.op, p)
    node.affine = (Affine(_per_channel(p["w"], np.int64), _per_channel(p["b"], np.int64), int(p["f_bits"]),
                          int(p["x_zp"]), int(p["out_zp"]), int(p["qmin"]), int(p["qmax"]))
                   if {"f_bits", "w", "b", "x_zp", "out_zp", "qmin", "qmax"} <= set(p) else None)
    node.tables = _tables(p)
    node.operands = _operands(p, arith)
    node.clamp = (int(p["qmin"]), int(p["qmax"])) if p.get("qmin") is not None and p.get("qmax") is not None \
        else None


def _per_channel(value, dtype) -> np.ndarray:
    return np.asarray(value, dtype).reshape(-1)


def _requant(p: dict, arith) -> Requant | None:
    """One multiplier per channel from the accumulator to the output codes, if the node has that form."""
    if "out_zp" not in p or "qmin" not in p or "qmax" not in p:
        return None
    mult = shift = ratio = None
    if "mult" in p and "shift" in p:
        rounding, bits = "half_up", arith.multiplier_bits
        mult, shift = _per_channel(p["mult"], np.int64), _per_channel(p["shift"], np.int64)
    elif "tfl_mult" in p and not isinstance(p["tfl_mult"], tuple):  # (a tuple: the stages of TFLite's Add)
        rounding, bits = "double", TFLITE_MULTIPLIER_BITS
        mult, shift = _per_channel(p["tfl_mult"], np.int64), _per_channel(p["tfl_shift"], np.int64)
    elif isinstance(p.get("scale"), np.ndarray):
        rounding, bits = "float32", arith.multiplier_bits
        ratio = _per_channel(p["scale"], np.float32)
    else:
        return None
    bias = _per_channel(p.get("bias", np.zeros(1, np.int64)), np.int64)
    in_zp = p.get("x_zp", p.get("a_zp"))  # (a MatMul's first operand)
    return Requant(rounding, int(bits), mult, shift, ratio, bias, None if in_zp is None else int(in_zp),
                   int(p["out_zp"]), int(p["qmin"]), int(p["qmax"]))


def _geometry(op: str, p: dict) -> Geometry | None:
    """The window of a convolution or pool, a Gemm's transposed A, a mean's axes (None for other nodes)."""
    if "axes" in p and "stride" not in p:
        return Geometry(axes=tuple(int(a) for a in p["axes"]))
    if "stride" not in p and "trans_a" not in p:
        return None
    w = p.get("_w")
    kernel = p.get("kernel")
    if kernel is None and isinstance(w, np.ndarray) and w.ndim == 4:
        kernel = tuple(int(k) for k in w.shape[2:])
    return Geometry(kernel, p.get("stride"), p.get("pads"), p.get("dilation"), int(p.get("groups", 1)),
                    p.get("out_hw"), bool(p.get("trans_a", False)))


def _tables(p: dict) -> Tables | None:
    entries: dict[str, np.ndarray] = {}
    in_q = None
    for key, value in p.items():
        name = TABLE_KEYS.get(key)
        if name is None:
            continue
        if isinstance(value, dict):  # a table of its own (Div's reciprocal: ``lut.table_params``)
            value = value.get("table")
        if isinstance(value, np.ndarray):
            entries[name if name not in entries else f"{name}{len(entries)}"] = value
    if "table" in entries and "_in_q" in p:
        in_q = p["_in_q"]
    return Tables(entries, in_q) if entries else None


def _operands(p: dict, arith) -> Operands | None:
    a, b = p.get("_ts", (p.get("_a"), p.get("_b")))  # (``_ts``: the tflite arithmetic's Add/Sub and Mul)
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        return None
    if "tfl_mult" in p and "left_shift" in p:  # TFLite's Add/Sub: its left shift, its pairs are TFLite's own
        return Operands(a, b, int(p["left_shift"]))
    if "a_mult" in p:  # the fixed-point three-stage Add/Sub (``ops.elementwise.lower_add``)
        stages = tuple((int(p[f"{k}_mult"]), int(p[f"{k}_shift"])) for k in ("a", "b", "out"))
        return Operands(a, b, int(p["left_shift"]), stages, arith.multiplier_bits)
    return Operands(a, b)
