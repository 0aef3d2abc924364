"""Whole models give the same integers on every convolution path the CPU offers: the AMX tiles
(kernels/conv_amx.py), the VNNI byte quads (kernels/conv_u8s8.py) and the int16 pairs (kernels/conv_int16.py).
Each path is switched off in turn (the model loaded again, so every node binds its kernels afresh) and every traced
tensor compared bit for bit. Paths this CPU lacks are skipped in the comparison (the test still compares the
ones it has)."""
from unittest import mock

import numpy as np
import pytest

import npu_sim
from kernels import conv_amx, conv_int16, conv_u8s8
from tests.qdq_models import real_models

PATHS = [("amx", conv_amx.AVAILABLE, conv_u8s8.AVAILABLE), ("quads", False, conv_u8s8.AVAILABLE),
         ("pairs", False, False)]


def _traces(path, feeds, amx, quads):
    with mock.patch.object(conv_amx, "AVAILABLE", amx), mock.patch.object(conv_u8s8, "AVAILABLE", quads):
        sim = npu_sim.load(path, board="default")
        return sim.trace(feeds)


@pytest.mark.skipif(not conv_int16.AVAILABLE, reason="needs AVX2 or AVX-512BW (no integer convolution tiles)")
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.full) for n in ("mobilenetv2_a8w8u", "ppocr_rec_a8w8")]
                         + ["ppocr_cls_a8w8"])  # the larger two: make test-full
def test_every_convolution_path_gives_the_same_integers(name):
    build, (path,) = real_models(name)
    feeds = build.sample_inputs(name, 1)[0]
    distinct = {(amx, quads): label for label, amx, quads in PATHS}  # a missing path collapses onto another
    runs = {label: _traces(path, feeds, amx, quads) for (amx, quads), label in distinct.items()}
    labels = list(runs)
    base = runs[labels[0]]
    for label in labels[1:]:
        other = runs[label]
        assert set(other) == set(base)
        for tensor, value in base.items():
            np.testing.assert_array_equal(np.asarray(other[tensor]), np.asarray(value), err_msg=f"{tensor}: {label}")
