"""A solver: one algorithm + schedule for one operator's problems (see
:mod:`schedules.registry` for the design)."""
from __future__ import annotations

from . import tuned as _tuned


WEIGHT_REASONS = {
    "dense": "needs a dense w; a sparse w takes 'auto' or 'sparse'",
    "csr": ("needs a sparse w (CSRWeights, torch sparse CSR, scipy CSR): it skips zeros, so "
            "0 * inf is never computed; algo='sparse' forces it"),
}


class Solver:
    """One way to compute a problem of operator ``op``.

    ``name`` is what ``algo=`` (``schedule=`` for the RNNs) calls it;
    ``target`` "cpu" or "cuda" (the problem's ``device``); ``version`` goes
    into the find key (bump it when the schedule changes what is fastest).
    ``numerics`` names the arithmetic, bit for bit: solvers of one op with
    the same ``numerics`` give the same IEEE result on every input (the same
    products, summed in the same order from the same start, so the same
    rounding, overflow, and ``0 * inf`` / NaN propagation).  With "auto" the
    find step offers only solvers of the first applicable one's ``numerics``
    (:func:`schedules.core.find.candidates`): which is fastest never changes
    the answer.  "ordered" (the default): every product, in the reduction's
    order, added one by one to the bias.
    Subclasses define :meth:`build` and :meth:`run`, and narrow
    :meth:`applicable`; each solver is its own class (what several share
    is a base class or a function, never a branch on ``name``)."""
    op = ""
    name = ""
    target = "cpu"
    version = 1
    numerics = "ordered"
    weight = None       # the weight kind it takes ("dense", "csr"); None: any
    activations = ()    # the activations its kernels apply in their epilogue (the others:
    #                     applied after the run, schedules.core.arrays.activate)
    residual = False    # whether its kernels add a conv's residual in their epilogue (else
    #                     added after a run of the problem without epilogue)

    def applicable(self, p):
        """True, or the reason (a phrase after the solver's name, such as
        "needs groups=1 (got groups=2)") why this solver cannot compute ``p``:
        the target, then the weight kind (:data:`WEIGHT_REASONS`); subclasses
        add their own conditions after these."""
        if p.device != self.target:
            return ("has no CUDA schedule" if self.target == "cpu"
                    else "runs with target='cuda' (or device arrays) only")
        if self.weight is not None and p.weight != self.weight:
            return WEIGHT_REASONS[self.weight]
        return True

    def numerics_for(self, p) -> str:
        """The ``numerics`` of this solver on ``p`` (what the find step
        compares): ``numerics``, unless a subclass computes ``p`` otherwise
        (a solver run per group says so for ``groups > 1``)."""
        return self.numerics

    def params(self, p) -> dict:
        """The default schedule parameters for ``p`` (from :func:`schedules.host`)."""
        return {}

    def space(self, p) -> dict:
        """The tunable parameters: ``{name: [values]}`` (empty: none), each
        value legal for ``p`` on its own; the tuner
        (:mod:`schedules.tuner`) times them one parameter at a time from
        the defaults."""
        return {}

    def with_values(self, p, values: dict) -> dict:
        """:meth:`build`'s params: the defaults with ``values`` (names of
        :meth:`space`) in place."""
        return {**self.params(p), **values}

    def tuned(self, p, values=None) -> dict:
        """The params :meth:`run` builds with: ``values`` (a tuner's
        candidate), else the values recorded for ``p`` on this host
        (:func:`schedules.core.tuned.recorded`), over the defaults."""
        values = self.chosen(p, values)
        return self.with_values(p, values) if values else self.params(p)

    def chosen(self, p, values=None) -> dict:
        """``values``, else the values recorded for ``p`` on this host ({}: none)."""
        return _tuned.recorded(self, p) if values is None else values

    def runner(self, p):
        """A callable ``args -> result`` that computes ``p`` as :meth:`run`
        does, with the params :meth:`tuned` gives now: what the call memo
        (:mod:`schedules.core.call_memo`) keeps.  The default calls
        :meth:`run`; a solver whose ``run`` only calls one kernel returns
        that kernel's call."""
        return lambda args: self.run(p, args)

    def build(self, p, params):
        """The scheduled ``tiramisu_py.Function`` of ``p``."""
        raise NotImplementedError

    def run(self, p, args, values=None):
        """Computes ``p`` on the checked arguments ``args`` (the kernel compiled
        once per process, the arguments laid out as it takes them) with the
        params of :meth:`tuned` (``values``: a tuner's candidate)."""
        raise NotImplementedError

    def result(self, p, args, values=None):
        """:meth:`run`'s result completed to ``p``'s (what the find step and
        the tuner time): the result itself, unless a base computes part of
        ``p`` around its kernels (a convolution's residual and activation
        where they are not in the kernel's epilogue)."""
        return self.run(p, args) if values is None else self.run(p, args, values)

    def solve(self, p, args):
        """What the public call returns (the last step of
        :func:`schedules.core.find.solve`): :meth:`run`'s result, with what
        the operator's calls add around the kernel's (the bases of the
        convolution and recurrent solvers: an activation, a dropped batch
        axis, a refused gradient)."""
        return self.run(p, args)

    def __repr__(self):
        return f"{self.name} ({self.target})"


def reasons(solvers, p) -> str:
    """Every solver and whether it applies to ``p``: "direct (cpu): applies;
    im2col (cpu): needs groups=1 (got groups=2); ..."."""
    out = []
    for s in solvers:
        why = s.applicable(p)
        out.append(f"{s!r}: {'applies' if why is True else why}")
    return "; ".join(out)
