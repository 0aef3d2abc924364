"""The command line on the committed demo model: run, dump, lower, boards."""
import json
from pathlib import Path

import numpy as np
import pytest

import npu_sim
from npu_sim.cli.main import main

DEMO = Path(__file__).parent.parent / "models" / "demo"
MODEL = DEMO / "digits_cnn.qdq.onnx"


def test_run_writes_outputs_and_dump(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", str(MODEL), "--input", f"input={DEMO / 'digits_sample.npy'}", "--out", str(out), "--dump-all"])
    text = capsys.readouterr().out
    assert code == 0
    ints = np.load(out / "logits.int.npy")
    deq = np.load(out / "logits.npy")
    assert ints.dtype == np.int8 and ints.shape == (1, 10)
    sim = npu_sim.load(MODEL, feed_shapes={"input": (1, 1, 8, 8)})
    x = np.load(DEMO / "digits_sample.npy")
    assert np.array_equal(ints, sim.run({"input": x}, raw=True)["logits"])
    assert np.allclose(deq, ints.astype(np.float32) * float(sim.program.tensors[sim.program.outputs["logits"]].q.scale))
    assert "top-5: 7" in text  # the sample is a 7
    index = json.loads((out / "index.json").read_text())
    trace = sim.trace({"input": x})
    assert set(index) == set(trace)
    for float_name, entry in index.items():
        arr = np.load(out / entry["file"])
        assert np.array_equal(arr, trace[float_name]), float_name
        assert entry["dtype"] == str(arr.dtype) and entry["shape"] == list(arr.shape)
    assert index["relu1_out"]["producer"] == "relu1"


def test_run_without_input_uses_seeded_random(tmp_path, capsys):
    def run(seed):
        out = tmp_path / f"o{seed}"
        assert main(["run", str(MODEL), "--input-shape", "input=2x1x8x8", "--out", str(out), "--seed", str(seed)]) == 0
        return np.load(out / "logits.int.npy")
    a, b, c = run(1), run(1), run(2)
    assert a.shape == (2, 10) and np.array_equal(a, b) and not np.array_equal(a, c)
    assert "random input" in capsys.readouterr().out


def test_image_input(tmp_path, capsys):
    pil = pytest.importorskip("PIL.Image")
    img = tmp_path / "digit.png"
    x = np.load(DEMO / "digits_sample.npy")[0, 0]
    pil.fromarray(((x + 1) / 2 * 255).round().astype(np.uint8)).save(img)
    code = main(["run", str(MODEL), "--input-shape", "input=1x1x8x8", "--input", f"input={img}", "--mean", "0.5",
                 "--std", "0.5", "--out", str(tmp_path / "o")])
    assert code == 0
    assert "top-5: 7" in capsys.readouterr().out


def test_lower_prints_one_line_per_op(capsys):
    assert main(["lower", str(MODEL), "--input-shape", "input=1x1x8x8"]) == 0
    text = capsys.readouterr().out
    sim = npu_sim.load(MODEL, input_shapes={"input": (1, 1, 8, 8)})
    op_lines = [line for line in text.splitlines() if " [" in line and not line.startswith(("input ", "output ", "#"))]
    assert len(op_lines) == len(sim.program.nodes)
    conv = next(line for line in op_lines if line.startswith("conv1 [Conv]"))
    assert "mult=" in conv and "shift=" in conv and "int8" in conv and "1x16x8x8" in conv


def test_boards_lists_presets(capsys):
    assert main(["boards"]) == 0
    text = capsys.readouterr().out
    assert "default" in text and "onnx" in text


def test_help_mentions_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for command in ("run", "lower", "boards"):
        assert command in text


def test_closed_output_pipe_ends_quietly():
    """`npu-sim lower MODEL | head -0`: the reader is gone before the output is written; the command stops with
    SIGPIPE's exit status (141, as other command-line tools) and prints nothing, neither an error nor a traceback."""
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-m", "npu_sim.cli", "lower", str(MODEL), "--input-shape",
                             "input=1x1x8x8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == "", err


def test_command_ends_without_teardown_and_loses_nothing(tmp_path):
    """The command's own entry point (``python -m npu_sim.cli``, as the ``npu-sim`` script) ends the process
    without the interpreter's teardown: the exit status is main's, every output file is whole, everything printed
    reaches the pipes (a ``lower`` listing too), and an exit handler registered during the command runs."""
    import subprocess
    import sys
    out = tmp_path / "out"
    flag = tmp_path / "atexit-ran"
    code = (f"import atexit, pathlib, runpy; atexit.register(pathlib.Path({str(flag)!r}).write_text, 'yes'); "
            "runpy.run_module('npu_sim.cli', run_name='__main__')")
    args = ["run", str(MODEL), "--input", f"input={DEMO / 'digits_sample.npy'}", "--out", str(out), "--dump-all"]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "top-5: 7" in proc.stdout and flag.read_text() == "yes"
    index = json.loads((out / "index.json").read_text())
    assert all(np.load(out / entry["file"]).size for entry in index.values())
    lowered = subprocess.run([sys.executable, "-m", "npu_sim.cli", "lower", str(MODEL), "--input-shape",
                              "input=1x1x8x8"], capture_output=True, text=True)
    in_process = subprocess.run([sys.executable, "-c", "import sys; from npu_sim.cli.main import main; "
                                 "sys.exit(main())", "lower", str(MODEL), "--input-shape", "input=1x1x8x8"],
                                capture_output=True, text=True)
    assert lowered.returncode == 0 and lowered.stdout == in_process.stdout and lowered.stdout.count("\n") > 5
    bad = subprocess.run([sys.executable, "-m", "npu_sim.cli", "run", str(tmp_path / "missing.onnx")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "missing.onnx" in bad.stderr and "Traceback" not in bad.stderr
