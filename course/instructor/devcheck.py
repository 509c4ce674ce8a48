"""The maintainer's guard (`course dev check`): the catalog and the course's trees agree.

Every check reads a repository root given as a parameter (tests point it at a copy) and returns
problems as data: a short id, the file concerned (relative to the root) and one sentence. The
solutions in ``solutions/`` are the single source of each lesson's text and code: every exercise
function keeps the learner's docstring with numbered TODO steps and a solution region, and the
skeleton in ``lessons/`` must be exactly what ``course.lesson_source.skeleton`` generates from it
(`course dev skeletons`). Sources are read with ``ast`` and ``tokenize``, never imported; only the
grader imports them, in its worker.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from course import lesson_source
from course.catalog import Catalog, Lesson, _parse
from course.engine import integrity
from course.engine.results import NOT_STARTED, LessonResult

REPO = Path(__file__).resolve().parents[2]
UPDATE_MANIFEST = "python tools/update_grading_manifest.py"
WRITE_SKELETONS = "course dev skeletons"
# Folders of the repository whose every file must belong to a catalog lesson.
TREES = ("lessons", "solutions", "tests/lessons", "tests/mistakes")
ALLOWED = {"tests/lessons": {"fixtures"}}  # besides __pycache__, which is ignored everywhere
_TODO_STEP = re.compile(r"^\s*1\.\s+\S", re.MULTILINE)


@dataclass(frozen=True)
class Problem:
    id: str  # short and stable, e.g. "missing-file"
    file: str  # relative to the root, "/"-separated
    message: str  # one sentence for the maintainer

    def __str__(self) -> str:
        return f"{self.id}  {self.file}: {self.message}"


def lesson_files(module: str) -> dict[str, str]:
    """What each available lesson has, by role, as paths relative to the root."""
    return {
        "skeleton": f"lessons/{module}.py",
        "solution": f"solutions/{module}.py",
        "grading tests": f"tests/lessons/test_{module}.py",
        "classic mistakes": f"tests/mistakes/{module}.toml",
    }


def optional_files(module: str) -> dict[str, str]:
    """Files a lesson may have, by role (not reported as missing, nor as stray)."""
    return {"pictures": f"tests/lessons/pictures_{module}.py"}


def read_catalog(root: Path) -> Catalog:
    """``root/course/catalog.toml`` parsed like the course's own (its paths are not used)."""
    with open(root / "course" / "catalog.toml", "rb") as handle:
        return _parse(tomllib.load(handle))


def check(root: Path = REPO, grade: bool = True) -> list[Problem]:
    """Every problem found in the course at ``root``; empty when all is consistent.

    ``grade=False`` skips grading skeletons and solutions (the only slow part, ~0.3 s a lesson).
    """
    root = Path(root).resolve()
    try:
        catalog = read_catalog(root)
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as error:
        return [
            Problem(
                "catalog-unreadable",
                "course/catalog.toml",
                f"The catalog cannot be read ({type(error).__name__}: {error}).",
            )
        ]
    problems = catalog_problems(catalog) + stray_files(root, catalog)
    for lesson in catalog.lessons:
        problems += lesson_problems(root, lesson, grade)
    return problems + manifest_problems(root)


def catalog_problems(catalog: Catalog) -> list[Problem]:
    """Unique modules and exercise names; every exercise has a summary and >= 2 real hints."""
    where = "course/catalog.toml"
    modules = [lesson.module for lesson in catalog.lessons]
    problems = [
        Problem("duplicate-lesson", where, f"Lesson {module} is listed twice.")
        for module in sorted({m for m in modules if modules.count(m) > 1})
    ]
    for lesson in catalog.lessons:
        names = [exercise.name for exercise in lesson.exercises]
        problems += [
            Problem("duplicate-exercise", where, f"{lesson.module} lists {name} twice.")
            for name in sorted({n for n in names if names.count(n) > 1})
        ]
        for exercise in lesson.exercises:
            label = f"{lesson.module}.{exercise.name}"
            if not exercise.summary.strip():
                problems.append(Problem("missing-summary", where, f"{label} has no summary."))
            hints = [hint for hint in exercise.hints if hint.strip()]
            if len(hints) < 2 or len(hints) < len(exercise.hints):
                empty = len(exercise.hints) - len(hints)
                detail = f" ({empty} of them empty)" if empty else ""
                problems.append(
                    Problem(
                        "missing-hints",
                        where,
                        f"{label} has {len(hints)} non-empty hint(s) of "
                        f"{len(exercise.hints)}{detail}; every exercise needs at least 2 and no "
                        "empty ones.",
                    )
                )
    return problems


