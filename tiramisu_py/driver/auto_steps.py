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
    step is given (a buffer to declare, indices over a copy's loops)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


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
