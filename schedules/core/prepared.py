"""Prepared weights, made once per weight and never stale: the one cache every
operator that prepares a weight uses (the packed LSTM/GRU layouts as an
:class:`schedules.RNNWeights`, the CSR form of a dense or torch/scipy sparse
weight as a :class:`schedules.CSRWeights` with its derived conv layouts).

``prepared(kind, sources, make, extra)`` returns ``make(arrays)``'s value for
the caller's arrays ``sources`` (NumPy arrays or CPU torch tensors), made
once and reused while the arrays hold the same values; ``arrays`` are the
cache's own read-only copies of them, so a prepared form (and whatever it
derives later, lazily) never reads the caller's memory.

**The rule (never stale).**  An entry is found by the arrays' identity: per
array the data address, shape, strides and dtype, and for a torch tensor (on
the CPU: the only device cached) its ``_version`` (bumped by every in-place op on the tensor, a view
or a ``detach()`` of it: a changed version is a miss at once).  An inference
tensor (made under ``torch.inference_mode()``, as weights loaded for
deployment often are) has no version counter: its identity is the rest, and
the comparison below alone keeps its entries exact (an in-place write
inside ``inference_mode`` is seen by it as any other write).  An entry
found is used only if every array still holds, **bit for bit, the values it
held when the entry was made**: the entry keeps a copy of them and compares
(the bytes: libc's ``memcmp`` over contiguous buffers, split over the
host's cores with the GIL released, ``np.array_equal`` over same-size
unsigned views otherwise; so NaNs compare equal and -0.0 differs from 0.0).  The comparison is what makes the cache exact where
the version cannot see a write: ``param.data.mul_(0.5)`` (``.data`` has a
version counter of its own), a write through ``tensor.numpy()``, a NumPy
array written in place (NumPy arrays have no version), a freed array whose
address is reused by another.  A prepared form is a function of the values
(and shapes) alone, so equal values give the right answer whatever the
object.  Its cost is one read of the weights and of the copy per call,
memory-bound (:data:`COMPARE_THREADS` threads read both), against packing
them again on every call (the cost this cache removes).  Arrays on a GPU are not cached
(prepared on every call).

**Weights that training updates.**  A torch weight that an optimizer steps
in place reaches every lookup in a new version: its entries could never be
found again, and their copies (a whole model's weights, written into fresh
memory at each step) were most of the cost (ResNet-18 at batch 2: a
training step with an SGD update 306 ms against torch's 155).  So where
the sources of a lookup were found in a new version at :data:`VOLATILE`
lookups in a row, the value is made from read-only views of them and not
kept (no copy, no comparison), except at every :data:`REPROBE`-th such
lookup, whose value is kept as any other: a weight that stops changing is
found again from there on (and the entry of the values before a change,
which no lookup can find, is dropped at once).  A value made so is only as
good as the call that made it: no one keeps it.

**The cache's own arrays.**  A prepared value that later calls pass back
as a source (BatchNorm folded into a conv's weight, then packed for the
conv's kernel: :mod:`schedules.torch_fused_ops`) is registered by :func:`own`: no
one else holds it, so while it is alive and unchanged in version the
entries made from it are found by identity alone, with no copy kept and no
comparison (the values it was made from are compared once, where it is
made).  A registered array that dies frees its address for others: it is
then an ordinary source again, and the entries made from it are dropped.
So is the old place of a registered tensor whose storage moves (``set_``,
``param.data = ...``): what lies there next is not it, and is compared.
An inference tensor is never registered nor found by identity alone (no
version would see its in-place writes): it is always compared.

**Memory.**  Least recently used entries are evicted while the entries hold
more than ``LIMIT_BYTES`` (the copies plus the prepared forms as their
``nbytes`` reports them, a lazily packed form counted when it is made;
``$TIRAMISU_PY_PREPARED_MB``, default 1024 MiB, read at the first lookup,
not at import: a value that is not a finite number >= 0 is a ValueError
naming the variable there; a sparse copy counts its own
bytes: the full copy it was made from is dropped once the value is made,
unless the value holds it) or more than
``LIMIT_ENTRIES`` (256) entries.  One entry larger than the limit is made,
used and not kept.  :func:`clear` empties the cache; ``PREPARATIONS`` counts
the values made per ``kind`` (the tests count with it).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import sys
import threading
import weakref
from collections import Counter, OrderedDict
import numpy as np

from . import environ, sparse_copy, workers

ENV = "TIRAMISU_PY_PREPARED_MB"
DEFAULT_MB = 1024
LIMIT_BYTES = None              # None: $TIRAMISU_PY_PREPARED_MB, read at a lookup (limit_bytes)
LIMIT_ENTRIES = 256
PREPARATIONS: Counter = Counter()

_entries: OrderedDict = OrderedDict()      # key -> (copies, value)
_latest: OrderedDict = OrderedDict()       # (kind, extra, places) -> the key of the last lookup
_changes: dict = {}             # (kind, extra, places) -> lookups in a row that found a change
VOLATILE = 2                    # sources changed at this many lookups in a row: values not kept,
REPROBE = 16                    # but at every this many (kept, so a source now stable is cached)
_owned: dict = {}               # address, shape, strides, dtype -> (weakref, serial) of own()
_owned_keys: dict = {}          # serial of an owned array -> the keys of the entries made from it
_graveyard: list = []           # serials of owned arrays that died, their entries not yet dropped
_serials = itertools.count(1)
_lock = threading.RLock()
COMPARE_THREADS = workers.THREADS
# a lookup comparing more bytes than this in all splits them over the threads (below it one
# thread reads as fast: measured 28-30 GB/s either way from 0.6 to 9 MB)
SPLIT_BYTES = 16 << 20


def _memcmp():
    try:
        f = ctypes.CDLL(ctypes.util.find_library("c") or None).memcmp
    except (OSError, AttributeError):
        return None
    f.restype = ctypes.c_int
    f.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    return f


_MEMCMP = _memcmp()


def prepared(kind, sources, make, extra=(), slot=None):
    """``make(arrays)`` for the arrays ``sources`` (a sequence of NumPy arrays
    or torch tensors; ``None`` items allowed), reused while each array holds
    the values it held when it was made (see the module's rule); ``arrays``:
    read-only NumPy copies of ``sources``, in order.  ``extra``: the other
    arguments the value depends on (hashable).  Sources that cannot be cached
    (a GPU tensor, an object that is not an array) are passed as they are
    and the value is made on every call.  ``slot``: the caller's
    :class:`Slot` for this call site (the same ``kind`` and ``extra`` at
    every lookup through it), which finds the entry of its last lookup again
    at less cost."""
    limit = limit_bytes()
    if slot is not None and slot.key is not None:
        value = _again(slot, sources)
        if value is not _MISS:
            return value
    probes = [_probe(s) for s in sources]
    if any(p is False for p in probes):
        PREPARATIONS[kind] += 1
        return make(list(sources))
    # an owned source's serial number is part of its identity: another array
    # owned later at the same address is another source
    owned = [None if p is None or p.unversioned else _owner(p.place) for p in probes]
    key = (kind, extra, tuple(None if p is None else p.ident + (o,) if o else p.ident
                              for p, o in zip(probes, owned)))
    places = (kind, extra, tuple(None if p is None else p.place for p in probes))
    with _lock:
        _bury()
        entry = _entries.get(key)
        if entry is not None:
            copies, value = entry
            if _all_same([(p, c) for p, c, o in zip(probes, copies, owned) if not o]):
                _entries.move_to_end(key)
                _changes.pop(places, None)
                if slot is not None:
                    slot.remember(key, places, probes, entry, owned)
                return value
            del _entries[key]
        streak = _changed(places, key)
    PREPARATIONS[kind] += 1
    if entry is None and streak >= VOLATILE and streak % REPROBE:
        # a new version at every lookup (a weight that training updates at each step): made
        # from read-only views of the sources and not kept, so neither copied nor compared
        return make([None if p is None else _readonly(p.view()) for p in probes])
    views = [None if p is None else p.view() for p in probes]
    # (an owned source is kept by its owner: the entry holds no copy of it)
    copies = [None if v is None or o else _Copy(v) for v, o in zip(views, owned)]
    value = make([v if o or v is None else c.array for v, c, o in zip(views, copies, owned)])
    for c in copies:
        if c is not None:
            c.made()
    with _lock:
        _entries[key] = entry = _Entry(copies, value)
        if slot is not None:
            slot.remember(key, places, probes, entry, owned)
        for o in owned:
            if o:
                _owned_keys.setdefault(o, set()).add(key)
        _evict(limit)
    return value


class Slot:
    """A call site's memory of its last lookup (``prepared(..., slot=)``):
    the entry found or made, and what identified its sources (data address,
    shape, strides, dtype, version; an owned source's serial number).  A
    lookup of sources identified alike (read with seven attribute reads a
    source: a full probe takes twice as many, and the key's making as much
    again) whose entry the cache still holds compares their values with the
    copies as any lookup does (an owned source, still owned under the same
    serial, is not compared, as no lookup compares it), and returns the
    value; anything else takes the whole lookup.  Kept only for sources
    that are all plain contiguous CPU torch tensors with a version (none an
    inference tensor, no sparse copy).  The entry is referred to weakly:
    the cache alone keeps it (its bound, :func:`clear`)."""
    __slots__ = ("key", "places", "marks", "entry", "spans", "owners")

    def __init__(self):
        self.key = None

    def remember(self, key, places, probes, entry, owned):
        global _PLAIN
        copies = entry.copies
        if not _PLAIN:
            torch = _torch()
            _PLAIN = (torch.Tensor, torch.nn.Parameter) if torch is not None else ()
        ok = all(p is None or (p.contiguous and not p.unversioned and (o or c is not None)
                               and (c is None or c.sparse is None) and type(p.source) in _PLAIN)
                 for p, c, o in zip(probes, copies, owned))
        self.key = key if ok else None
        if ok:      # (the entry by a weak reference: the cache alone keeps it alive)
            self.places, self.entry = places, weakref.ref(entry)
            self.marks = [None if p is None else p.ident for p in probes]
            self.owners = list(owned)
            self.spans = [None if p is None or o else (c.address, p.nbytes)
                          for p, c, o in zip(probes, copies, owned)]


class _Entry:
    """An entry of the cache: the copies kept of its sources and its value
    (unpacked as a pair; weakly referenced by a :class:`Slot`)."""
    __slots__ = ("copies", "value", "__weakref__")

    def __init__(self, copies, value):
        self.copies, self.value = copies, value

    def __iter__(self):
        return iter((self.copies, self.value))

    def __getitem__(self, i):
        return (self.copies, self.value)[i]


_MISS = object()
_PLAIN = ()                     # torch.Tensor, torch.nn.Parameter, once torch is loaded


def _again(slot, sources):
    """The value of ``slot``'s entry where ``sources`` are those it
    remembers, in the same versions and holding the same values, else
    :data:`_MISS` (under the lock: a slot is remembered under it)."""
    with _lock:
        marks = slot.marks
        if slot.key is None or len(sources) != len(marks):
            return _MISS
        spans = []
        for s, m, span, serial in zip(sources, marks, slot.spans, slot.owners):
            if s is None or m is None:
                if s is not m:
                    return _MISS
                continue
            try:    # (a GPU tensor, a lazy negation: not alike; a subclass may raise)
                if s.data_ptr() != m[0] or s._version != m[4] or s.shape != m[1] \
                        or s.stride() != m[2] or s.dtype != m[3] or not s.is_cpu or s.is_neg():
                    return _MISS
            except (AttributeError, RuntimeError, TypeError):
                return _MISS
            if serial:      # (owned when remembered: found by identity while still owned so)
                if _owner(m[:4]) != serial:
                    return _MISS
                continue
            spans.append((m[0],) + span)
        _bury()
        entry = slot.entry()
        if entry is None or _entries.get(slot.key) is not entry:
            slot.key = None
            return _MISS
        if spans and not _equal_spans(spans):     # (the copies' addresses: alive while the entry is)
            return _MISS
        _entries.move_to_end(slot.key)
        _changes.pop(slot.places, None)
        return entry.value


def _changed(places, key):
    """After a miss of ``key``: how many lookups in a row have found the
    sources at ``places`` (the same places, kind and extra) in later
    versions of the same tensors (0: the first lookup, the same version
    again, or other arrays at those places); the entry of their last
    versions, which no later lookup finds, is dropped."""
    last = _latest.pop(places, None)
    _latest[places] = key
    while len(_latest) > 4 * LIMIT_ENTRIES:
        _latest.popitem(last=False)
    if last is None or last == key or not _later(key, last):
        _changes.pop(places, None)
        return 0
    _entries.pop(last, None)
    _changes[places] = streak = _changes.get(places, 0) + 1
    if len(_changes) > 4 * LIMIT_ENTRIES:
        _changes.clear()
    return streak


def _later(key, last):
    """Whether the sources of ``key`` are those of ``last`` in later torch
    versions (an in-place update: no version lower, one higher, the same
    owners), not other arrays that took their places."""
    later = False
    for new, old in zip(key[2], last[2]):
        if new is None or old is None or len(new) < 5:    # (a NumPy array: no version)
            if new != old:
                return False
            continue
        if new[4] is None or old[4] is None or new[4] < old[4] or new[5:] != old[5:]:
            return False
        later = later or new[4] > old[4]
    return later


def _readonly(view):
    """A read-only NumPy view of ``view`` (False stays False)."""
    if view is False:
        return view
    out = view.view()
    out.setflags(write=False)
    return out


def own(*arrays):
    """Registers ``arrays`` (torch tensors or NumPy arrays of a prepared
    value, held by no one but the cache's entry and its callers) as the
    cache's own: sources found by identity alone (see the module's rule)."""
    for a in arrays:
        probe = _probe(a)
        if probe is None or probe is False or probe.unversioned:
            continue
        k, serial = probe.place, next(_serials)
        _owned[k] = (weakref.ref(a, lambda r, k=k, serial=serial: _dead(r, k, serial)), serial)


def _dead(ref, place, serial):
    """An owned array died: its place is free, and the entries made from it,
    which no lookup can find any more (its serial number is in their keys),
    are dropped at the next lookup (a training step's flipped weights, made
    anew at each step, had kept their packed forms until the cache's limit;
    not here: a collection may run this while the entries are iterated)."""
    if _owned.get(place, (None,))[0] is ref:
        _owned.pop(place, None)
    _graveyard.append(serial)


def _bury():
    """Drops the entries of the owned arrays that died (under the lock)."""
    while _graveyard:
        for key in _owned_keys.pop(_graveyard.pop(), ()):
            _entries.pop(key, None)


def _owner(place):
    """The serial number of the live owned array at ``place``, or None."""
    ref, serial = _owned.get(place, (None, None))
    return serial if ref is not None and _still_at(ref(), place) else None


def _still_at(owned, place):
    """Whether the owned array ``owned`` (None: dead) still holds ``place``:
    a tensor's storage can move (``set_``, ``param.data = ...``), leaving
    its old place to whatever is allocated there next, which is not it."""
    if owned is None:
        return False
    if isinstance(owned, np.ndarray):           # (an array's buffer never moves)
        return True
    try:
        return owned.data_ptr() == place[0] and owned.shape == place[1] \
            and owned.stride() == place[2] and owned.dtype == place[3]
    except (AttributeError, RuntimeError, TypeError):
        return False


def clear():
    """Empties the cache (the counters stay)."""
    with _lock:
        _entries.clear()
        _latest.clear()
        _changes.clear()
        _owned_keys.clear()


def cached_bytes() -> int:
    """The bytes the entries hold now (copies and prepared forms)."""
    with _lock:
        return sum(_entry_bytes(e) for e in _entries.values())


def _entry_bytes(entry):
    copies, value = entry
    return sum(c.nbytes for c in copies if c is not None) + int(getattr(value, "nbytes", 0))


_env_limit = (None, DEFAULT_MB << 20)      # ($TIRAMISU_PY_PREPARED_MB's text, its bytes)


def limit_bytes() -> int:
    """The entries' bound in bytes: ``LIMIT_BYTES`` where set, else
    ``$TIRAMISU_PY_PREPARED_MB`` MiB (default 1024), or a ValueError naming
    the variable where it is not a finite number >= 0."""
    global _env_limit
    if LIMIT_BYTES is not None:
        return LIMIT_BYTES
    text = environ.get(ENV)
    if text != _env_limit[0]:
        try:
            mb = DEFAULT_MB if text is None or not text.strip() else float(text)
        except ValueError:
            mb = None
        if mb is None or not 0 <= mb < float("inf"):
            raise ValueError(f"${ENV}={text!r}: expected the prepared-weights cache's bound in "
                             f"MiB, a finite number >= 0 (default {DEFAULT_MB}; 0 keeps "
                             "nothing); set it so or unset it")
        _env_limit = (text, int(mb * 2 ** 20))
    return _env_limit[1]


def _evict(limit):
    total = sum(_entry_bytes(e) for e in _entries.values())
    while _entries and (total > limit or len(_entries) > LIMIT_ENTRIES):
        _, entry = _entries.popitem(last=False)
        total -= _entry_bytes(entry)


class _Probe:
    """What a lookup reads of one source: ``place`` (data address, shape,
    byte strides, dtype: the key of :func:`own`), ``ident`` (``place`` and,
    for a CPU torch tensor, its ``_version``; None for an inference tensor,
    ``unversioned``), whether it is
    C-contiguous, its bytes, and :meth:`view`, the NumPy view of it (made
    only on a miss: a hit reads the memory at ``address`` directly)."""
    __slots__ = ("source", "place", "ident", "address", "nbytes", "contiguous", "unversioned",
                 "_view")

    def view(self):
        if self._view is None:
            self._view = _host_view(self.source)
        return self._view


def _probe(s):
    """The :class:`_Probe` of ``s`` (None for None; False: not cacheable).
    A CPU torch tensor's is read with the fewest attribute reads (a folded
    conv's lookup probes six tensors per call: ``str(dtype)``, byte strides
    and ``device.type`` made each probe 2x dearer)."""
    if s is None:
        return None
    if isinstance(s, np.ndarray):
        return _view_probe(s)
    torch = _torch()
    if torch is None or not isinstance(s, torch.Tensor) or s.layout is not torch.strided \
            or not s.is_cpu:
        return False
    if s.is_conj() or s.is_neg() or s.is_complex():   # (what it shows: from a resolved copy)
        view = _host_view(s)
        return False if view is False else _view_probe(view)
    p = _Probe()
    p._view = None
    address = s.data_ptr()
    # (element strides and the dtype object: the same identity as byte strides and its name)
    p.place = (address, s.shape, s.stride(), s.dtype)
    p.unversioned = s.is_inference()        # (reading its _version raises)
    p.ident = p.place + (None if p.unversioned else s._version,)
    p.source, p.address, p.nbytes, p.contiguous = s, address, s.nbytes, s.is_contiguous()
    return p


def _torch():
    """The torch module once anything imported it (a probe never imports it), else None."""
    return sys.modules.get("torch")


def _view_probe(view):
    """The :class:`_Probe` of a NumPy array (its own view)."""
    p = _Probe()
    address = view.__array_interface__["data"][0]
    p.place = p.ident = (address, view.shape, view.strides, view.dtype.str)
    p.unversioned = False
    p.source = p._view = view
    p.address, p.nbytes, p.contiguous = address, view.nbytes, view.flags.c_contiguous
    return p


def _host_view(s):
    """A NumPy view of the torch tensor or NumPy array ``s`` (False: none)."""
    if isinstance(s, np.ndarray):
        return s
    try:
        s = s.detach().resolve_conj().resolve_neg()
        if str(s.dtype) == "torch.bfloat16":        # (NumPy has none: its bits)
            import torch
            s = s.view(torch.int16)
        return s.numpy()
    except (TypeError, RuntimeError):
        return False


class _Copy:
    """The read-only copy an entry keeps of a source: ``array`` and its
    ``address``, or for a large mostly-zero source a
    :class:`~schedules.core.sparse_copy.SparseCopy` (``sparse``; ``array``
    only until the value is made: :meth:`made`)."""
    __slots__ = ("array", "address", "sparse", "nbytes")

    def __init__(self, view):
        self.array = np.array(view, copy=True)
        self.array.setflags(write=False)
        self.address = self.array.__array_interface__["data"][0]
        self.sparse = sparse_copy.of(self.array)
        self.nbytes = self.array.nbytes

    def made(self):
        """The value is made: a sparse copy lets its full array go (the value
        may still hold it: it is then the value's)."""
        if self.sparse is not None:
            self.array = self.address = None
            self.nbytes = self.sparse.nbytes


def _all_same(pairs):
    """Bitwise equality of each source and the copy kept of it, for the
    (probe, copy) ``pairs`` of one lookup: contiguous buffers by libc's
    ``memcmp`` (or against a sparse copy by its helper; a source no longer
    contiguous misses), all of a lookup's bytes split evenly over
    :data:`COMPARE_THREADS` threads above :data:`SPLIT_BYTES` (so a stack of
    weights of 16 MB each is read by every core, not one tensor per call on
    one), the others by :func:`_same_values`."""
    spans, sparse = [], []
    for probe, copy in pairs:
        if probe is None or copy is None:
            if probe is not copy:
                return False
        elif copy.sparse is not None:
            if not probe.contiguous or probe.nbytes != copy.sparse.src_nbytes:
                return False
            sparse.append((probe.address, copy.sparse))
        elif probe.nbytes != copy.array.nbytes:
            return False
        elif _MEMCMP is not None and probe.contiguous:
            spans.append((probe.address, copy.address, probe.nbytes))
        elif not _same_values(probe, copy):
            return False
    return _equal_spans(spans, sparse)


def _same_values(probe, copy):
    """Bitwise equality of a (strided) source and its copy, by NumPy."""
    view, copy = probe.view(), copy.array
    if view is False or view.shape != copy.shape or view.dtype != copy.dtype:
        return False
    size = view.dtype.itemsize
    if view.dtype.kind in "fciub" and size in (1, 2, 4, 8):
        bits = np.dtype(f"u{size}")
        return bool(np.array_equal(view.view(bits), copy.view(bits)))
    return bool(np.array_equal(view, copy))


def _equal_spans(spans, sparse=()):
    """``memcmp(a, b, n) == 0`` for every ``(a, b, n)`` of ``spans``, and no
    difference between the source at ``address`` and the sparse copy of
    every ``(address, copy)`` of ``sparse``; above :data:`SPLIT_BYTES` read
    in all, in :data:`COMPARE_THREADS` runs of about equal bytes (spans cut
    anywhere, sparse copies between chunks; ctypes and cffi release the GIL
    during each call)."""
    parts = [(s, 0, s.chunks, s.chunk_bytes(0, s.chunks), a) for a, s in sparse]
    total = sum(n for _, _, n in spans) + sum(p[3] for p in parts)
    if total <= SPLIT_BYTES or COMPARE_THREADS == 1:
        return all(n == 0 or _MEMCMP(a, b, n) == 0 for a, b, n in spans) and \
            not any(s.differs(a, c0, c1) for s, c0, c1, _, a in parts)
    share = -(-total // COMPARE_THREADS)
    share = -(-share // 64) * 64
    runs, run, room = [], [], share
    for a, b, n in spans:
        done = 0
        while done < n:
            k = min(room, n - done)
            run.append((a + done, b + done, k))
            done, room = done + k, room - k
            if room == 0:
                runs.append(run)
                run, room = [], share
    for s, c, end, _, a in parts:
        while c < end:              # whole chunks up to the run's share (one at least)
            c1 = s.chunks_within(c, end, room)
            run.append((s, c, c1, a))
            room -= s.chunk_bytes(c, c1)
            c = c1
            if room <= 0:
                runs.append(run)
                run, room = [], share
    if run:
        runs.append(run)
    # (every run waited for: none reads the copies after the caller may drop them)
    return all(list(workers.pool().map(_run_equal, runs)))


def _run_equal(run):
    """One thread's part of :func:`_equal_spans`: memcmp spans ``(a, b, n)``
    and sparse ranges ``(copy, c0, c1, address)``."""
    for item in run:
        if len(item) == 3:
            a, b, n = item
            if _MEMCMP(a, b, n) != 0:
                return False
        elif item[0].differs(item[3], item[1], item[2]):
            return False
    return True