def stray_files(root: Path, catalog: Catalog) -> list[Problem]:
    """Files in the lesson trees that no catalog lesson accounts for."""
    known = {
        path
        for lesson in catalog.lessons
        for files in (lesson_files(lesson.module), optional_files(lesson.module))
        for path in files.values()
    }
    problems = []
    for tree in TREES:
        folder = root / tree
        if not folder.is_dir():
            problems.append(Problem("missing-folder", tree, "This folder is missing."))
            continue
        for path in sorted(folder.iterdir()):
            name = f"{tree}/{path.name}"
            if path.name == "__pycache__" or name in known or path.name in ALLOWED.get(tree, ()):
                continue
            problems.append(
                Problem(
                    "stray-file",
                    name,
                    "No lesson of the catalog uses this "
                    "file: add its lesson to course/catalog.toml or remove it.",
                )
            )
    return problems


def lesson_problems(root: Path, lesson: Lesson, grade: bool = True) -> list[Problem]:
    """One lesson: its files exist, its skeleton is generated from its solution, its skeleton
    and solution grade right.

    A lesson none of whose files exist yet is only announced ("coming soon") and is skipped.
    """
    files = lesson_files(lesson.module)
    present = {role: (root / path).is_file() for role, path in files.items()}
    if not any(present.values()):
        return []
    problems = [
        Problem(
            "missing-file",
            path,
            f"Lesson {lesson.id} ({lesson.module}) has no {role} file although its other files exist.",
        )
        for role, path in files.items()
        if not present[role]
    ]
    if not lesson.exercises:
        problems.append(
            Problem("no-exercises", "course/catalog.toml", f"{lesson.module} lists no exercises.")
        )
    solution = _parse_source(root, files["solution"], problems) if present["solution"] else None
    if solution is not None:
        problems += todo_problems(lesson, solution, files["solution"])
        problems += source_problems(root, lesson)
    if grade and present["grading tests"]:
        test_file = root / files["grading tests"]
        if present["skeleton"]:
            problems += skeleton_grade_problems(lesson, root / "lessons", test_file, files["skeleton"])
        if solution is not None:
            problems += solution_grade_problems(
                lesson, root / "solutions", test_file, files["solution"], files["grading tests"]
            )
    return problems


def _parse_source(root: Path, relative: str, problems: list[Problem]) -> ast.Module | None:
    try:
        return ast.parse((root / relative).read_text(encoding="utf-8"), filename=relative)
    except (SyntaxError, UnicodeDecodeError, ValueError) as error:
        problems.append(Problem("syntax-error", relative, f"The file cannot be parsed: {error}."))
        return None


def public_functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Top-level functions not starting with ``_``, and public methods as ``Class.method``."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    not item.name.startswith("_") or item.name == "__init__"
                ):
                    found[f"{node.name}.{item.name}"] = item
    return found


def todo_problems(lesson: Lesson, solution: ast.Module, where: str) -> list[Problem]:
    """Each exercise function says what to do in numbered TODO steps (in the solution, which
    the skeleton copies)."""
    functions = public_functions(solution)
    problems = []
    for exercise in lesson.exercises:
        node = functions.get(exercise.name)
        if node is None:
            problems.append(
                Problem(
                    "missing-function",
                    where,
                    f"The catalog's exercise {exercise.name} has no function of that name here.",
                )
            )
            continue
        doc = ast.get_docstring(node) or ""
        todo = doc.split("TODO", 1)[1] if "TODO" in doc else ""
        if not _TODO_STEP.search(todo):
            problems.append(
                Problem(
                    "missing-todo",
                    where,
                    f"{exercise.name}'s docstring has no "
                    "numbered TODO steps (a 'TODO:' line, then '1. ...').",
                )
            )
    return problems


def source_problems(root: Path, lesson: Lesson) -> list[Problem]:
    """Every exercise function of the solution has a solution region, and the checked-in
    skeleton is what the generator makes of the solution."""
    files = lesson_files(lesson.module)
    where, target = files["solution"], root / files["skeleton"]
    source = (root / where).read_text(encoding="utf-8")
    try:
        split = lesson_source.parse(source, where)
        generated = lesson_source.skeleton(source, lesson, where)
    except lesson_source.LessonSourceError as error:
        return [Problem("solution-region-error", where, str(error))]
    problems = []
    for exercise in lesson.exercises:
        function = split.function(exercise.name)
        if function is not None and not function.regions:
            problems.append(
                Problem(
                    "missing-solution-region",
                    where,
                    f"{exercise.name} has no solution region: put its body between "
                    f"{lesson_source.BEGIN!r} and {lesson_source.END!r} lines, so that the skeleton "
                    "leaves it to the learner.",
                )
            )
    if target.is_file() and target.read_bytes() != generated.encode("utf-8"):
        problems.append(
            Problem(
                "skeleton-stale",
                files["skeleton"],
                f"It is not what {where} generates (first difference at line "
                f"{_first_difference(target.read_text(encoding='utf-8', errors='replace'), generated)}): "
                f"edit the solution, not the skeleton, and run `{WRITE_SKELETONS}`.",
            )
        )
    return problems


