"""`course dev check` on a lesson's sources: the solution is the single source (TODO steps and
solution regions), and the checked-in skeleton is exactly what ``course.content.lesson_source`` generates
from it (`course dev skeletons` writes it). Sources are read with ``ast``, never imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from course.content import lesson_source
from course.content.catalog import Lesson
from course.devcheck.repository import REPO, Problem, lesson_files, read_catalog

WRITE_SKELETONS = "course dev skeletons"
_TODO_STEP = re.compile(r"^\s*1\.\s+\S", re.MULTILINE)
# A call of numpy/math/torch (`np.where(`) or a method call (`x.reshape(`, `).sum(`): the code
# itself, which belongs in the last hint tier. Attributes (`k.T`, `q.shape[-1]`) and the
# learner's own functions (`softmax(x)`) may be named.
CODE_CALL = re.compile(r"\b(?:np|numpy|math|torch)\.[\w.]+\s*\(|[\w)\]]\.[A-Za-z_]\w*\(")


def parse_source(root: Path, relative: str, problems: list[Problem]) -> ast.Module | None:
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
        problems += _dictating(exercise.name, "TODO step", todo, where)
        for tier, hint in enumerate(exercise.hints[:-1], start=1):
            problems += _dictating(exercise.name, f"hint {tier}", hint, "course/content/catalog.toml")
    return problems


def _dictating(name: str, what: str, text: str, where: str) -> list[Problem]:
    """A TODO step or an early hint that writes the numpy line says *how* instead of *what*."""
    calls = sorted({match.group(0) for match in CODE_CALL.finditer(text)})
    if not calls:
        return []
    return [
        Problem(
            "code-in-todo",
            where,
            f"{name}'s {what} writes code ({', '.join(calls)}): say what to compute and which "
            "shapes go in and out; the numpy call belongs in the last hint tier.",
        )
    ]


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
