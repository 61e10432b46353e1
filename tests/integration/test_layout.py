"""The tree shows the design (docs/architecture.md "Where things are"): these checks keep it so.

- sluiced's modules call each other in one direction only: no file calls a function of a file that
  (directly or through others) calls back into it, and nothing calls into main.c.
- each NF is one folder nfs/<name>/ with its <name>.c (registered as <name> with
  SL_NF_PLUGIN_REGISTER, no main() of its own) and one line in nfs/meson.build.
(Python import circles: test_layout_python.py.)
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANAGER = ROOT / "src" / "manager"


def _strip_c(text):
    """C source without comments and string/char literals (so names in them are not references)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)


# a function definition at the start of a line: return type, name, parameters, then the body's brace
_DEF = re.compile(r"^(?!static\b)(?!typedef\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;{)]*\)\s*\{", re.M)


def c_call_graph(folder):
    """{file: {other file: [functions of other file it names]}} over folder/*.c (non-static functions)."""
    sources = {p.name: _strip_c(p.read_text()) for p in sorted(folder.glob("*.c"))}
    defined = {}
    for name, text in sources.items():
        for m in _DEF.finditer(text):
            defined.setdefault(m.group(1), name)
    graph = {name: {} for name in sources}
    for name, text in sources.items():
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", text))
        for fn, owner in defined.items():
            if owner != name and fn in words:
                graph[name].setdefault(owner, []).append(fn)
    return graph


def find_cycle(graph):
    """One cycle of the directed graph {node: iterable of nodes} as a list of nodes, or None."""
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_find_cycle_sees_a_cycle():
    # the checker itself: a test that cannot fail proves nothing
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None


def test_c_call_graph_sees_a_call_back(tmp_path):
    (tmp_path / "a.c").write_text("int fa(void)\n{\n\treturn fb();\n}\n")
    (tmp_path / "b.c").write_text("/* fa() in a comment is no call */\nint fb(void)\n{\n\treturn 1;\n}\n")
    assert c_call_graph(tmp_path) == {"a.c": {"b.c": ["fb"]}, "b.c": {}}
    (tmp_path / "b.c").write_text("int fb(void)\n{\n\treturn fa();\n}\n")
    assert find_cycle(c_call_graph(tmp_path)) == ["a.c", "b.c", "a.c"]


def test_manager_modules_have_no_call_circles():
    graph = c_call_graph(MANAGER)
    assert "registry.c" in graph and "main.c" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "src/manager call circle: " + " -> ".join(
        f"{a} ({', '.join(graph[a][b])})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_main_only_starts_runs_and_stops():
    # nothing of the manager calls into main.c: it is the start-up file, not a registry
    graph = c_call_graph(MANAGER)
    callers = sorted(f for f, callees in graph.items() if "main.c" in callees)
    assert callers == [], f"{callers} call functions defined in src/manager/main.c"


def test_each_nf_is_one_folder_with_one_meson_line():
    # adding an NF = one folder nfs/<name>/ with <name>.c + one line in nfs/meson.build; the source
    # registers the NF under the folder's name (process sluice-nf-<name>, plugin sluice-nf-<name>.so)
    # and leaves main() to the SDK (common/nf_main.c)
    nfs = ROOT / "nfs"
    listed = re.findall(r"^nf_programs \+= \{'([\w-]+)':", (nfs / "meson.build").read_text(), re.M)
    assert len(listed) == len(set(listed)), listed
    folders = sorted(p.name for p in nfs.iterdir() if p.is_dir() and p.name != "common")
    assert sorted(listed) == folders, "nfs/meson.build's nf_programs and the nfs/<name>/ folders differ"
    for name in folders:
        src = nfs / name / f"{name}.c"
        assert src.is_file(), f"nfs/{name}/ has no {name}.c"
        assert not (nfs / name / "main.c").exists(), f"nfs/{name}/main.c: the NF's source is {name}.c"
        text = src.read_text()
        code = _strip_c(text)
        assert "SL_NF_PLUGIN_REGISTER(" in code, f"nfs/{name}/{name}.c has no SL_NF_PLUGIN_REGISTER"
        assert re.search(r'\.name\s*=\s*"' + re.escape(name) + '"', text), \
            f"nfs/{name}/{name}.c does not register the NF as .name = \"{name}\""
        assert not re.search(r"\bint\s+main\s*\(", code), f"nfs/{name}/{name}.c has its own main()"
    loose = sorted(p.name for p in nfs.iterdir() if p.is_file() and p.name != "meson.build")
    assert loose == [], f"files directly in nfs/ (an NF's go in nfs/<name>/, shared ones in nfs/common/): {loose}"
