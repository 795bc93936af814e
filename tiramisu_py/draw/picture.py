"""A :class:`Picture`: the data a picture shows (``.data``) and the function
that renders it with matplotlib, which is optional and imported only when a
picture is rendered (``save``, ``_repr_png_``, ``_repr_svg_``, ``figure``).
Rendering uses matplotlib's object API (``matplotlib.figure.Figure``, no
pyplot, no global state), so it runs headless (Agg)."""
from __future__ import annotations

import io
from pathlib import Path

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
INSTALL = "pip install tiramisu_py[draw]"


def figure_class():
    """matplotlib's Figure class, or an ImportError that says how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("drawing a picture needs matplotlib, an optional dependency of "
                          f"tiramisu_py: {INSTALL} (or pip install matplotlib)") from None
    return Figure


class Picture:
    """A picture: ``data`` (what is drawn, as plain data: for an iteration
    space a :class:`~tiramisu_py.draw.space.SpaceData`) and its rendering.
    ``save(path)`` writes PNG, SVG or PDF by the path's suffix; in Jupyter it
    shows inline (``_repr_png_``, ``_repr_svg_``)."""

    def __init__(self, data, render):
        self.data = data
        self._render = render

    def __repr__(self):
        return f"<Picture of {self.data.title!r}>"

    def figure(self):
        """The rendered matplotlib Figure (a new one each call)."""
        return self._render(self.data, figure_class())

    def save(self, path, dpi=100):
        """Writes the picture to ``path`` (.png, .svg or .pdf) and returns the path."""
        path = Path(path)
        fmt = FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise ValueError(f"Picture.save: path={str(path)!r} must end in "
                             f"{', '.join(FORMATS)} (the format is taken from the suffix)")
        self.figure().savefig(path, format=fmt, dpi=dpi)
        return path

    def _bytes(self, fmt):
        buf = io.BytesIO()
        self.figure().savefig(buf, format=fmt, dpi=100)
        return buf.getvalue()

    def _repr_png_(self):
        return self._bytes("png")

    def _repr_svg_(self):
        return self._bytes("svg").decode()
