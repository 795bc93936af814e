"""Renders a :class:`~tiramisu_py.draw.space.SpaceData` with matplotlib (only
called when a picture is rendered; ``Figure`` is matplotlib's class).

One axes per panel: a marker per instance (one marker shape per statement,
statements sharing a point side by side), filled by its parallel step (one
colour per wavefront), labelled with its execution order (0 first) while the
labels fit; the blocks (one per value of the axes beyond the two drawn) side
by side on a light ground, in rows when there are many, each captioned;
dependence arrows by kind (flow solid black, anti dashed blue, output dotted
green, each bent its own way so that kinds between the same points stay
apart); tiles outlined; the refused dependence of an illegal schedule in
thick red, its two instances circled.  The figure's size follows the space,
so labels do not overlap; one legend for the figure."""
from __future__ import annotations

import math

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
ARROW_STYLE = {"flow": ("black", "-", 0.0), "anti": ("tab:blue", "--", 0.3),
               "output": ("tab:green", ":", -0.3)}
CELL_IN = 0.55               # inches per unit of the axes when labelled (3 statements side by side)
MAX_FIG_IN = 14.0
ORDER_FONT = 5.5             # points: the order labels
CHAR_IN = 0.046              # inches per digit of an order label
BLOCK_GAP = 2.4              # units between two blocks (room for the caption)


def render_space(data, Figure):
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    layouts = [Layout(p) for p in data.panels]
    n_stmts = max((len(p.statements) for p in data.panels), default=1)
    # an order label must fit between two markers side by side
    digits = len(str(max((len(p.points) for p in data.panels), default=1)))
    need = digits * CHAR_IN + 0.02
    sep = min(_separation(len(p.statements)) for p in data.panels) if data.panels else 1.0
    cell = max(CELL_IN * max(1.0, (n_stmts + 1) / 4 + 0.25), (need + 0.01) / sep)
    width = sum((lay.xlim[1] - lay.xlim[0] + 0.4) * cell for lay in layouts) + 2.5 \
        + 0.8 * len(layouts)
    height = max((lay.ylim[1] - lay.ylim[0] + 0.4) * cell for lay in layouts) + 2.0
    scale = min(1.0, MAX_FIG_IN / width, MAX_FIG_IN / height)
    labelled = cell * scale * sep >= need
    fig = Figure(figsize=(max(width * scale, 6.0), max(height * scale, 3.5)), layout="constrained")
    axs = fig.subplots(1, len(data.panels), squeeze=False)[0]
    handles = {}
    for ax, p, lay in zip(axs, data.panels, layouts):
        n_steps = max((pt.step for pt in p.points), default=0) + 1     # colours per panel
        cmap = ListedColormap(_colours(n_steps))
        norm = BoundaryNorm([s - 0.5 for s in range(n_steps + 1)], n_steps)
        _draw_panel(ax, p, lay, cmap, norm, labelled, handles)
        if n_steps > 1:
            cb = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax,
                              orientation="horizontal", shrink=0.8, aspect=30)
            cb.set_label("parallel step: one colour per step", fontsize=8)
            cb.ax.tick_params(labelsize=7)
            cb.set_ticks(_ticks(0, n_steps - 1))
    for kind, (colour, style, _) in ARROW_STYLE.items():
        if any(a.kind == kind for p in data.panels for a in p.arrows):
            handles[f"{kind} dependence"] = Line2D([], [], color=colour, linestyle=style)
    if any(p.tiles for p in data.panels):
        handles["tile"] = Patch(facecolor="none", edgecolor="grey", linestyle="--")
    if any(p.highlight for p in data.panels):
        handles["refused dependence"] = Line2D([], [], color="red", linewidth=2.5)
    fig.legend(list(handles.values()), list(handles), loc="outside right upper", fontsize=8)
    if data.title:
        fig.suptitle(data.title, fontsize=10)
    return fig


def _colours(n):
    from matplotlib import colormaps
    cmap = colormaps["viridis"]
    return [cmap(0.5 if n == 1 else k / (n - 1)) for k in range(n)]


def _extent(points):
    xs = [pt.xy[0] for pt in points] or [0]
    ys = [pt.xy[1] for pt in points] or [0]
    return min(xs), max(xs), min(ys), max(ys)


