"""The Python package python/sluice/ has no import cycles.

Every module's imports are read with `ast` (also those inside functions, which run later but still
tie the modules together), package-relative imports are resolved, and the graph is searched for
strongly connected components. Importing `a.b.c` also runs the `__init__` of `a.b` unless the
importer is inside `a.b` already, so that counts as an edge too.

Also a script: `python3 tests/integration/test_layout_python.py [DIR [PACKAGE]]` prints the graph and
the cycles (exit 1 if there is one); DIR defaults to python/sluice, PACKAGE to DIR's name ("" for a
directory of scripts such as bench/).
"""

import ast
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SLUICE_DIR = REPO_ROOT / "python" / "sluice"


def modules_of(pkg_dir, pkg_name):
    """{dotted module name: file} for every .py file under pkg_dir (a package named pkg_name; ""
    for a directory of scripts that import each other as top-level modules, like bench/)."""
    pkg_dir = Path(pkg_dir)
    mods = {}
    for f in sorted(pkg_dir.rglob("*.py")):
        parts = list(f.relative_to(pkg_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(([pkg_name] if pkg_name else []) + parts)
        if name:
            mods[name] = f
    return mods


def _is_package(f):
    return f.name == "__init__.py"


def imports_of(mod, f, mods):
    """[(imported module, line)] for one module: only modules in `mods`."""
    package = mod if _is_package(f) else mod.rpartition(".")[0]
    out = []

    def add(target, line):
        # the most specific module that exists: 'sluice.config.ConfigError' -> 'sluice.config'
        while target and target not in mods:
            target = target.rpartition(".")[0]
        if not target:
            return
        out.append((target, line))
        # importing a.b.c runs a/__init__ and a/b/__init__ first (unless mod is inside them already)
        parent = target.rpartition(".")[0]
        while parent:
            if parent in mods and not (mod == parent or mod.startswith(parent + ".")):
                out.append((parent, line))
            parent = parent.rpartition(".")[0]

    tree = ast.parse(f.read_text(), str(f))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[:-(node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            for a in node.names:
                sub = f"{base}.{a.name}"
                add(sub if sub in mods else base, node.lineno)
    return [(t, line) for t, line in out if t != mod]


def import_graph(pkg_dir=SLUICE_DIR, pkg_name="sluice"):
    """{module: {imported module: [lines]}} for the package's own modules."""
    mods = modules_of(pkg_dir, pkg_name)
    graph = {}
    for mod, f in mods.items():
        edges = graph.setdefault(mod, {})
        for target, line in imports_of(mod, f, mods):
            lines = edges.setdefault(target, [])
            if line not in lines:
                lines.append(line)
    return graph


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(sccs)


def describe(graph, comp):
    """'a -> b (a.py:12)' lines for the edges inside one cycle."""
    return "\n".join(f"  {a} -> {b} (line {', '.join(map(str, graph[a][b]))})"
                     for a in comp for b in sorted(graph[a]) if b in comp)


def test_checker_finds_a_cycle(tmp_path):
    """The checker itself: relative, absolute and function-level imports close a cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import x\n")
    (pkg / "c.py").write_text("import pkg.a\nx = 1\n")
    (pkg / "d.py").write_text("from . import c\n")
    g = import_graph(pkg, "pkg")
    assert cycles(g) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert "pkg.sub" in g["pkg.a"]  # importing pkg.sub.b runs pkg/sub/__init__.py
    (pkg / "c.py").write_text("x = 1\n")
    assert cycles(import_graph(pkg, "pkg")) == []


def test_sluice_package_has_no_import_cycle():
    g = import_graph()
    assert "sluice.cli" in g and "sluice.config" in g
    found = cycles(g)
    assert not found, "import cycles in python/sluice:\n" + "\n".join(describe(g, c) for c in found)


def main(argv):
    pkg_dir = Path(argv[1]) if len(argv) > 1 else SLUICE_DIR
    pkg_name = argv[2] if len(argv) > 2 else pkg_dir.resolve().name  # "" for a directory of scripts
    g = import_graph(pkg_dir, pkg_name)
    for mod in sorted(g):
        print(f"{mod}: {', '.join(sorted(g[mod])) or '-'}")
    found = cycles(g)
    print(f"{len(g)} modules, {sum(len(e) for e in g.values())} imports between them, "
          f"{len(found)} cycle(s)")
    for comp in found:
        print("cycle: " + ", ".join(comp))
        print(describe(g, comp))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
