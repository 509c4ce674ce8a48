"""The package's shape: each package imports only the packages it may (the layers of
docs/architecture.md), no import circle anywhere (imports inside functions included), the
engine never imports rich or typer, and no module reaches into another's underscore names.

Every import statement of every module in course/ is read with ``ast``, so an import placed
inside a function to dodge a circle at start-up still counts as an arrow. Each check is also run
on a scratch copy with a planted fault, so a check that cannot fail would be seen.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "course"

CONTENT = "course.content"
ENGINE = "course.engine"
# Room -> the rooms it may import besides itself. A module belongs to the longest room that is
# a prefix of its name; an allowed entry admits that module or package and everything under it.
MAY_IMPORT: dict[str, set[str]] = {
    "course": set(),  # course/__init__.py: the version
    "course.__main__": {"course.cli"},
    "course.atomic_file": set(),
    "course.tiny_model": set(),
    CONTENT: {"course.atomic_file"},
    # the engine, from the bytes on the wire up to the warm grader
    "course.engine.wire": set(),
    "course.engine.sandbox": {"course.engine.wire"},
    "course.engine.sandbox.worker": {
        "course.engine.wire",
        "course.engine.sandbox.landlock",
        "course.engine.sandbox.seccomp",
    },
    "course.engine.calls": {CONTENT, "course.engine.sandbox", "course.engine.wire"},
    "course.engine.results": {"course.engine.calls.upstream"},
    "course.engine.integrity": {CONTENT},
    "course.engine.pictures": {
        CONTENT,
        "course.engine.integrity",
        "course.engine.calls",
        "course.engine.sandbox.limits",  # an experiment's raised limits
    },
    "course.engine.testing": {
        CONTENT,
        "course.engine.results",
        "course.engine.calls",
        "course.engine.pictures",
        "course.engine.wire",
    },
    "course.engine.grading": {
        "course.atomic_file",
        CONTENT,
        "course.engine.results",
        "course.engine.integrity",
        "course.engine.calls",
        "course.engine.sandbox",
        "course.engine.testing",
        "course.engine.wire",
    },
    "course.engine.warm": {
        CONTENT,
        "course.engine.results",
        "course.engine.calls",
        "course.engine.grading",
        "course.engine.sandbox",
        "course.engine.testing",
    },
    "course.engine.__main__": {CONTENT, "course.engine.grading"},
    # what uses the engine
    "course.workspace": {"course.atomic_file", CONTENT, ENGINE},
    "course.bench": {CONTENT, "course.engine.calls", "course.engine.results", "course.workspace"},
    "course.devcheck": {CONTENT, ENGINE},
    "course.instructor.notebooks": {CONTENT, ENGINE},
    "course.instructor.classroom": {"course", CONTENT, ENGINE, "course.instructor.notebooks"},
    "course.render": {CONTENT, ENGINE, "course.workspace", "course.bench"},
    "course.cli": {
        "course",
        CONTENT,
        "course.workspace",
        "course.bench",
        "course.devcheck",
        "course.instructor",
        "course.render",
    },
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py")) if "_data" not in p.parts}


def imports_of(path: Path, known: set[str], package_dir: Path = PACKAGE) -> set[str]:
    """The course modules ``path`` imports anywhere in its body (``from a import b`` counts as
    ``a.b`` when that is a module, else as ``a``)."""
    found: set[str] = set()
    name = module_name(path, package_dir)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
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
    return found - {name}


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(package)
    return {name: imports_of(path, set(found), package) for name, path in found.items()}


def room(module: str) -> str:
    """The longest room of ``MAY_IMPORT`` that ``module`` is, or lies in."""
    rooms = [r for r in MAY_IMPORT if module == r or module.startswith(r + ".")]
    return max(rooms, key=len)


def forbidden_imports(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every (importer, imported) pair whose rooms the table above does not connect."""
    bad = []
    for importer, targets in sorted(edges.items()):
        home = room(importer)
        allowed = MAY_IMPORT[home] | {home}
        for target in sorted(targets):
            if room(target) == home:
                continue
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                bad.append((importer, target))
    return bad


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


