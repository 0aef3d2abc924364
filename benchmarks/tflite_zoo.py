"""Acceptance benchmark (not a unit test): npu-sim on the TFLite zoo, each .tflite and its tf2onnx twin.

The zoo (``models/tflite_zoo.py``, built in the Vela virtualenv into ``~/.cache/npu-sim/tflite-zoo/``) holds real
Keras-application networks as full-integer .tflite (int8 and 16x8), their tf2onnx twins (``STEM.tflite.onnx``),
LiteRT's every-tensor oracle (``STEM.npz``: the reference kernels) and Vela 5.2's compile for ethos-u55-128
(totals in ``STEM.json``). For every model, on board ``ethos-u55-128``:

* **run**: the oracle's input through ``npu_sim.load(STEM.tflite).execute(..., keep_all=True)``; every LiteRT
  tensor compared bit for bit by its TFLite name (NHWC): counts equal / differing / missing. The same input
  through the twin, compared with LiteRT and with the .tflite run (the twin is NCHW inside: 4-D tensors inside
  its graph are transposed back; a TFLite tensor the twin only re-labels is found through its QuantizeLinear);
* **estimate**: total cycles, peak SRAM (peak live activation bytes) and flash (constant bytes) of the .tflite and
  of the twin against Vela's (the sum of its per-layer ``Op Cycles``; ``Total SRAM used``; ``Total On-chip Flash
  used``), as ratios;
* **check**: how many nodes npu-sim places on the CPU (and which ops) against Vela's ``CPU operators = N``.

A failure (e.g. npu-sim not reading .tflite yet) is reported per model and column, never a crash. Prints one
Markdown table; ``--json`` prints the measurements instead. Runs in npu-sim's own venv (no TensorFlow):

    .venv/bin/python benchmarks/tflite_zoo.py [--zoo DIR] [--only STEM ...] [--no-run] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx

import npu_sim

ZOO = Path.home() / ".cache" / "npu-sim" / "tflite-zoo"
BOARD = "ethos-u55-128"


def failure(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]


def run_values(opened, feed: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of one run by name, graph outputs also by their model names."""
    sim = npu_sim.load(opened, board=BOARD)
    (name,) = sim.inputs
    result = sim.execute({name: feed}, keep_all=True)
    values = dict(result.values)
    for oname, tname in sim.program.outputs.items():
        values[oname] = result.values[tname]
    return values


