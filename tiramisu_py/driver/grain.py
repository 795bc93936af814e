"""The parallel grain: a parallel loop (or region) whose work between two
synchronisations is below it runs on one thread (:mod:`codegen.regions`,
``run_small_serially``), as torch's ``at::parallel_for`` runs a range below its
grain size inline.  Work is counted in statement instances, an upper bound
from the loop bounds over the kernel's fixed parameters.

Where it comes from, first found:

* ``$TIRAMISU_PY_PARALLEL_GRAIN`` (an int >= 0; 0: every parallel loop stays
  parallel);
* this host's record in the tuning store (kind :data:`KIND`, keyed by the CPU
  model, the cores and the SIMD width), written by :func:`measure` through
  ``tiramisu-py tune grain`` only when an interleaved A/B confirms it;
* :data:`DEFAULT`.

The generated C says it where it made a loop serial (a comment naming the
work and the grain), and :func:`describe` says which grain a compile uses
and why."""
from __future__ import annotations

import os

from codegen import target

from .. import tuning

ENV = "TIRAMISU_PY_PARALLEL_GRAIN"
KIND = "parallel_grain"
# statement instances between synchronisations below which two threads lose
# to one: ~2^15 vector-lane stores (a few microseconds of work) cost less than
# a fork/join or a barrier on a quiet machine (see docs/performance.md)
DEFAULT = 1 << 15
_cache: dict = {}


def host_key() -> str:
    """The key of this host's record: CPU model, cores, SIMD width."""
    return f"{target.cpu_model()}|cores={target.cores()}|simd={target.vector_bits()}"


def _valid(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parallel_grain() -> int:
    """The grain a compile uses now (the module docstring)."""
    return _source()[0]


def describe() -> str:
    """Which grain a compile uses and where it comes from, in words."""
    value, where = _source()
    return f"parallel grain {value} statement instances ({where})"


def _source() -> tuple:
    text = os.environ.get(ENV)
    if text is not None and text.strip():
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(f"${ENV}={text!r}: expected a whole number of statement instances "
                             ">= 0 (0: every parallel loop stays parallel)")
        return value, f"${ENV}"
    gen = tuning.generation()
    hit = _cache.get(gen)
    if hit is None:
        rec = tuning.get(KIND, host_key(), valid=_valid)
        hit = (rec, "measured on this host, tuning store") if rec is not None \
            else (DEFAULT, "the default; `tiramisu-py tune grain` measures this host's")
        _cache.clear()
        _cache[gen] = hit
    return hit
