"""Long layer names in `npu-sim estimate` (issue 31): the table and the hotspots cut a name past NAME_CAP in the
middle alike, say so in one line, and --json keeps every name in full."""
import json

import onnx

from npu_sim.cli.main import main
from npu_sim.render.text import NAME_CAP
from tests.qdq_models import quantize, small_cnn

LONG = "efficientnet-lite0/model/blocks_24/depthwise_conv2d/" * 3 + "conv1"  # 161 characters


def long_named(tmp_path):
    path = quantize(small_cnn(), tmp_path, "long")
    model = onnx.load(str(path))
    next(n for n in model.graph.node if n.name == "conv1").name = LONG
    onnx.save(model, str(path))
    return path


def test_estimate_cuts_long_names_alike_and_json_keeps_them(tmp_path, capsys):
    path = long_named(tmp_path)
    assert main(["estimate", str(path), "--top", "10"]) == 0
    out = capsys.readouterr().out
    hot = out.split("hotspots:\n")[1].splitlines()
    row = next(line for line in hot if "(Conv" in line and "…" in line)
    assert LONG not in out and LONG[:20] in row and row.split("cycles  ")[1].startswith(LONG[:(NAME_CAP - 1) // 3])
    assert max(len(line) for line in hot if line.startswith("  ")) < 120
    assert f"(names longer than {NAME_CAP} characters are cut in the middle at …; --json has them in full)" in out
    assert main(["estimate", str(path), "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    assert LONG in {r["node"] for r in layers}


def test_no_note_when_every_name_fits(tmp_path, capsys):
    assert main(["estimate", str(quantize(small_cnn(), tmp_path, "short"))]) == 0
    assert "are cut in the middle" not in capsys.readouterr().out
