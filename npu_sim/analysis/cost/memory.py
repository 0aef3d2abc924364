"""Does it fit: the bytes a program needs in the board's memories (``npu-sim estimate``'s memory section, the
``memory.*`` rules of ``npu-sim check``).

* **Constants** (flash/ROM), each constant tensor counted once, as the board stores them
  (``npu_sim.analysis.cost.constants``): weights of multiply-accumulate ops at their dtype (int8, int16; int4
  packs two per byte) in the board's weight layout, a per-channel record of every multiply-accumulate op
  (``[memory] bias_bytes`` + ``scale_bytes_per_channel`` per output channel; ``bias_bytes = 0``: the bias tensor
  at its own width), other quantized constants (an Add's constant operand, ...) at their dtype, the lookup tables
  the lowering built (each node's ``Tables`` record: entries x the narrowest integer width that holds them), the
  zeros of the weight layout and the alignment (``padding``); on a Vela board, the constants Vela makes for the
  ops it rewrites (MEAN, SOFTMAX, lookup tables, unfolded PADs).
* **Activations** (SRAM, the tensor arena) under the executor's schedule, the program's node order: a tensor
  is live from the node that produces it (model inputs: from the start) to its last consumer (model outputs: to
  the end); a view (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) shares its input's buffer, and so
  does a Pad whose consumers are all convolutions or pools (folded into their padding, as Vela does). The live
  set of a node is the bytes of every tensor live while it runs (its inputs and outputs included); the peak is
  the largest. A float model input is quantized by the host: the board holds its integer copy only. On a Vela
  board an element-wise op writes over an input it alone reads (``_in_place``).
* **SRAM used** = peak activations + the constants when ``weight_memory = "sram"``; **flash used** = the
  constants. They fit when at most ``sram_bytes`` / ``flash_bytes`` (0: not limited).
"""
from __future__ import annotations

import numpy as np

from npu_sim.analysis.cost.constants import constant_bytes, lut_bytes  # noqa: F401  (lut_bytes: re-exported)
from npu_sim.analysis.cost.layer import tensor_bytes
from npu_sim.ir import Program
from npu_sim.opset import VIEW_OPS, facts_of, kind_of


def buffer_spans(program: Program) -> dict[str, tuple[int, int]]:
    """Every activation buffer (named by the tensor that owns it; a view's output is its input's buffer) and the
    first and last node index it is live at."""
    nodes = program.nodes
    consumers: dict[str, list[str]] = {}
    through = {n.outputs[0]: n.inputs[0] for n in nodes if n.layout and n.inputs}  # layout changes: looked through
    for node in nodes:
        for name in ([] if node.layout else node.inputs):
            while name in through:
                name = through[name]
            consumers.setdefault(name, []).append(node.op)
    owner: dict[str, str] = {}
    for node in nodes:
        folded = facts_of(node.op).pad and all(facts_of(op).folds_pad for op in consumers.get(node.outputs[0], [""]))
        if (node.op in VIEW_OPS or folded or node.layout) and node.inputs and len(node.outputs) == 1:
            src = node.inputs[0]
            if src in program.tensors and not program.tensors[src].is_const:
                owner[node.outputs[0]] = owner.get(src, src)
    _in_place(program, owner)
    span: dict[str, list[int]] = {}

    def touch(name: str, at: int) -> None:
        t = program.tensors.get(name)  # a tolerant lowering may have left a producer out
        if t is None or t.is_const or t.q is None:
            return
        s = span.setdefault(owner.get(name, name), [at, at])
        s[0], s[1] = min(s[0], at), max(s[1], at)

    if not nodes:
        return {}
    for name in program.inputs.values():
        touch(name, 0)
    for i, node in enumerate(nodes):
        for name in node.inputs + node.outputs:
            touch(name, i)
        # a float input's Quantize runs on the host: its integer output is there from the start
        src = program.tensors.get(node.inputs[0]) if node.inputs else None
        if kind_of(node.op) == "convert" and src is not None and src.q is None:
            touch(node.outputs[0], 0)
    for name in program.outputs.values():
        touch(name, len(nodes) - 1)
    return {b: (a, e) for b, (a, e) in span.items()}