def private_reaches(package: Path = PACKAGE) -> list[str]:
    """Places where a module imports another module's underscore name, or reads one through a
    module it imported (``from course.x import _y``; ``import course.x as m; m._y``)."""
    found = []
    for name, path in modules(package).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("course")):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{name}:{node.lineno} imports {node.module}.{alias.name}")
                    module_aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                module_aliases.update(
                    (a.asname or a.name.split(".")[0]) for a in node.names if a.name.startswith("course")
                )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in module_aliases
            ):
                found.append(f"{name}:{node.lineno} reads {node.value.id}.{node.attr}")
    return found


def scratch_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "course"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "_data", "*.npz", "*.zip"))
    return copy


def plant(copy: Path, module: str, line: str) -> None:
    path = copy.parent / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef planted():\n    {line}\n", encoding="utf-8")


# -- the import reader and the circle finder ------------------------------------------------------


def test_the_import_reader_sees_imports_inside_functions():
    edges = graph()
    assert "course.engine.grading.runner" in edges["course.workspace.actions"]  # imported inside a function
    assert "course.render.basics" in edges["course.cli.common"]  # imported inside fail()


def test_the_circle_finder_finds_a_circle_of_three():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_the_package_takes_part_in_an_import_circle():
    assert circles(graph()) == []


# -- the layers ----------------------------------------------------------------------------------


def test_every_package_and_module_of_the_course_lies_in_a_room_of_the_table():
    for name in modules():
        assert room(name) in MAY_IMPORT, name


def test_each_package_imports_only_the_packages_it_may():
    assert forbidden_imports(graph()) == []


def test_the_engine_holds_at_most_eight_modules_and_the_course_six_loose_ones():
    engine = [
        p.name for p in (PACKAGE / "engine").glob("*.py") if p.name not in ("__init__.py", "__main__.py")
    ]
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(engine) <= 8, engine
    assert len(loose) <= 6, loose


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("course.engine.wire.values", "from course.content import catalog", "course.content.catalog"),
        (
            "course.engine.sandbox.keeper",
            "from course.engine.calls import errors",
            "course.engine.calls.errors",
        ),
        (
            "course.engine.testing.memo",
            "from course.engine.grading import runner",
            "course.engine.grading.runner",
        ),
        ("course.engine.results", "import course.workspace.state", "course.workspace.state"),
        ("course.render.basics", "from course.cli import common", "course.cli.common"),
    ],
)
def test_a_forbidden_import_planted_in_a_scratch_copy_is_found(tmp_path, module, line, expected):
    copy = scratch_copy(tmp_path)
    assert forbidden_imports(graph(copy)) == []
    plant(copy, module, line)
    assert forbidden_imports(graph(copy)) == [(module, expected)]


def test_the_engine_never_imports_rich_or_typer():
    for name, path in modules().items():
        if not name.startswith(ENGINE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            )
            for imported in names:
                assert imported.split(".")[0] not in ("rich", "typer"), f"{name} imports {imported}"


def test_new_package_inits_hold_only_a_docstring_except_the_grading_tests_face():
    for init in PACKAGE.rglob("__init__.py"):
        name = module_name(init)
        if (
            name in ("course", "course.cli", "course.tiny_model", "course.engine.testing")
            or "_data" in init.parts
        ):
            continue
        body = ast.parse(init.read_text(encoding="utf-8")).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), f"{name}: only a docstring"
        assert isinstance(body[0].value, ast.Constant) and body[0].value.value.strip(), f"{name}: a docstring"


# -- privacy -------------------------------------------------------------------------------------


def test_no_module_imports_or_reads_another_modules_underscore_names():
    assert private_reaches() == []


def test_an_underscore_name_reached_into_in_a_scratch_copy_is_found(tmp_path):
    copy = scratch_copy(tmp_path)
    before = set(private_reaches(copy))
    plant(copy, "course.render.basics", "from course.content.catalog import _planted")
    plant(copy, "course.cli.common", "from course.engine import results; return results._planted")
    found = sorted(set(private_reaches(copy)) - before)
    assert [place.split(":")[0] for place in found] == ["course.cli.common", "course.render.basics"], found
    assert found[0].endswith("reads results._planted") and found[1].endswith("catalog._planted")


