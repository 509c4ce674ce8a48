"""A scratch copy of the course (package, skeletons, solutions, grading tests, classic mistakes)
that the project's tests can change (rename lessons, add one) and then run as a learner does:
``python -m course ...`` in a fresh process with the copy first on PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PARTS = ("course", "lessons", "solutions", "tests/lessons", "tests/mistakes")
DATA_SUFFIXES = (".py", ".toml")  # text files in which a lesson's module name is data


def copy_course(target: Path) -> Path:
    """The course's own files under ``target`` (no installed data, no caches)."""
    for part in PARTS:
        shutil.copytree(
            REPO / part, target / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_data")
        )
    return target


def lesson_data_files(root: Path) -> list[Path]:
    """Every file that may name a lesson: lesson sources, grading tests, pictures modules,
    mistakes and fixtures, and the package's data files (never its Python code)."""
    files = [p for part in PARTS[1:] for p in sorted((root / part).rglob("*")) if p.is_file()]
    return files + sorted((root / "course" / "content").glob("*.toml"))


def rename_lessons(root: Path, renames: dict[str, str]) -> None:
    """Rename lesson modules everywhere in the copy's lesson data: file names and text."""
    for path in lesson_data_files(root):
        if path.suffix in DATA_SUFFIXES:
            text = path.read_text(encoding="utf-8")
            for old, new in renames.items():
                text = text.replace(old, new)
            path.write_text(text, encoding="utf-8")
        renamed = path.name
        for old, new in renames.items():
            renamed = renamed.replace(old, new)
        if renamed != path.name:
            path.rename(path.with_name(renamed))


def environment(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURSE_")}
    env.update(PYTHONPATH=str(root), COURSE_SERVER="off", NO_COLOR="1", COLUMNS="160")
    return env


def course(root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``course ARGS`` run from the copy, in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "course", *args],
        cwd=cwd,
        env=environment(root),
        capture_output=True,
        text=True,
        timeout=120,
    )


def ready_workspace(root: Path) -> Path:
    """Record the copy's grading folder as pristine (as a maintainer does after changing it),
    then make a workspace with ``course init`` holding every solution of the copy."""
    workspace = root.parent / "workspace"
    script = (
        "import sys; from course.engine.integrity import write_manifest; write_manifest();"
        "import course; print(course.__file__);"
        "from course.cli import main; sys.argv = ['course', 'init', sys.argv[1]]; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(workspace)],
        cwd=root.parent,
        env=environment(root),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.splitlines()[0]).is_relative_to(root), "not the copy's package"
    for solution in (root / "solutions").glob("*.py"):
        shutil.copy(solution, workspace)
    return workspace
