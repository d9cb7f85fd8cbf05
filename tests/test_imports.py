"""The package's import graph: no cycle, and dependencies point the way DESIGN.md draws them.

Every `import` counts, including those inside functions (a function-level import hides a cycle from
the interpreter, not from a reader); only `if TYPE_CHECKING:` blocks are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "atgrpo"

FORBIDDEN = {
    # importer prefix -> imported prefixes it must not reach directly
    "atgrpo.learner": ("atgrpo.workflows", "atgrpo.warmstart", "atgrpo.actor", "atgrpo.cli", "atgrpo.launch"),
    "atgrpo.actor": ("atgrpo.learner", "atgrpo.cli", "atgrpo.launch", "atgrpo.warmstart"),
    "atgrpo.workflows": ("atgrpo.learner", "atgrpo.actor", "atgrpo.cli", "atgrpo.launch", "atgrpo.warmstart"),
    "atgrpo.engines": ("atgrpo.workflows", "atgrpo.learner", "atgrpo.actor", "atgrpo.cli"),
    "atgrpo.transport": ("atgrpo.workflows", "atgrpo.learner", "atgrpo.actor", "atgrpo.cli", "atgrpo.engines"),
    "atgrpo.messages": ("atgrpo.",),
    "atgrpo.units": ("atgrpo.workflows", "atgrpo.learner", "atgrpo.actor", "atgrpo.engines"),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(path: Path, modules: set[str]) -> set[str]:
    """The atgrpo modules `path` imports (a `from pkg import name` of a submodule counts as that module)."""
    me = module_name(path)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("atgrpo"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = me.split(".") if is_pkg else me.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("atgrpo"):
                subs = {f"{target}.{a.name}" for a in node.names} & modules
                out.update(subs or {target})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    out.discard(me)
    return out & modules


def graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files} | {"atgrpo._core"}  # the compiled extension
    return {module_name(f): imported(f, modules) for f in files}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def test_the_cycle_finder_finds_a_hidden_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package() -> None:
    edges = graph()
    assert "atgrpo.workflows.games" in edges and edges["atgrpo.cli.learner"], "the graph was not read"
    assert cycles(edges) == []


def test_dependencies_point_one_way() -> None:
    wrong = [
        (src, dst)
        for src, deps in graph().items()
        for prefix, banned in FORBIDDEN.items()
        if src == prefix or src.startswith(prefix + ".")
        for dst in deps
        if any(dst == b.rstrip(".") or dst.startswith(b if b.endswith(".") else b + ".") or dst == b for b in banned)
    ]
    assert wrong == []
