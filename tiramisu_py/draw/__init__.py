"""Pictures of iteration spaces, dependences and schedules (``f.draw()``,
``tp.draw_compare``, ``IllegalScheduleError.draw()``) and of sparsity
patterns.  The data (:mod:`.space`) is computed with isl from the model,
which it reads and never changes; the rendering (:mod:`.render`) needs
matplotlib, an optional dependency (``pip install tiramisu_py[draw]``),
imported only when a picture is rendered.  Beside ``driver/``."""
from .picture import Picture
from .pictures import draw_compare, draw_function, draw_violation
from .space import Arrow, Panel, Point, SpaceData

__all__ = ["Picture", "draw_compare", "draw_function", "draw_violation", "Arrow", "Panel",
           "Point", "SpaceData"]
