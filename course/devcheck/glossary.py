"""`course dev check` on the glossary (``course/content/glossary.toml``): every lesson it names is in
the catalog and defines the function named; every number it cites is written in its text and
equals what its expression computes with the reference solutions.

An expression is parsed with ``ast`` and must be ONE call of a function named in the entry's
``lessons`` with literal arguments (numbers, strings, None, True/False, lists and tuples of them):
nothing else is evaluated. The function comes from ``solutions/<module>.py`` of the root, imported
by path in this process: the maintainers' own code, never a learner's. A root without a glossary
(a cut copy of the course) has nothing to check.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import re
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from course.content.catalog import Catalog
from course.content.glossary import Entry, Glossary, GlossaryError, parse
from course.devcheck.repository import Problem

WHERE = "course/content/glossary.toml"
# 1050624 or 1,050,624 (a number the text cites), not a digit run inside a word like "fp16"
_NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?!\w)")
LARGE = 100_000  # a number this large in a text must be computed (or be an argument) there


def glossary_problems(root: Path, catalog: Catalog, path: Path | None = None) -> list[Problem]:
    """Every problem of the glossary at ``path`` (default ``root/course/glossary.toml``)."""
    path = path or root / WHERE
    if not path.is_file():
        return []
    try:
        with open(path, "rb") as handle:
            glossary = parse(tomllib.load(handle))
    except (OSError, tomllib.TOMLDecodeError, GlossaryError) as error:
        return [Problem("glossary-unreadable", WHERE, f"The glossary cannot be used: {error}")]
    problems = _name_problems(glossary)
    with _solutions(root, catalog) as function:
        for label, entry in _entries(glossary):
            problems += _entry_problems(label, entry, catalog, root, function)
    return problems


def _entries(glossary: Glossary) -> Iterator[tuple[str, Entry]]:
    for term in glossary.terms:
        yield f"term '{term.name}'", term
    for answer in glossary.faq:
        yield f"question '{answer.question}'", answer


def _name_problems(glossary: Glossary) -> list[Problem]:
    """Names and aliases are unique; every related term exists."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for term in glossary.terms:
        for name in (term.name, *term.aliases):
            other = seen.setdefault(name.lower(), term.name)
            if other != term.name:
                problems.append(
                    Problem("glossary-duplicate", WHERE, f"'{name}' names both '{other}' and '{term.name}'.")
                )
    names = {term.name.lower() for term in glossary.terms}
    for term in glossary.terms:
        problems += [
            Problem(
                "glossary-related", WHERE, f"Term '{term.name}' relates to '{name}', which is not a term."
            )
            for name in term.related
            if name.lower() not in names
        ]
    return problems


def _entry_problems(
    label: str, entry: Entry, catalog: Catalog, root: Path, function: Callable[[str, str], object]
) -> list[Problem]:
    problems: list[Problem] = []

    def report(kind: str, message: str) -> None:
        problems.append(Problem(f"glossary-{kind}", WHERE, f"The {label} {message}"))

    ids = {lesson.id: lesson for lesson in catalog.lessons}
    written = {id: root / "solutions" / lesson.file_name for id, lesson in ids.items()}
    for place in entry.lessons:
        if place.lesson not in ids:
            report("lesson", f"names lesson {place.lesson!r}, which the catalog does not list.")
        elif written[place.lesson].is_file() and place.function not in _defined(written[place.lesson]):
            report("function", f"names {place.function} in lesson {place.lesson}, whose solution lacks it.")
    scope = {(place.lesson, place.function) for place in entry.lessons}
    cited = _cited(getattr(entry, "text", ""))
    arguments: set[object] = set()
    for number in entry.numbers:
        shown = f"{number.value:,}" if isinstance(number.value, int) else repr(number.value)
        if number.value not in {value for value, _ in cited}:
            report("number-text", f"lists {shown} ({number.expression}) but its text does not cite it.")
        try:
            name, args, kwargs = parse_call(number.expression)
        except ValueError as error:
            report("expression", f"has {number.expression!r}, which {error}.")
            continue
        arguments.update(a for a in [*args, *kwargs.values()] if isinstance(a, (int, float)))
        if (number.lesson, name) not in scope:
            report(
                "expression",
                f"computes with {name}, which its lessons do not name in lesson {number.lesson}.",
            )
            continue
        if number.lesson not in ids or not written[number.lesson].is_file():
            continue  # an unknown lesson is reported above; a lesson not written yet is skipped
        try:
            result = function(ids[number.lesson].module, name)(*args, **kwargs)  # type: ignore[operator]
        except Exception as error:  # the maintainers' own code: reported, not raised
            report("number", f"has {number.expression}, which raised {type(error).__name__}: {error}.")
            continue
        if not _equal(result, number.value):
            report(
                "number", f"cites {shown}, but {number.expression} is {result!r} with the reference solution."
            )
    listed = {number.value for number in entry.numbers}
    for value, as_written in cited:
        if abs(value) >= LARGE and value not in listed and value not in arguments:
            report("number-text", f"cites {as_written} without an expression that computes it.")
    return problems


def parse_call(expression: str) -> tuple[str, list[object], dict[str, object]]:
    """``name(literal, ..., key=literal)`` as (name, args, kwargs); ValueError for anything else."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError("is not Python") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ValueError("is not a call of a solution function by its name")
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(k.arg is None for k in call.keywords):
        raise ValueError("unpacks arguments (* or **): write them out")
    try:
        args = [ast.literal_eval(arg) for arg in call.args]
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in call.keywords}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError("has an argument that is not a literal (a number, string, list, ...)") from None
    return call.func.id, args, kwargs


def _defined(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return set()
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _cited(text: str) -> list[tuple[int | float, str]]:
    """The numbers written in a text, each as a value and as written."""
    found: list[tuple[int | float, str]] = []
    for match in _NUMBER.finditer(text):
        digits = match.group().replace(",", "")
        found.append((float(digits) if "." in digits else int(digits), match.group()))
    return found


def _equal(result: object, value: int | float) -> bool:
    if isinstance(value, int) and not isinstance(result, float):
        try:
            return int(result) == value and float(result) == value  # type: ignore[call-overload, arg-type]
        except (TypeError, ValueError, OverflowError):
            return False
    try:
        return math.isclose(float(result), float(value), rel_tol=1e-9)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


@contextmanager
def _solutions(root: Path, catalog: Catalog) -> Iterator[Callable[[str, str], object]]:
    """``function(module, name)``: a function of a reference solution of ``root``, imported by
    path with its own lessons importable (``from l02_softmax import softmax``). Lesson modules
    already imported in this process (a learner's, by in-process grading) are set aside and put
    back afterwards, so each side sees its own."""
    folder = str(root / "solutions")
    modules = {lesson.module for lesson in catalog.lessons}
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name in modules}
    sys.path.insert(0, folder)
    loaded: dict[str, ModuleType] = {}

    def function(module: str, name: str) -> object:
        if module not in loaded:
            spec = importlib.util.spec_from_file_location(module, Path(folder) / f"{module}.py")
            assert spec is not None and spec.loader is not None
            found = importlib.util.module_from_spec(spec)
            sys.modules[module] = found
            spec.loader.exec_module(found)
            loaded[module] = found
        return getattr(loaded[module], name)

    try:
        yield function
    finally:
        sys.path.remove(folder)
        for name in [name for name in sys.modules if name in modules]:
            del sys.modules[name]
        sys.modules.update(saved)
