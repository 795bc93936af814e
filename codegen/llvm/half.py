"""LLVM backend: conversions between the 16-bit float storage types (their
bits in ``i16``) and float32, scalar or ``<w x ...>``, appended to the
function being built (``f``: :class:`codegen.llvm.lower.Func`)."""
from __future__ import annotations

from .lower import splat_lit, vt


def half_to_f32(f, x: str, fr: str, w) -> str:
    """bfloat16: its bits are float32's top half; float16: IEEE ``fpext``."""
    t16, t32, tf, th = vt("i16", w), vt("i32", w), vt("float", w), vt("half", w)
    if fr == "float16":
        h = f.op(f"bitcast {t16} {x} to {th}")
        return f.op(f"fpext {th} {h} to {tf}")
    y = f.op(f"zext {t16} {x} to {t32}")
    y = f.op(f"shl {t32} {y}, {splat_lit('16', 'i32', w)}")
    return f.op(f"bitcast {t32} {y} to {tf}")


def f32_to_half(f, x: str, to: str, w) -> str:
    """float16: IEEE ``fptrunc``; bfloat16: round to nearest even on the
    bits, a NaN kept quiet with its sign (the C backend's ``tp_cvt_f32_bf16``)."""
    t16, t32, tf, th = vt("i16", w), vt("i32", w), vt("float", w), vt("half", w)
    if to == "float16":
        h = f.op(f"fptrunc {tf} {x} to {th}")
        return f.op(f"bitcast {th} {h} to {t16}")

    def c(v):
        return splat_lit(str(v), "i32", w)
    u = f.op(f"bitcast {tf} {x} to {t32}")
    hi = f.op(f"lshr {t32} {u}, {c(16)}")
    odd = f.op(f"and {t32} {hi}, {c(1)}")
    r = f.op(f"add {t32} {u}, {c(0x7fff)}")
    r = f.op(f"add {t32} {r}, {odd}")
    r = f.op(f"lshr {t32} {r}, {c(16)}")
    qnan = f.op(f"or {t32} {hi}, {c(0x40)}")
    nan = f.op(f"fcmp uno {tf} {x}, {x}")
    r = f.op(f"select {vt('i1', w)} {nan}, {t32} {qnan}, {t32} {r}")
    return f.op(f"trunc {t32} {r} to {t16}")
