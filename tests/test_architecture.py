"""The package's shape: imports flow one way, no import circle anywhere (imports inside
functions included), and the engine never imports rich or typer.

Every import statement of every module in course/ is read with ``ast``, so an import placed
inside a function to dodge a circle at start-up still counts as an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "course"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "_data" not in p.parts}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The course modules ``path`` imports anywhere in its body (``from a import b`` counts as
    ``a.b`` when that is a module, else as ``a``)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base])
                base = base.strip(".")
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")
                elif base in known:
                    found.add(base)
    return found - {module_name(path)}


def graph() -> dict[str, set[str]]:
    known = set(modules())
    return {name: imports_of(path, known) for name, path in modules().items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), plus self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_import_reader_sees_imports_inside_functions():
    edges = graph()
    assert "course.engine.grading.runner" in edges["course.workspace.actions"]  # imported inside grade()
    assert "course.render.basics" in edges["course.cli.common"]  # imported inside fail()


def test_the_circle_finder_finds_a_circle_of_three():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_the_package_takes_part_in_an_import_circle():
    assert circles(graph()) == []


def test_the_engine_never_imports_rich_typer_or_a_layer_above_it():
    above = ("course.cli", "course.render", "course.workspace.actions", "course.instructor")
    for name, path in modules().items():
        if not name.startswith("course.engine"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            for imported in names:
                assert imported.split(".")[0] not in ("rich", "typer"), f"{name} imports {imported}"
                assert not imported.startswith(above), f"{name} imports {imported}"


def test_rendering_never_imports_the_cli_and_services_never_import_rendering():
    edges = graph()
    for name, targets in edges.items():
        if name.startswith("course.render"):
            assert not any(t.startswith("course.cli") for t in targets), (name, targets)
        if name.startswith(
            (
                "course.workspace.actions",
                "course.workspace.session",
                "course.instructor",
                "course.content.catalog",
            )
        ):
            assert not any(t.startswith(("course.cli", "course.render")) for t in targets), (name, targets)
