"""Bad arguments to compiled kernels: each must raise the right exception
(TypeError for what an argument *is*, ValueError for what it *holds* or how it
is laid out) whose message names the argument, must leave the arrays passed
untouched, must never crash the interpreter, and must not spoil the kernel:
a correct call right after a rejected one still gives the right answer.

Kernels come from ``examples/`` and are compiled once per module.  Inputs are
random (NumPy ``default_rng`` with fixed seeds).  Tolerances: float32 results
``rtol=atol=1e-4``, float64 results ``rtol=1e-10, atol=1e-12`` (jacobi, exact
same operation order as the reference) and ``1e-5`` for the LSTM (float32
kernel vs float64 reference)."""
from repo_paths import ROOT
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from examples import conv2d, gemm, jacobi2d, lstm, sparse_conv  # noqa: E402



# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def kernels():
    return {"gemm": gemm.build().compile(),
            "sparse": sparse_conv.build().compile(),
            "jacobi": jacobi2d.build().compile(),
            "lstm": lstm.build().compile()}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(20240611)
    d = {}
    # gemm: A (4, 5) @ B (5, 3)
    d["a"] = rng.standard_normal((4, 5), dtype=np.float32)
    d["b"] = rng.standard_normal((5, 3), dtype=np.float32)
    # CSR sparse conv, 30% dense weights
    inp, w, bias = sparse_conv.random_inputs(n=2, cin=3, cout=5, h=6, w=5, density=0.3, seed=7)
    h, wd = inp.shape[2:]
    rowptr, colidx, val = sparse_conv.to_csr(w)(h, wd)
    assert len(colidx) > 6 and rowptr[-1] == len(colidx)
    d["sp"] = dict(inp=sparse_conv.pad_flat(inp), rowptr=rowptr, colidx=colidx, val=val,
                   bias=bias, H=h, W=wd)
    d["sp_ref"] = conv2d.reference(inp, w, bias)
    # jacobi-2d, 8 x 8, T = 2
    d["A"], d["B"] = jacobi2d.random_inputs(n=8, seed=3)
    d["jac_ref"] = jacobi2d.reference(d["A"], d["B"], 2)
    # LSTM: 2 layers, T=3, B=2, H=4
    d["lstm"] = lstm.random_inputs(layers=2, T=3, B=2, H=4, seed=5)
    d["lstm_ref"] = lstm.reference(*d["lstm"])
    return d


def sp_call(k, d, **changes):
    args = dict(d["sp"])
    args.update(changes)
    for name in [n for n, v in changes.items() if v is DROP]:
        del args[name]
    return k(**args)


DROP = object()


# ------------------------------------------------------------- good calls
def good_gemm(k, d):
    out = k(d["a"], d["b"])
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (4, 3)
    np.testing.assert_allclose(out, d["a"] @ d["b"], rtol=1e-4, atol=1e-4)


def good_sparse(k, d):
    out = sp_call(k, d)
    np.testing.assert_allclose(out, d["sp_ref"], rtol=1e-4, atol=1e-4)


