"""A tuner's records, by name: listed, described and forgotten the same way
for every tuner (``tiramisu-py tune --list``, ``--forget [WHAT]``).

Each tuner describes its record kind once (:class:`RecordKind`: the store's
kind, a title, how one record reads in words, which names ``--forget WHAT``
matches); the command line lists and forgets the kinds it is given, in
order.  Nothing here is registered globally: a caller passes the kinds it
means (the language's command line its own, ``tiramisu-py`` every one)."""
from __future__ import annotations

from . import database


class RecordKind:
    """The records of one kind in the store.

    ``describe(key, value)``: a record in words; ``names(key, value)``: the
    names ``forget(WHAT)`` removes it by; ``listed(key)``: whether a key is
    a record of its own (not an alias of another, which is removed with
    it but not counted); ``order(key, value)``: the listing's sort key;
    ``forgotten()``: called after records were removed (a tuner's caches)."""

    def __init__(self, kind, title, describe, *, names=None, listed=None, order=None,
                 forgotten=None):
        self.kind, self.title = kind, title
        self._describe = describe
        self._names = names or (lambda key, value: ())
        self._listed = listed or (lambda key: True)
        self._order = order or (lambda key, value: key)
        self._forgotten = forgotten or (lambda: None)

    def records(self) -> list:
        """``[(key, value)]`` of the listed records (any host), in order."""
        found = [(k, v) for k, v in database.store().records(self.kind).items()
                 if self._listed(k)]
        return sorted(found, key=lambda kv: self._order(*kv))

    def describe(self, key, value) -> str:
        return self._describe(key, value)

    def lines(self) -> list:
        """The listing: a title line, then one line per record."""
        found = self.records()
        return [f"{self.title}s ({len(found)}):"] + ["  " + self.describe(k, v) for k, v in found]

    def forget(self, what=None) -> int:
        """Removes the records named ``what`` (every record of the kind,
        damaged ones too, when None); returns how many listed records went."""
        s = database.store()
        found = s.records(self.kind)
        if what is None:
            s.forget(self.kind)
            gone = list(found)
        else:
            gone = [k for k, v in found.items() if what in self._names(k, v)]
            for k in gone:
                s.forget(self.kind, k)
        self._forgotten()
        return sum(1 for k in gone if self._listed(k))


def listing(kinds) -> list:
    """The lines of ``--list``: each kind's, in order."""
    return [line for kind in kinds for line in kind.lines()]


def forget(kinds, what=None) -> list:
    """``--forget [WHAT]``: removes the records of each kind named ``what``
    (all when None); returns one line per kind ("forgot 2 ... record(s)")."""
    return [f"forgot {kind.forget(what)} {kind.title}(s)" for kind in kinds]
