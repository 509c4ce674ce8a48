"""Submissions whose code is the same: as a reference solution, or as another submission.

`course grade` compares code, not bytes: two files are the same when their syntax trees are,
with docstrings left out. Comments, blank lines, indentation, spacing, line breaks, quotes,
redundant parentheses and trailing commas never reach the tree, so reformatting a copy (by hand
or with a formatter) or rewriting its comments and docstrings does not hide it; renaming a
variable does. A file that is the pristine skeleton is never flagged (nothing was written).

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
                    _note(row, lesson, "the reference solution", "reference solution")
                if others:
                    shown = ", ".join(others[:5]) + (
                        f" and {len(others) - 5} more" if len(others) > 5 else ""
                    )
                    _note(row, lesson, f"the same code as {shown}", *others)


def _note(row: dict, lesson: Lesson, what: str, *matches: str) -> None:
    row["problems"].append(f"{lesson.file_name} is {what} up to formatting and comments")
    row.setdefault("similar", {}).setdefault(lesson.module, []).extend(matches)
