"""Seeded differential tests of this wave's ``auto_schedule`` rules on
random programs.  The rules sized by the caches (streamed outputs: ``Storage.stream_outputs``; tiles and blocks from
the L2) on random elementwise and stencil programs, on a host whose caches
are a few lines (L2 256 B, L3 1 KiB) so that they fire on small sizes: each
auto-scheduled kernel, on both targets, computes the unscheduled kernel's
values bit for bit, its printed steps replay to the same code, and some
programs are streamed and some not (a later statement reading the output, a
size within the cache).  And ``transposed_rows``' vectors of rows in flight
on random batched matrix-vector products.  No timing is asserted."""
from __future__ import annotations

import random

import numpy as np
import pytest

import tiramisu_py as tp

PROGRAMS = 24                     # (21 of the 48 kernels streamed when written)


@pytest.fixture
def tiny_caches(monkeypatch):
    from codegen import target
    monkeypatch.setattr(target, "cache_sizes", lambda: {(2, "Unified"): 256,
                                                        (3, "Unified"): 1024})


def program(seed):
    """``(build, inputs)``: a random program of one to three statements."""
    R = random.Random(seed)
    n, m = R.randint(3, 40), R.randint(3, 70)
    dtype = R.choice([tp.float32, tp.float64])
    lo = R.choice([0, 1])
    reads = [(R.randint(-lo, lo), R.randint(-lo, lo), R.choice([1.0, 0.5, 2.0]))
             for _ in range(R.randint(1, 4))]
    read_again = R.random() < 0.3
    second = R.random() < 0.3

    rows, cols = (f"N - {lo}", f"M - {lo}") if lo else ("N", "M")

    def build():
        f = tp.Function(f"fz{seed}", params={"N": n, "M": m})
        i, j = f.var("i", lo, rows), f.var("j", lo, cols)
        A = f.input("A", ("N", "M"), dtype)
        expr = sum((c * A[i + di, j + dj] for di, dj, c in reads), 0.0)
        out = f.computation("out", [i, j], expr)
        if second:
            i2, j2 = f.var("i2", 0, "N"), f.var("j2", 0, "M")
            f.computation("sq", [i2, j2], A[i2, j2] * A[i2, j2])
        if read_again:
            k, l2 = f.var("k", lo, rows), f.var("l", lo, cols)
            f.computation("twice", [k, l2], out[k, l2] * 2.0)
        return f
    A = np.random.default_rng(seed).standard_normal((n, m)).astype(dtype.name)
    return build, {"A": A}


def _values(result):
    return {k: np.asarray(v) for k, v in result.items()} if isinstance(result, dict) \
        else {"out": np.asarray(result)}


def test_cache_sized_rules_on_random_programs(tiny_caches):
    streamed = plain = 0
    for seed in range(PROGRAMS):
        build, inputs = program(seed)
        want = _values(build().compile("c")(**inputs))
        for target in ("c", "llvm"):
            f = build()
            steps = f.auto_schedule(target=target)
            text = "\n".join(map(str, steps))
            k = f.compile(target)
            got = _values(k(**inputs))
            for name, w in want.items():
                np.testing.assert_array_equal(got[name], w,
                                              err_msg=f"seed {seed} {target}:\n{text}")
            g = build()
            exec(text, {"f": g})                       # the printed steps, pasted
            assert g.compile(target).source == k.source, f"seed {seed} {target}"
            if "store_nontemporal" in text:
                streamed += 1
            else:
                plain += 1
    assert streamed and plain, (streamed, plain)


def test_rows_in_flight_on_random_matrix_vector_products():
    """``transposed_rows`` with 1, 2 or 4 vectors of rows (the rows a
    multiple of the lanes times 2 to 8): the auto-scheduled kernel adds each
    row in the program's order, so its values are the unscheduled kernel's
    up to the C compiler's contraction of a multiply and an add into one
    (``-ffp-contract=fast``, gcc's default: in the vector loop, not in the
    scalar one), a rounding of the last bit."""
    from codegen import loops
    R = random.Random(7)
    seen = set()
    for seed in range(10):
        dtype = R.choice([tp.float32, tp.float64])
        lanes = loops.host_lanes(dtype.bits)
        n, m, nb = lanes * R.choice([2, 3, 4, 6, 8]), lanes * R.randint(1, 4), R.randint(1, 3)

        def build():
            f = tp.Function(f"mv{seed}", params={"NB": nb, "N": n, "M": m})
            b, i, j = f.var("b", 0, "NB"), f.var("i", 0, "N"), f.var("j", 0, "M")
            A, x = f.input("A", ("NB", "N", "M"), dtype), f.input("x", ("NB", "M"), dtype)
            y = f.computation("y", [b, i], 0.0, dtype=dtype)
            y[b, i] += A[b, i, j] * x[b, j]
            return f
        rng = np.random.default_rng(seed)
        A = rng.standard_normal((nb, n, m)).astype(dtype.name)
        x = rng.standard_normal((nb, m)).astype(dtype.name)
        f = build()
        text = "\n".join(map(str, f.auto_schedule(target="c")))
        split = [s for s in text.splitlines() if ".split('i1', " in s]
        seen.add(len(split))
        want = np.asarray(build().compile("c")(A=A, x=x))
        eps = 1e-12 if dtype == tp.float64 else 1e-5          # (sums that cancel: absolute)
        np.testing.assert_allclose(np.asarray(f.compile("c")(A=A, x=x)), want, rtol=eps,
                                   atol=eps * np.abs(want).max(), err_msg=f"seed {seed}:\n{text}")
    assert seen == {0, 1}, seen                # both one vector of rows and several


