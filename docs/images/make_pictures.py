"""Makes the pictures of the README and the user guide (docs/guide/pictures.md):

    python3 docs/images/make_pictures.py

Each is drawn by the public API at small sizes (matplotlib needed:
``pip install tiramisu_py[draw]``) and kept small (< 150 KB).
* ``lstm_wavefront.png``: examples/lstm.py's multilayer LSTM (its c_step
  and h_step: z has a gate loop of its own), program order beside the
  wavefront (time skewed by the layer, interchanged outward, the layer loop
  parallel): each colour is one parallel step.
* ``jacobi1d_tiled.png``: a Jacobi 1-D stencil, program order beside the
  schedule skewed (i + t) and tiled 2 x 4: the arrows turn forward, tiles
  outlined.
* ``jacobi2d_time_tiled.png``: examples/jacobi2d.py time-tiled as
  ``f.auto_schedule()`` does it, at tiles 2 x 4 x 4: one block per t, every
  instance of both statements, tiles outlined.
* ``refused_interchange.png``: the interchange the legality check refuses
  for that stencil, the pair of instances it names circled.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

import tiramisu_py as tp  # noqa: E402
from examples import jacobi1d, jacobi2d, lstm  # noqa: E402

HERE = Path(__file__).resolve().parent
DPI = 72


def main():
    f = lstm.wavefront(lstm.build())
    f.draw(loops=("t", "l"), params={"NL": 3, "T": 5, "B": 1, "H": 1}, compare=True,
           statement=["c_step", "h_step"]).save(HERE / "lstm_wavefront.png", dpi=DPI)
    f = jacobi1d.skewed_tiled(jacobi1d.build(), 2, 4)
    f.draw(params={"T": 4, "N": 8}, compare=True).save(HERE / "jacobi1d_tiled.png", dpi=DPI)
    f = jacobi2d.time_tiled(jacobi2d.build())
    f.draw(params={"T": 3, "N": 5}).save(HERE / "jacobi2d_time_tiled.png", dpi=DPI)
    f = jacobi1d.build()
    f.statements[0].interchange("t", "i")
    try:
        f.compile()
    except tp.IllegalScheduleError as e:
        e.draw(params={"T": 3, "N": 6}).save(HERE / "refused_interchange.png", dpi=DPI)
    for p in sorted(HERE.glob("*.png")):
        print(p.name, p.stat().st_size // 1024, "KB")


if __name__ == "__main__":
    main()
