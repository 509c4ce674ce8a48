"""Named misconceptions (``course/content/misconceptions.toml``): a diagnosed classic mistake that shows
one of them (a grading test's ``Mistake(..., misconception="<id>")``) gets its fix idea in the
check's message. Looked up by id only: no sentence written for people is read here."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache

from course.content import resources
from course.engine.results import LessonResult

REGISTRY = resources.CONTENT_DIR / "misconceptions.toml"


@dataclass(frozen=True)
class Misconception:
    id: str
    name: str
    fix: str


@lru_cache(maxsize=1)
def load() -> tuple[Misconception, ...]:
    with open(REGISTRY, "rb") as handle:
        entries = tomllib.load(handle)["misconception"]
    return tuple(Misconception(e["id"], e["name"], e["fix"]) for e in entries)


def ids() -> frozenset[str]:
    return frozenset(m.id for m in load())


def find(misconception_id: str) -> Misconception | None:
    """The registry's entry of that id, if any."""
    return next((m for m in load() if m.id == misconception_id), None)


def label(result: LessonResult) -> None:
    """Add the fix idea to every check whose diagnosed mistake shows a named misconception; an
    id the registry does not hold is dropped (tests/test_misconceptions.py keeps them known)."""
    for exercise in result.exercises:
        for check in exercise.checks:
            found = find(check.misconception) if check.misconception else None
            if found is None:
                check.misconception = ""
                continue
            check.name_mistake(f"\nMisconception: {found.name}. Fix idea: {found.fix}")