def test_panels_packed_for_random_products(uncontracted):
    """``pack_panels`` on seeded random products ``C[i, j] += A[i, k] *
    B[k, j]`` (sizes 72 to 200, B transposed or not, float32 or float64):
    where it fires, the B tile read along the register block's columns is
    copied per reduction tile; either way the auto-scheduled kernel adds in
    the program's order (the unscheduled kernel's values bit for bit on C,
    built without contraction; within rounding on LLVM), and its printed
    steps replay to the same code.  The rule fires on some and not on others
    (a row shorter than the column tile, a transposed B packed otherwise)."""
    R = random.Random(11)
    fired = skipped = 0
    for seed in range(4):
        dtype = R.choice([tp.float32, tp.float64])
        n, m, kk = (R.randint(72, 200) for _ in range(3))
        if seed == 1:
            m = 48                                   # one column tile: no panel
        trans = seed == 2

        def build():
            f = tp.Function(f"mm{seed}", params={"N": n, "M": m, "K": kk})
            i, j, k = f.var("i", 0, "N"), f.var("j", 0, "M"), f.var("k", 0, "K")
            A = f.input("A", ("N", "K"), dtype)
            B = f.input("B", ("M", "K") if trans else ("K", "M"), dtype)
            C = f.computation("C", [i, j], 0.0, dtype=dtype)
            C[i, j] += A[i, k] * (B[j, k] if trans else B[k, j])
            return f
        rng = np.random.default_rng(seed)
        args = {"A": rng.standard_normal((n, kk)).astype(dtype.name),
                "B": rng.standard_normal((m, kk) if trans else (kk, m)).astype(dtype.name)}
        want = np.asarray(build().compile("c")(**args))
        f = build()
        text = "\n".join(map(str, f.auto_schedule(target="c")))
        panel = "name='C_update_B_panel'" in text
        fired, skipped = fired + panel, skipped + (not panel)
        if panel:
            assert "f.computations['C_update_B_panel'].vectorize(" in text, text
        k = f.compile("c")
        np.testing.assert_array_equal(np.asarray(k(**args)), want, err_msg=f"seed {seed}:\n{text}")
        g = build()
        exec(text, {"f": g})
        assert g.compile("c").source == k.source, f"seed {seed}"
        eps = 1e-12 if dtype == tp.float64 else 1e-4
        np.testing.assert_allclose(np.asarray(f.compile("llvm")(**args)), want, rtol=eps,
                                   atol=eps * np.abs(want).max(), err_msg=f"seed {seed}")
    assert fired and skipped, (fired, skipped)


def test_a_short_row_is_tiled_whole_for_the_padded_copy(uncontracted):
    """A register-blocked convolution whose rows (40 columns) fit in four of
    its blocks' widths gets column tiles of the whole row, whatever the
    host's lanes: a part of the row made its padded copy's index along the
    columns a remainder (``% 18``) that no vector loads (Zen 3: 650 ms for
    8x64x56x56); the result is the unscheduled kernel's."""
    import re
    from bench import peers_ours
    s = {"N": 2, "CI": 16, "CO": 16, "H": 12, "W": 40}
    f = peers_ours.build("conv2d", s)
    text = "\n".join(map(str, f.auto_schedule(target="c")))
    tile = re.search(r"update\.tile\('n', 'o', 'y', 'x', (\d+), (\d+), (\d+), (\d+)\)", text)
    assert tile and int(tile.group(4)) >= 40, text
    assert "cache_at('inp[" in text, text
    rng = np.random.default_rng(3)
    args = {"inp": rng.standard_normal((2, 16, 12, 40)).astype(np.float32),
            "w": rng.standard_normal((16, 16, 3, 3)).astype(np.float32)}
    want = np.asarray(peers_ours.build("conv2d", s).compile("c")(**args))
    np.testing.assert_array_equal(np.asarray(f.compile("c")(**args)), want)
