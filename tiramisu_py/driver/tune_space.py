"""The tuner's default space: :func:`candidates` of ``f``, ranked by a small
cost model of the host.

The auto-scheduler is run once on a copy (``probe``); the knobs its rules
consulted (:attr:`AutoScheduler.used`: a band's ``tile``, a time band's
``time_tile``, a register block's ``mr`` rows by ``nv`` vectors, a dot
product's ``jam`` rows, a reassociated reduction's ``sums`` registers, a
parallel block's ``block_vectors``) are the only ones varied, each around
the value the rules chose, plus the switches every schedule has
(``unroll``, ``vectorize``, ``fuse``, ``pad``; ``schedule="dynamic"`` on C;
``stream`` where a large output is streamed past the caches).

Each candidate gets a predicted cost relative to the auto schedule's
(:func:`predicted`), from what the host says of itself (vector registers,
lanes, L2): a register block's multiply-adds against the loads feeding them
(two FMA and two load ports a cycle, the block's accumulators, its vectors of
B and a broadcast in the registers, else spilled), a tile's footprint against
half of the L2 and its loop overhead, a time tile's halo, enough independent
chains of multiply-adds to cover their latency.  The model only orders the
candidates (the budget may end the search early: the likeliest go first);
measurement decides (:func:`tiramisu_py.tune`)."""
from __future__ import annotations

from codegen import target as host

from .auto_point_loops import l2_bytes
from .auto_schedule import SIZES, SIZES_1D, AutoScheduler

BLOCKS = ((6, 4), (4, 4), (8, 3), (5, 4), (7, 3), (12, 2), (14, 2), (3, 4), (8, 2), (4, 2),
          (2, 4), (6, 2), (5, 2), (3, 3))          # (the last three: blocks of 16 registers, AVX2)
FMA_PORTS = LOAD_PORTS = 2          # a cycle, on the hosts we tune (Zen 4/5, recent Intel)
FMA_LATENCY = 4                     # cycles
LOAD_SHARE = 0.25                   # what a load a multiply-add costs beside the ports (the L1's
                                    # bandwidth, shared with the tiles' copies and the next rows)
SWITCHES = ({"unroll": False}, {"vectorize": False}, {"fuse": False}, {"pad": False})
SWITCH_COST = {"unroll": 1.5, "vectorize": 4.0, "fuse": 1.2, "pad": 1.3, "schedule": 1.05,
               "stream": 1.1}


def probe(f, target, options=None) -> dict:
    """The knobs the auto-scheduler consulted on a copy of ``f`` (name ->
    the value its rules took)."""
    a = AutoScheduler(f.copy(), target, None, options)
    a.run()
    return dict(a.used)


def candidates(f, target) -> list:
    """``[(options, predicted), ...]``: the auto schedule's options first
    (``{}``, predicted 1.0), then the others by predicted cost (ties in the
    order made)."""
    used = probe(f, target)
    out = []
    for opts in _variants(used, target):
        if opts and opts not in [o for o, _ in out]:
            out.append((opts, predicted(opts, used)))
    out.sort(key=lambda c: c[1])
    return [({}, 1.0)] + out


def _variants(used, target):
    regs = host.vector_registers()
    tile = used.get("tile")
    if tile is not None:
        sizes = SIZES + (SIZES_1D if tile > SIZES[-1] else ())
        if "mr" in used:
            sizes = [t for t in sizes if tile // 2 <= t <= 2 * tile] + [tile + tile // 2]
        for t in sizes:
            if t != tile:
                yield {"tile": t}
    if "mr" in used:
        rows, cols = used.get("extents", (None, None))
        lanes = used.get("lanes", 1)
        for mr, nv in BLOCKS:
            if mr * nv + nv + 1 > regs or (mr, nv) == (used["mr"], used["nv"]) \
                    or not _whole(rows, mr) \
                    or not (nv == used["nv"] or _whole(cols, nv * lanes)):
                continue
            yield {"mr": mr, "nv": nv}
            for t in (tile // 2, 2 * tile) if tile else ():
                yield {"mr": mr, "nv": nv, "tile": t}
    for name, values in (("time_tile", (8, 32, 64)), ("jam", (4, 16)), ("sums", (1, 2, 8)),
                         ("block_vectors", (4, 16)), ("row_vectors", (1, 2))):
        if name in used:
            yield from ({name: v} for v in values if v != used[name])
    yield from SWITCHES
    if used.get("stream"):              # a large output streamed past the caches: or not
        yield {"stream": False}
    if target == "c":
        yield {"schedule": "dynamic"}


def _whole(extent, block):
    """A loop of ``extent`` (None: unknown) in blocks of ``block``: whole
    blocks, or so many that the partial one is a small part.  (A block that
    leaves a remainder in each of a tile's and the loop's ends multiplies
    the partial cases: a 3x3 convolution's 64 channels in rows of 7, tiles
    of 32, generate 7 MB of C in 70 s.)"""
    return extent is None or extent % block == 0 or extent >= 16 * block


def predicted(opts, used) -> float:
    """Cost of the candidate ``opts`` relative to the auto schedule's (1.0:
    as fast; the knobs ``used`` took their values there)."""
    cost = 1.0
    if "mr" in used:
        cost *= _block(opts.get("mr", used["mr"]), opts.get("nv", used["nv"])) \
            / _block(used["mr"], used["nv"])
    if "tile" in opts and used.get("tile"):
        dims = 2 if used["tile"] <= SIZES[-1] else 1
        cost *= _tile(opts["tile"], dims) / _tile(used["tile"], dims)
    if "time_tile" in opts:
        cost *= _time_tile(opts["time_tile"]) / _time_tile(used["time_tile"])
    for name in ("jam", "sums", "row_vectors"):
        if name in opts:
            cost *= _chains(opts[name]) / _chains(used[name])
    if "block_vectors" in opts:
        cost *= (1 + 2 / opts["block_vectors"]) / (1 + 2 / used["block_vectors"])
    for name, factor in SWITCH_COST.items():
        if name in opts and opts[name] in (False, "dynamic"):
            cost *= factor
    return round(cost, 3)


def _block(mr, nv):
    """Cycles per multiply-add of an ``mr`` x ``nv`` register block: its
    ``mr * nv`` FMAs a step against its ``mr`` broadcasts and ``nv`` loads
    (and the FMA's latency: each accumulator's next add waits on its last),
    plus :data:`LOAD_SHARE` of a cycle per load and multiply-add, four
    times slower when the block does not fit in the registers."""
    step = max(mr * nv / FMA_PORTS, (mr + nv) / LOAD_PORTS, FMA_LATENCY)
    spill = 4.0 if mr * nv + nv + 1 > host.vector_registers() else 1.0
    return spill * step / (mr * nv) * (1 + LOAD_SHARE * (mr + nv) / (mr * nv))


def _tile(t, dims):
    """A tile of side ``t``: its loop overhead and its footprint (three
    arrays of float32 ``t**dims``) over half of the L2."""
    footprint = 3 * 4 * t ** dims
    return (1 + 16 / t) * max(1.0, footprint / (l2_bytes() / 2))


def _time_tile(tt):
    return (1 + 4 / tt) * max(1.0, tt / 64)


def _chains(n):
    """Independent chains of adds: fewer than the FMA latency times its
    ports leave the units waiting."""
    return max(1.0, FMA_LATENCY * FMA_PORTS / max(n, 1)) * (1 + n / 64)


__all__ = ["BLOCKS", "candidates", "predicted", "probe"]
