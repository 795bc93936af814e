"""Renders a :class:`~tiramisu_py.draw.space.SpaceData` with matplotlib (only
called when a picture is rendered; ``Figure`` is matplotlib's class).

One axes per panel: a marker per point (one marker shape per statement,
statements sharing a point side by side), filled by its parallel step (one
colour per wavefront), labelled with its execution order (0 first) while the
labels fit; dependence arrows by kind (flow solid black, anti dashed blue,
output dotted green, each bent its own way so that kinds between the same
points stay apart); tiles outlined; the refused dependence of an illegal
schedule in thick red, its two instances circled.  The figure's size follows
the space, so labels do not overlap; one legend for the figure."""
from __future__ import annotations

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
ARROW_STYLE = {"flow": ("black", "-", 0.0), "anti": ("tab:blue", "--", 0.3),
               "output": ("tab:green", ":", -0.3)}
CELL_IN = 0.55               # inches per unit of the axes when labelled (3 statements side by side)
MAX_FIG_IN = 14.0


def render_space(data, Figure):
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    extents = [_extent(p) for p in data.panels]
    n_stmts = max((len(p.statements) for p in data.panels), default=1)
    cell = CELL_IN * max(1.0, (n_stmts + 1) / 4 + 0.25)
    width = sum((e[1] - e[0] + 2) * cell for e in extents) + 2.5 + 0.8 * len(extents)
    height = max((e[3] - e[2] + 2) * cell for e in extents) + 2.0
    scale = min(1.0, MAX_FIG_IN / width, MAX_FIG_IN / height)
    labelled = scale == 1.0
    fig = Figure(figsize=(max(width * scale, 6.0), max(height * scale, 3.5)), layout="constrained")
    axs = fig.subplots(1, len(data.panels), squeeze=False)[0]
    handles = {}
    for ax, p in zip(axs, data.panels):
        n_steps = max((pt.step for pt in p.points), default=0) + 1     # colours per panel
        cmap = ListedColormap(_colours(n_steps))
        norm = BoundaryNorm([s - 0.5 for s in range(n_steps + 1)], n_steps)
        _draw_panel(ax, p, cmap, norm, labelled, handles, n_stmts)
        if n_steps > 1:
            cb = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax,
                              orientation="horizontal", shrink=0.8, aspect=30)
            cb.set_label("parallel step: one colour per step", fontsize=8)
            cb.ax.tick_params(labelsize=7)
            cb.set_ticks(_ticks(0, n_steps - 1))
    for kind, (colour, style, _) in ARROW_STYLE.items():
        if any(a.kind == kind for p in data.panels for a in p.arrows):
            handles[f"{kind} dependence"] = Line2D([], [], color=colour, linestyle=style)
    if any(pt.tile is not None for p in data.panels for pt in p.points):
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


def _extent(p):
    xs = [pt.xy[0] for pt in p.points] or [0]
    ys = [pt.xy[1] for pt in p.points] or [0]
    return min(xs), max(xs), min(ys), max(ys)


def _offset(p, n_stmts):
    """stmt -> x offset inside a unit cell (statements sharing a point side by side)."""
    k = len(p.statements)
    width = min(0.26, 0.8 / (k - 1)) if k > 1 else 0.0      # all inside the point's cell
    return {s: (i - (k - 1) / 2) * width for i, s in enumerate(p.statements)}


def _draw_panel(ax, p, cmap, norm, labelled, handles, n_stmts):
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Rectangle

    off = _offset(p, n_stmts)
    pos = {(pt.stmt, pt.xy): (pt.xy[0] + off[pt.stmt], pt.xy[1]) for pt in p.points}
    for tile in sorted({pt.tile for pt in p.points if pt.tile is not None}):
        xs = [pt.xy[0] for pt in p.points if pt.tile == tile]     # the cells, not the offsets:
        ys = [pt.xy[1] for pt in p.points if pt.tile == tile]     # tiles never overlap
        ax.add_patch(Rectangle((min(xs) - 0.45, min(ys) - 0.45), max(xs) - min(xs) + 0.9,
                               max(ys) - min(ys) + 0.9, fill=False, edgecolor="grey",
                               linestyle="--", linewidth=0.8))
    for a in p.arrows:
        colour, style, rad = ARROW_STYLE[a.kind]
        ax.add_patch(FancyArrowPatch(pos[a.src], pos[a.dst], arrowstyle="-|>", mutation_scale=7,
                                     color=colour, linestyle=style, linewidth=0.7,
                                     connectionstyle=f"arc3,rad={rad}", shrinkA=4, shrinkB=4))
    for k, s in enumerate(p.statements):
        pts = [pt for pt in p.points if pt.stmt == s]
        marker = MARKERS[k % len(MARKERS)]
        ax.scatter([pos[(s, pt.xy)][0] for pt in pts], [pt.xy[1] for pt in pts],
                   c=[pt.step for pt in pts], cmap=cmap, norm=norm, marker=marker, s=36,
                   edgecolors="black", linewidths=0.4, zorder=3)
        handles.setdefault(f"statement {s}", Line2D([], [], marker=marker, color="grey",
                                                     markeredgecolor="black", linestyle=""))
        if labelled:
            for pt in pts:
                x, y = pos[(s, pt.xy)]
                ax.text(x, y + 0.2, str(pt.time), fontsize=5.5, ha="center", va="bottom",
                        zorder=4)
    if p.highlight:
        h = p.highlight
        src, dst = pos[h["source"]], pos[h["sink"]]
        ax.add_patch(FancyArrowPatch(src, dst, arrowstyle="-|>", mutation_scale=12, color="red",
                                     linewidth=2.5, shrinkA=6, shrinkB=6, zorder=5))
        ax.scatter([src[0], dst[0]], [src[1], dst[1]], s=260, facecolors="none",
                   edgecolors="red", linewidths=2, zorder=5)
    x0, x1, y0, y1 = _extent(p)
    ax.set_xlim(x0 - 0.8, x1 + 0.8)
    ax.set_ylim(y0 - 0.8, y1 + 0.8)
    ax.set_xticks(_ticks(x0, x1))
    ax.set_yticks(_ticks(y0, y1))
    ax.tick_params(labelsize=7)
    ax.set_xlabel(p.axes[0], fontsize=9)
    ax.set_ylabel(p.axes[1] or "", fontsize=9)
    if not p.axes[1]:
        ax.set_yticks([])
    ax.set_title(_title(p), fontsize=8)


def _ticks(lo, hi):
    """Integer ticks inside the drawn range (none beyond it: the corner stays clear)."""
    step = max(1, -(-(hi - lo + 1) // 10))
    return list(range(lo, hi + 1, step))


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
    if p.highlight:
        lines.append(p.highlight["text"])
    return "\n".join(lines)