def _in_place(program: Program, owner: dict[str, str]) -> None:
    """On a board whose NPU compiler is Vela: an element-wise op (``OpFacts.in_place``) writes its output over an
    input of the same shape and type that it alone reads (Vela's allocation, its ``ofm_can_reuse_ifm``: the first
    such input; ResNet's residual Adds, EfficientNet's swish Muls); graph inputs and outputs are not overwritten.
    ``owner`` updated in place."""
    if program.board.rules.npu_compiler != "vela":
        return
    readers: dict[str, int] = {}
    for node in program.nodes:
        for name in ([] if node.layout else node.inputs):
            readers[owner.get(name, name)] = readers.get(owner.get(name, name), 0) + 1
    kept = {owner.get(n, n) for n in list(program.inputs.values()) + list(program.outputs.values())}
    for node in program.nodes:
        if not facts_of(node.op).in_place or node.layout or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        t_out = program.tensors.get(out)
        for name in node.inputs:
            t = program.tensors.get(name)
            buf = owner.get(name, name)
            if (t is None or t.is_const or t.q is None or t_out is None or buf in kept or readers.get(buf) != 1
                    or tuple(t.shape) != tuple(t_out.shape) or t.q.dtype != t_out.q.dtype
                    or owner.get(out, out) != out):
                continue
            for alias, b in list(owner.items()):
                if b == out:
                    owner[alias] = buf
            owner[out] = buf
            readers[buf] = readers.get(out, 0)
            break


def live_sets(program: Program, spans: dict | None = None) -> list[int]:
    """Bytes live while each node runs (every buffer whose span covers the node); ``spans``: the program's
    ``buffer_spans``, when already made."""
    delta = np.zeros(len(program.nodes) + 1, np.int64)
    for buf, (a, e) in (spans or buffer_spans(program)).items():
        n = tensor_bytes(program.tensors[buf])
        delta[a] += n
        delta[e + 1] -= n
    return [int(v) for v in np.cumsum(delta)[:-1]]


def live_at(program: Program, index: int, spans: dict | None = None) -> list[str]:
    """The buffers live while node ``index`` runs, largest first (``spans`` as ``live_sets`` takes them)."""
    bufs = [b for b, (a, e) in (spans or buffer_spans(program)).items() if a <= index <= e]
    return sorted(bufs, key=lambda b: -tensor_bytes(program.tensors[b]))


def memory_report(program: Program, board=None) -> dict:
    """The memory section of the estimate (JSON-ready): constants, the live activation bytes per node and their
    peak, what the board's SRAM and flash hold, and whether they fit (None: the board sets no size)."""
    board = board or program.board
    mem = board.memory
    consts = constant_bytes(program, board)
    flash = sum(consts.values())
    spans = buffer_spans(program)
    live = live_sets(program, spans)
    peak_at = max(range(len(live)), key=live.__getitem__) if live else None
    peak = live[peak_at] if peak_at is not None else 0
    sram = peak + (flash if mem.weight_memory == "sram" else 0)
    largest = live_at(program, peak_at, spans)[:4] if live else []
    return {
        "weight_bytes": consts["weights"], "bias_bytes": consts["biases"], "scale_bytes": consts["scales"],
        "other_constant_bytes": consts["other"], "lut_bytes": consts["luts"], "padding_bytes": consts["padding"],
        "flash_used_bytes": flash,
        "peak_activation_bytes": peak, "peak_node": program.nodes[peak_at].name if live else "",
        "peak_tensors": [{"tensor": b, "bytes": tensor_bytes(program.tensors[b])} for b in largest],
        "weight_memory": mem.weight_memory, "sram_used_bytes": sram,
        "sram_bytes": mem.sram_bytes, "flash_bytes": mem.flash_bytes, "sram_key": mem.sram_key,
        "feature_map_spill": mem.feature_map_spill,
        "fits_sram": (sram <= mem.sram_bytes) if mem.sram_bytes else None,
        "fits_flash": (flash <= mem.flash_bytes) if mem.flash_bytes else None,
        "layers": [{"node": n.name, "live_bytes": b} for n, b in zip(program.nodes, live)],
    }
