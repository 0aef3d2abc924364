"""What the board's rules require of a re-quantization (``board_settings``; ``finding_overrides`` for what a
re-quantized model still gets refused, tensor by tensor) and the verdict of a re-quantized model on the board
(``verdict``).

``board_settings`` starts from how the model was quantized (``npu_sim.qdq.recalibrate.QuantSettings``) and changes
only what the board's ``[rules]`` refuse, the cheapest change first (``Rules.activation_setting``,
``Rules.weight_setting``): a dtype the board does not take becomes the nearest one it does (uint8 -> int8 before
int8 -> int16), activations become symmetric only where the dtype the board takes may not have a zero point,
weights lose their zero points only where the board wants symmetric weights, per-channel weight scales become one
per layer only where the board takes no per-channel weights, and a pinned model-input quantization the board
refuses is replaced (the board's fixed 8-bit input scale, else left to calibration). The same derivation writes the
check's own fix texts (``npu_sim.analysis.check.board_rules``), so the advice and the re-quantization agree.
"""
from __future__ import annotations

from dataclasses import replace

from npu_sim.boards.rules import QUANT_TYPES, Rules
from npu_sim.qdq.recalibrate import QuantSettings, merge_extra_options

_DTYPES = {q: d for d, q in QUANT_TYPES.items()}


def _activations(settings: QuantSettings, rules: Rules, extra: dict, changes: list[str]) -> str:
    old = _DTYPES.get(settings.activation_type, "int8")
    new, symmetric = rules.activation_setting(old)
    if new != old:
        why = (f"the board takes no {old} activations" if old not in rules.activation_dtypes else
               f"the board takes {old} activations only with zero point 0, where {old} holds no negative value")
        changes.append(f"activation_type=QuantType.{QUANT_TYPES[new]} (was {settings.activation_type}): {why}")
    if symmetric and not settings.extra_options.get("ActivationSymmetric"):
        extra["ActivationSymmetric"] = True
        changes.append(f"ActivationSymmetric=True: the board takes {new} activations only with zero point 0")
    return QUANT_TYPES[new]


def _weights(settings: QuantSettings, rules: Rules, extra: dict, changes: list[str]) -> tuple[str, bool]:
    old = _DTYPES.get(settings.weight_type, "int8")
    new, symmetric = rules.weight_setting(old)
    if new != old:
        changes.append(f"weight_type=QuantType.{QUANT_TYPES[new]} (was {settings.weight_type}): the board takes no "
                       f"{old} weights")
    # onnxruntime quantizes signed weights symmetrically by default: say so only where that default is not taken
    if symmetric and (settings.extra_options.get("WeightSymmetric") is False
                      or (new.startswith("u") and not settings.extra_options.get("WeightSymmetric"))):
        extra["WeightSymmetric"] = True
        changes.append("WeightSymmetric=True: the board takes weights only with zero point 0")
    per_channel = settings.per_channel
    if per_channel and not rules.per_channel_weights:
        per_channel = False
        changes.append("per_channel=False: the board takes one weight scale per layer")
    return QUANT_TYPES[new], per_channel


def _input_pins(settings: QuantSettings, rules: Rules, extra: dict, changes: list[str]) -> None:
    """A model input pinned to a scale and zero point (``quantization_settings`` keeps the input's quantization)
    that the board refuses: pinned to the board's fixed input scale instead, or left to calibration."""
    tqo = {}
    for name, lst in (settings.extra_options.get("TensorQuantOverrides") or {}).items():
        pin = lst[0] if lst else {}
        if "dtype" not in pin or "zero_point" not in pin:
            continue
        new, symmetric = rules.activation_setting(pin["dtype"])
        if new == pin["dtype"] and not (symmetric and pin["zero_point"]):
            continue
        if rules.input_scale and new in ("int8", "uint8"):  # the board's 8-bit input stub
            tqo[name] = [{"scale": rules.input_scale, "zero_point": 0, "dtype": new}]
            how = f"scale {rules.input_scale:g}, zero point 0, as the board's input stub takes"
        else:
            tqo[name] = [{"quant_type": QUANT_TYPES[new], **({"symmetric": True} if symmetric else {})}]
            how = f"{new}{', symmetric' if symmetric else ''}, calibrated"
        changes.append(f"input {name}: {how} (was {pin['dtype']} with zero point {pin['zero_point']})")
    if tqo:
        extra["TensorQuantOverrides"] = tqo


def board_settings(settings: QuantSettings, rules: Rules) -> tuple[QuantSettings, dict, list[str]]:
    """The settings ``settings`` must change to for a board with ``rules`` (see the module docstring): the new
    settings, the extra_options that changed (JSON form, for the fix file) and one sentence per change (none:
    the board takes the model's settings as they are)."""
    extra: dict = {}
    changes: list[str] = []
    act = _activations(settings, rules, extra, changes)
    wt, per_channel = _weights(settings, rules, extra, changes)
    _input_pins(settings, rules, extra, changes)
    new = replace(settings, activation_type=act, weight_type=wt, per_channel=per_channel,
                  extra_options=merge_extra_options(settings.extra_options, extra),
                  source=settings.source + (", changed as the board requires" if changes else ""))
    return new, extra, changes


def finding_overrides(check_result, aliases: dict, fix: dict) -> dict:
    """The check's own fixes of the quantization settings it still refuses (the ``overrides`` of its dtype.* and
    zero_point.* errors: per tensor, the type the board takes), as extra_options ``TensorQuantOverrides`` by the
    float model's names (``aliases``: a graph output quantize_static renamed); nothing the ``fix`` already says,
    and a tensor it pins to a scale keeps its pin. Empty: nothing more to ask for."""
    have = fix.get("TensorQuantOverrides") or {}
    tqo = {}
    for _, f in check_result.findings:
        if f.severity != "error" or not f.quantization_setting:
            continue
        for o in f.values.get("overrides", []):
            name = aliases.get(o["tensor"], o["tensor"])
            entry = [{k: v for k, v in o.items() if k != "tensor"}]
            if have.get(name) != entry and not (have.get(name) and "scale" in have[name][0]):
                tqo[name] = entry
    return {"TensorQuantOverrides": tqo} if tqo else {}


def verdict(check_result) -> dict:
    """Whether the re-quantized model passes the board's check; else the rules that block it, most errors
    first, each with its count, one example and whether a quantization setting could fix it."""
    rules: dict[str, dict] = {}
    for node, f in check_result.findings:
        if f.severity != "error":
            continue
        r = rules.setdefault(f.rule, {"rule": f.rule, "count": 0, "example": f"{node}: {f.message}",
                                      "quantization_setting": f.quantization_setting})
        r["count"] += 1
    return {"board": check_result.board, "deployable": check_result.deployable,
            "errors": check_result.count("error"),
            "blocking": sorted(rules.values(), key=lambda r: (-r["count"], r["rule"]))}
