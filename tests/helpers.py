"""Shared helpers of the project's own tests: grade a folder the way a learner's check does."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
LESSONS = REPO / "lessons"
MISTAKES = REPO / "tests" / "mistakes"


def grade_folder(folder: Path, lesson: str, timeout: float = 120) -> dict:
    """Grade ``folder`` as ``lesson`` in a fresh process (``python -m course.engine``)."""
    done = subprocess.run([sys.executable, "-m", "course.engine", str(folder), lesson],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode in (0, 1), f"grader exited {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def solutions_with(tmp_path: Path, module: str, source: str) -> Path:
    """A copy of every solution, with ``module`` replaced by ``source``."""
    folder = tmp_path / "ws"
    shutil.copytree(SOLUTIONS, folder, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    (folder / f"{module}.py").write_text(source)
    return folder


def all_messages(result: dict) -> str:
    parts = [result.get("message", ""), result.get("note", ""), result.get("notice", "")]
    for exercise in result["exercises"]:
        parts += [check["message"] for check in exercise["checks"]]
    return "\n".join(parts)


LESSON_MODULE = re.compile(r"l\d\d_\w+")


def import_lessons(*modules: str, folder: Path = SOLUTIONS) -> tuple[ModuleType, ...]:
    """``folder/<module>.py`` for each module, imported by name as a learner's are, together with
    the lesson modules they import from ``folder``. sys.path and sys.modules are restored
    afterwards, so solutions and skeletons imported by different tests never mix."""
    saved = {name: sys.modules.pop(name) for name in list(sys.modules)
             if LESSON_MODULE.fullmatch(name)}
    sys.path.insert(0, str(folder))
    try:
        return tuple(importlib.import_module(module) for module in modules)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if LESSON_MODULE.fullmatch(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
