"""The call memo (:mod:`schedules.core.call_memo`): a repeated
``schedules.gemm`` call with arguments of the same layout skips the parse
and the find step and gives the same result; any change of layout, dtype,
arguments, environment or tuning store parses again."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np
import pytest

import schedules
from schedules.core import call_memo
from schedules.problems.gemm import GemmProblem, cpu_operands
from tiramisu_py import tuning

RNG = np.random.default_rng(7)


@pytest.fixture
def parses(monkeypatch, tmp_path):
    """A fresh store and memo; the number of parses of gemm calls."""
    monkeypatch.setenv("TIRAMISU_PY_CACHE", str(tmp_path))
    tuning.close()
    call_memo._PLANS.clear()
    count = [0]
    real = GemmProblem.from_call.__func__

    def counted(cls, *args, **kwargs):
        count[0] += 1
        return real(cls, *args, **kwargs)
    monkeypatch.setattr(GemmProblem, "from_call", classmethod(counted))
    yield count
    tuning.close()
    call_memo._PLANS.clear()


def mats(n, k, m, dtype=np.float32):
    return RNG.standard_normal((n, k)).astype(dtype), RNG.standard_normal((k, m)).astype(dtype)


@pytest.mark.parametrize("shape", [(3, 5, 7), (40, 33, 70)])     # the rows and the BLIS solver
def test_a_repeated_call_skips_the_parse_and_gives_the_same_bits(parses, shape):
    a, b = mats(*shape)
    first = schedules.gemm(a, b)
    assert parses[0] == 1 and len(call_memo._PLANS) == 1
    a2, b2 = mats(*shape)                         # new arrays, the same layout
    again, other = schedules.gemm(a, b), schedules.gemm(a2, b2)
    assert parses[0] == 1
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(other, a2 @ b2, rtol=1e-4, atol=1e-4)
    call_memo._PLANS.clear()                      # the full path: the same bits
    np.testing.assert_array_equal(schedules.gemm(a2, b2), other)


def test_another_layout_dtype_or_argument_parses_again(parses):
    a, b = mats(16, 24, 32)
    schedules.gemm(a, b)
    bf = np.asfortranarray(b)                     # same shape, other strides
    np.testing.assert_allclose(schedules.gemm(a, bf), a @ b, rtol=1e-4, atol=1e-4)
    assert parses[0] == 2
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = schedules.gemm(a64, b64)
    assert out.dtype == np.float64 and parses[0] == 3
    np.testing.assert_allclose(out, a64 @ b64, rtol=1e-10)
    p = schedules.GemmParams(mr=4, nr=16, kc=24, mc=16, nc=32, vector=16)
    np.testing.assert_allclose(schedules.gemm(a, b, params=p), a @ b, rtol=1e-4, atol=1e-4)
    assert parses[0] == 4
    # b as nn.Linear's weight.t(): bf's layout (a Fortran array is C's transpose), whose
    # plan converts it as the parse did (read as stored): no parse
    bt = np.ascontiguousarray(b.T).T
    np.testing.assert_allclose(schedules.gemm(a, bt), a @ b, rtol=1e-4, atol=1e-4)
    assert parses[0] == 4


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_call_whose_parse_converts_its_operands_is_memoised_with_the_same_conversions(
        parses, kind):
    """Operands the parse converts by their layout alone (a transposed view
    of A copied C-contiguous, B given as ``weight.t()`` read as stored, both
    at once) parse once; later calls of those layouts convert them so again
    (:func:`schedules.problems.gemm.cpu_operands`, what the parse returns:
    the same data, shapes and strides) and give the full path's bits."""
    torch = pytest.importorskip("torch") if kind == "torch" else None
    wrap = (lambda x: torch.from_numpy(x)) if torch else (lambda x: x)
    for n, k, m in ((5, 7, 9), (40, 33, 70)):
        layouts = {"b.t()": lambda a, b: (a, wrap(np.ascontiguousarray(b.T)).T),
                   "a.t()": lambda a, b: (wrap(np.ascontiguousarray(a.T)).T, b),
                   "both": lambda a, b: (wrap(np.ascontiguousarray(a.T)).T,
                                         wrap(np.ascontiguousarray(b.T)).T)}
        for name, make in layouts.items():
            before = parses[0]
            results = []
            for _ in range(3):
                a, b = mats(n, k, m)
                a, b = make(wrap(a), wrap(b))
                results.append((schedules.gemm(a, b), a, b))
            assert parses[0] == before + 1, name
            p, args = GemmProblem.from_call("gemm", a, b, None, None)
            assert p.trans_b == (name != "a.t()")
            for got, want in zip(cpu_operands(a, b, p.dtype, p.trans_b), args):
                assert type(got) is type(want) and got.shape == want.shape
                assert (got.strides, got.dtype) == (want.strides, want.dtype) if torch is None \
                    else (got.stride(), got.dtype) == (want.stride(), want.dtype)
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
            for out, a, b in results:
                call_memo._PLANS.clear()
                full = schedules.gemm(a, b)
                np.testing.assert_array_equal(np.asarray(out), np.asarray(full))


