"""The learner's code around an error, as code: what a grading test's ``CODE_MISTAKES`` read.

A mistake such as ``k_t = k.T`` raises a line later (``scores = q @ k_t``), so the line that
raised is not enough: for each frame the learner's error went through, innermost first, this
gives that line, then the statements of its function up to it, as ``ast.unparse`` writes them
(no comments, no docstrings: the lesson's TODO text mentions the very mistakes). The file is
parsed here, in the grader, never run; one that does not parse (changed since) gives nothing.
"""

from __future__ import annotations

import ast
import stat
from functools import lru_cache
from pathlib import Path

MOST_LINES = 200  # statements of one function that are read back
LARGEST_FILE = 2**20  # as report.LESSON_FILE_LIMIT: a larger file is not read


@lru_cache(maxsize=16)
def _tree(path: Path, stamp: tuple[int, int]) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _statements_before(tree: ast.Module, function: str, line: int) -> list[str]:
    """The statements of the function ``function`` that holds ``line``, up to that line."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != function:
            continue
        if not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        found = []
        for statement in ast.walk(node):
            if not isinstance(statement, ast.stmt) or statement is node:
                continue
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # a docstring or a bare string
            if statement.lineno <= line and not isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                try:
                    found.append(ast.unparse(statement).splitlines()[0])
                except (ValueError, RecursionError):
                    continue
        return found[-MOST_LINES:]
    return []


def around(folder: Path | None, frames: list[dict]) -> list[str]:
    """For each frame, innermost first: its line of code, then its function's statements up to
    that line, last first."""
    found: list[str] = []
    for frame in reversed(frames):
        found.append(str(frame.get("code", "")))
        if folder is None:
            continue
        name = str(frame.get("file", ""))  # from the worker: a plain .py name, or nothing is read
        if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".py"):
            continue
        path = Path(folder) / name
        try:
            found_stat = path.lstat()  # a regular file only: no FIFO, device or link to one
        except OSError:
            continue
        if not stat.S_ISREG(found_stat.st_mode) or found_stat.st_size >= LARGEST_FILE:
            continue
        tree = _tree(path, (found_stat.st_mtime_ns, found_stat.st_size))
        if tree is not None:
            found += reversed(
                _statements_before(tree, str(frame.get("function", "")), int(frame.get("line", 0)))
            )
    return found
