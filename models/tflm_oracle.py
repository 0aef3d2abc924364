"""Record TensorFlow Lite Micro's integers of every tensor of the committed TFLite fixtures (the TFLM oracle).

Beside LiteRT (``models/tflite_fixtures.py``, ``tests/fixtures/tflite/NAME.npz``) this runs every committed fixture
``.tflite`` (``tests/fixtures/tflite/*.tflite`` and ``edited/*.tflite``) through TFLite Micro's Python interpreter
(PyPI package ``tflite-micro``; its host build has the portable reference kernels, not CMSIS-NN) on the SAME input
the LiteRT recording used (``input`` of ``NAME.npz``; a fixture LiteRT refuses has no ``.npz``, so it gets the input
LiteRT's recorder would have drawn: ``numpy.random.default_rng(8)``, the whole integer range). The interpreter
is built with ``InterpreterConfig.kPreserveAllTensors`` (no tensor shares memory with another) and every tensor
is read back by index (``GetTensor(index, 0)``). Written into ``tests/fixtures/tflite/tflm/``:

* ``NAME.tflm.npz`` -- ``input`` and TFLM's integers of every non-constant tensor (``t:<TFLite tensor name>``, the
  keys of ``NAME.npz``), plus ``meta:tflite_micro`` (the package version that computed them);
* ``NAME.tflm.refusal.txt`` -- where TFLM refuses a node: TFLM's own messages (the kernel's line, then
  ``Node OP (number N) failed to prepare|invoke``; an op TFLM has no kernel for: ``Didn't find op for builtin
  opcode``). A refusal at prepare time runs nothing (no ``.npz``); one at
  invoke time ran the nodes before N, whose outputs (and only those) are in ``NAME.tflm.npz``.

Self-check: each fixture TFLM runs whole is run a second time on a copy of the model whose every op output is
also a graph output (what the LiteRT recorder does against in-place ops); the two runs must agree on every
tensor, or the recorder stops.

Each fixture runs in a child process (TFLM prints its messages from C, and a crash stays in the child).
Usage, in a virtualenv of its own (never the project's ``.venv``)::

    python3 -m venv /root/.cache/npu-sim/tflm-venv
    /root/.cache/npu-sim/tflm-venv/bin/pip install tflite-micro==0.dev20261023182759
    /root/.cache/npu-sim/tflm-venv/bin/python models/tflm_oracle.py [--only NAME ...]

(that version brought numpy 2.4.6, flatbuffers 25.12.19). ``tests/test_tflm_oracle.py`` compares npu-sim with the
recorded integers; it does not need ``tflite-micro``.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tflite"
OUT = FIXTURES / "tflm"
SEED = 7  # models/tflite_fixtures.py: the input is drawn from default_rng(SEED + 1)
ARENA = 16 << 20  # bytes; every tensor has its own memory when all are preserved
REFUSED_PREPARE, REFUSED_INVOKE = 3, 4  # the child's exit codes
NODE_LINE = re.compile(r"Node (\w+) \(number (\d+)\) failed to (prepare|invoke)")


def _model(data: bytes):
    from tflite_micro import runtime
    return runtime.convert_bytearray_to_object(bytearray(data))


def _is_const(model, tensor) -> bool:
    buf = model.buffers[tensor.buffer]
    return buf.data is not None and len(buf.data) > 0 or bool(getattr(buf, "size", 0))


def every_tensor_an_output(data: bytes) -> bytes:
    """The same model with every op output also a graph output (the kernels and their arithmetic unchanged)."""
    import flatbuffers
    model = _model(data)
    for sg in model.subgraphs:
        outs = [int(t) for t in sg.outputs]
        for op in sg.operators:
            outs += [int(t) for t in op.outputs if t >= 0 and int(t) not in outs]
        sg.outputs = outs
    builder = flatbuffers.Builder(len(data) + 4096)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _child(tflite: Path, x_path: Path, out: Path, every_output: bool) -> int:
    """Run TFLM once; write every non-constant tensor to ``out``; the exit code says how far it got."""
    from tflite_micro import runtime
    data = tflite.read_bytes()
    if every_output:
        data = every_tensor_an_output(data)
    model = _model(data)
    try:
        it = runtime.Interpreter.from_bytes(data, arena_size=ARENA,
                                            intrepreter_config=runtime.InterpreterConfig.kPreserveAllTensors)
    except RuntimeError as exc:
        print(f"python: {exc}", flush=True)
        return REFUSED_PREPARE
    it.set_input(np.load(x_path), 0)
    code = 0
    try:
        it.invoke()
    except RuntimeError as exc:
        print(f"python: {exc}", flush=True)
        code = REFUSED_INVOKE
    arrays = {}
    for index, tensor in enumerate(model.subgraphs[0].tensors):  # GetTensor past the last index crashes TFLM
        if _is_const(model, tensor):
            continue
        value = np.array(it.GetTensor(index, 0)["tensor_data"])
        if value.dtype.kind in "iu" and value.size:
            arrays["t:" + tensor.name.decode()] = value
    np.savez(out, **arrays)
    return code


def _input_for(tflite: Path) -> np.ndarray:
    """LiteRT's recorded input, or (no recording: LiteRT refused the model) the one its recorder would draw."""
    ref = tflite.with_suffix(".npz")
    if ref.exists():
        return np.load(ref)["input"]
    from tflite_micro import runtime
    model = _model(tflite.read_bytes())
    sg = model.subgraphs[0]
    tensor = sg.tensors[int(sg.inputs[0])]
    types = runtime.schema_fb.TensorType
    dtype = {types.INT8: np.int8, types.INT16: np.int16, types.UINT8: np.uint8}[tensor.type]
    info = np.iinfo(dtype)
    rng = np.random.default_rng(SEED + 1)
    return rng.integers(info.min, info.max + 1, size=tuple(int(n) for n in tensor.shape)).astype(dtype)


