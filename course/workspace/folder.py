"""The learner's workspace: a folder of lesson files marked by a ``.course/`` folder.

A workspace is found from ``--workspace DIR``, then ``COURSE_WORKSPACE``, then by walking up from
the current folder, then ``./workspace``. ``init`` copies the pristine skeletons in, never
overwriting a file the learner already has.
"""

from __future__ import annotations

import os
from pathlib import Path

from course.content.catalog import Catalog, Lesson, Record

MARKER = ".course"
DEFAULT_NAME = "workspace"


class WorkspaceProblem(Exception):
    """A workspace that cannot be found or used; the message tells the learner what to do."""


class Workspace(Record):
    __slots__ = ("root",)
    root: Path

    def __init__(self, root: Path) -> None:
        super().__init__(root)

    @property
    def course_dir(self) -> Path:
        return self.root / MARKER

    @property
    def state_path(self) -> Path:
        return self.course_dir / "state.json"

    @property
    def backups(self) -> Path:
        return self.course_dir / "backups"

    def lesson_file(self, lesson: Lesson) -> Path:
        return self.root / lesson.file_name

    def display(self, path: Path) -> str:
        """``path`` as the learner would type it from the current folder."""
        try:
            return os.path.relpath(path)
        except ValueError:
            return str(path)


def is_workspace(folder: Path) -> bool:
    return (folder / MARKER).is_dir()


def find(explicit: str | os.PathLike | None = None, start: Path | None = None) -> Workspace | None:
    """The workspace the learner means, or None when there is none yet."""
    named = explicit or os.environ.get("COURSE_WORKSPACE")
    if named:
        folder = Path(named).expanduser().resolve()
        if not is_workspace(folder):
            raise WorkspaceProblem(
                f"{folder} is not a course workspace (it has no {MARKER}/ "
                f"folder). Create one with `course init {named}`."
            )
        return Workspace(folder)
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if is_workspace(folder):
            return Workspace(folder)
    if is_workspace(here / DEFAULT_NAME):
        return Workspace(here / DEFAULT_NAME)
    return None


def init(folder: Path, catalog: Catalog, skip: frozenset[str] = frozenset()) -> tuple[Workspace, list[Path]]:
    """Create (or complete) a workspace; returns it and the lesson files it added. Lessons in
    ``skip`` (files placed before, then deleted by the learner) are not put back."""
    folder = folder.expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise WorkspaceProblem(f"{folder} exists and is not a folder.")
    if folder.is_dir() and not is_workspace(folder) and _has_lesson_files(folder, catalog):
        raise WorkspaceProblem(
            f"{folder} already holds lesson files but no {MARKER}/ folder; "
            "choose an empty folder so nothing of yours is overwritten."
        )
    (folder / MARKER).mkdir(parents=True, exist_ok=True)
    workspace = Workspace(folder)
    added = []
    for lesson in catalog.available():
        target = workspace.lesson_file(lesson)
        if not target.exists() and lesson.module not in skip:
            _copy(lesson.skeleton, target)
            added.append(target)
    return workspace, added


def _has_lesson_files(folder: Path, catalog: Catalog) -> bool:
    return any((folder / lesson.file_name).exists() for lesson in catalog.lessons)


def backup(workspace: Workspace, lesson: Lesson) -> Path | None:
    """Copy the learner's lesson file to ``.course/backups/`` with a timestamp; None if absent."""
    source = workspace.lesson_file(lesson)
    if not source.exists():
        return None
    import shutil

    workspace.backups.mkdir(parents=True, exist_ok=True)
    from datetime import datetime

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    target = workspace.backups / f"{lesson.module}-{stamp}.py"
    shutil.copy2(source, target)
    return target


def restore_skeleton(workspace: Workspace, lesson: Lesson) -> None:
    _copy(lesson.skeleton, workspace.lesson_file(lesson))


def _copy(source: Path, target: Path) -> None:
    """``shutil.copyfile``, imported only when a file is copied: every command opens the
    workspace through ``init``, most copy nothing, and shutil pulls in lzma and bz2."""
    import shutil

    shutil.copyfile(source, target)
