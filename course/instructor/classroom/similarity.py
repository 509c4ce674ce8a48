"""Submissions whose code is the same: as a reference solution, or as another submission.

`course grade` compares code, not bytes: two files are the same when their syntax trees are,
with docstrings left out. Comments, blank lines, indentation, spacing, line breaks, quotes,
redundant parentheses and trailing commas never reach the tree, so reformatting a copy (by hand
or with a formatter) or rewriting its comments and docstrings does not hide it; renaming a
variable does. A file that is the pristine skeleton is never flagged (nothing was written).
The learner's helper modules (``utils.py``, which lesson files import) are compared too: with
every lesson's reference solution, and with other submissions' helpers, so moving a reference
solution's code into a helper does not hide it.

A match is a problem on the submission's row (the gradebook's problems column, the JSON report,
JUnit properties); it changes no points: a short lesson can be solved the same way honestly, so
the instructor decides.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from course.content.catalog import Lesson

_DOCUMENTED = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def fingerprint(source: bytes) -> str | None:
    """A digest of the code's syntax tree without docstrings; None when it does not parse."""
    try:
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, _DOCUMENTED) and node.body and _is_docstring(node.body[0]):
                node.body = node.body[1:]
        text = ast.dump(tree, annotate_fields=False, include_attributes=False)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def fingerprints(sources: Mapping[str, bytes], lessons: Iterable[Lesson]) -> dict[str, str]:
    """Each lesson's fingerprint (by module) of the files a bundle held (by file name)."""
    found = {}
    for lesson in lessons:
        if lesson.file_name in sources:
            digest = fingerprint(sources[lesson.file_name])
            if digest is not None:
                found[lesson.module] = digest
    return found


def helper_fingerprints(helpers: Mapping[str, bytes]) -> dict[str, str]:
    """Each helper's fingerprint (by file name) of the helper modules a submission held."""
    found = {}
    for file, source in helpers.items():
        digest = fingerprint(source)
        if digest is not None:
            found[file] = digest
    return found


def _of_file(path: Path) -> str | None:
    try:
        return fingerprint(path.read_bytes())
    except OSError:
        return None


def flag(rows: Sequence[dict], lessons: Sequence[Lesson]) -> None:
    """Add a problem (and an entry under ``similar``) to every row whose lesson file is the same
    code as the lesson's reference solution or as another row's file, skeletons excepted."""
    for lesson in lessons:
        skeleton = _of_file(lesson.skeleton)
        reference = _of_file(lesson.solution) if lesson.solution.is_file() else None
        groups: dict[str, list[dict]] = {}
        for row in rows:
            digest = row.get("fingerprints", {}).get(lesson.module)
            if digest is not None and digest != skeleton:
                groups.setdefault(digest, []).append(row)
        for digest, group in groups.items():
            for row in group:
                others = [other["file"] for other in group if other is not row]
                if digest == reference:
                    _note(row, lesson.file_name, "the reference solution", "reference solution")
                if others:
                    _note(row, lesson.file_name, f"the same code as {_listed(others)}", *others)
    _flag_helpers(rows, lessons)


def _flag_helpers(rows: Sequence[dict], lessons: Sequence[Lesson]) -> None:
    """Add a problem (and an entry under ``similar``) to every row with a helper module that is
    the same code as a lesson's reference solution or as another row's helper, skeletons
    excepted."""
    references: dict[str, Lesson] = {}
    skeletons = set()
    for lesson in lessons:
        reference = _of_file(lesson.solution) if lesson.solution.is_file() else None
        if reference is not None:
            references.setdefault(reference, lesson)
        skeletons.add(_of_file(lesson.skeleton))
    groups: dict[str, list[tuple[dict, str]]] = {}
    for row in rows:
        for file, digest in row.get("helper_fingerprints", {}).items():
            if digest not in skeletons:
                groups.setdefault(digest, []).append((row, file))
    for digest, group in groups.items():
        for row, file in group:
            if digest in references:
                lesson = references[digest]
                _note(row, file, f"the reference solution of {lesson.file_name}", "reference solution")
            others = [other["file"] for other, _ in group if other is not row]
            if others:
                _note(row, file, f"the same code as {_listed(others)}", *others)


def _listed(files: list[str]) -> str:
    return ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")


def _note(row: dict, file: str, what: str, *matches: str) -> None:
    row["problems"].append(f"{file} is {what} up to formatting and comments")
    row.setdefault("similar", {}).setdefault(file.removesuffix(".py"), []).extend(matches)
