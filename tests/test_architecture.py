"""The house rules, enforced on the source (tests/import_graph.py reads every
import, those inside functions too):

* packages import one way: ``codegen`` < ``tiramisu_py`` < ``schedules`` <
  ``bench``/``examples`` (``codegen`` never imports the compiler front end);
* inside ``tiramisu_py`` too, its floors (TIRAMISU_PY_FLOORS) one way;
* no import circle;
* no file over ~700 lines;
* in ``codegen``, a backend subpackage (``codegen.c``, ``codegen.llvm``,
  ``codegen.cuda``) imports codegen's top-level modules, itself and the C
  family (``codegen.c``: the CUDA printer extends the C printer); nothing else
  in codegen imports a backend but ``codegen/__init__.py``; no module of
  codegen imports a private (``_x``) name of another.

The circles not yet removed are listed in REMAINING (and the long files in
REMAINING_LONG): a new circle, or one that grows, fails; one that is gone must
leave the list, so the lists only shrink, to empty."""
from pathlib import Path

import ast

import import_graph as ig

ORDER = {"codegen": 0, "tiramisu_py": 1, "schedules": 2, "bench": 3, "examples": 3}
MAX_LINES = 720

# the circles still to break (docs: shared/notes/architecture-review.md)
REMAINING = [
]
# imports against the package order still to remove
REMAINING_UPWARD: set = set()

# files still to split
REMAINING_LONG: set = set()

# tiramisu_py's floors, bottom up (shared/DESIGN.md): base < lang < poly,
# runtime < analysis < commands, lower < driver, draw (pictures: they read the model,
# never change it) < api < the package's __init__ and the mpi facade (re-exports) <
# the command line.  A module imports from its own sub-package or from a lower
# floor, never from its floor's other sub-package nor from above (imports inside
# functions count).
TIRAMISU_PY_FLOORS = {"base": 0, "tuning": 0, "confirm": 0, "lang": 1, "poly": 2, "runtime": 2,
                      "analysis": 3, "commands": 4, "lower": 4, "driver": 5, "draw": 5,
                      "api": 6, "": 7, "mpi": 7, "cli": 8, "__main__": 9}

GRAPH = ig.imports(ig.modules())


def test_packages_import_one_way():
    upward = {(m, t) for m, edges in GRAPH.items() for t, _ in edges
              if ORDER[t.split(".")[0]] > ORDER[m.split(".")[0]]}
    new = sorted((m, t, line) for m, edges in GRAPH.items() for t, line in edges
                 if (m, t) in upward and (m, t.split(".")[0]) not in REMAINING_UPWARD)
    assert not new, f"imports against the package order: {new}"
    gone = {(m, p) for m, p in REMAINING_UPWARD
            if not any(a == m and t.split(".")[0] == p for a, t in upward)}
    assert not gone, f"no longer upward, remove from REMAINING_UPWARD: {sorted(gone)}"


def _room(mod):
    """The sub-package (or top-level module) of a tiramisu_py module: "" for
    the package itself."""
    return mod.split(".")[1] if "." in mod else ""


def floor_violations(graph, floors, package="tiramisu_py"):
    """(module, imported module, line) of every import inside ``package``
    that does not run down its floors."""
    out = []
    for m, edges in graph.items():
        if m.split(".")[0] != package:
            continue
        for t, line in edges:
            if t.split(".")[0] != package or _room(t) == _room(m):
                continue
            if floors[_room(t)] >= floors[_room(m)]:
                out.append((m, t, line))
    return sorted(out)


# the operator library's floors (shared/DESIGN.md: problems and solvers):
# the host facts < core (solver base, find, kernels, arrays) < weights (CSR,
# packed RNN weights) < problems < blocks (schedule pieces solvers share) <
# solvers < registry < api (and plans: a call made once) < the package's __init__, and the
# torch glue on top
# (fusion: the model-level fusion convert applies, below the modules that use it)
SCHEDULES_FLOORS = {"host": 0, "core": 1, "weights": 2, "problems": 3, "blocks": 4,
                    "solvers": 5, "registry": 6, "api": 7, "tuner": 7, "plans": 7, "": 8,
                    # the torch glue: helpers < the recurrent ops < the other ops < convert's
                    # fusion < modules
                    "torch_glue": 8, "torch_rnn_ops": 9, "torch_ops": 10, "torch_fused_ops": 11,
                    "fusion": 12, "nn": 13,
                    "conformance": 14,   # the conformance suite's refusal table, read by its test
                    "graph_rewrite": 13, "dynamo": 14,   # the torch.compile backend: its rewrite
                    "cli": 15}   # the tiramisu-py command: tiramisu_py.cli + the library's tune