# -- docstrings cite what exists -----------------------------------------------------------------

CITED = re.compile(r"``([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+)(?:\(\))?``")
FILE_SUFFIXES = ("py", "toml", "json", "md", "ini", "npz", "zip", "txt", "csv")
CITED_PATH = re.compile(
    r"(?<![\w/.])((?:course|tests|tools|benchmarks|docs)/[\w/.-]+\.(?:py|toml|md|json|ini))"
)


def resolves(dotted: str, leaves: dict[str, list[str]]) -> bool:
    """Whether ``dotted`` names a course module or an attribute of one: written whole
    (``course.engine.results.PASSED``) or from a module's own name (``results.PASSED``)."""
    head, *rest = dotted.split(".")
    if rest[-1] in FILE_SUFFIXES:
        return True  # a file name (``catalog.toml``): paths are checked apart
    candidates = [dotted] if head == "course" else [f"{m}.{'.'.join(rest)}" for m in leaves.get(head, [])]
    if head != "course" and not candidates:
        return True  # not a module of the course: an object, a standard module, a parameter
    for candidate in candidates:
        parts = candidate.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                target: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attribute in parts[cut:]:
                    target = getattr(target, attribute)
            except AttributeError:
                break
            return True
    return False


def stale_citations(package: Path = PACKAGE) -> list[str]:
    leaves: dict[str, list[str]] = {}
    for name in modules():
        leaves.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    stale = []
    for name, path in modules(package).items():
        text = path.read_text(encoding="utf-8")
        stale += [f"{name}: ``{c}``" for c in CITED.findall(text) if not resolves(c, leaves)]
        stale += [f"{name}: {p}" for p in CITED_PATH.findall(text) if not (PACKAGE.parent / p).exists()]
    return stale


def test_every_module_name_and_path_a_docstring_cites_exists():
    assert stale_citations() == []


def test_a_stale_citation_in_a_scratch_copy_is_found(tmp_path):
    copy = scratch_copy(tmp_path)
    before = set(stale_citations(copy))
    path = copy / "render" / "basics.py"
    cited = '\n\n"""See ``results.NO_SUCH_NAME`` and course/engine/nowhere.py."""\n'
    path.write_text(path.read_text(encoding="utf-8") + cited, encoding="utf-8")
    assert sorted(set(stale_citations(copy)) - before) == [
        "course.render.basics: ``results.NO_SUCH_NAME``",
        "course.render.basics: course/engine/nowhere.py",
    ]


def test_every_path_the_readme_and_docs_cite_exists():
    root = PACKAGE.parent
    documents = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    missing = [
        f"{document.name}: {cited}"
        for document in documents
        for cited in CITED_PATH.findall(document.read_text(encoding="utf-8"))
        if not (root / cited).exists() and "__pycache__" not in cited
    ]
    assert missing == []


def test_docs_architecture_describes_every_package():
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for init in PACKAGE.rglob("__init__.py"):
        if "_data" in init.parts or init.parent == PACKAGE:
            continue
        folder = init.parent.relative_to(PACKAGE).as_posix()
        named = (f"`{folder}/`", f"`course/{folder}/`", f"`{folder.rsplit('/', 1)[-1]}/`")
        assert any(name in text for name in named), folder


def test_the_grading_tests_face_hands_out_every_name_it_lists_and_loads_nothing_until_asked():
    script = (
        "import sys\nimport course.engine.testing as face\n"
        "assert 'hypothesis' not in sys.modules and 'course.engine.pictures.maps' not in sys.modules\n"
        "import course.engine.testing.error_shapes, course.engine.testing.misconceptions\n"
        "assert 'hypothesis' not in sys.modules, 'a module of the package loaded the face'\n"
        "for name in face.__all__:\n    assert getattr(face, name) is not None, name\n"
        "from course.engine.testing import check_array, maps, memo\n"
        "assert maps.__name__ == 'course.engine.pictures.maps' and memo.__name__.endswith('.memo')\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