def good_jacobi(k, d):
    A, B = d["A"].copy(), d["B"].copy()
    out = k(A=A, B=B, T=2)
    assert out["A"] is A and out["B"] is B          # updated in place
    np.testing.assert_allclose(A, d["jac_ref"][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(B, d["jac_ref"][1], rtol=1e-10, atol=1e-12)


def good_lstm(k, d):
    out = lstm.run(k, *d["lstm"])
    np.testing.assert_allclose(out, d["lstm_ref"], rtol=1e-5, atol=1e-5)


GOOD = {"gemm": good_gemm, "sparse": good_sparse, "jacobi": good_jacobi, "lstm": good_lstm}


def test_good_calls_first(kernels, data):
    for key, check in GOOD.items():
        check(kernels[key], data)


# ------------------------------------------------------- the table of bad calls
def _ro(x):
    x = x.copy()
    x.flags.writeable = False
    return x


def _f(x):
    return np.asfortranarray(x)


# (id, kernel, call(k, d), exception, regex the message must match)
BAD_CALLS = [
    # --- names and arity
    ("missing-B", "gemm", lambda k, d: k(d["a"]), TypeError, r"missing.*'B'"),
    ("missing-A-kw", "gemm", lambda k, d: k(B=d["b"]), TypeError, r"missing.*'A'"),
    ("missing-U", "lstm", lambda k, d: k(x=d["lstm"][0], W=d["lstm"][1], bias=d["lstm"][3]),
     TypeError, r"'U'"),
    ("missing-rowptr", "sparse", lambda k, d: sp_call(k, d, rowptr=DROP), TypeError, r"'rowptr'"),
    ("unexpected-kw", "gemm", lambda k, d: k(d["a"], d["b"], Q=1), TypeError, r"unexpected.*'Q'"),
    ("unexpected-kw-case", "gemm", lambda k, d: k(d["a"], d["b"], c=d["a"]), TypeError, r"'c'"),
    ("unexpected-temp-name", "lstm", lambda k, d: k(*d["lstm"], gates=np.zeros((2, 2, 16), np.float32)),
     TypeError, r"'gates'"),
    ("too-many-positional", "gemm", lambda k, d: k(d["a"], d["b"], d["a"]), TypeError,
     r"2 positional arrays \(the inputs: A, B\), got 3; the outputs \(C\) and the params "
     r"\(N, M, K\) are passed by name: gemm\(A, B, C=\.\.\., N=\.\.\., M=\.\.\., K=\.\.\.\)"),
    ("positional-to-no-inputs", "jacobi", lambda k, d: k(d["A"].copy(), d["B"].copy(), T=1),
     TypeError, r"0 positional arrays \(the inputs: none\), got 2; the outputs \(A, B\) and "
                r"the params \(.*\) are passed by name: jacobi2d\(A=\.\.\., B=\.\.\., "),
    ("twice", "gemm", lambda k, d: k(d["a"], d["b"], A=d["a"]), TypeError, r"'A'.*twice"),
    # --- dtypes
    ("float64-for-float32", "gemm", lambda k, d: k(d["a"].astype(np.float64), d["b"]),
     TypeError, r"'A'.*float64.*float32"),
    ("int32-for-float32", "gemm", lambda k, d: k(d["a"], d["b"].astype(np.int32)),
     TypeError, r"'B'.*int32"),
    ("float16", "gemm", lambda k, d: k(d["a"].astype(np.float16), d["b"]), TypeError, r"'A'"),
    ("int64-rowptr", "sparse", lambda k, d: sp_call(k, d, rowptr=d["sp"]["rowptr"].astype(np.int64)),
     TypeError, r"'rowptr'.*int64.*int32"),
    ("uint32-colidx", "sparse", lambda k, d: sp_call(k, d, colidx=d["sp"]["colidx"].astype(np.uint32)),
     TypeError, r"'colidx'"),
    ("float32-jacobi", "jacobi", lambda k, d: k(A=d["A"].astype(np.float32), B=d["B"].copy(), T=1),
     TypeError, r"'A'"),
    ("float64-lstm-x", "lstm", lambda k, d: k(d["lstm"][0].astype(np.float64), *d["lstm"][1:]),
     TypeError, r"'x'"),
    # --- ranks and shapes
    ("rank-3-A", "gemm", lambda k, d: k(d["a"][None], d["b"]), ValueError, r"'A'.*3 dimensions"),
    ("rank-1-B", "gemm", lambda k, d: k(d["a"], d["b"][0].copy()), ValueError, r"'B'.*1 dimension"),
    ("rank-bias-lstm", "lstm", lambda k, d: k(*d["lstm"][:3], d["lstm"][3][0].copy()),
     ValueError, r"'bias'"),
    ("shape-B", "gemm", lambda k, d: k(d["a"], np.zeros((6, 3), np.float32)), ValueError,
     r"'B'.*\(6, 3\)"),
    ("shape-4H", "lstm", lambda k, d: k(d["lstm"][0], d["lstm"][1][:, :-1].copy(), *d["lstm"][2:]),
     ValueError, r"'W'"),
    ("shape-val", "sparse", lambda k, d: sp_call(k, d, val=d["sp"]["val"][:-1].copy()),
     ValueError, r"'val'"),
    ("shape-jacobi-nonsquare", "jacobi", lambda k, d: k(A=np.zeros((3, 4)), B=np.zeros((3, 4)), T=1),
     ValueError, r"'A'"),
    ("param-N-contradicts", "gemm", lambda k, d: k(d["a"], d["b"], N=7), ValueError, r"N=7"),
    ("param-K-contradicts", "gemm", lambda k, d: k(d["a"], d["b"], K=6), ValueError, r"K=6"),
    ("param-N-contradicts-jacobi", "jacobi", lambda k, d: k(A=d["A"].copy(), B=d["B"].copy(), T=1, N=9),
     ValueError, r"N=9"),
    # --- params of the wrong kind
    ("param-float", "gemm", lambda k, d: k(d["a"], d["b"], N=4.0), TypeError, r"'N'.*float"),
    ("param-bool", "gemm", lambda k, d: k(d["a"], d["b"], N=True), TypeError, r"'N'.*bool"),
    ("param-str", "gemm", lambda k, d: k(d["a"], d["b"], N="4"), TypeError, r"'N'.*str"),
    ("param-None", "jacobi", lambda k, d: k(A=d["A"].copy(), B=d["B"].copy(), T=None),
     TypeError, r"'T'"),
    ("param-np-float", "jacobi", lambda k, d: k(A=d["A"].copy(), B=d["B"].copy(), T=np.float64(1)),
     TypeError, r"'T'"),
    ("param-array", "sparse", lambda k, d: sp_call(k, d, H=np.array([6])), TypeError, r"'H'"),
    ("param-not-inferable-H", "sparse", lambda k, d: sp_call(k, d, H=DROP), TypeError, r"'H'"),
    ("param-not-inferable-T", "jacobi", lambda k, d: k(A=d["A"].copy(), B=d["B"].copy()),
     TypeError, r"'T'"),
    ("param-not-inferable-N", "jacobi", lambda k, d: k(T=1), TypeError, r"'N'"),
    # --- layout and kind of object
    ("transposed", "gemm", lambda k, d: k(np.ascontiguousarray(d["a"].T).T, d["b"]),
     ValueError, r"'A'.*contiguous"),
    ("sliced", "gemm", lambda k, d: k(np.zeros((4, 10), np.float32)[:, ::2], d["b"]),
     ValueError, r"'A'.*contiguous"),
    ("fortran", "gemm", lambda k, d: k(d["a"], _f(d["b"])), ValueError, r"'B'.*contiguous"),
    ("reversed", "sparse", lambda k, d: sp_call(k, d, val=d["sp"]["val"][::-1]),
     ValueError, r"'val'"),
    ("list", "gemm", lambda k, d: k(d["a"].tolist(), d["b"]), TypeError, r"'A'.*list"),
    ("tuple", "gemm", lambda k, d: k(d["a"], tuple(map(tuple, d["b"]))), TypeError, r"'B'"),
    ("None", "gemm", lambda k, d: k(None, d["b"]), TypeError, r"'A'"),
    ("numpy-scalar", "gemm", lambda k, d: k(np.float32(1), d["b"]), TypeError, r"'A'"),
    ("python-float", "sparse", lambda k, d: sp_call(k, d, bias=1.0), TypeError, r"'bias'"),
    # --- outputs
    ("read-only-out", "jacobi", lambda k, d: k(A=_ro(d["A"]), B=d["B"].copy(), T=1),
     ValueError, r"'A'.*read-only"),
    ("read-only-out-gemm", "gemm", lambda k, d: k(d["a"], d["b"], C=_ro(np.zeros((4, 3), np.float32))),
     ValueError, r"'C'.*read-only"),
    ("out-is-in", "jacobi", lambda k, d: (lambda x: k(A=x, B=x, T=1))(d["A"].copy()),
     ValueError, r"'A'.*'B'|'B'.*'A'"),
    ("out-overlaps-in-views", "jacobi",
     lambda k, d: (lambda m: k(A=m[0:64].reshape(8, 8), B=m[60:124].reshape(8, 8), T=1))(np.zeros(128)),
     ValueError, r"overlap"),
    ("out-overlaps-input", "gemm",
     lambda k, d: (lambda m: k(m[:20].reshape(4, 5), d["b"], C=m[16:28].reshape(4, 3)))(
         np.zeros(32, np.float32)),
     ValueError, r"'C'.*'A'"),
    ("out-wrong-shape", "lstm", lambda k, d: k(*d["lstm"], h=np.zeros((3, 3, 3, 3), np.float32)),
     ValueError, r"'h'"),
    ("out-wrong-dtype", "gemm", lambda k, d: k(d["a"], d["b"], C=np.zeros((4, 3))),
     TypeError, r"'C'"),
    # --- CSR structure
    ("rowptr-non-monotone", "sparse",
     lambda k, d: sp_call(k, d, rowptr=_swap(d["sp"]["rowptr"], 2, 3)), ValueError,
     r"'rowptr'.*non-decreasing"),
    ("rowptr-last-past-nnz", "sparse",
     lambda k, d: sp_call(k, d, rowptr=_bump_last(d["sp"]["rowptr"], 1)), ValueError, r"'rowptr'"),
    ("rowptr-far-past-nnz", "sparse",
     lambda k, d: sp_call(k, d, rowptr=_bump_last(d["sp"]["rowptr"], 2**31 - 1 - int(d["sp"]["rowptr"][-1]))),
     ValueError, r"'rowptr'"),
    ("rowptr-negative-first", "sparse",
     lambda k, d: sp_call(k, d, rowptr=_set(d["sp"]["rowptr"], 0, -1)), ValueError, r"'rowptr'"),
    ("rowptr-all-negative", "sparse",
     lambda k, d: sp_call(k, d, rowptr=d["sp"]["rowptr"] - 10**6), ValueError, r"'rowptr'"),
    ("rowptr-negative-middle", "sparse",
     lambda k, d: sp_call(k, d, rowptr=_set(d["sp"]["rowptr"], 2, -5)), ValueError, r"'rowptr'"),
    ("colidx-past-inp", "sparse",
     lambda k, d: sp_call(k, d, colidx=_set(d["sp"]["colidx"], 3, d["sp"]["inp"].shape[1] - 1)),
     ValueError, r"'colidx'"),
    ("colidx-int32-max", "sparse",
     lambda k, d: sp_call(k, d, colidx=_set(d["sp"]["colidx"], 0, 2**31 - 1)), ValueError, r"'colidx'"),
    ("colidx-negative", "sparse",
     lambda k, d: sp_call(k, d, colidx=_set(d["sp"]["colidx"], 3, -1)), ValueError, r"'colidx'"),
    ("colidx-int32-min", "sparse",
     lambda k, d: sp_call(k, d, colidx=_set(d["sp"]["colidx"], 5, -2**31)), ValueError, r"'colidx'"),
    ("inp-too-small", "sparse",
     lambda k, d: sp_call(k, d, inp=np.ascontiguousarray(d["sp"]["inp"][:, :-3])), ValueError,
     r"out of range|'inp'|'colidx'"),
    ("H-too-large", "sparse", lambda k, d: sp_call(k, d, H=1000), ValueError, r"y=999|'H'"),
]


def _swap(x, i, j):
    x = x.copy()
    x[i], x[j] = x[j], x[i]
    assert x[i] > x[j]
    return x


def _bump_last(x, by):
    x = x.copy()
    x[-1] += by
    return x


def _set(x, i, v):
    x = x.copy()
    x[i] = v
    return x


@pytest.mark.parametrize("case", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_call_is_rejected_then_kernel_still_works(kernels, data, case):
    _, key, call, exc, match = case
    k = kernels[key]
    with pytest.raises(exc, match=match):
        call(k, data)
    GOOD[key](k, data)


def test_rejected_call_leaves_arrays_untouched(kernels, data):
    """Arguments are checked before native code runs: a call refused for one
    argument writes nothing into the others."""
    k = kernels["jacobi"]
    A, B = _ro(data["A"]), data["B"].copy()
    with pytest.raises(ValueError, match=r"'A'"):
        k(A=A, B=B, T=3)
    np.testing.assert_array_equal(B, data["B"])
    B = data["B"].copy()
    A = data["A"].astype(np.float32)
    with pytest.raises(TypeError, match=r"'A'"):
        k(A=A, B=B, T=3)
    np.testing.assert_array_equal(B, data["B"])
    C = np.full((4, 3), 7.0, np.float32)
    with pytest.raises(ValueError, match=r"'B'"):
        kernels["gemm"](data["a"], np.zeros((6, 3), np.float32), C=C)
    assert (C == 7.0).all()
    sp = kernels["sparse"]
    out = np.full(data["sp_ref"].shape, 3.0, np.float32)
    with pytest.raises(ValueError, match=r"'colidx'"):
        sp_call(sp, data, colidx=_set(data["sp"]["colidx"], 0, -1), out=out)
    assert (out == 3.0).all()


def test_numpy_integer_params_and_read_only_inputs_are_fine(kernels, data):
    k = kernels["gemm"]
    out = k(_ro(data["a"]), _ro(data["b"]), N=np.int64(4), M=np.int32(3))
    np.testing.assert_allclose(out, data["a"] @ data["b"], rtol=1e-4, atol=1e-4)


def test_separate_views_of_one_array_are_fine(kernels, data):
    k = kernels["jacobi"]
    m = np.zeros(128)
    A, B = m[:64].reshape(8, 8), m[64:].reshape(8, 8)
    A[...], B[...] = data["A"], data["B"]
    k(A=A, B=B, T=2)
    np.testing.assert_allclose(A, data["jac_ref"][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(B, data["jac_ref"][1], rtol=1e-10, atol=1e-12)


def test_output_passed_in_place(kernels, data):
    C = np.full((4, 3), np.nan, np.float32)
    out = kernels["gemm"](data["a"], data["b"], C=C)
    assert out is C
    np.testing.assert_allclose(C, data["a"] @ data["b"], rtol=1e-4, atol=1e-4)


def test_empty_sizes(kernels, data):
    k = kernels["gemm"]
    assert k(np.zeros((0, 5), np.float32), data["b"]).shape == (0, 3)
    out = k(np.zeros((4, 0), np.float32), np.zeros((0, 3), np.float32))
    assert out.shape == (4, 3) and (out == 0).all()


# ------------------------------------------------------------- CSR contents
def test_csr_all_rows_empty_returns_bias(kernels, data):
    k = kernels["sparse"]
    sp = data["sp"]
    cout = len(sp["bias"])
    out = k(inp=sp["inp"], rowptr=np.zeros(cout + 1, np.int32), colidx=np.zeros(0, np.int32),
            val=np.zeros(0, np.float32), bias=sp["bias"], H=sp["H"], W=sp["W"])
    expect = np.broadcast_to(sp["bias"][None, :, None, None], (sp["inp"].shape[0], cout, sp["H"], sp["W"]))
    np.testing.assert_array_equal(out, expect)


def test_csr_density_zero_weights_via_example(kernels):
    inp, w, bias = sparse_conv.random_inputs(n=1, cin=2, cout=3, h=4, w=5, density=0.0, seed=11)
    out = sparse_conv.run(kernels["sparse"], inp, w, bias)
    np.testing.assert_array_equal(out, np.broadcast_to(bias[None, :, None, None], out.shape))


def test_csr_rowptr_nonzero_but_colidx_empty(kernels, data):
    sp = data["sp"]
    cout = len(sp["bias"])
    rowptr = np.full(cout + 1, 3, np.int32)
    rowptr[0] = 0
    with pytest.raises(ValueError, match=r"'rowptr'"):
        kernels["sparse"](inp=sp["inp"], rowptr=rowptr, colidx=np.zeros(0, np.int32),
                          val=np.zeros(0, np.float32), bias=sp["bias"], H=sp["H"], W=sp["W"])


def test_csr_rowptr_not_starting_at_zero_is_fine(kernels, data):
    """A row-pointer array need not start at 0 (a slice of a larger CSR)."""
    sp = data["sp"]
    rowptr = sp["rowptr"].copy()
    rowptr[0] = rowptr[1]                 # row 0 empty now
    out = sp_call(kernels["sparse"], data, rowptr=rowptr)
    np.testing.assert_allclose(out[:, 1:], data["sp_ref"][:, 1:], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[:, 0], np.broadcast_to(sp["bias"][0], out[:, 0].shape))


# ------------------------------------------------- known gaps (library bugs)
def test_non_native_byte_order_is_rejected_or_correct(kernels, data):
    a = data["a"].astype(">f4")
    try:
        out = kernels["gemm"](a, data["b"])
    except (TypeError, ValueError) as exc:
        assert "'A'" in str(exc)
    else:
        np.testing.assert_allclose(out, data["a"] @ data["b"], rtol=1e-4, atol=1e-4)


def test_negative_param_names_the_param(kernels, data):
    with pytest.raises(ValueError, match=r"'H'|H=-1"):
        sp_call(kernels["sparse"], data, H=-1)


def test_param_out_of_int64_range(kernels, data):
    with pytest.raises(ValueError, match=r"'T'"):
        kernels["jacobi"](A=data["A"].copy(), B=data["B"].copy(), T=2**64)


# ------------------------------------------------------------------- torch
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_torch_float32_tensors(kernels, data, torch):
    a, b = torch.from_numpy(data["a"].copy()), torch.from_numpy(data["b"].copy())
    out = kernels["gemm"](a, b)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (4, 3)
    np.testing.assert_allclose(out.numpy(), data["a"] @ data["b"], rtol=1e-4, atol=1e-4)
    # an output tensor passed in place is written without a copy
    C = torch.full((4, 3), float("nan"))
    ptr = C.data_ptr()
    out = kernels["gemm"](a, b, C=C)
    assert out is C and C.data_ptr() == ptr
    np.testing.assert_allclose(C.numpy(), data["a"] @ data["b"], rtol=1e-4, atol=1e-4)
    # a view with a storage offset is used where it lies
    big = torch.zeros(10, 5)
    big[3:7] = a
    out = kernels["gemm"](big[3:7], b)
    np.testing.assert_allclose(out.numpy(), data["a"] @ data["b"], rtol=1e-4, atol=1e-4)


def test_torch_in_place_float64(kernels, data, torch):
    A, B = torch.from_numpy(data["A"].copy()), torch.from_numpy(data["B"].copy())
    pa, pb = A.data_ptr(), B.data_ptr()
    out = kernels["jacobi"](A=A, B=B, T=2)
    assert out["A"] is A and out["B"] is B and A.data_ptr() == pa and B.data_ptr() == pb
    np.testing.assert_allclose(A.numpy(), data["jac_ref"][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(B.numpy(), data["jac_ref"][1], rtol=1e-10, atol=1e-12)


def test_torch_mixed_with_numpy_returns_torch(kernels, data, torch):
    out = kernels["gemm"](torch.from_numpy(data["a"].copy()), data["b"])
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), data["a"] @ data["b"], rtol=1e-4, atol=1e-4)


def test_torch_bad_tensors(kernels, data, torch):
    k = kernels["gemm"]
    a, b = torch.from_numpy(data["a"].copy()), torch.from_numpy(data["b"].copy())
    with pytest.raises(TypeError, match=r"'A'.*float64"):
        k(a.double(), b)
    with pytest.raises(TypeError, match=r"'B'.*int32"):
        k(a, b.int())
    with pytest.raises(TypeError, match=r"'A'.*bfloat16"):
        k(a.bfloat16(), b)
    with pytest.raises(ValueError, match=r"'A'.*contiguous"):
        k(torch.randn(5, 4).t(), b)
    with pytest.raises(ValueError, match=r"'A'.*contiguous"):
        k(torch.randn(4, 10)[:, ::2], b)
    with pytest.raises(ValueError, match=r"'A'.*contiguous"):
        k(torch.randn(1, 5).expand(4, 5), b)
    with pytest.raises(ValueError, match=r"'A'.*meta"):
        k(torch.empty(4, 5, device="meta"), b)
    with pytest.raises(ValueError, match=r"'B'"):
        k(a, torch.zeros(6, 3))
    with pytest.raises(TypeError, match=r"'N'"):
        k(a, b, N=torch.tensor(4))
    with pytest.raises(ValueError, match=r"'C'.*contiguous"):
        k(a, b, C=torch.zeros(3, 4).t())
    A = torch.from_numpy(data["A"].copy())
    with pytest.raises(ValueError, match=r"overlap"):
        kernels["jacobi"](A=A, B=A, T=1)
    flat = torch.zeros(100, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"overlap"):
        kernels["jacobi"](A=flat[:64].view(8, 8), B=flat[30:94].view(8, 8), T=1)
    good_gemm(k, data)


def test_torch_requires_grad(kernels, data, torch):
    """A kernel without a registered backward refuses a tensor that requires
    grad (its result would silently carry no gradient); under no_grad the
    tensor is read as data (no copy, no error).  With a backward registered
    the call goes through it: tests/schedules/test_torch_ops.py."""
    a = torch.from_numpy(data["a"].copy()).requires_grad_(True)
    b = torch.from_numpy(data["b"].copy())
    with pytest.raises(RuntimeError, match="'A' require grad.*no backward"):
        kernels["gemm"](a, b)
    with torch.no_grad():
        out = kernels["gemm"](a, b)
    assert isinstance(out, torch.Tensor) and not out.requires_grad
    np.testing.assert_allclose(out.numpy(), data["a"] @ data["b"], rtol=1e-4, atol=1e-4)
    assert a.grad is None


def test_torch_neg_view_is_rejected_or_correct(kernels, data, torch):
    if not hasattr(torch.Tensor, "_neg_view"):
        pytest.skip("no _neg_view in this torch")
    a = torch.from_numpy(-data["a"])._neg_view()          # logically == data["a"]
    b = torch.from_numpy(data["b"].copy())
    try:
        out = kernels["gemm"](a, b)
    except (TypeError, ValueError) as exc:
        assert "'A'" in str(exc)
    else:
        np.testing.assert_allclose(out.numpy(), data["a"] @ data["b"], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------- crash proof
CHILD = r"""
import os, sys
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
import numpy as np
from examples import gemm, jacobi2d, sparse_conv
g = gemm.build().compile()
j = jacobi2d.build().compile()
s = sparse_conv.build().compile()
rng = np.random.default_rng(0)
a = rng.standard_normal((4, 5), dtype=np.float32)
b = rng.standard_normal((5, 3), dtype=np.float32)
A, B = jacobi2d.random_inputs(n=8, seed=1)
inp, w, bias = sparse_conv.random_inputs(n=1, cin=2, cout=3, h=5, w=4, density=0.5, seed=2)
rowptr, colidx, val = sparse_conv.to_csr(w)(5, 4)
sp = dict(inp=sparse_conv.pad_flat(inp), rowptr=rowptr, colidx=colidx, val=val, bias=bias, H=5, W=4)

def sp_with(**kw):
    d = dict(sp); d.update(kw); return s(**d)

def setv(x, i, v):
    x = x.copy(); x[i] = v; return x

ro = A.copy(); ro.flags.writeable = False
mem = np.zeros(128)
bad = [
    lambda: g(a),
    lambda: g(a, b, a),
    lambda: g(a, b, A=a),
    lambda: g(a, b, Z=1),
    lambda: g(a.astype(np.float64), b),
    lambda: g(a[None], b),
    lambda: g(a, np.zeros((6, 3), np.float32)),
    lambda: g(a, b, N=100000),
    lambda: g(a, b, K=10**6),
    lambda: g(a, b, N=-4),
    lambda: g(a, b, N=1.5),
    lambda: g(a.T, b),
    lambda: g(a.tolist(), b),
    lambda: g(a, b, C=np.zeros((40, 30), np.float32)),
    lambda: j(A=ro, B=B.copy(), T=1),
    lambda: j(A=A, B=A, T=1),
    lambda: j(A=mem[:64].reshape(8, 8), B=mem[32:96].reshape(8, 8), T=1),
    lambda: j(A=A.copy(), B=B.copy(), T=1, N=1000),
    lambda: sp_with(rowptr=setv(rowptr, -1, 10**9)),
    lambda: sp_with(rowptr=setv(rowptr, 0, -10**9)),
    lambda: sp_with(rowptr=rowptr[::-1].copy()),
    lambda: sp_with(colidx=setv(colidx, 0, 10**9)),
    lambda: sp_with(colidx=setv(colidx, 0, -10**9)),
    lambda: sp_with(H=10**6),
    lambda: sp_with(W=10**6),
    lambda: sp_with(inp=np.zeros((1, 3), np.float32)),
    lambda: sp_with(rowptr=rowptr.astype(np.int64)),
]
refused = 0
for k, call in enumerate(bad):
    try:
        call()
    except (TypeError, ValueError, IndexError) as exc:
        refused += 1
    else:
        print("accepted bad call", k)
out = g(a, b)
assert np.allclose(out, a @ b, rtol=1e-4, atol=1e-4)
print("refused", refused, "of", len(bad))
print("survived")
"""


def test_bad_calls_never_crash_the_interpreter():
    script = CHILD
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, f"child died with {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "survived" in r.stdout
    assert "accepted bad call" not in r.stdout, r.stdout


READ_ONLY_CHILD = """
import sys, warnings
import numpy as np
import torch
from examples import gemm
k = gemm.build().compile()
a = np.ones((4, 5), np.float32)
b = np.ones((5, 3), np.float32)
np.zeros((4, 3), np.float32).tofile({path!r})
with warnings.catch_warnings():
    warnings.simplefilter("ignore")      # torch: the given NumPy array is not writable
    c = torch.from_numpy(np.memmap({path!r}, np.float32, mode="r", shape=(4, 3)))
for out in (c, c.numpy()):
    try:
        k(a, b, C=out)
    except ValueError as exc:
        print("refused:", exc)
    else:
        print("accepted a read-only output")
print("survived")
"""


def test_read_only_torch_output_is_refused_not_a_segfault(tmp_path):
    """Issue 17: ``C=torch.from_numpy(np.memmap(p, mode="r"))`` (and its
    ``.numpy()``, which says writeable) wrote into read-only pages, SIGSEGV.
    Run in a child: it must end with a ValueError naming C, never a signal."""
    pytest.importorskip("torch", reason="torch is not installed")
    script = READ_ONLY_CHILD.format(path=str(tmp_path / "c.bin"))
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, f"child died with {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}"
    assert "survived" in r.stdout and "accepted" not in r.stdout, r.stdout
    refusals = [line for line in r.stdout.splitlines() if line.startswith("refused:")]
    assert len(refusals) == 2 and all("'C'" in m and "read-only" in m for m in refusals), r.stdout
