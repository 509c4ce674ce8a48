"""The course repository as `course dev check` reads it: its root, the catalog, where each lesson's
files are, and the Problem a check reports (data: an id, a file, one sentence; never printed here)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from course.content.catalog import Catalog, catalog_from_data

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Problem:
    id: str  # short and stable, e.g. "missing-file"
    file: str  # relative to the root, "/"-separated
    message: str  # one sentence for the maintainer

    def __str__(self) -> str:
        return f"{self.id}  {self.file}: {self.message}"


def lesson_files(module: str) -> dict[str, str]:
    """What each available lesson has, by role, as paths relative to the root."""
    return {
        "skeleton": f"lessons/{module}.py",
        "solution": f"solutions/{module}.py",
        "grading tests": f"tests/lessons/test_{module}.py",
        "classic mistakes": f"tests/mistakes/{module}.toml",
    }


def optional_files(module: str) -> dict[str, str]:
    """Files a lesson may have, by role (not reported as missing, nor as stray)."""
    return {"pictures": f"tests/lessons/pictures_{module}.py"}


def read_catalog(root: Path) -> Catalog:
    """``root/course/content/catalog.toml`` parsed like the course's own (its paths are not used)."""
    with open(root / "course" / "content" / "catalog.toml", "rb") as handle:
        return catalog_from_data(tomllib.load(handle))
