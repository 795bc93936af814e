"""The C target keeps its vector code: gcc 12.2's miscompile of if-converted
guarded loads is worked around only in kernels that have a guarded access
(codegen.toolchain.IFCVT_GUARD), so a scheduled softmax -- selects in the
vector math's clamps and in max, no guarded load -- is vector code on C.
Counted in the assembly gcc makes from the kernel's source, not timed."""
import platform
import re
import subprocess

import numpy as np
import pytest

import tiramisu_py as tp
from codegen import toolchain
from codegen.c.emit import guarded_access

X86 = platform.machine() in ("x86_64", "AMD64", "i686")


def softmax():
    """The README's style of schedule: parallel rows, 16-wide vectors,
    reassociated sums."""
    f = tp.Function("softmax", params=["N", "M"])
    i, j = f.var("i", 0, "N"), f.var("j", 0, "M")
    X = f.input("X", ("N", "M"), tp.float32)
    mx = f.computation("mx", [i], X[i, 0])
    mx[i].max(X[i, j])
    e = f.computation("e", [i, j], tp.exp(X[i, j] - mx[i]))
    s = f.computation("s", [i], 0.0)
    s[i] += e[i, j]
    out = f.computation("out", [i, j], e[i, j] / s[i])
    for c in (mx, mx.update, e, s, s.update, out):
        c.parallelize("i")
    mx.update.vectorize("j", 16, allow_reassociation=True)
    e.vectorize("j", 16)
    s.update.vectorize("j", 16, allow_reassociation=True)
    out.vectorize("j", 16)
    return f


def padded_copy():
    """``out[y, x] = 1 <= y < N + 1 ? data[y - 1, x] : 0``: the guarded copy
    gcc 12.2 vectorised wrongly (spatial_pack's padded input)."""
    f = tp.Function("padded", params={"N": 7, "W": 6})
    y, x = f.var("y", 0, 9), f.var("x", 0, "W")
    data = f.input("data", ("N", "W"), tp.float32)
    f.computation("out", [y, x], tp.select((y >= 1) & (y < 8), data[y - 1, x], 0.0))
    return f


def packed_float_ops(source: str) -> int:
    """The packed single-precision instructions on 256- or 512-bit registers
    in the assembly of ``source`` built with every flag of a kernel's build."""
    cc = toolchain.find_c_compiler()
    flags = [f for f in toolchain.compiler_flags(cc) if f != "-shared"]
    r = subprocess.run([*cc.argv, *flags, "-S", "-o", "-", "-x", "c", "-"], input=source,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return sum(1 for line in r.stdout.splitlines()
               if re.match(r"\s+v\w+ps\s", line) and re.search(r"%[yz]mm", line))


def test_only_a_kernel_with_a_guarded_load_turns_if_conversion_off():
    soft = softmax().compile(target="cpu")
    pad = padded_copy().compile(target="cpu")
    assert toolchain.IFCVT_GUARD not in soft.source
    assert toolchain.IFCVT_GUARD in pad.source
    assert not guarded_access(soft.lowered.body, soft.lowered.constants)
    d = np.arange(42, dtype=np.float32).reshape(7, 6) + 1
    want = np.concatenate([np.zeros((1, 6), np.float32), d, np.zeros((1, 6), np.float32)])
    np.testing.assert_array_equal(pad(d), want)


@pytest.mark.skipif(not X86, reason="counts x86 vector instructions (ymm/zmm registers)")
def test_scheduled_softmax_is_vector_code_on_c():
    k = softmax().compile(target="cpu")
    x = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(k(x), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    if "avx2" not in open("/proc/cpuinfo").read():
        pytest.skip("the host has no 256-bit vectors")
    # 66 with if-conversion on gcc 12.2 (AVX-512), 12 without it: the exp
    # polynomial, the max, the sums and the division as packed operations
    assert packed_float_ops(k.source) >= 40