def _run(tflite: Path, x_path: Path, tmp: Path, every_output: bool) -> tuple[int, str, dict]:
    out = tmp / ("every.npz" if every_output else "plain.npz")
    cmd = [sys.executable, __file__, "--child", str(tflite), str(x_path), str(out)] + (["--every"] if every_output
                                                                                          else [])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode not in (0, REFUSED_PREPARE, REFUSED_INVOKE):
        raise RuntimeError(f"{tflite.name}: TFLM's child exited {proc.returncode}:\n{proc.stdout}")
    arrays = dict(np.load(out)) if out.exists() else {}
    return proc.returncode, proc.stdout, arrays


def _ran_before(tflite: Path, node: int) -> set[str]:
    """Names of the graph input and of the outputs of the ops before ``node`` (those TFLM ran)."""
    model = _model(tflite.read_bytes())
    sg = model.subgraphs[0]
    index = [int(t) for t in sg.inputs] + [int(t) for op in sg.operators[:node] for t in op.outputs if t >= 0]
    return {sg.tensors[i].name.decode() for i in index}


def record(tflite: Path, out_dir: Path, version: str) -> str:
    """Record one fixture; return a one-line summary."""
    rel = tflite.relative_to(FIXTURES).with_suffix("")
    target = out_dir / rel.parent / f"{rel.name}.tflm"
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in (target.with_suffix(".tflm.npz"), target.with_suffix(".tflm.refusal.txt")):
        stale.unlink(missing_ok=True)
    x = _input_for(tflite)
    with tempfile.TemporaryDirectory() as tmp:
        x_path = Path(tmp) / "x.npy"
        np.save(x_path, x)
        code, log, arrays = _run(tflite, x_path, Path(tmp), every_output=False)
        if code == 0:
            _, _, again = _run(tflite, x_path, Path(tmp), every_output=True)
            for key, value in arrays.items():
                if key not in again or not np.array_equal(again[key], value):
                    raise RuntimeError(f"{rel}: {key} differs when every op output is a graph output")
    if code:
        lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.startswith(("Traceback", " "))]
        if len(lines) < 2:
            raise RuntimeError(f"{rel}: TFLM failed without saying why:\n{log}")
        target.with_suffix(".tflm.refusal.txt").write_text("\n".join(lines) + "\n")
        if code == REFUSED_PREPARE:
            return f"{rel}: refused at prepare: {lines[0]}"
        node = [m for m in map(NODE_LINE.search, lines) if m]
        if not node:
            raise RuntimeError(f"{rel}: TFLM failed at invoke without naming the node:\n{log}")
        ran = _ran_before(tflite, int(node[0].group(2)))
        arrays = {k: v for k, v in arrays.items() if k[2:] in ran}
    np.savez_compressed(target.with_suffix(".tflm.npz"), input=x, **arrays,
                        **{"meta:tflite_micro": np.array(version)})
    what = "refused at invoke, kept the nodes before it" if code else "ran"
    return f"{rel}: {what}: {len(arrays)} tensors"


def fixtures(only=None) -> list[Path]:
    paths = sorted(FIXTURES.glob("*.tflite")) + sorted((FIXTURES / "edited").glob("*.tflite"))
    return [p for p in paths if not only or p.stem in only]


def main(argv=None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        sys.exit(_child(Path(argv[1]), Path(argv[2]), Path(argv[3]), "--every" in argv[4:]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="fixture names (default: every .tflite fixture)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    import tflite_micro
    version = tflite_micro.__version__
    print(f"tflite-micro {version}")
    for path in fixtures(a.only):
        print(record(path, a.out, version))


if __name__ == "__main__":
    main()
