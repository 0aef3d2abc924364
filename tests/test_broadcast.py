"""broadcast_3d: numpy broadcasting collapsed to (outer, mid, inner) must describe the same element mapping."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_sim.ops.elementwise import broadcast_3d


@st.composite
def shapes(draw):
    out = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 5))))

    def operand():
        rank = draw(st.integers(0, len(out)))
        return tuple(d if draw(st.booleans()) else 1 for d in out[len(out) - rank:])
    return out, operand(), operand()


@settings(deadline=None, max_examples=300)
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