def test_schedules_imports_run_down_its_floors():
    rooms = {_room(m) for m in GRAPH if m.split(".")[0] == "schedules"}
    assert rooms <= set(SCHEDULES_FLOORS), \
        f"give these a floor in SCHEDULES_FLOORS: {sorted(rooms - set(SCHEDULES_FLOORS))}"
    bad = floor_violations(GRAPH, SCHEDULES_FLOORS, "schedules")
    assert not bad, f"imports against schedules' floors (module, imported, line): {bad}"


def test_tiramisu_py_imports_run_down_its_floors():
    rooms = {_room(m) for m in GRAPH if m.split(".")[0] == "tiramisu_py"}
    assert rooms <= set(TIRAMISU_PY_FLOORS), \
        f"give these a floor in TIRAMISU_PY_FLOORS: {sorted(rooms - set(TIRAMISU_PY_FLOORS))}"
    bad = floor_violations(GRAPH, TIRAMISU_PY_FLOORS)
    assert not bad, f"imports against tiramisu_py's floors (module, imported, line): {bad}"


def test_the_floor_check_finds_upward_and_sideways_imports():
    g = {"tiramisu_py.lang.expr": {("tiramisu_py.lang.affine", 1), ("tiramisu_py.base.errors", 2)},
         "tiramisu_py.poly.model": {("tiramisu_py.driver.compile", 3),
                                    ("tiramisu_py.runtime.kernel", 4)},
         "tiramisu_py.api": {("tiramisu_py.driver.compile", 5)}}
    assert floor_violations(g, TIRAMISU_PY_FLOORS) == [
        ("tiramisu_py.poly.model", "tiramisu_py.driver.compile", 3),
        ("tiramisu_py.poly.model", "tiramisu_py.runtime.kernel", 4)]


def test_codegen_never_imports_the_front_end():
    bad = sorted((m, t) for m, edges in GRAPH.items() if m.startswith("codegen")
                 for t, _ in edges if not t.startswith("codegen"))
    assert not bad


def test_no_new_import_circle():
    found = ig.cycles(GRAPH)
    new = [c for c in found if not any(set(c) <= set(r) for r in REMAINING)]
    assert not new, f"import circles: {new}"
    gone = [r for r in REMAINING if not any(set(c) & set(r) for c in found)]
    assert not gone, f"these circles are gone: remove them from REMAINING: {gone}"


BACKENDS = ("codegen.c", "codegen.llvm", "codegen.cuda")


def _backend(mod: str):
    return next((b for b in BACKENDS if mod == b or mod.startswith(b + ".")), None)


def test_codegen_backends_are_imported_one_way():
    bad = []
    for m, edges in GRAPH.items():
        if not m.startswith("codegen"):
            continue
        own = _backend(m)
        for t, line in edges:
            if not t.startswith("codegen"):
                continue
            b = _backend(t)
            if own is not None:      # a backend: the top level, itself, the C family
                ok = (b is None and t.count(".") == 1) or b in (own, "codegen.c")
            else:                    # codegen's top level: no backend but from __init__
                ok = b is None or m == "codegen"
            if not ok:
                bad.append((m, t, line))
    assert not bad, f"codegen imports against the backend rule: {sorted(bad)}"


def _private_uses(mods: dict, mod: str) -> list:
    """(line, module, name) of every private name ``mod`` takes from another
    module of ``mods``: ``from m import _x``, or ``m._x`` of an imported ``m``."""
    path = mods[mod]
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    aliases, out = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = ig._resolve(mod, is_pkg, node)
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in mods:
                    aliases[a.asname or a.name] = full
                elif base in mods and base != mod and a.name.startswith("_"):
                    out.append((node.lineno, base, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in mods and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr.startswith("_") \
                and not node.attr.startswith("__") and aliases[node.value.id] != mod:
            out.append((node.lineno, aliases[node.value.id], node.attr))
    return out


def test_codegen_takes_no_private_name_of_another_module():
    mods = {m: p for m, p in ig.modules().items() if m.startswith("codegen")}
    bad = sorted((m, *u) for m in mods for u in _private_uses(mods, m))
    assert not bad, f"private names taken from another module of codegen: {bad}"


def test_the_cycle_finder_finds_cycles():
    g = {"a": {("b", 1)}, "b": {("c", 1)}, "c": {("a", 1), ("d", 1)}, "d": set(),
         "e": {("e", 1)}}
    assert ig.cycles(g) == [["a", "b", "c"]]


def test_no_file_is_too_long():
    root = Path(ig.ROOT)
    long = sorted((str(p.relative_to(root)), n) for p in root.rglob("*.py")
                  if ".git" not in p.parts and not any(x.startswith(".") for x in p.parts)
                  and (n := len(p.read_text().splitlines())) > MAX_LINES)
    new = [(p, n) for p, n in long if p not in REMAINING_LONG]
    assert not new, f"files over {MAX_LINES} lines: {new}"
    gone = REMAINING_LONG - {p for p, _ in long}
    assert not gone, f"no longer too long, remove from REMAINING_LONG: {sorted(gone)}"
