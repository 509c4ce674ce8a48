"""Where the course's own files live: its data beside this module (``CONTENT_DIR``), the
package (``PACKAGE_DIR``), and the skeletons, solutions and grading tests (``data_dir``).

In a wheel the skeletons, solutions and grading tests travel as package data under
``course/_data``; in a clone (editable install or running from the source tree) they are the
top-level ``lessons/``, ``solutions/`` and ``tests/lessons/`` folders. The package finds them
only through here.
"""

from __future__ import annotations

from pathlib import Path

CONTENT_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = CONTENT_DIR.parent
_DATA = PACKAGE_DIR / "_data"
_REPO = PACKAGE_DIR.parent

# kind -> (folder inside _data, folder inside a clone)
_KINDS = {
    "lessons": ("lessons", "lessons"),
    "solutions": ("solutions", "solutions"),
    "grading": ("grading", "tests/lessons"),
}


def data_dir(kind: str) -> Path:
    """The folder that holds one kind of course file ("lessons", "solutions" or "grading")."""
    packaged, cloned = _KINDS[kind]
    if (_DATA / packaged).is_dir():
        return _DATA / packaged
    return _REPO / cloned


def skeleton_path(module: str) -> Path:
    return data_dir("lessons") / f"{module}.py"


def solution_path(module: str) -> Path:
    return data_dir("solutions") / f"{module}.py"


def grading_test_path(module: str) -> Path:
    return data_dir("grading") / f"test_{module}.py"


def pictures_path(module: str) -> Path:
    """The lesson's pictures module (what it wants drawn), beside its grading tests."""
    return data_dir("grading") / f"pictures_{module}.py"
