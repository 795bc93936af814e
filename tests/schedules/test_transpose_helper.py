"""``schedules.core.transpose.transposed_into``: the C helper's tiles of
16 x 16 (through registers, the edges element by element) give NumPy's
transpose exactly, at every shape (edges of partial
tiles, one row, empty), into a wider matrix whose other columns it leaves
alone; what the helper does not take (other dtypes, strided arrays) is
NumPy's copy; a matrix too small for the transpose is refused."""
import numpy as np
import pytest

from schedules.core import transpose


@pytest.mark.parametrize("rows,cols,width", [(100, 1024, 112), (1, 5, 3), (17, 33, 20),
                                             (16, 16, 16), (0, 8, 4), (5, 0, 7), (48, 37, 50),
                                             (32, 64, 32)])
def test_transposed_into_is_numpys_transpose(rows, cols, width):
    rng = np.random.default_rng(rows * 1000 + cols)
    src = rng.standard_normal((rows, cols), dtype=np.float32)
    out = np.full((cols, width), 7.0, np.float32)
    assert transpose.transposed_into(src, out) is out
    np.testing.assert_array_equal(out[:, :rows], src.T)
    assert (out[:, rows:] == 7.0).all()


def test_the_helper_is_built_here_and_other_layouts_fall_back():
    assert transpose._transpose() is not None          # gcc is present on CI and here
    src = np.arange(24, dtype=np.float64).reshape(4, 6)
    out = np.zeros((6, 4))
    np.testing.assert_array_equal(transpose.transposed_into(src, out), src.T)
    strided = np.arange(48, dtype=np.float32).reshape(4, 12)[:, ::2]
    out = np.zeros((6, 5), np.float32)
    np.testing.assert_array_equal(transpose.transposed_into(strided, out)[:, :4], strided.T)
    with pytest.raises(ValueError, match="cannot hold"):
        transpose.transposed_into(np.zeros((4, 6), np.float32), np.zeros((6, 3), np.float32))


@pytest.mark.parametrize("co,ci,k", [(64, 3, 7), (70, 5, 3), (8, 4, 1), (48, 32, 3), (0, 4, 3)])
@pytest.mark.parametrize("threads", [1, 3])
def test_pack_weight_is_numpys_nchwc_layout(co, ci, k, threads, monkeypatch):
    """The conv weight packed by the tiled transposes (a block of 16 output
    channels each, the last zero-padded) is NumPy's ``[Co/16][Ci][Kh][Kw][16]``,
    in one thread or its blocks split over three (below any size), and
    NumPy's copies where the helper is not built give the same."""
    from schedules.core import workers
    from schedules.weights.conv import pack_weight
    monkeypatch.setattr(workers, "THREADS", threads)
    monkeypatch.setattr(transpose, "PACK_SPLIT_BYTES", 1)
    w = np.random.default_rng(co).standard_normal((co, ci, k, k), dtype=np.float32)
    cob = -(-co // 16)
    ref = np.zeros((cob * 16, ci, k, k), np.float32)
    ref[:co] = w
    want = ref.reshape(cob, 16, ci, k, k).transpose(0, 2, 3, 4, 1)
    np.testing.assert_array_equal(pack_weight(w, 16), want)
    monkeypatch.setattr(transpose._HELPER, "lib", lambda: None)
    np.testing.assert_array_equal(pack_weight(w, 16), want)


@pytest.mark.parametrize("groups,rows,cols,k", [(1, 64, 3, 49), (2, 20, 37, 9), (1, 16, 16, 1),
                                               (3, 3, 5, 6), (96, 1, 1, 9)])
def test_flipped_items_is_numpys_transpose_of_reversed_items(groups, rows, cols, k):
    """Per group a matrix of items of k floats transposed with each item
    reversed (a conv weight to its input gradient's) is NumPy's; another
    dtype falls back to NumPy's copy."""
    m = np.random.default_rng(rows + k).standard_normal((groups, rows, cols, k),
                                                        dtype=np.float32)
    want = m.transpose(0, 2, 1, 3)[..., ::-1]
    np.testing.assert_array_equal(
        transpose.flipped_items(m, np.empty((groups, cols, rows, k), np.float32)), want)
    np.testing.assert_array_equal(
        transpose.flipped_items(m, np.empty((groups, cols, rows, k), np.float64)), want)
    with pytest.raises(ValueError, match="cannot hold"):
        transpose.flipped_items(m, np.empty((groups, cols, rows, k + 1), np.float32))


@pytest.mark.parametrize("co,ci,k,vb", [(64, 64, 3, 16), (64, 3, 7, 16), (40, 24, 3, 16),
                                        (96, 200, 1, 32), (8, 5, 3, 16), (0, 4, 3, 16)])
def test_flip_packed_is_the_flipped_weight_packed(co, ci, k, vb, monkeypatch):
    """A weight flipped for its input's gradient and packed in one pass is
    the flipped weight (:func:`flipped_items`) packed by ``pack_weight``,
    bit for bit: the input channels' last block zero-padded, its output
    channels in one thread or split over three; NumPy's copies where the
    helper is not built give the same."""
    from schedules.core import workers
    from schedules.weights.conv import pack_weight
    w = np.random.default_rng(co + ci).standard_normal((co, ci, k, k), dtype=np.float32)
    flipped = transpose.flipped_items(w.reshape(1, co, ci, k * k),
                                      np.empty((1, ci, co, k * k), np.float32))
    want = pack_weight(flipped.reshape(ci, co, k, k), vb)
    np.testing.assert_array_equal(transpose.flip_packed(w, vb), want)
    monkeypatch.setattr(workers, "THREADS", 3)
    monkeypatch.setattr(workers, "SPLIT_BYTES", 1)
    np.testing.assert_array_equal(transpose.flip_packed(w, vb), want)
    monkeypatch.setattr(transpose._HELPER, "lib", lambda: None)
    np.testing.assert_array_equal(transpose.flip_packed(w, vb), want)


@pytest.mark.parametrize("co,ci,k,stride,vb", [(32, 24, 3, 2, 16), (16, 40, 5, 3, 32),
                                               (8, 5, 2, 2, 16), (4, 3, 7, 2, 16), (8, 4, 1, 2, 16)])
def test_flip_packed_phases_are_the_phase_weights_packed(co, ci, k, stride, vb, monkeypatch):
    """Each phase's sub-kernel of a strided weight (its taps ``r, r +
    stride, ...``) flipped and packed in one pass is the sub-kernel of
    ``phase_weight`` packed by ``pack_weight``, bit for bit, and None where
    no tap is in the phase; NumPy's copies where the helper is not built
    give the same."""
    torch = pytest.importorskip("torch", reason="phase_weight makes torch tensors")
    from schedules.solvers.conv_grad import phase_weight
    from schedules.weights.conv import pack_weight
    w = np.random.default_rng(co + k).standard_normal((co, ci, k, k), dtype=np.float32)
    subs = [phase_weight(torch.from_numpy(w.copy()), 1, stride, divmod(i, stride))
            for i in range(stride * stride)]
    for helper in (True, False):
        if not helper:
            monkeypatch.setattr(transpose._HELPER, "lib", lambda: None)
        for idx, sub in enumerate(subs):
            got = transpose.flip_packed(w, vb, stride, divmod(idx, stride))
            if sub is None:
                assert got is None
            else:
                np.testing.assert_array_equal(got, pack_weight(sub.numpy(), vb))
