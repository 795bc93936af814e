"""The commands :mod:`tiramisu_py.driver.auto_schedule` applies, as records:
a :class:`Step` prints as the Python a user would write and gives itself to
a Function; :class:`Applied` is the list the search returns."""
from __future__ import annotations


class StmtRef:
    """A statement in a printed command: ``f.computations['C'].update``."""

    def __init__(self, f, name):
        self.name = name
        self.text = _ref_text(f, name)

    def __repr__(self):
        return self.text


class Code:
    """An argument printed as Python over ``f`` and evaluated so when the
    step is given (a buffer to declare, indices over a copy's loops).
    ``data``: the same as plain data (:func:`new_buffer`, :func:`store_index`),
    what a tuning record holds; :func:`code_of` makes the Code again from it,
    checked, so that a record never holds text to evaluate."""

    def __init__(self, text, data=None):
        self.text, self.data = text, data

    def __repr__(self):
        return self.text


_DTYPE_OF = ("computations", "buffers")
_OPS = ("", "-", "%")


def new_buffer(name, shape, dtype_of):
    """``f.buffer(name, shape, f.<kind>[owner].dtype)``: ``dtype_of`` is
    ``(kind, owner)``, kind "computations" or "buffers"."""
    kind, owner = dtype_of
    return Code(f"f.buffer({name!r}, {tuple(shape)}, f.{kind}[{owner!r}].dtype)",
                {"buffer": name, "shape": list(shape), "dtype_of": [kind, owner]})


def store_index(comp, terms):
    """The index ``[...]`` over ``f.computations[comp].vars``: each term 0,
    or ``(k, op, c)``: ``vars[k]`` alone (op ""), ``vars[k] - c`` or
    ``vars[k] % c`` (``c`` > 0; for "-" any int: a negative one prints as
    ``+``)."""
    ref = f"f.computations[{comp!r}]"
    text = ["0" if t == 0 else f"{ref}.vars[{t[0]}]" + (
        "" if not t[1] else f" + {-t[2]}" if t[1] == "-" and t[2] < 0 else f" {t[1]} {t[2]}")
        for t in terms]
    return Code(f"[{', '.join(text)}]",
                {"index_of": comp, "terms": [0 if t == 0 else list(t) for t in terms]})


def code_of(data):
    """The Code a record's ``data`` describes; ValueError when it is not
    what :func:`new_buffer` or :func:`store_index` make."""
    def name(x):
        if not (isinstance(x, str) and x.isidentifier()):
            raise ValueError(f"not a name: {x!r}")
        return x

    def count(x, least=0):
        if type(x) is not int or (least is not None and x < least):
            raise ValueError(f"not an int{'' if least is None else f' >= {least}'}: {x!r}")
        return x
    if isinstance(data, dict) and set(data) == {"buffer", "shape", "dtype_of"}:
        kind = data["dtype_of"]
        if not (isinstance(kind, list) and len(kind) == 2 and kind[0] in _DTYPE_OF) \
                or not isinstance(data["shape"], list) or not data["shape"]:
            raise ValueError(f"not a recorded buffer: {data!r}")
        return new_buffer(name(data["buffer"]), [count(n, 1) for n in data["shape"]],
                          (kind[0], name(kind[1])))
    if isinstance(data, dict) and set(data) == {"index_of", "terms"} \
            and isinstance(data["terms"], list):
        terms = []
        for t in data["terms"]:
            if t == 0 and type(t) is int:
                terms.append(0)
            elif isinstance(t, list) and len(t) == 3 and t[1] in _OPS:
                terms.append((count(t[0]), t[1], count(t[2], 1 if t[1] == "%" else None)))
            else:
                raise ValueError(f"not a recorded index term: {t!r}")
        return store_index(name(data["index_of"]), terms)
    raise ValueError(f"not recorded code: {data!r}")


def loop_names(st):
    """The loop names of a statement's schedule state, outermost first."""
    return [lp.name for lp in st.loops]


def _ref_text(f, name):
    for c in f.computations.values():
        if c.name == name:
            return f"f.computations[{name!r}]"
        for k, u in enumerate(c.updates):
            if u.name == name:
                return f"f.computations[{c.name!r}]." + \
                    ("update" if k == len(c.updates) - 1 else f"updates[{k}]")
    raise KeyError(name)


def statement(f, name):
    for c in f.computations.values():
        if c.name == name:
            return c
        for u in c.updates:
            if u.name == name:
                return u
    raise KeyError(name)


class Step:
    """One command the auto-scheduler applied: ``str(step)`` is the Python
    that applies it to a Function named ``f``; ``step.apply(f)`` gives it."""

    def __init__(self, f, stmt, verb, *args, **kwargs):
        self.stmt, self.verb, self.args, self.kwargs = stmt, verb, args, kwargs
        self.receiver = "f" if stmt is None else _ref_text(f, stmt)

    def __str__(self):
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.receiver}.{self.verb}({', '.join(parts)})"

    __repr__ = __str__

    def apply(self, f):
        obj = f if self.stmt is None else statement(f, self.stmt)
        args = [[statement(f, r.name) for r in a] if isinstance(a, list)
                and a and isinstance(a[0], StmtRef) else
                statement(f, a.name) if isinstance(a, StmtRef) else
                eval(a.text, {"f": f}) if isinstance(a, Code) else a    # noqa: S307
                for a in self.args]
        getattr(obj, self.verb)(*args, **self.kwargs)


class Applied(list):
    """The Steps applied, in order (a list); ``notes``: the groups of
    statements the search left as they were, and why."""

    def __init__(self):
        super().__init__()
        self.notes = []
