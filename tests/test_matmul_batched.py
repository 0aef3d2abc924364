"""MatMul of two activations (npu_sim.ops.mac._batched_matmul): one batched float matmul where one exact float
chunk covers K (float32 below 2**24, float64 below 2**53), else the integer matmul per batch -- always numpy's
int64 result, with its broadcasting and 1-D promotion."""
import numpy as np
import pytest

from npu_sim.ops import mac

CASES = [((1, 8, 40, 15), (1, 8, 15, 40), 255),   # attention scores, 8-bit: float32
         ((2, 1, 5, 7), (3, 7, 4), 255),           # broadcast batch dimensions
         ((7,), (2, 7, 3), 255), ((4, 6), (6,), 255), ((6,), (6,), 255),  # 1-D operands promoted
         ((2, 9, 300), (2, 300, 5), 65535),        # 16-bit: float64
         ((1, 3, 4), (1, 4, 2), 0)]                # all zero


@pytest.mark.parametrize("a_shape,b_shape,dev", CASES, ids=[f"{a}x{b}" for a, b, _ in CASES])
def test_batched_matmul_is_numpys_int64_matmul(a_shape, b_shape, dev):
    rng = np.random.default_rng(len(a_shape) * 31 + dev)
    a = rng.choice(np.array([-dev, dev, 0, dev // 3], np.int64), a_shape).astype(np.int32)
    b = rng.choice(np.array([-dev, dev, 1, -dev // 7], np.int64), b_shape).astype(np.int32)
    got = mac._batched_matmul(a, b)
    want = np.matmul(a.astype(np.int64), b.astype(np.int64))
    assert got.dtype == np.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_past_the_float64_bound_the_integer_matmul_runs(monkeypatch):
    """Where no exact float chunk covers K, each batch goes to the exact integer matmul (forced here)."""
    calls = []
    real = mac.int_matmul
    monkeypatch.setattr(mac, "gemm_plan", lambda bound, k: ("loops", 0))
    monkeypatch.setattr(mac, "int_matmul", lambda a, b, *args, **kw: calls.append(1) or real(a, b, *args, **kw))
    a = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4) - 11
    b = np.arange(4 * 5, dtype=np.int32).reshape(1, 4, 5) * 1000
    np.testing.assert_array_equal(mac._batched_matmul(a, b), np.matmul(a.astype(np.int64), b.astype(np.int64)))
    assert len(calls) == 2


@pytest.mark.parametrize("k,proven", [(8, True), (200000, False)])
def test_a_matmul_of_two_activations_checks_its_accumulator_only_where_it_can_overflow(tmp_path, k, proven):
    """A sum of K products of two 8-bit activations reaches at most K * max|a - a_zp| * max|b - b_zp| (128 each for
    int8 about zero): while that is below 2**31 the board's 32-bit accumulator cannot overflow, so no element is
    checked (and the requantization takes its branch-free row); at K = 200,000 it could, and every element is."""
    import npu_sim
    from tests import qdq_models as qm
    model = qm.build_model([qm.helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                           {"a": (1, 2, k), "b": (1, k, 3)}, {"y": None})
    sim = npu_sim.load(qm.quantize(model, tmp_path, f"mm{k}", activation_type="s8"), board="default")
    (mm,) = [n for n in sim.program.nodes if n.op == "MatMul"]
    assert not mm.params["_acc_check"].any() if proven else mm.params["_acc_check"].all()
    x = sim.random_inputs(0)
    sim.run(x)  # runs either way