class Layout:
    """Where a panel's points go.  One block: at their (x, y), with the axes'
    ticks.  Several: each block over its own extent (a skew by a block's
    axis moves the points, not the block), in a grid (one row up to 4
    blocks, else about square), columns and rows as wide as their widest
    block, its ticks written beside it."""

    def __init__(self, p):
        self.blocks = sorted({pt.block for pt in p.points}, key=_block_key) or [()]
        self.extent = {b: _extent([pt for pt in p.points if pt.block == b])
                       for b in self.blocks}
        n = len(self.blocks)
        if n == 1:
            self.shift = {self.blocks[0]: (0, 0)}
            x0, x1, y0, y1 = self.extent[self.blocks[0]]
            self.xlim, self.ylim = (x0 - 0.8, x1 + 0.8), (y0 - 0.8, y1 + 0.8)
        else:
            w = {b: e[1] - e[0] for b, e in self.extent.items()}
            h = {b: e[3] - e[2] for b, e in self.extent.items()}
            mean_w, mean_h = (sum(w.values()) / n + BLOCK_GAP, sum(h.values()) / n + BLOCK_GAP)
            cols = n if n <= 4 else max(1, min(n, math.ceil(math.sqrt(n * mean_h / mean_w))))
            rows = -(-n // cols)
            col_w = [max(w[b] for b in self.blocks[c::cols]) for c in range(cols)]
            row_h = [max(h[b] for b in self.blocks[r * cols:(r + 1) * cols]) for r in range(rows)]
            self.shift = {}
            for k, b in enumerate(self.blocks):
                r, c = divmod(k, cols)
                left = sum(col_w[:c]) + c * BLOCK_GAP
                top = -(sum(row_h[:r]) + r * BLOCK_GAP)
                self.shift[b] = (left - self.extent[b][0], top - self.extent[b][3])
            self.xlim = (-1.7, sum(col_w) + (cols - 1) * BLOCK_GAP + 0.8)
            self.ylim = (-(sum(row_h) + (rows - 1) * BLOCK_GAP) - 1.3, 1.3)
        off = _offset(p)
        self.pos = {(pt.stmt, pt.instance): self.at(pt.block, pt.xy[0] + off[pt.stmt], pt.xy[1])
                    for pt in p.points}

    def at(self, block, x, y):
        dx, dy = self.shift[block]
        return x + dx, y + dy


def _separation(k):
    """Units between the markers of ``k`` statements side by side (all inside one cell)."""
    return min(0.26, 0.8 / (k - 1)) if k > 1 else 1.0


def _offset(p):
    """stmt -> x offset inside a unit cell (statements sharing a point side by side)."""
    k = len(p.statements)
    return {s: (i - (k - 1) / 2) * _separation(k) for i, s in enumerate(p.statements)}


def _block_key(block):
    """Blocks in order of their values; those of a statement without the axis first."""
    return tuple((v is not None, v or 0) for v in block)


def _caption(p, block):
    return ", ".join(f"no {name}" if v is None else f"{label} = {v}" if label == name else
                     f"{label}: {v}" for label, name, v in zip(p.blocks, p.block_axes, block))


def _draw_panel(ax, p, lay, cmap, norm, labelled, handles):
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Rectangle

    if len(lay.blocks) > 1:
        for b in lay.blocks:
            _draw_block(ax, p, lay, b)
    for t in p.tiles:                   # the cells, not the offsets: tiles never overlap
        tx, ty = lay.at(t.block, t.box[0], t.box[1])
        ax.add_patch(Rectangle((tx - 0.45, ty - 0.45), t.box[2] - t.box[0] + 0.9,
                               t.box[3] - t.box[1] + 0.9, fill=False, edgecolor="grey",
                               linestyle="--", linewidth=0.8))
    pos = lay.pos
    block = {(pt.stmt, pt.instance): pt.block for pt in p.points}
    for a in p.arrows:
        if block[a.src] != block[a.dst]:
            continue                    # between blocks: counted in the title, not drawn
        colour, style, rad = ARROW_STYLE[a.kind]
        ax.add_patch(FancyArrowPatch(pos[a.src], pos[a.dst], arrowstyle="-|>", mutation_scale=7,
                                     color=colour, linestyle=style, linewidth=0.7,
                                     connectionstyle=f"arc3,rad={rad}", shrinkA=4, shrinkB=4))
    for k, s in enumerate(p.statements):
        pts = [pt for pt in p.points if pt.stmt == s]
        marker = MARKERS[k % len(MARKERS)]
        xy = [pos[(s, pt.instance)] for pt in pts]
        ax.scatter([x for x, _ in xy], [y for _, y in xy],
                   c=[pt.step for pt in pts], cmap=cmap, norm=norm, marker=marker, s=36,
                   edgecolors="black", linewidths=0.4, zorder=3)
        handles.setdefault(f"statement {s}", Line2D([], [], marker=marker, color="grey",
                                                     markeredgecolor="black", linestyle=""))
        if labelled:
            for pt, (x, y) in zip(pts, xy):
                ax.text(x, y + 0.2, str(pt.time), fontsize=ORDER_FONT, ha="center", va="bottom",
                        zorder=4)
    if p.highlight:
        h = p.highlight
        src, dst = pos[h["source"]], pos[h["sink"]]
        ax.add_patch(FancyArrowPatch(src, dst, arrowstyle="-|>", mutation_scale=12, color="red",
                                     linewidth=2.5, shrinkA=6, shrinkB=6, zorder=5))
        ax.scatter([src[0], dst[0]], [src[1], dst[1]], s=260, facecolors="none",
                   edgecolors="red", linewidths=2, zorder=5)
    ax.set_xlim(*lay.xlim)
    ax.set_ylim(*lay.ylim)
    if len(lay.blocks) > 1:                 # each block's ticks are written beside it
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        x0, x1, y0, y1 = lay.extent[lay.blocks[0]]
        ax.set_xticks(_ticks(x0, x1))
        ax.set_yticks(_ticks(y0, y1) if p.axes[1] else [])
    ax.tick_params(labelsize=7)
    ax.set_xlabel(p.axes[0], fontsize=9)
    ax.set_ylabel(p.axes[1] or "", fontsize=9)
    ax.set_title(_title(p), fontsize=8)


def _draw_block(ax, p, lay, b):
    """A block's ground, caption and ticks."""
    from matplotlib.patches import Rectangle
    x0, x1, y0, y1 = lay.extent[b]
    bx, by = lay.at(b, x0, y0)
    ax.add_patch(Rectangle((bx - 0.6, by - 0.6), x1 - x0 + 1.2, y1 - y0 + 1.2,
                           facecolor="0.94", edgecolor="none", zorder=0))
    ax.text(bx + (x1 - x0) / 2, by + y1 - y0 + 0.65, _caption(p, b), fontsize=7.5,
            ha="center", va="bottom")
    for v in _ticks(x0, x1):
        ax.text(bx + v - x0, by - 0.7, str(v), fontsize=6, ha="center", va="top", color="0.3")
    if p.axes[1]:
        for v in _ticks(y0, y1):
            ax.text(bx - 0.7, by + v - y0, str(v), fontsize=6, ha="right", va="center",
                    color="0.3")


def _ticks(lo, hi):
    """Integer ticks inside the drawn range (none beyond it: the corner stays clear)."""
    step = max(1, -(-(hi - lo + 1) // 10))
    return list(range(lo, hi + 1, step))


def _crossing(p):
    block = {(pt.stmt, pt.instance): pt.block for pt in p.points}
    return sum(block[a.src] != block[a.dst] for a in p.arrows)


def _title(p):
    lines = [p.title] if p.title else []
    marks = sorted({f"{loop} {m}" for s in p.marks for loop, m in p.marks[s].items()})
    if marks:
        lines.append("tags: " + ", ".join(marks))
    steps = sorted({loop for loop, _ in p.step_loops.values() if loop})
    if steps:
        tagged = any(t for _, t in p.step_loops.values())
        lines.append(f"steps: loops outside {', '.join(steps)}"
                     + ("" if tagged else " (no dependence carried)"))
    blocks = {pt.block for pt in p.points}
    if p.blocks and len(blocks) == 1:
        lines.append(_caption(p, blocks.pop()))        # one block: no caption on it
    crossing = _crossing(p)
    if crossing:
        lines.append(f"{crossing} dependences between blocks (not drawn)")
    if p.omitted:
        lines.append("not drawn: " + ", ".join(p.omitted) + " (other loops)")
    if p.highlight:
        lines.append(p.highlight["text"])
    return "\n".join(lines)
