"""Which lessons use which: read once from the reference solutions' imports.

A solution imports the earlier lessons it builds on (``from l02_softmax import softmax``); those
import statements are the one record of the course's dependencies, read here with ``ast`` (never
run). Where an installation has no solutions, the skeleton (generated from the solution, with the
same imports) is read instead.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from course.content.catalog import Catalog, Lesson


def _imported_modules(path: Path) -> frozenset[str]:
    """Top-level module names a Python file imports; none when it cannot be read or parsed."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return frozenset()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.partition(".")[0])
    return frozenset(found)


@lru_cache(maxsize=64)
def _uses(module: str, source: Path, known: frozenset[str]) -> frozenset[str]:
    return (_imported_modules(source) & known) - {module}


def uses(catalog: Catalog, lesson: Lesson) -> frozenset[str]:
    """The modules of other lessons that ``lesson``'s code imports directly."""
    return _uses(lesson.module, lesson.reference, frozenset(each.module for each in catalog.lessons))


def dependents(catalog: Catalog, lesson: Lesson) -> list[Lesson]:
    """The lessons that use ``lesson`` directly or through another lesson, in course order."""
    found: set[str] = {lesson.module}
    changed = True  # to a fixed point: course order is not assumed to follow the imports
    while changed:
        changed = False
        for each in catalog.lessons:
            if each.module not in found and uses(catalog, each) & found:
                found.add(each.module)
                changed = True
    return [each for each in catalog.lessons if each.module in found and each is not lesson]
