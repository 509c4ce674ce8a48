"""Shared helpers of the project's own tests: grade a folder the way a learner's check does."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

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
