"""Named misconceptions (``course/misconceptions.toml``): a diagnosed mistake that shows one of
them gets its id on the check and its one-line fix idea in the message."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from course.engine.results import LessonResult

REGISTRY = Path(__file__).resolve().parents[1] / "misconceptions.toml"


@dataclass(frozen=True)
class Misconception:
    id: str
    name: str
    fix: str
    matches: tuple[str, ...]
    example: str


@lru_cache(maxsize=1)
def load() -> tuple[Misconception, ...]:
    with open(REGISTRY, "rb") as handle:
        entries = tomllib.load(handle)["misconception"]
    return tuple(
        Misconception(e["id"], e["name"], e["fix"], tuple(e["matches"]), e["example"]) for e in entries
    )


def find(mistake: str) -> Misconception | None:
    """The misconception a diagnosed mistake's description shows, if any."""
    return next((m for m in load() if any(text in mistake for text in m.matches)), None)


def label(result: LessonResult) -> None:
    """Tag every check whose mistake shows a named misconception, and add its fix idea."""
    for exercise in result.exercises:
        for check in exercise.checks:
            found = find(check.mistake) if check.mistake else None
            if found is not None:
                check.misconception = found.id
                check.message += f"\nMisconception: {found.name}. Fix idea: {found.fix}"
