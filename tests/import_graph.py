"""The repository's import graph, read from the source (an AST walk: imports
inside functions count as much as those at the top of a file), and its
strongly connected components: what tests/test_architecture.py checks."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tiramisu_py", "codegen", "schedules", "bench", "examples")
TOP_MODULES = ("tiramisu_py_command",)          # single-file modules at the root


def modules(root: Path = ROOT) -> dict:
    """{dotted module name: path} of every Python file in PACKAGES and TOP_MODULES."""
    out = {name: root / f"{name}.py" for name in TOP_MODULES}
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(mods: dict) -> dict:
    """{module: {(imported module, line)}} restricted to the modules of ``mods``
    (``from pkg import name`` is an import of ``pkg.name`` when that is a module)."""
    out = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:        # import a.b.c of a module a.b
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    edges.add((t, node.lineno))
        out[mod] = edges
    return out


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan),
    each sorted; a module importing itself does not count."""
    index, low, stack, on, out = {}, {}, [], set(), []
    adj = {m: sorted({t for t, _ in e}) for m, e in graph.items()}

    def visit(v):
        work = [(v, iter(adj.get(v, ())))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(adj.get(w, ()))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return sorted(out)


if __name__ == "__main__":
    g = imports(modules())
    for c in cycles(g):
        print(len(c), c)
