"""The house rules, enforced on the source (tests/import_graph.py reads every
import, those inside functions too):

* packages import one way: ``codegen`` < ``tiramisu_py`` < ``schedules`` <
  ``bench``/``examples`` < ``tiramisu_py_command`` (the ``tiramisu-py`` script)
  (``codegen`` never imports the compiler front end);
* no module of codegen, tiramisu_py or schedules imports by name
  (``importlib``) or edits ``sys.path``: every import is a statement this
  test reads;
* inside ``tiramisu_py`` too, its floors (TIRAMISU_PY_FLOORS) one way;
* no import circle;
* no file over ~700 lines;
* in ``codegen``, a backend subpackage (``codegen.c``, ``codegen.llvm``,
  ``codegen.cuda``) imports codegen's top-level modules, itself and the C
  family (``codegen.c``: the CUDA printer extends the C printer); nothing else
  in codegen imports a backend but ``codegen/__init__.py``;
* in ``tiramisu_py``, ``codegen`` and ``schedules`` no module takes a private
  (``_x``) name of another (imported, or read from an imported module);
* ``schedules.api`` reaches the solvers only through the registry and the
  find step, and no solver decides on its own ``name``.

The circles not yet removed are listed in REMAINING (and the long files in
REMAINING_LONG): a new circle, or one that grows, fails; one that is gone must
leave the list, so the lists only shrink, to empty."""
from pathlib import Path

import ast

import import_graph as ig

ORDER = {"codegen": 0, "tiramisu_py": 1, "schedules": 2, "bench": 3, "examples": 3,
         "tiramisu_py_command": 4}
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
# never change it) < function (the user's Function: data + verbs) < the package's __init__ and the mpi facade (re-exports) <
# the command line; tuning (the store, the A/B, host keys, the parallel grain) on the
# ground floor beside base.  A module imports from its own sub-package or from a lower
# floor, never from its floor's other sub-package nor from above (imports inside
# functions count).
TIRAMISU_PY_FLOORS = {"base": 0, "tuning": 0, "lang": 1, "poly": 2, "runtime": 2,
                      "analysis": 3, "commands": 4, "lower": 4, "driver": 5, "draw": 5,
                      "function": 6, "": 7, "mpi": 7, "cli": 8, "__main__": 9}

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


def test_installed_packages_import_by_statement_only():
    """codegen, tiramisu_py and schedules never reach a module through
    ``importlib.import_module`` nor edit ``sys.path`` (how the former
    command line reached examples/ and bench/, unseen by this test)."""
    bad = []
    for mod, path in ig.modules().items():
        if mod.split(".")[0] not in ("codegen", "tiramisu_py", "schedules"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                    (node.value.id, node.attr) in (("importlib", "import_module"),
                                                   ("sys", "path"))):
                bad.append((mod, node.lineno, f"{node.value.id}.{node.attr}"))
    assert not bad, f"imports the import graph cannot see: {sorted(bad)}"


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
                    "graph_rewrite": 13, "dynamo": 14}   # the torch.compile backend: its rewrite


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
         "tiramisu_py.function": {("tiramisu_py.driver.compile", 5)}}
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


def _private_uses(mods: dict, mod: str, source: str | None = None) -> list:
    """(line, module, name) of every private name ``mod`` takes from another
    module of ``mods``: ``from m import _x`` (``m`` a module or a package,
    ``from .m import _x`` too), or ``m._x`` / ``a.b._x`` of an imported
    module (``import m as alias``, ``from pkg import m``, ``import a.b``).
    A module's own names, and public names bound to a private alias
    (``from m import x as _x``), are not taken."""
    path = mods[mod]
    tree = ast.parse(path.read_text() if source is None else source, str(path))
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
                top = a.name.split(".")[0]
                if a.asname and a.name in mods:
                    aliases[a.asname] = a.name
                elif not a.asname and top in mods:
                    aliases[top] = top

    def module_of(node):
        """The module an expression names (``alias``, ``alias.sub``), or None."""
        if isinstance(node, ast.Name):
            return aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = module_of(node.value)
            if base is not None and f"{base}.{node.attr}" in mods:
                return f"{base}.{node.attr}"
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            owner = module_of(node.value)
            if owner is not None and owner != mod:
                out.append((node.lineno, owner, node.attr))
    return sorted(out)


PRIVATE_CHECKED = ("tiramisu_py", "codegen", "schedules")


def test_no_module_takes_a_private_name_of_another():
    """In tiramisu_py, codegen and schedules no module imports or reads a
    private (``_x``) name of another module, inside its package too: what
    is shared is public (or lives where it is used)."""
    mods = {m: p for m, p in ig.modules().items() if m.split(".")[0] in PRIVATE_CHECKED}
    bad = sorted((m, *u) for m in mods for u in _private_uses(mods, m))
    assert not bad, f"private names taken from another module: {bad}"


def test_the_private_name_check_finds_every_form():
    mods = {m: p for m, p in ig.modules().items() if m.split(".")[0] in PRIVATE_CHECKED}
    src = ("from ..weights.rnn import _is_csr, as_numpy as _numpy\n"       # 1: taken
           "from ..weights import rnn\n"
           "import schedules.core.kernels\n"
           "import tiramisu_py as tp\n"
           "def f():\n"
           "    return (rnn._csr_arrays, schedules.core.kernels._KERNELS, tp._x, _own,\n"
           "            rnn.as_numpy, tp.__version__)\n"
           "def _own():\n"
           "    pass\n")
    assert _private_uses(mods, "schedules.problems.rnn", src) == [
        (1, "schedules.weights.rnn", "_is_csr"), (6, "schedules.core.kernels", "_KERNELS"),
        (6, "schedules.weights.rnn", "_csr_arrays"), (6, "tiramisu_py", "_x")]


def test_the_library_api_reaches_solvers_only_through_the_registry():
    """schedules.api imports no solver module: a public call is parse (a
    problem) -> core.find.solve over the registry's list -> the solver."""
    bad = sorted((t, line) for t, line in GRAPH["schedules.api"]
                 if t.startswith("schedules.solvers"))
    assert not bad, f"schedules.api imports solver modules (use the registry): {bad}"


def own_name_uses(source: str) -> list:
    """Lines where a method reads ``self.name`` to decide something (in a
    comparison, a lookup, an argument) rather than to name something (a
    kernel key's tuple, an f-string)."""
    out = []
    for parent in ast.walk(ast.parse(source)):
        if isinstance(parent, (ast.Tuple, ast.FormattedValue)):
            continue
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, ast.Attribute) and child.attr == "name" \
                    and isinstance(child.value, ast.Name) and child.value.id == "self":
                out.append(child.lineno)
    return out


def test_no_solver_branches_on_its_own_name():
    """Each solver is its own class with its own build and run: what several
    share is a base class or a function, never a switch on ``self.name``."""
    bad = sorted((m, line) for m, p in ig.modules().items() if m.startswith("schedules.solvers")
                 for line in own_name_uses(p.read_text()))
    assert not bad, f"solvers deciding on their own name: {bad}"


def test_the_own_name_check_finds_a_switch():
    src = ("class A:\n    def run(self):\n        k = (1, self.name)\n"
           "        if self.name == 'x':\n            return T[self.name]\n"
           "        return f(algo=self.name, key=f'{self.name}')\n")
    assert own_name_uses(src) == [4, 5, 6]


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
