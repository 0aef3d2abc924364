"""broadcast_3d: numpy broadcasting collapsed to (outer, mid, inner) must describe the same element mapping."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from npu_sim.ops.elementwise import broadcast_3d


@st.composite
def shapes(draw):
    out = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 5))))

    def operand():
        rank = draw(st.integers(0, len(out)))
        return tuple(d if draw(st.booleans()) else 1 for d in out[len(out) - rank:])
    return out, operand(), operand()


@settings(deadline=None, max_examples=examples(300))
@given(shapes())
def test_broadcast_3d_maps_the_same_elements(case):
    out, sa, sb = case
    plan = broadcast_3d(out, sa, sb)
    if plan is None:
        return  # more than three runs: the caller materializes the broadcast instead
    out3, (a3, b3) = plan
    assert int(np.prod(out3)) == int(np.prod(out))
    for shape, shape3 in ((sa, a3), (sb, b3)):
        x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        assert len(shape3) == 3 and all(d in (1, o) for d, o in zip(shape3, out3))
        direct = np.broadcast_to(x, out).reshape(-1)
        collapsed = np.broadcast_to(x.reshape(shape3), out3).reshape(-1)
        np.testing.assert_array_equal(direct, collapsed)


def test_common_layouts_collapse():
    assert broadcast_3d((1, 8, 5, 5), (1, 8, 5, 5), (1, 8, 1, 1)) == ((1, 8, 25), [(1, 8, 25), (1, 8, 1)])
    assert broadcast_3d((2, 3, 4), (2, 3, 4), ()) == ((1, 1, 24), [(1, 1, 24), (1, 1, 1)])


def test_binary_nodes_materialize_what_does_not_collapse():
    """Mul and Add of operands whose broadcast needs more than three runs: the node's closure broadcasts them
    explicitly and gives the twins' integers (and the same again on a second call, through the kept closure)."""
    from npu_sim.ir import Node, Operands, QParams, Requant, Tensor
    from npu_sim.ops import elementwise
    from tests import naive

    sa, sb, out = (2, 1, 3, 1, 5), (1, 4, 1, 6, 1), (2, 4, 3, 6, 5)
    assert broadcast_3d(out, sa, sb) is None
    ta, tb = (Tensor(n, n, s, QParams("int8", np.float32(0.1), np.int64(zp))) for n, s, zp in (("a", sa, 2),
                                                                                                ("b", sb, -1)))
    ctx = type("Ctx", (), {"shape_of": staticmethod(lambda name: {"y": out}[name])})()
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-128, 128, s).astype(np.int8) for s in (sa, sb))
    fa, fb = (np.ascontiguousarray(np.broadcast_to(v, out)).reshape(-1) for v in (a, b))
    # the operands (zero points 2 and -1), multipliers and clamp are the nodes' records, as the op families make them
    mul = Node("m", "Mul", ["a", "b"], ["y"], elementwise._run_mul, {"_out_dtype": np.int8},
               requant=Requant("half_up", 31, np.array([1 << 30]), np.array([36]), None, np.zeros(1, np.int64), 2,
                               -3, -128, 127),
               operands=Operands(ta, tb), clamp=(-128, 127))
    add = Node("s", "Sub", ["a", "b"], ["y"], elementwise._run_add, {"sign_b": -1, "out_zp": -3, "_out_dtype": np.int8},
               operands=Operands(ta, tb, 20, ((1 << 30, 31), (1 << 30, 31), (1 << 30, 21))), clamp=(-128, 127))
    expected = {"m": naive.mul(fa, 2, fb, -1, 1 << 30, 36, -3, -128, 127, np.int8),
                "s": naive.add_rescaled(fa, 2, 1 << 30, 31, fb, -1, 1 << 30, 31, 20, -1, 1 << 30, 21, -3, -128, 127,
                                        np.int8)}
    for node in (mul, add):
        for _ in range(2):
            y = node.run(node, [a, b], ctx)[0]
            assert y.shape == out
            np.testing.assert_array_equal(y.reshape(-1), expected[node.name].reshape(-1))
