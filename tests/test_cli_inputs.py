"""The command line as a new user types it (issue 20, item 5): inputs and options."""
from pathlib import Path

import numpy as np
import pytest

from npu_sim.cli.main import main

DEMO = Path(__file__).parent.parent / "models" / "demo"
MODEL = DEMO / "digits_cnn.qdq.onnx"
SAMPLE = DEMO / "digits_sample.npy"


def _logits(out: Path) -> np.ndarray:
    return np.load(out / "logits.int.npy")


def test_run_input_without_name_and_npz(tmp_path, capsys):
    """`run --input FILE` feeds the only input; a .npz feeds the array named like the input, else its only one."""
    assert main(["run", str(MODEL), "--input", f"input={SAMPLE}", "--out", str(tmp_path / "named")]) == 0
    assert main(["run", str(MODEL), "--input", str(SAMPLE), "--out", str(tmp_path / "bare")]) == 0
    x = np.load(SAMPLE)
    np.savez(tmp_path / "named.npz", input=x, other=np.zeros(3))
    np.savez(tmp_path / "only.npz", whatever=x)
    assert main(["run", str(MODEL), "--input", str(tmp_path / "named.npz"), "--out", str(tmp_path / "z1")]) == 0
    assert main(["run", str(MODEL), "--input", f"input={tmp_path / 'only.npz'}", "--out", str(tmp_path / "z2")]) == 0
    ref = _logits(tmp_path / "named")
    for out in ("bare", "z1", "z2"):
        assert np.array_equal(_logits(tmp_path / out), ref), out
    capsys.readouterr()
    np.savez(tmp_path / "two.npz", a=x, b=x)
    assert main(["run", str(MODEL), "--input", str(tmp_path / "two.npz"), "--out", str(tmp_path / "z3")]) == 2
    err = capsys.readouterr().err
    assert "['a', 'b']" in err and "Traceback" not in err


def test_repeated_input_is_refused(tmp_path, capsys):
    assert main(["run", str(MODEL), "--input", f"input={SAMPLE}", "--input", str(SAMPLE),
                 "--out", str(tmp_path / "o")]) == 2
    assert "--input input is given twice" in capsys.readouterr().err
    assert main(["check", str(MODEL), "--input", f"input={SAMPLE}", "--input", f"input={SAMPLE}"]) == 2
    assert "given twice" in capsys.readouterr().err


def test_no_abbreviated_options(capsys):
    """`estimate M --input x=f.npy` was read as --input-shape; now estimate refuses the option it does not have."""
    with pytest.raises(SystemExit) as exc:
        main(["estimate", str(MODEL), "--input", "x=f.npy"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --input x=f.npy" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", str(MODEL), "--inp", str(SAMPLE)])
    assert "unrecognized arguments: --inp" in capsys.readouterr().err


def test_report_model_after_data(capsys):
    """`report --data FILE MODEL`: the list option does not swallow the model."""
    code = main(["report", "--data", str(DEMO / "digits_test.npz"), str(MODEL), "--limit", "4", "--no-sensitivity"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "npu-sim report: " + str(MODEL) in captured.out and "4 sample(s)" in captured.out
    assert main(["report", "--data", str(DEMO / "digits_test.npz"), "--limit", "4"]) == 2
    assert "give the QDQ model" in capsys.readouterr().err


def test_version(capsys):
    import npu_sim
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"npu-sim {npu_sim.__version__}"
