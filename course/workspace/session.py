"""An opened workspace: where it is, the catalog, the learner's progress state, and what the
learner should be told about it. Every command starts here; `course list` needs nothing more,
so this holds only opening (and rebuilding) the state, not grading (``course.workspace.actions``).

Nothing here prints or imports rich/typer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from course.content.catalog import Catalog, Lesson, load_catalog
from course.workspace import folder
from course.workspace import state as state_file

if TYPE_CHECKING:
    from course.engine.results import LessonResult

# A lesson's status when it passed, as the engine writes it (course.engine.results.PASSED),
# spelled here so that opening a session does not import the engine.
PASSED = "passed"


@dataclass
class Session:
    """An opened workspace with its progress, plus what the learner should be told about it."""

    workspace: folder.Workspace
    catalog: Catalog
    state: state_file.State
    notices: list[str] = field(default_factory=list)
    created: bool = False

    def update(self, change: Callable[[state_file.State], None]) -> None:
        """Apply ``change`` to the saved state under its lock (another command may have recorded
        something since this session read it) and keep the result."""
        self.state = state_file.update(self.workspace.state_path, change, fallback=self.state)

    def current(self) -> Lesson | None:
        """The first available lesson not passed yet (or needing a re-check); None once every
        one has passed."""
        for lesson in self.catalog.available():
            if self.state.status(lesson.module) != PASSED or self.state.needs_recheck(lesson.module):
                return lesson
        return None


def open_session(explicit: str | None = None, create: bool = False) -> Session:
    """Find the workspace (creating ``./workspace`` if ``create``), load or rebuild its state."""
    catalog = load_catalog()
    found = folder.find(explicit)
    notices: list[str] = []
    created = False
    if found is None:
        if not create:
            raise folder.WorkspaceProblem(
                "No course workspace here. `course next` creates one in ./workspace, or run "
                "`course init DIR`; elsewhere, pass --workspace DIR or set COURSE_WORKSPACE."
            )
        found, added = folder.init(Path.cwd() / folder.DEFAULT_NAME, catalog)
        created = True
        notices.append(
            f"Created your workspace in {found.display(found.root)}/: your lesson files are there."
        )
        fresh = state_file.State(placed=[p.stem for p in added])
        session = Session(found, catalog, fresh, notices, created)
        session.update(lambda _: None)  # writes ``fresh`` unless another command was quicker
        return session
    try:
        loaded = state_file.load(found.state_path)
    except state_file.StateProblem as problem:
        loaded = rebuild_state(found, catalog)
        notices.append(
            f"Your progress could not be read ({problem}); it was rebuilt by "
            "re-grading your lesson files. Hints revealed before are forgotten."
        )
        loaded = state_file.update(found.state_path, lambda _: None, fallback=loaded)
    # Lessons released since the workspace was made get their file; a file the learner deleted
    # is not put back silently (the check says it is missing, `course reset` restores it).
    _, added = folder.init(found.root, catalog, skip=frozenset(loaded.placed))
    if added:
        new = [path.stem for path in added]
        loaded = state_file.update(found.state_path, lambda s: place(s, new), fallback=loaded)
    for path in added:
        notices.append(f"New lesson file: {found.display(path)}")
    return Session(found, catalog, loaded, notices, created)


def init_workspace(directory: Path) -> tuple[folder.Workspace, list[Path]]:
    """`course init DIR`: a workspace with every lesson file not there yet; the progress state
    (kept when readable) records which files were placed. Raises WorkspaceProblem."""
    catalog = load_catalog()
    created, added = folder.init(directory, catalog)
    new = [path.stem for path in added]

    def place(state: state_file.State) -> None:
        state.placed = sorted(set(state.placed) | set(new))

    state_file.update(created.state_path, place)
    return created, added


def place(state: state_file.State, modules: list[str]) -> None:
    state.placed += [module for module in modules if module not in state.placed]


def rebuild_state(workspace: folder.Workspace, catalog: Catalog) -> state_file.State:
    from course.engine.grading.runner import grade

    rebuilt = state_file.State(welcomed=True, placed=[lesson.module for lesson in catalog.available()])
    for lesson in catalog.available():
        if workspace.lesson_file(lesson).exists():
            record(rebuilt, lesson, grade(lesson, workspace.root))
    return rebuilt


def record(state: state_file.State, lesson: Lesson, result: LessonResult) -> None:
    """Remember a grade in the state: the lesson's and each exercise's status, when."""
    progress = state.lesson(lesson.module)
    progress.status = result.status
    progress.exercises = {e.name: e.status for e in result.exercises}
    progress.checked_at = state_file.now()
    progress.recheck_after = ""
    if result.passed and not progress.passed_at:
        progress.passed_at = progress.checked_at
