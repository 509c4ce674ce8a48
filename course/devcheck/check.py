"""The maintainer's guard (`course dev check`): the catalog and the course's trees agree.

Every check reads a repository root given as a parameter (tests point it at a copy) and returns
problems as data: a short id, the file concerned (relative to the root) and one sentence. The
solutions in ``solutions/`` are the single source of each lesson's text and code: every exercise
function keeps the learner's docstring with numbered TODO steps and a solution region, and the
skeleton in ``lessons/`` must be exactly what ``course.content.lesson_source.skeleton`` generates from it
(`course dev skeletons`). Sources are read with ``ast`` and ``tokenize``, never imported; only the
grader imports them, in its worker.
"""

from __future__ import annotations

import ast
import hashlib
import json
import tomllib
import zipfile
from pathlib import Path

from course.content.catalog import Catalog, Lesson
from course.devcheck.glossary import glossary_problems
from course.devcheck.grading import hint_problems, skeleton_grade_problems, solution_grade_problems
from course.devcheck.repository import REPO, Problem, lesson_files, optional_files, read_catalog
from course.devcheck.sources import parse_source, source_problems, todo_problems
from course.engine import integrity

UPDATE_MANIFEST = "python tools/update_grading_manifest.py"
# Folders of the repository whose every file must belong to a catalog lesson.
TREES = ("lessons", "solutions", "tests/lessons", "tests/mistakes")
ALLOWED = {"tests/lessons": {"fixtures"}}  # besides __pycache__, which is ignored everywhere


def check(root: Path = REPO, grade: bool = True, hints: bool | None = None) -> list[Problem]:
    """Every problem found in the course at ``root``; empty when all is consistent.

    ``grade=False`` skips grading skeletons and solutions (the only slow part); ``hints``
    (default: as ``grade``) grades each code hint in place of its function's solution.
    """
    hints = grade if hints is None else hints
    root = Path(root).resolve()
    try:
        catalog = read_catalog(root)
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as error:
        return [
            Problem(
                "catalog-unreadable",
                "course/content/catalog.toml",
                f"The catalog cannot be read ({type(error).__name__}: {error}).",
            )
        ]
    problems = catalog_problems(catalog) + stray_files(root, catalog)
    for lesson in catalog.lessons:
        problems += lesson_problems(root, lesson, grade, hints)
    return problems + manifest_problems(root) + glossary_problems(root, catalog)


def catalog_problems(catalog: Catalog) -> list[Problem]:
    """Unique modules and exercise names; every exercise has a summary and >= 2 real hints."""
    where = "course/content/catalog.toml"
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
                    "file: add its lesson to course/content/catalog.toml or remove it.",
                )
            )
    return problems


def lesson_problems(root: Path, lesson: Lesson, grade: bool = True, hints: bool = False) -> list[Problem]:
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
            Problem("no-exercises", "course/content/catalog.toml", f"{lesson.module} lists no exercises.")
        )
    solution = parse_source(root, files["solution"], problems) if present["solution"] else None
    if solution is not None:
        problems += todo_problems(lesson, solution, files["solution"])
        problems += source_problems(root, lesson)
    if present["grading tests"]:
        problems += untitled_checks(root, files["grading tests"])
    if grade and present["grading tests"]:
        test_file = root / files["grading tests"]
        if present["skeleton"]:
            problems += skeleton_grade_problems(lesson, root / "lessons", test_file, files["skeleton"])
        if solution is not None:
            problems += solution_grade_problems(
                lesson, root / "solutions", test_file, files["solution"], files["grading tests"]
            )
        if solution is not None and hints:
            problems += hint_problems(lesson, root, test_file)
    return problems


def untitled_checks(root: Path, path: str) -> list[Problem]:
    """Every grading test has a docstring: its first line is the title a learner reads above a
    failed check (a title made from the function's name reads badly)."""
    try:
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []  # the grading run reports a file that cannot be read
    return [
        Problem(
            "untitled-check",
            path,
            f"{node.name} has no docstring: its first line is the title a learner reads when it fails.",
        )
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test")
        and not (ast.get_docstring(node) or "").strip()
    ]


def manifest_problems(root: Path) -> list[Problem]:
    """course/content/grading_manifest.json and grading_pristine.zip record today's grading tests."""
    manifest, pristine = (
        root / "course" / "content" / "grading_manifest.json",
        root / "course" / "content" / "grading_pristine.zip",
    )
    where = "course/content/grading_manifest.json"
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
                "course/content/grading_pristine.zip",
                "The pristine copy of "
                f"the grading tests does not match the manifest: run `{UPDATE_MANIFEST}`.",
            )
        ]
    return []
