"""Pictures of data: the sparsity pattern of a matrix (e.g. a CSR weight,
rows by output channel).  :func:`sparsity_picture` takes the nonzero
positions as plain data; matplotlib renders them only when asked."""
from __future__ import annotations

from dataclasses import dataclass

from .picture import Picture


@dataclass
class PatternData:
    """What a sparsity picture draws: the nonzero ``(row, column)`` positions
    of a ``shape[0] x shape[1]`` matrix; ``groups``: columns per group (e.g.
    KH*KW per input channel: a line between groups), or None."""
    title: str
    shape: tuple
    nonzeros: list
    row_label: str
    col_label: str
    groups: int | None = None


def sparsity_picture(rows, cols, shape, title, row_label="row", col_label="column",
                     groups=None, path=None):
    """A :class:`Picture` of the nonzeros at ``rows[k], cols[k]``."""
    data = PatternData(title, tuple(int(d) for d in shape),
                       sorted({(int(r), int(c)) for r, c in zip(rows, cols)}),
                       row_label, col_label, groups)
    pic = Picture(data, render_pattern)
    if path is not None:
        pic.save(path)
    return pic


def render_pattern(data, Figure):
    n_rows, n_cols = data.shape
    width = min(12.0, max(4.0, 2.0 + n_cols * 0.08))
    height = min(10.0, max(3.0, 1.5 + n_rows * 0.08))
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.subplots()
    if data.nonzeros:
        r, c = zip(*data.nonzeros)
        size = max(1.0, min(30.0, 2000.0 / max(n_rows, n_cols)))
        ax.scatter(c, r, s=size, marker="s", color="black", linewidths=0)
    if data.groups and data.groups < n_cols:
        for x in range(data.groups, n_cols, data.groups):
            ax.axvline(x - 0.5, color="tab:blue", linewidth=0.4)
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)              # row 0 at the top, as a matrix
    ax.set_xlabel(data.col_label, fontsize=9)
    ax.set_ylabel(data.row_label, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.set_title(data.title, fontsize=9)
    return fig
