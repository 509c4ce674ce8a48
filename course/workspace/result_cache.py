"""The learner's last grade of each lesson, reused while nothing it depends on has changed.

`course check --all` and the all-passed `course next` re-grade every lesson; most of the time
none of the files changed since the last check. A lesson's grade depends on the workspace's
files (the lesson imports earlier lessons and any helper module or package of the folder, and
may read data there; a file named like a lesson is mentioned in a notice) and on the course
build (its code, grading tests, interpreter and limits:
``course.engine.warm.client.fingerprint``). The key is a digest of all of that, by content: any
byte changed in any file of the folder (hidden folders such as ``.course/`` aside), a file
added or removed, or another course build, re-grades.

Safe because it is only ever the learner's own convenience:

- the cache lives outside the workspace, in the user's cache folder
  (``$XDG_CACHE_HOME/attention-course/results``, else ``~/.cache/...``), in a folder only this
  user may enter (``private_socket.private_folder``); else nothing is cached;
- entries are written by the command (the grader's side), never by a process running learner
  code; an entry that does not parse, has another key or another shape is ignored;
- ``course grade`` never reads it (it calls the engine directly), and the GitHub Classroom
  test command passes ``--fresh``, which neither reads nor writes it: a grade that counts is
  always computed. ``COURSE_CACHE=off`` turns it off.

One entry per workspace and lesson (its last graded run); results with a timeout or an error
of the whole lesson are not kept, since another run may go otherwise. Beside the results,
``examples_file`` names where a check graded in its own process keeps the examples of passing
property checks (``course.engine.grading.kept_examples``), under the same rules.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING

from course import atomic_file

if TYPE_CHECKING:  # loaded when an entry is read or written: a check sends its request first
    from course.engine.results import LessonResult

SCHEMA = 1
ENTRY_LIMIT = 4 * 2**20  # an entry larger than this is not ours: ignored unread
HASHED_LIMIT = 2**20  # files at least this large (never a lesson file) are keyed by size and time
FILES_LIMIT = 500  # a folder with more files than this is not cached at all


def enabled() -> bool:
    return os.environ.get("COURSE_CACHE", "on").lower() not in ("off", "0", "no", "false")


def folder() -> Path | None:
    """Our private cache folder, made if needed; None if it cannot be had as ours alone."""
    from course.engine.warm import private_socket

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    if not os.path.isabs(base):
        return None
    try:
        os.makedirs(base, 0o700, exist_ok=True)
    except OSError:
        return None
    top = Path(base) / "attention-course"
    if not private_socket.private_folder(top):
        return None
    results = top / "results"
    return results if private_socket.private_folder(results) else None


def examples_file(module: str) -> Path | None:
    """Where a cold check keeps the examples of ``module``'s passing property checks
    (``course.engine.grading.kept_examples``: trusted as this cache is, keyed by the build
    inside), in a private folder beside the results; None if it cannot be had."""
    from course.engine.warm import private_socket

    where = folder()
    if where is None:
        return None
    examples = where.parent / "examples"
    return examples / f"{module}.json" if private_socket.private_folder(examples) else None


def key(source_dir: Path, module: str, build: str, tree: str | None = None) -> str | None:
    """The digest a lesson's grade depends on: ``build`` (the course build's fingerprint), the
    folder and lesson, and ``tree`` (``tree_digest`` of the folder, computed here if not
    given: one walk serves every lesson of a check). None when the tree has no digest."""
    tree = tree_digest(source_dir) if tree is None else tree
    if not tree:
        return None
    return hashlib.sha256(f"{SCHEMA}\0{build}\0{source_dir}\0{module}\0{tree}".encode()).hexdigest()


def tree_digest(source_dir: Path) -> str:
    """Every file under the folder by content (helper modules and packages, data a lesson file
    may read), except hidden folders (``.course/``, a ``.venv``) and ``__pycache__``; "" (no
    caching) for a folder of more than ``FILES_LIMIT`` files."""
    digest = hashlib.sha256()
    count = 0
    for folder, folders, files in os.walk(source_dir):
        folders[:] = sorted(name for name in folders if not name.startswith(".") and name != "__pycache__")
        for name in sorted(files):
            count += 1
            if count > FILES_LIMIT:
                return ""
            path = Path(folder) / name
            digest.update(f"{path.relative_to(source_dir)}\0".encode())
            try:
                stat = path.lstat()
                if not S_ISREG(stat.st_mode) or stat.st_size >= HASHED_LIMIT:
                    digest.update(f"{stat.st_mode}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
                else:
                    digest.update(hashlib.sha256(path.read_bytes()).digest())
            except OSError:
                digest.update(b"unreadable\0")
    return digest.hexdigest()


def _entry(source_dir: Path, module: str) -> Path | None:
    where = folder()
    if where is None:
        return None
    name = hashlib.sha256(f"{source_dir}\0{module}".encode()).hexdigest()[:40]
    return where / f"{name}.json"


def load(source_dir: Path, module: str, digest: str | None) -> LessonResult | None:
    """The kept grade of ``module`` if it was kept under ``digest`` (``key`` now), else None."""
    if not enabled() or digest is None:
        return None
    entry = _entry(source_dir, module)
    if entry is None:
        return None
    try:
        with open(entry, "rb") as handle:
            raw = handle.read(ENTRY_LIMIT + 1)
        data = json.loads(raw) if len(raw) <= ENTRY_LIMIT else None
        if not isinstance(data, dict) or data.get("key") != digest:
            return None
        from course.engine.results import LessonResult

        result = LessonResult.from_dict(data["result"])
        return result if result.lesson == module and keepable(result) else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def keepable(result: LessonResult) -> bool:
    """A grade that another run would give again (``LessonResult.repeatable``)."""
    return result.repeatable()


def store(source_dir: Path, module: str, digest: str | None, result: LessonResult) -> None:
    """Keep ``result`` as the last grade of ``module`` under ``digest``, the key computed
    *before* grading (a file saved meanwhile must not be credited with the older grade).
    Atomic; failures are ignored."""
    if not enabled() or digest is None or not keepable(result):
        return
    entry = _entry(source_dir, module)
    if entry is None:
        return
    data = {"key": digest, "result": result.to_dict()}
    with contextlib.suppress(OSError):  # one C-encoded string: dump() writes piece by piece
        atomic_file.replace(entry, json.dumps(data))
