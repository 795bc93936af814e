"""The call-time reads of an index array, in one vectorised C pass each: its
range (``tp_range_*``: min and max together, where NumPy reads the array
twice) and, for row pointers, the first position where it decreases
(``tp_descent_*``: a block is searched only when its vector pass saw a
decrease).  Built once per host (:class:`codegen.CHelper`); NumPy where no
C compiler builds it, or for an array the helper does not take (not
C-contiguous, not aligned, or of a dtype it has no loop for: uint64, bool).

Every kernel call reads its index arrays in full through here: a read-only
NumPy array can still be written (``torch.from_numpy`` ignores the flag),
so a fact remembered of its values could be stale (see
:func:`tiramisu_py.runtime.memory.seal`)."""
from __future__ import annotations

import numpy as np

from codegen import CHelper

# the dtypes with a loop: NumPy's name -> the C type
TYPES = {"int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
         "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t"}
BLOCK = 4096                    # elements a descent pass reads before it looks closer

SOURCE = "#include <stdint.h>\n" + "".join(rf"""
void tp_range_{name}(const {ctype} *a, int64_t n, int64_t *out)
{{
    {ctype} lo = a[0], hi = a[0];
    for (int64_t i = 1; i < n; i++) {{
        {ctype} v = a[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }}
    out[0] = (int64_t)lo;
    out[1] = (int64_t)hi;
}}

int64_t tp_descent_{name}(const {ctype} *a, int64_t n)
{{
    for (int64_t b = 0; b + 1 < n; b += {BLOCK}) {{
        int64_t e = b + {BLOCK} < n - 1 ? b + {BLOCK} : n - 1;
        int bad = 0;
        for (int64_t i = b; i < e; i++)
            bad |= a[i + 1] < a[i];
        if (bad)
            for (int64_t i = b; i < e; i++)
                if (a[i + 1] < a[i])
                    return i;
    }}
    return -1;
}}
""" for name, ctype in TYPES.items())
DECLARATION = "".join(f"void tp_range_{name}(const void *a, int64_t n, int64_t *out);\n"
                      f"int64_t tp_descent_{name}(const void *a, int64_t n);\n" for name in TYPES)

_HELPER = CHelper("tp_range_int8", SOURCE, DECLARATION)
_functions: dict = {}           # (kind, dtype) -> the helper's function, or None


def _function(kind, values):
    """The helper's ``tp_<kind>_<dtype>`` for ``values``, or None (NumPy then)."""
    flags = values.flags
    if not (flags.c_contiguous and flags.aligned):
        return None
    key = (kind, values.dtype)
    f = _functions.get(key, False)
    if f is False:
        name = values.dtype.name
        lib = _HELPER.lib() if name in TYPES and values.dtype.isnative else None
        f = _functions[key] = getattr(lib, f"tp_{kind}_{name}") if lib else None
    return f


def value_range(values):
    """``(min, max)`` of the NumPy array ``values`` as Python ints (None when
    empty)."""
    if values.size == 0:
        return None
    f = _function("range", values)
    if f is None:
        return int(values.min()), int(values.max())
    ffi = _HELPER.ffi()
    out = ffi.new("int64_t[2]")
    f(ffi.from_buffer(values), values.size, out)
    return out[0], out[1]


def first_descent(values):
    """The first ``k`` with ``values[k + 1] < values[k]`` of the 1-D NumPy
    array ``values``, or None where it never decreases."""
    if values.size < 2:
        return None
    f = _function("descent", values)
    if f is None:
        down = values[1:] < values[:-1]         # (no difference: it could overflow)
        return int(np.argmax(down)) if down.any() else None
    k = f(_HELPER.ffi().from_buffer(values), values.size)
    return None if k < 0 else k
