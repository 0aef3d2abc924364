"""npu-sim's flash on ethos-u55-128 against Vela 5.2's read-only allocation ("Total On-chip Flash used").

The fixtures (tests/fixtures/vela_flash/, built by ``python models/vela_flash_fixtures.py`` in the Vela virtualenv)
hold one small network, int8 and 16x8, with one of each constant Vela stores (convolutions in both weight orders,
a 9x9 kernel, depthwise 3x3 and 5x5, a Dense layer, a LOGISTIC, a multiply by a constant, an unfolded zero pad,
a MEAN, a SOFTMAX), and ``NAME.readonly.txt``: Vela's ``--verbose-allocation`` list of its read-only tensors and
its summary's flash line, from ``vela NAME.tflite --accelerator-config ethos-u55-128 --system-config
Ethos_U55_High_End_Embedded --memory-mode Sram_Only --config Arm/vela.ini --verbose-performance
--verbose-allocation`` (Vela 5.2.0, 2026-12-06): 24,752 bytes (int8) and 25,696 bytes (16x8).

Vela's flash is its constant tensors, each padded to 16 bytes: a MAC op's records (10 bytes per output channel)
then its weight stream, the tables and scalars of its softmax, the ones of its MEAN, the lookup table, the pad's
fill, the multiply's constant. Everything but the weight streams npu-sim counts to the byte (less the few header
bytes of the MEAN's stream of ones); the weight streams it counts uncompressed, in Vela's layout, zeros included.
Vela's encoder compresses those zeros, which on this tiny network are most of its streams: npu-sim's total is
1.042 (int8) and 1.046 (16x8) of Vela's here, within 1% on 23 of the 26 networks of the TFLite zoo
(docs/ETHOS_U55.md).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import npu_sim
from npu_sim.analysis.cost.constants import constant_bytes
from npu_sim.analysis.cost.weight_layout import out_channels, round_up, weight_layout_elements
from npu_sim.opset import WEIGHT_INPUT, kind_of

FIXTURES = Path(__file__).parent / "fixtures" / "vela_flash"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.tflite"))
VELA_FLASH = {"flash_mix_int8": 24752, "flash_mix_16x8": 25696}


def _vela(name: str) -> tuple[int, dict[str, int]]:
    """Vela's read-only total (bytes) and its tensors' sizes by name."""
    text = (FIXTURES / f"{name}.readonly.txt").read_text()
    sizes = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(":")]
        if len(parts) >= 6 and parts[2].isdigit():
            sizes[":".join(parts[5:])] = int(parts[2])
    total = int(re.search(r"Allocation Peak Tensor Size: (\d+) bytes", text).group(1))
    kib = float(re.search(r"Total On-chip Flash used\s+([\d.]+) KiB", text).group(1))
    assert round(total / 1024, 2) == kib and sum(sizes.values()) == total
    return total, sizes


@pytest.mark.parametrize("name", NAMES)
def test_flash_against_velas_read_only_area(name):
    total, sizes = _vela(name)
    assert total == VELA_FLASH[name]
    sim = npu_sim.load(str(FIXTURES / f"{name}.tflite"), board="ethos-u55-128")
    program, mem = sim.program, sim.board.memory
    ours = constant_bytes(program)
    assert sum(ours.values()) == npu_sim.estimate(sim, board="ethos-u55-128").memory["flash_used_bytes"]
    # the weight streams: Vela's encoded (its MAC tensor less the 16-byte-aligned records), ours uncompressed
    vela_streams = our_streams = 0
    for node in program.nodes:
        if kind_of(node.op) == "mac":
            vela_tensor = sizes.pop(re.sub(r"#\d+$", "", node.inputs[WEIGHT_INPUT]))
            vela_streams += vela_tensor - round_up(10 * out_channels(program, node), 16)
            our_streams += round_up(weight_layout_elements(program, node, mem), 16)
    assert vela_streams > 0 and our_streams > 0
    # everything else to the byte, less the 16 bytes the MEAN's stream of 5,760 one-bit weights takes for its
    # header and end (Vela: 736 bytes; npu-sim: 720)
    assert (total - vela_streams) - (sum(ours.values()) - our_streams) == 16
    assert any(n.endswith("Mean_weights") for n in sizes) and "pad_const" in sizes and "exp_lut" in sizes
    assert 1.0 < sum(ours.values()) / total < 1.05


def test_softmax_and_tables_as_vela_makes_them():
    """int8: one exp table of 256 int32 and a 256-byte LOGISTIC table; 16x8: two 512-entry int32 tables and no
    LOGISTIC table (the Ethos-U55 computes a 16-bit sigmoid itself)."""
    for name, luts in (("flash_mix_int8", 256 * 4 + 256), ("flash_mix_16x8", 2 * 512 * 4)):
        _, sizes = _vela(name)
        assert sum(v for k, v in sizes.items() if k.endswith("lut") or k == "sigmoid") == luts
        program = npu_sim.load(str(FIXTURES / f"{name}.tflite"), board="ethos-u55-128").program
        assert constant_bytes(program)["luts"] == luts
