"""LLVM backend: a vector load whose lanes read a 32-element window of one
row, ``A[..., x + d % c]`` (``x`` the same in every lane, ``d`` varies,
``0 < c <= 32``), as two loads of the window and one two-table permute
(AVX-512 ``vpermi2ps`` / ``vpermi2d``) instead of a gather.

The lanes' index ``d % c`` (floor modulo: in ``[0, c)`` whatever ``d``)
names the element of the window ``A[..., x : x + 32]`` each lane takes; the
window's two 16-element halves are loaded with a mask that keeps them in
the row (``0 <= x + k < row extent``), so no lane reads past the row, and a
lane's index past the row (outside the program's meaning) reads 0.  A
gather costs about a cycle an element on the hosts we measured (0.3 ns on a
Zen 5 core); the permute one instruction for 16 lanes, with the window's
loads hoisted out of loops that do not move ``x``.  This is how the sparse
recurrent products are written (:mod:`schedules.weights.window`): 16 rows
in the lanes, their nonzeros in a window of 32 columns, a byte each for
the column within the window."""
from __future__ import annotations

from .. import ir
from .lower import MEMT

WINDOW = 32                      # two 16-lane tables
LANES = 16
_WIDE = ("int32", "int64")
_PERMUTE = {"float": "llvm.x86.avx512.vpermi2var.ps.512",
            "i32": "llvm.x86.avx512.vpermi2var.d.512"}


def _terms(e) -> list:
    """The summands of an integer ``+`` chain (int32 or int64, through
    conversions between them: an index whose sum wrapped around would lie
    outside the array, which no valid program reads)."""
    if isinstance(e, ir.Cast) and e.dtype in _WIDE and isinstance(e.a, ir.Binary):
        e = e.a
    if isinstance(e, ir.Binary) and e.op == "add" and e.dtype in _WIDE:
        return _terms(e.a) + _terms(e.b)
    if isinstance(e, ir.Binary) and e.op == "sub" and e.dtype in _WIDE:
        return _terms(e.a) + [ir.Binary("sub", ir.Const(0, e.dtype), e.b, e.dtype)]
    return [e]


def _window_term(e) -> bool:
    """``d % c`` with a constant ``0 < c <= WINDOW`` (the index within the window)."""
    if isinstance(e, ir.Cast) and ir.is_int(e.dtype):
        e = e.a
    in_range = isinstance(e, ir.Binary) and ir.is_int(e.dtype) and (
        e.op == "floormod" or e.op == "mod" and e.a.dtype.startswith("uint"))
    return in_range and isinstance(e.b, ir.Const) and isinstance(e.b.value, int) \
        and not isinstance(e.b.value, bool) and 0 < e.b.value <= WINDOW


def window_load(low, a, index, idx):
    """The permuted window (an SSA ``<16 x T>``) for the load of ``a`` at
    ``index`` (IR) / ``idx`` (its lowered indices), or None where the load
    is not of that form (or the host has no AVX-512): then it is a gather.
    ``low``: the expression lowering (``vec``, ``f``, ``m``, ``index``, ``addr``)."""
    mt = MEMT[a.dtype]
    if low.vec is None or low.vec.w != LANES or mt not in _PERMUTE or not low.host.avx512 \
            or len(idx) < 2 or any(i.kind != "u" for i in idx[:-1]) or idx[-1].kind != "v":
        return None
    terms = _terms(index[-1])
    inside = [t for t in terms if _window_term(t)]
    if len(inside) != 1:
        return None
    rest = [t for t in terms if t is not inside[0]]
    x = ir.Const(0, "int64")
    for t in rest:
        x = ir.Binary("add", x, t if t.dtype == "int64" else ir.Cast(t, "int64"), "int64")
    base = low.index(x)
    lane = low.index(inside[0])
    if base.kind != "u" or lane.kind != "v":
        return None
    f, m = low.f, low.m
    vty, name = f"<{LANES} x {mt}>", _PERMUTE[mt]
    m.declare(name, vty, [vty, f"<{LANES} x i32>", vty])
    mload = f"llvm.masked.load.v{LANES}{'f32' if mt == 'float' else 'i32'}.p0"
    m.declare(mload, vty, ["ptr", f"<{LANES} x i1>", vty])
    extent = a.strides[-2]                    # the row's length (row-major strides)
    at = low.addr(a, list(idx[:-1]) + [base], False)
    # the window's lanes inside the row, as bits: [max(0, -x), min(32, extent - x))
    m.declare("llvm.smin.i64", "i64", ["i64", "i64"])
    m.declare("llvm.smax.i64", "i64", ["i64", "i64"])

    def clamped(v, name):                     # v clamped to [0, WINDOW]
        v = f.op(f"call i64 @llvm.smax.i64(i64 {v}, i64 0)")
        return f.op(f"call i64 @llvm.smin.i64(i64 {v}, i64 {WINDOW})", name)
    lo = clamped(f.op(f"sub i64 0, {base.t}"), "wlo")
    hi = clamped(f.op(f"sub i64 {extent}, {base.t}"), "whi")
    below = f.op(f"sub i64 {f.op(f'shl i64 1, {hi}')}, 1")
    under = f.op(f"sub i64 {f.op(f'shl i64 1, {lo}')}, 1")
    bits = f.op(f"and i64 {below}, {f.op(f'xor i64 {under}, -1')}", "wbits")
    halves = []
    for half in (0, 1):
        part = bits if half == 0 else f.op(f"lshr i64 {bits}, {LANES}")
        ok = f.op(f"bitcast i16 {f.op(f'trunc i64 {part} to i16')} to <{LANES} x i1>", "inrow")
        p = at if half == 0 else f.op(f"getelementptr {mt}, ptr {at}, i64 {LANES}", "p")
        halves.append(f.op(f"call {vty} @{mload}(ptr align 4 {p}, <{LANES} x i1> {ok}, "
                           f"{vty} zeroinitializer)", "win"))
    sel = f.op(f"trunc <{LANES} x i64> {lane.t} to <{LANES} x i32>", "wlane")
    return f.op(f"call {vty} @{name}({vty} {halves[0]}, <{LANES} x i32> {sel}, {vty} {halves[1]})",
                "wperm")