def nchw_tensors(graph) -> set[str]:
    """The twin's tensors in NCHW: a Transpose by (0, 3, 1, 2) makes one, any other node passes its inputs' layout
    on (the graph input is NHWC, as TFLite's)."""
    nchw: set[str] = set()
    for node in graph.node:
        if node.op_type == "Transpose":
            perm = next((list(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "perm"), [])
            inside = perm == [0, 3, 1, 2]
        else:
            inside = any(i in nchw for i in node.input)
        if inside:
            nchw.update(node.output)
    return nchw


def twin_view(opened, values: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The twin's tensors by TFLite name (those of ``want``), in TFLite's shape: tf2onnx names a TFLite activation
    as the QuantizeLinear output of that name, or re-creates it (NAME_prequant, or a tensor of its own name that
    DequantizeLinear NAME_dequant reads, e.g. a Mean as GlobalAveragePool + Squeeze). It is NCHW inside the graph
    except where tf2onnx kept TFLite's layout (before its first Transpose, after a Reshape standing for a
    Transpose), so the shape decides; where both layouts have that shape (H = W = C) the Transposes do."""
    graph = opened.proto.graph
    nchw = nchw_tensors(graph)
    dequantized = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input}
    view = {}
    for name, ref in want.items():
        for key in (name, opened.quantized.get(name), f"{name}_prequant", dequantized.get(f"{name}_dequant")):
            if key in values:
                got = values[key]
                if got.ndim == 4 and got.transpose(0, 2, 3, 1).shape == ref.shape and (
                        got.shape != ref.shape or key in nchw):
                    got = got.transpose(0, 2, 3, 1)
                view[name] = got
                break
    return view


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.astype(np.int64), b.astype(np.int64))


def tally(want: dict[str, np.ndarray], got: dict[str, np.ndarray], optimized: dict | None = None) -> dict:
    """Tensors of ``want`` equal / differing / missing in ``got`` (bit for bit); ``optimized``: the tensors on
    which LiteRT's optimized kernels differ from its reference kernels, to count the differing ones that equal
    them (``optimized``)."""
    out = {"equal": 0, "differ": 0, "missing": 0, "optimized": 0, "first": []}
    for name, ref in want.items():
        mine = got.get(name)
        if mine is None:
            out["missing"] += 1
            kind = f"{name}: missing"
        elif not same(mine, ref):
            out["differ"] += 1
            if optimized and name in optimized and same(mine, optimized[name]):
                out["optimized"] += 1
            kind = f"{name}: differs ({mine.dtype}{list(mine.shape)} vs {ref.dtype}{list(ref.shape)}" + (
                f", {int(np.sum(mine.astype(np.int64) != ref.astype(np.int64)))} elements" if mine.shape == ref.shape
                else "") + (", = LiteRT's optimized kernels" if optimized and name in optimized and
                            same(mine, optimized[name]) else "") + ")"
        else:
            out["equal"] += 1
            continue
        if len(out["first"]) < 3:
            out["first"].append(kind[:240])
    return out


def costs(opened) -> dict:
    """estimate (cycles, peak SRAM, flash) and check (CPU placement) of one model."""
    est = npu_sim.estimate(opened, board=BOARD)
    res = npu_sim.check(opened, board=BOARD)
    cpu = [n for n in res.nodes if n.placement == "CPU"]
    return {"cycles": est.summary["total_cycles"], "sram_bytes": est.memory.get("peak_activation_bytes"),
            "flash_bytes": est.memory.get("flash_used_bytes"), "cpu_nodes": len(cpu),
            "cpu_ops": sorted({n.op for n in cpu}), "nodes": len(res.nodes)}


def attempt(record: dict, key: str, job):
    """job()'s value, its time in ``record[key]`` (merged with the value when that is a dict of measurements), or
    None with the failure in ``record[key]["error"]``."""
    t0 = time.time()
    try:
        value = job()
    except Exception as exc:  # npu-sim's refusal or a bug: reported in its column, the benchmark goes on
        record[key] = {"error": failure(exc)}
        return None
    record[key] = {"seconds": round(time.time() - t0, 1)}
    return value


def load_npz(path: Path) -> dict[str, np.ndarray]:
    """``t:<name>`` entries by name, and ``input``; empty when the file is absent."""
    if not path.exists():
        return {}
    with np.load(path) as z:
        return {k[2:] if k.startswith("t:") else k: z[k] for k in z.files}


def compare_runs(rec: dict, zoo: Path, stem: str, opened_tfl, opened_twin) -> None:
    """(a) the .tflite run and (b) the twin's run (models already open, or None) against LiteRT's STEM.npz, and
    against each other, tensor by tensor, into ``rec``."""
    litert = load_npz(zoo / f"{stem}.npz")
    feed = litert.pop("input")
    optimized = load_npz(zoo / f"{stem}.optimized.npz")
    mine = attempt(rec, "tflite_run", lambda: run_values(opened_tfl, feed)) if opened_tfl else None
    theirs = attempt(rec, "twin_run", lambda: twin_view(opened_twin, run_values(opened_twin, feed), litert)) \
        if opened_twin else None
    if mine is not None:
        rec["tflite_vs_litert"] = tally(litert, mine, optimized)
    if theirs is not None:
        rec["twin_vs_litert"] = tally(litert, theirs, optimized)
    if mine is not None and theirs is not None:
        rec["tflite_vs_twin"] = tally({k: v for k, v in mine.items() if k in litert}, theirs)


def compare_optimized_dump(stem: str, folder: Path, zoo: Path = ZOO):
    """``npu_sim.compare_dump`` of LiteRT's optimized-kernel dump of the zoo network ``stem`` on ethos-u55-128: the
    reference run's input and the tensors the optimized kernels computed otherwise (``STEM.optimized.npz``),
    written into ``folder`` as one dump. Returns (the comparison, the first divergent tensor's report); a
    ``FileNotFoundError`` names what the zoo lacks (the network, or its optimized dump: a build whose optimized
    kernels give the reference integers has none)."""
    files = [zoo / f"{stem}{ext}" for ext in (".tflite", ".npz", ".optimized.npz")]
    for f in files:
        if not f.exists():
            raise FileNotFoundError(f)
    opened = npu_sim.open_model(files[0])
    (name,) = opened.inputs
    with np.load(files[1]) as ref, np.load(files[2]) as opt:
        arrays = {name: ref["input"], **{k[2:]: opt[k] for k in opt.files}}
    np.savez(folder / "dump.npz", **arrays)
    c = npu_sim.compare_dump(opened, folder / "dump.npz", board=BOARD)
    return c, next(t for t in c.tensors if t.producer == c.first_divergent)


def measure(zoo: Path, stem: str, execute: bool) -> dict:
    manifest = json.loads((zoo / f"{stem}.json").read_text())
    rec: dict = {"stem": stem, "ops": manifest.get("ops", {}), "vela": manifest.get("vela"),
                 "build_failures": manifest.get("failures", {})}
    tfl, twin = zoo / f"{stem}.tflite", zoo / f"{stem}.tflite.onnx"
    if not tfl.exists():
        return rec
    opened_tfl = attempt(rec, "tflite_open", lambda: npu_sim.open_model(tfl))
    opened_twin = attempt(rec, "twin_open", lambda: npu_sim.open_model(twin)) if twin.exists() else None
    if execute and (zoo / f"{stem}.npz").exists():
        compare_runs(rec, zoo, stem, opened_tfl, opened_twin)
    for key, opened in (("tflite_cost", opened_tfl), ("twin_cost", opened_twin)):
        if opened is not None and (value := attempt(rec, key, lambda: costs(opened))) is not None:
            rec[key].update(value)
    return rec


def cell_tally(rec: dict, key: str, run_key: str) -> str:
    if key in rec:
        t = rec[key]
        return f"{t['equal']}/{t['differ']}/{t['missing']}" + (f" ({t['optimized']} = opt)" if t["optimized"] else "")
    err = rec.get(run_key, {}).get("error") or rec.get(run_key.replace("_run", "_open"), {}).get("error")
    return f"FAIL ({err[:60]})" if err else "-"


def ratio(rec: dict, key: str, field: str) -> str:
    cost, vela = rec.get(key, {}), rec.get("vela") or {}
    if "error" in cost:
        return "FAIL"
    mine, ref = cost.get(field), vela.get(field)
    if mine is None or not ref:
        return "-"
    return f"{mine / ref:.3f}"


def cpu_cell(rec: dict, key: str) -> str:
    cost = rec.get(key, {})
    if "error" in cost or "cpu_nodes" not in cost:
        return "FAIL" if "error" in cost else "-"
    return f"{cost['cpu_nodes']}" + (f" ({', '.join(cost['cpu_ops'])})" if cost["cpu_ops"] else "")


def table(records: list[dict]) -> str:
    head = ["model", "tflite vs LiteRT eq/diff/miss", "twin vs LiteRT", "tflite vs twin", "Vela cycles",
            "cycles tflite/Vela", "twin/Vela", "Vela SRAM", "SRAM tflite/Vela", "twin/Vela", "flash tflite/Vela",
            "twin/Vela", "CPU Vela", "CPU tflite", "CPU twin"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        vela = r.get("vela") or {}
        vela_cpu = f"{vela['cpu_ops']}" + (f" ({', '.join(vela['cpu_layers'])})" if vela.get("cpu_layers") else "") \
            if "cpu_ops" in vela else "-"
        row = [r["stem"], cell_tally(r, "tflite_vs_litert", "tflite_run"), cell_tally(r, "twin_vs_litert", "twin_run"),
               cell_tally(r, "tflite_vs_twin", "tflite_run"), f"{vela['cycles']:,.0f}" if vela else "-",
               ratio(r, "tflite_cost", "cycles"), ratio(r, "twin_cost", "cycles"),
               f"{vela['sram_bytes']:,.0f}" if "sram_bytes" in vela else "-",
               ratio(r, "tflite_cost", "sram_bytes"), ratio(r, "twin_cost", "sram_bytes"),
               ratio(r, "tflite_cost", "flash_bytes"), ratio(r, "twin_cost", "flash_bytes"),
               vela_cpu, cpu_cell(r, "tflite_cost"), cpu_cell(r, "twin_cost")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def notes(records: list[dict]) -> str:
    """The first differences and every failure, below the table."""
    out = []
    for r in records:
        for step, msg in r["build_failures"].items():
            out.append(f"- {r['stem']}: not built ({step}): {msg[:200]}")
        for key in ("tflite_open", "twin_open", "tflite_run", "twin_run", "tflite_cost", "twin_cost"):
            if "error" in r.get(key, {}):
                out.append(f"- {r['stem']} {key}: {r[key]['error']}")
        for key in ("tflite_vs_litert", "twin_vs_litert", "tflite_vs_twin"):
            for line in r.get(key, {}).get("first", []):
                out.append(f"- {r['stem']} {key}: {line}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, default=ZOO, help=f"the zoo folder (default {ZOO})")
    ap.add_argument("--only", nargs="*", metavar="STEM", help="models, e.g. mobilenet_v2_int8 (default: all)")
    ap.add_argument("--no-run", action="store_true", help="estimate and check only (no every-tensor runs)")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON")
    a = ap.parse_args(argv)
    stems = sorted(p.stem for p in a.zoo.glob("*.json")) if a.zoo.is_dir() else []
    if a.only:
        stems = [s for s in stems if s in a.only]
    if not stems:
        print(f"no zoo models in {a.zoo}: build them with models/tflite_zoo.py (Vela venv)", file=sys.stderr)
        return 2
    records = []
    for stem in stems:
        records.append(measure(a.zoo, stem, not a.no_run))
        print(f"{stem}: done", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(records, indent=1))
    else:
        print(f"TFLite zoo on {BOARD} ({a.zoo}); tensors: equal/differing/missing (k = opt: differing from "
              f"LiteRT's reference kernels, equal to its optimized ones); ratios: npu-sim / Vela 5.2\n")
        print(table(records))
        print("\n" + notes(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
