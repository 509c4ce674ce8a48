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


def _function_at(tree: ast.Module, function: str, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function named ``function`` that holds ``line``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return node
    return None


def _statements_before(tree: ast.Module, function: str, line: int) -> list[str]:
    """The statements of the function ``function`` that holds ``line``, up to that line."""
    node = _function_at(tree, function, line)
    if node is None:
        return []
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


def _parsed(folder: Path, frame: dict) -> tuple[ast.Module, Path] | None:
    """The file of ``frame`` in ``folder``, parsed, and its path; None unless it is a plain .py
    name (as the worker reports it) of a regular file, not too large, that parses."""
    name = str(frame.get("file", ""))
    if "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".py"):
        return None
    path = Path(folder) / name
    try:
        found_stat = path.lstat()  # a regular file only: no FIFO, device or link to one
    except OSError:
        return None
    if not stat.S_ISREG(found_stat.st_mode) or found_stat.st_size >= LARGEST_FILE:
        return None
    tree = _tree(path, (found_stat.st_mtime_ns, found_stat.st_size))
    return None if tree is None else (tree, path)


def around(folder: Path | None, frames: list[dict]) -> list[str]:
    """For each frame, innermost first: its line of code, then its function's statements up to
    that line, last first."""
    found: list[str] = []
    for frame in reversed(frames):
        found.append(str(frame.get("code", "")))
        parsed = None if folder is None else _parsed(folder, frame)
        if parsed is not None:
            found += reversed(
                _statements_before(parsed[0], str(frame.get("function", "")), int(frame.get("line", 0)))
            )
    return found


def _last_assignment(function: ast.AST, name: str, before: int) -> ast.stmt | None:
    """The last statement of ``function`` before line ``before`` that assigns ``name``."""
    last: ast.stmt | None = None
    for node in ast.walk(function):
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.lineno >= before:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for target in targets for t in ast.walk(target)):
            if last is None or node.lineno > last.lineno:
                last = node
    return last


def operand_assignments(folder: Path | None, frames: list[dict]) -> list[tuple[str, int, str]]:
    """For the innermost frame: each name its failing statement reads that the same function
    assigned on an earlier line, with that line, (name, line number, code). An index or shape
    error in ``scores[i]`` often comes from where ``scores`` was made, lines before."""
    parsed = None if folder is None or not frames else _parsed(folder, frames[-1])
    if parsed is None:
        return []
    path = parsed[1]
    try:
        found_stat = path.lstat()
    except OSError:
        return []
    stamp = (found_stat.st_mtime_ns, found_stat.st_size)
    line = int(frames[-1].get("line", 0))
    return list(_operands(path, stamp, str(frames[-1].get("function", "")), line))


@lru_cache(maxsize=64)
def _operands(path: Path, stamp: tuple[int, int], name: str, line: int) -> tuple[tuple[str, int, str], ...]:
    """``operand_assignments`` of the function ``name`` failing at ``line`` of the file at
    ``path`` as it was at ``stamp``: many checks of one grade fail on the same line."""
    tree = _tree(path, stamp)
    function = None if tree is None else _function_at(tree, name, line)
    if function is None:
        return ()
    holding = [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.stmt)
        and node is not function
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    if not holding:
        return ()
    failing = min(holding, key=lambda node: (node.end_lineno or node.lineno) - node.lineno)  # innermost
    if isinstance(failing, (ast.Raise, ast.Assert)):
        return ()  # the learner's own refusal: its operands are not what went wrong
    names = dict.fromkeys(
        node.id for node in ast.walk(failing) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    )
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ()
    found = []
    for operand in names:
        assigned = _last_assignment(function, operand, failing.lineno)
        if assigned is not None and assigned.lineno <= len(lines):
            found.append((operand, assigned.lineno, lines[assigned.lineno - 1].strip()[:200]))
    return tuple(found)