def test_the_environment_and_the_tuning_store_are_part_of_the_key(parses, monkeypatch, tmp_path):
    a, b = mats(8, 8, 8)
    schedules.gemm(a, b)
    monkeypatch.setenv("TIRAMISU_PY_TARGET", "c")
    schedules.gemm(a, b)
    assert parses[0] == 2
    monkeypatch.delenv("TIRAMISU_PY_TARGET")
    schedules.gemm(a, b)
    assert parses[0] == 2                         # the first key again
    before = tuning.generation()
    tuning.store().put("test_call_memo", "k", {"v": 1})    # this process writes a store
    assert tuning.generation() != before
    schedules.gemm(a, b)
    assert parses[0] == 3


def test_refused_calls_are_refused_every_time(parses):
    a, b = mats(4, 5, 6)
    for _ in range(2):
        with pytest.raises(ValueError, match="inner dimensions differ"):
            schedules.gemm(a, a)
    assert not call_memo._PLANS
    with pytest.raises(TypeError):
        schedules.gemm(a, b, target=["llvm"])


def test_torch_tensors_memoised_unless_they_record_a_gradient(parses):
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    a, b = (torch.from_numpy(x) for x in mats(6, 7, 9))
    out = schedules.gemm(a, b)
    out2 = schedules.gemm(a.clone(), b.clone())
    assert isinstance(out2, torch.Tensor) and parses[0] == 1
    torch.testing.assert_close(out2, out, rtol=0, atol=0)
    assert call_memo.layout(a.requires_grad_()) is None
    with torch.no_grad():                      # records nothing: memoised, Parameters too
        assert call_memo.layout(a) is not None
        assert call_memo.layout(torch.nn.Parameter(b)) is not None
    assert call_memo.layout(torch.nn.Parameter(b)) is None
    class Sub(np.ndarray):
        pass
    assert call_memo.layout(np.zeros((2, 2)).view(Sub)) is None        # a subclass


def test_the_environment_reads_are_os_environs(monkeypatch):
    """schedules.core.environ reads os.environ's own mapping (no encoding per
    read): the same answers as os.environ.get after every kind of change."""
    from schedules.core import environ
    name = "TIRAMISU_PY_TEST_ENVIRON"
    monkeypatch.delenv(name, raising=False)
    assert environ.get(name) is None and environ.values((name, "HOME")) == \
        environ.values((name, "HOME"))
    before = environ.values((name,))
    monkeypatch.setenv(name, "é1")
    assert environ.get(name) == "é1" == os.environ.get(name)
    after = environ.values((name,))
    assert after != before
    os.environ[name] = "2"
    assert environ.get(name) == "2" and environ.values((name,)) not in (before, after)
    del os.environ[name]
    assert environ.get(name) is None and environ.values((name,)) == before
    monkeypatch.setattr(os, "environ", {name: "3"})         # replaced: read as it is
    assert environ.get(name) == "3" and environ.values((name,)) == ("3",)