def _first_difference(ours: str, theirs: str) -> int:
    a, b = ours.splitlines(), theirs.splitlines()
    return next((n for n, (x, y) in enumerate(zip(a, b, strict=False), 1) if x != y), min(len(a), len(b)) + 1)


def write_skeletons(root: Path = REPO) -> list[str]:
    """Generate the skeleton of every lesson that has a solution; the files it changed."""
    root = Path(root).resolve()
    changed = []
    for lesson in read_catalog(root).lessons:
        files = lesson_files(lesson.module)
        solution, target = root / files["solution"], root / files["skeleton"]
        if not solution.is_file():
            continue
        text = lesson_source.skeleton(solution.read_text(encoding="utf-8"), lesson, files["solution"])
        if not target.is_file() or target.read_bytes() != text.encode("utf-8"):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text.encode("utf-8"))
            changed.append(files["skeleton"])
    return changed


def _grade(lesson: Lesson, folder: Path, test_file: Path) -> LessonResult:
    """Grade in this process. pytest (importlib mode) reuses a test module already in
    sys.modules under the same name, so a test file of another root graded earlier in this
    process would silently stand in for this one: forget it before and after."""
    from course.engine.runner import grade

    sys.modules.pop(test_file.stem, None)
    try:
        return grade(lesson, folder, test_file=test_file)
    finally:
        sys.modules.pop(test_file.stem, None)


def skeleton_grade_problems(lesson: Lesson, folder: Path, test_file: Path, where: str) -> list[Problem]:
    """The fresh skeleton grades "not-started" in every single check."""
    result = _grade(lesson, folder, test_file)
    if result.message and not result.untied:
        return [
            Problem("skeleton-error", where, f"Grading the skeleton failed: {_first_line(result.message)}")
        ]
    started = [
        f"{e.name}/{c.name} ({c.status})"
        for e in result.exercises
        for c in e.checks
        if c.status != NOT_STARTED
    ]
    if not started:
        return []
    return [
        Problem(
            "skeleton-not-stub",
            where,
            f"{len(started)} check(s) do not grade "
            f"not-started, e.g. {', '.join(started[:3])}: is the skeleton solved by "
            "accident?",
        )
    ]


def solution_grade_problems(
    lesson: Lesson, folder: Path, test_file: Path, where: str, tests_where: str
) -> list[Problem]:
    """The solution passes every check, and every grading test belongs to an exercise."""
    result = _grade(lesson, folder, test_file)
    if result.untied:
        return [
            Problem(
                "untied-test",
                tests_where,
                f"Tests without an @exercise marker naming "
                f"an exercise of {lesson.module} in the catalog: {', '.join(result.untied)}.",
            )
        ]
    problems = [
        Problem("untested-exercise", tests_where, f"No grading test is marked @exercise({exercise.name!r}).")
        for exercise in result.exercises
        if not exercise.checks
    ]
    if result.passed or problems:
        return problems
    if result.message:
        return [
            Problem("solution-fails", where, f"Grading the solution failed: {_first_line(result.message)}")
        ]
    failed = [
        f"{e.name}/{c.name} ({c.status}: {_first_line(c.message)})"
        for e in result.exercises
        for c in e.checks
        if c.status != "passed"
    ]
    return [
        Problem("solution-fails", where, f"{len(failed)} check(s) do not pass, e.g. {'; '.join(failed[:2])}.")
    ]


def _first_line(text: str) -> str:
    """The first line of a message, and its last when it has more (the error of a traceback)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()] or [""]
    return (lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}")[:300]


def manifest_problems(root: Path) -> list[Problem]:
    """course/grading_manifest.json and grading_pristine.zip record today's grading tests."""
    manifest, pristine = root / "course" / "grading_manifest.json", root / "course" / "grading_pristine.zip"
    where = "course/grading_manifest.json"
    try:
        expected = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [
            Problem(
                "manifest-missing",
                where,
                f"The grading-test manifest is missing or unreadable: run `{UPDATE_MANIFEST}`.",
            )
        ]
    present = integrity.grading_files(root / "tests" / "lessons")
    stale = sorted(set(expected) ^ set(present)) + sorted(
        name for name in set(expected) & set(present) if integrity.digest(present[name]) != expected[name]
    )
    if stale:
        return [
            Problem(
                "manifest-stale",
                where,
                f"It does not match tests/lessons/ "
                f"({', '.join(stale[:4])}{', ...' if len(stale) > 4 else ''}): "
                f"run `{UPDATE_MANIFEST}`.",
            )
        ]
    try:
        with zipfile.ZipFile(pristine) as archive:
            packed = {name: hashlib.sha256(archive.read(name)).hexdigest() for name in archive.namelist()}
    except (OSError, zipfile.BadZipFile, KeyError):
        packed = {}
    if packed != expected:
        return [
            Problem(
                "manifest-stale",
                "course/grading_pristine.zip",
                "The pristine copy of "
                f"the grading tests does not match the manifest: run `{UPDATE_MANIFEST}`.",
            )
        ]
    return []
