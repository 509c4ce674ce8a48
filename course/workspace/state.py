"""Progress state in ``.course/state.json``: plain data, validated on read, written atomically.

The state only records what the learner did (results of checks, hints revealed, solutions
peeked); the current lesson is derived from it. A state that is missing, unreadable, or written by
a newer course raises ``StateProblem`` so the caller can rebuild it by re-grading.

Several commands may run at once (``course watch`` beside a manual ``course check``): every
change is a read-modify-write under an exclusive lock (``update``), so none is lost.
"""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from course import atomic_file

FORMAT = 1
LOCK_NAME = "state.lock"
MAX_BYTES = 16 * 1024**2  # a real state is a few kB
LOCK_SECONDS = 30.0  # a command holds the lock for milliseconds; past this, write unlocked


class StateProblem(Exception):
    """The state file cannot be used; the message says why in a few words."""


@dataclass
class LessonProgress:
    status: str = "not-started"
    exercises: dict[str, str] = field(default_factory=dict)  # exercise -> status
    checked_at: str = ""
    passed_at: str = ""
    hints: dict[str, int] = field(default_factory=dict)  # exercise -> tiers revealed
    solution_peeked: bool = False
    # Set when an earlier lesson this one uses was reset after it passed (that lesson's module):
    # the pass no longer vouches for the code, so it needs a re-check; any check clears it.
    recheck_after: str = ""


@dataclass
class State:
    format: int = FORMAT
    welcomed: bool = False
    lessons: dict[str, LessonProgress] = field(default_factory=dict)
    placed: list[str] = field(default_factory=list)  # lesson files the course has put in place

    def lesson(self, module: str) -> LessonProgress:
        return self.lessons.setdefault(module, LessonProgress())

    def status(self, module: str) -> str:
        progress = self.lessons.get(module)
        return progress.status if progress else "not-started"

    def needs_recheck(self, module: str) -> bool:
        """True when a lesson this one uses was reset since it was last checked."""
        progress = self.lessons.get(module)
        return bool(progress and progress.recheck_after)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _lesson_from(data: object) -> LessonProgress:
    if not isinstance(data, dict):
        raise StateProblem("a lesson entry is not an object")
    progress = LessonProgress()
    for key, default in asdict(progress).items():
        value = data.get(key, default)
        if type(value) is not type(default):
            raise StateProblem(f"'{key}' has the wrong type")
        setattr(progress, key, value)
    if not all(isinstance(v, int) and v >= 0 for v in progress.hints.values()):
        raise StateProblem("hint counts are not whole numbers")
    return progress


def load(path: Path) -> State:
    """Read the state; raises StateProblem when it is missing, corrupt or from a newer course."""
    try:
        raw = _read_plain_file(path).decode("utf-8")
    except FileNotFoundError:
        raise StateProblem("there was no progress file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateProblem(f"the progress file could not be read ({exc.__class__.__name__})") from None
    try:
        data = json.loads(raw)
    except ValueError:
        raise StateProblem("the progress file was not valid JSON (corrupt or truncated)") from None
    if not isinstance(data, dict):
        raise StateProblem("the progress file did not hold an object")
    version = data.get("format")
    if isinstance(version, int) and version > FORMAT:
        raise StateProblem(
            f"it was written by a newer version of the course (format {version}; "
            f"this one reads format {FORMAT})"
        )
    if version != FORMAT:
        raise StateProblem(f"the progress file has an unknown format ({version!r})")
    lessons = data.get("lessons", {})
    if not isinstance(lessons, dict):
        raise StateProblem("'lessons' is not an object")
    placed = data.get("placed", [])
    if not isinstance(placed, list) or not all(isinstance(m, str) for m in placed):
        raise StateProblem("'placed' is not a list of lesson names")
    return State(
        format=FORMAT,
        welcomed=bool(data.get("welcomed", False)),
        lessons={str(k): _lesson_from(v) for k, v in lessons.items()},
        placed=placed,
    )


def _read_plain_file(path: Path) -> bytes:
    """The file's bytes, never through a link nor from a FIFO or device (which could block or
    never end): those are an OSError, so the state is rebuilt and saved over them."""
    handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(handle, "rb") as stream:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise OSError(errno.EINVAL, "not a plain file")
        data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise OSError(errno.EFBIG, "too large")
    return data


def save(state: State, path: Path) -> None:
    """Write atomically: a crash mid-write leaves the old file, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asdict(state), indent=2, sort_keys=True) + "\n"
    atomic_file.replace(path, text, durable=True)


def update(path: Path, change: Callable[[State], None], fallback: State | None = None) -> State:
    """Apply ``change`` to the state as it is on disk now and save it, holding the workspace's
    lock throughout, so that commands running at once never overwrite each other's progress.
    An unreadable state is replaced by (a copy of) ``fallback``, else an empty one, before the
    change. Returns the state written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent):
        try:
            current = load(path)
        except StateProblem:
            current = copy.deepcopy(fallback) if fallback is not None else State()
        change(current)
        save(current, path)
    return current


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the exclusive lock on ``folder/state.lock``, waiting at most ``LOCK_SECONDS``: a
    stuck holder (or a lock file that cannot be made safely) must not hang every command, and
    each write stays atomic without the lock."""
    handle = _open_lock(folder)
    try:
        deadline = time.monotonic() + LOCK_SECONDS
        while handle is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        yield
    finally:
        if handle is not None:
            os.close(handle)  # releases the lock


def _open_lock(folder: Path) -> int | None:
    """The lock file's descriptor, opened without following a link and checked to be a plain
    file of ours: a link, FIFO or folder planted in its place is removed and the file made anew."""
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for _ in range(5):
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                handle = os.open(LOCK_NAME, flags, 0o600, dir_fd=directory)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    return None
            else:
                info = os.fstat(handle)
                if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                    return handle
                os.close(handle)
            try:
                os.unlink(LOCK_NAME, dir_fd=directory)
            except IsADirectoryError:
                with suppress(OSError):
                    os.rmdir(LOCK_NAME, dir_fd=directory)
            except FileNotFoundError:
                pass
            except OSError:
                return None
        return None
    finally:
        os.close(directory)
