"""Submission bundles: what `course submit` writes and what `course grade` opens, defensively.

A bundle is a zip holding the learner's lesson files (only the catalog's lesson modules found in
the workspace, at the top level), the helper modules they import from the workspace (``NAME.py``
files, followed from import to import: ``own_modules``) and ``result.json``: the learner's own
grading at submission time (per lesson and exercise: status and points), the course version, the
sha256 of each file, the UTC time and the learner's name. The instructor never trusts
``result.json``: `course grade` re-grades the files and reports where the claim and the re-grade
disagree. `course submit` writes nothing when a helper cannot be one (named like the standard
library, an installed package, a lesson or a hook such as ``conftest``: ``learner_imports``), when
a lesson file imports at its top what is neither numpy, the standard library nor the learner's,
or when the bundle would pass the limits below.

Points: one point per passed check; a lesson's (and an exercise's) maximum is its number of
checks. Opening a bundle refuses anything an honest `course submit` never writes: not a zip,
truncated or failing its checksums, more than ``MAX_MEMBERS`` members or ``MAX_TOTAL_BYTES``
uncompressed (zip bombs), names with ``..``, absolute paths, backslashes or links. Helpers are
extracted beside the lesson files when a lesson file imports them (as `course submit` found
them); a ``NAME.py`` that cannot be a helper is reported with the reason and never extracted, and
other unknown members are reported and never extracted (a ``numpy.py`` must not shadow numpy).

The bundle file itself is opened without following a symbolic link, and refused unread when it
is not a regular file, is larger than ``MAX_BUNDLE_BYTES``, or when the end of its central
directory (the EOCD record, and the zip64 one when there is one: read here from the file's last
64 KiB, as ``zipfile`` finds them) announces more than ``MAX_MEMBERS`` entries or a central
directory larger than ``MAX_DIRECTORY_BYTES``: ``zipfile`` reads the whole central directory
into memory and makes an object per entry before anything can be counted, so a 101 MiB zip
listing 2 million entries cost a gigabyte and half a minute before it was refused. Every text
taken from a bundle is made safe to show and to write later (``safe_text``), where it joins a row.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import BinaryIO, cast

from course import __version__
from course.content.catalog import Catalog, Lesson
from course.engine.grading import learner_imports
from course.engine.results import PASSED, LessonResult

RESULT_FILE = "result.json"
SCHEMA = 1
POINTS_RULE = "1 point per passed check; a lesson's maximum is its number of checks"
MAX_MEMBERS = 32
MAX_FILE_BYTES = 1024**2
MAX_TOTAL_BYTES = 4 * 1024**2
MAX_DIRECTORY_BYTES = MAX_MEMBERS * 1024  # an entry: 46 bytes, its name and extra fields
# Deflate never grows data by more than a few bytes per block; headers and the central
# directory add little more: a bundle within the limits above is far smaller than this.
MAX_BUNDLE_BYTES = MAX_TOTAL_BYTES + 1024**2

Grader = Callable[[Lesson, Path], LessonResult]


class SubmissionProblem(Exception):
    """Nothing to submit, or the bundle cannot be written; the message says what to do."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def points(result: LessonResult) -> tuple[int, int]:
    """(points, maximum) of a graded lesson: passed checks, all checks."""
    checks = [check for exercise in result.exercises for check in exercise.checks]
    return sum(check.status == PASSED for check in checks), len(checks)


def lesson_summary(result: LessonResult) -> dict:
    """A lesson's entry in ``result.json`` and in the gradebook report."""
    got, most = points(result)
    exercises = [
        {
            "name": e.name,
            "status": e.status,
            "points": sum(c.status == PASSED for c in e.checks),
            "max_points": len(e.checks),
        }
        for e in result.exercises
    ]
    return {
        "lesson": result.lesson,
        "status": result.status,
        "points": got,
        "max_points": most,
        "exercises": exercises,
    }


def learner_name(explicit: str | None = None) -> str:
    """--name, else $USER, else the login name, else "unknown"."""
    if explicit and explicit.strip():
        return explicit.strip()
    if os.environ.get("USER"):
        return os.environ["USER"]
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no user database entry in some containers
        return "unknown"


def lesson_files(folder: Path, catalog: Catalog) -> list[Lesson]:
    """The catalog's lessons whose file is in ``folder``, in catalog order."""
    return [lesson for lesson in catalog.lessons if (folder / lesson.file_name).is_file()]


def build_bundle(
    folder: Path,
    out: Path,
    catalog: Catalog,
    name: str,
    grade: Grader | None = None,
    lessons: Iterable[Lesson] | None = None,
) -> dict:
    """Grade the lesson files of ``folder`` and write them with ``result.json`` to the zip
    ``out``; returns the result payload. ``lessons`` limits which lessons go in."""
    if grade is None:
        from course.engine.grading import runner

        grade = runner.grade
    chosen = lesson_files(folder, catalog)
    if lessons is not None:
        wanted = {lesson.module for lesson in lessons}
        chosen = [lesson for lesson in chosen if lesson.module in wanted]
    if not chosen:
        raise SubmissionProblem(
            f"No lesson files in {folder}: nothing to submit. Run `course submit` "
            "in your workspace (or pass --workspace DIR)."
        )
    contents = {lesson.file_name: (folder / lesson.file_name).read_bytes() for lesson in chosen}
    helpers = own_modules(folder, contents, catalog)
    contents.update(helpers)
    _within_limits(contents)
    summaries = [lesson_summary(grade(lesson, folder)) for lesson in chosen]
    payload = {
        "schema": SCHEMA,
        "course": catalog.title,
        "course_version": __version__,
        "name": name,
        "submitted_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "points_rule": POINTS_RULE,
        "files": {file: sha256(data) for file, data in contents.items()},
        "helpers": sorted(helpers),
        "lessons": summaries,
        "total_points": sum(s["points"] for s in summaries),
        "max_points": sum(s["max_points"] for s in summaries),
    }
    claim = (json.dumps(payload, indent=2) + "\n").encode("utf-8")
    _within_limits({**contents, RESULT_FILE: claim})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
            for file, data in contents.items():
                bundle.writestr(file, data)
            bundle.writestr(RESULT_FILE, claim)
        partial.replace(out)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise SubmissionProblem(f"Could not write {out}: {error.strerror or error}.") from None
    return payload


def own_modules(folder: Path, lesson_sources: dict[str, bytes], catalog: Catalog) -> dict[str, bytes]:
    """The learner's helper modules (file name -> bytes) that the lesson files (file name ->
    bytes) import from ``folder``, directly or through one another, found by reading their
    syntax trees. ``SubmissionProblem`` when one cannot be a helper, when a lesson file imports a
    package folder of the workspace, or when a lesson file or helper imports at its top what is
    neither numpy, the standard library nor the learner's own: grading would not find it."""
    lessons = {lesson.module for lesson in catalog.lessons}
    packages: list[str] = []
    unread: list[str] = []
    find = learner_imports.folder_lookup(folder)

    def lookup(name: str) -> bytes | None:
        if (folder / f"{name}.py").is_file():
            source = find(name)
            if source is None:  # larger than a bundle's member may be, or unreadable
                unread.append(f"{name}.py")
            return source
        if (folder / name).is_dir() and not learner_imports.not_a_helper(name, (), folder):
            packages.append(name)
        return None

    found = learner_imports.reach(lesson_sources.values(), lookup, lessons)
    again = " Nothing was written."
    if unread:
        raise SubmissionProblem(
            f"Your lesson files import {unread[0]} from your workspace, which cannot be read or "
            f"is larger than {MAX_FILE_BYTES} bytes (a bundle's limit per file).{again}"
        )
    for name in found:
        why = learner_imports.not_a_helper(name, lessons, folder)
        if why:
            raise SubmissionProblem(
                f"Your lesson files import {name}.py from your workspace, but it is {why}: "
                f"rename it (and the imports of it), then submit again.{again}"
            )
    if packages:
        raise SubmissionProblem(
            f"Your lesson files import the folder {packages[0]}/ from your workspace: `course "
            f"submit` bundles helper modules as single files only ({packages[0]}.py).{again}"
        )
    helpers = {f"{name}.py": source for name, source in found.items()}
    for file, source in {**lesson_sources, **helpers}.items():
        foreign = learner_imports.outside([source], set(found), lessons)
        if foreign:
            raise SubmissionProblem(
                f"{file} imports {', '.join(foreign[:3])}, which is neither numpy, Python's "
                "standard library nor a module of your workspace: a class is graded with numpy "
                f"and the standard library only. Remove that import, then submit again.{again}"
            )
    return helpers


def _within_limits(contents: dict[str, bytes]) -> None:
    """``SubmissionProblem`` when a bundle of ``contents`` (member name -> bytes; one member
    for ``result.json`` is counted when it is not there yet) is one `course grade` refuses."""
    members = len(contents) + (RESULT_FILE not in contents)
    total = sum(map(len, contents.values()))
    largest = max(contents, key=lambda file: len(contents[file]))
    if members > MAX_MEMBERS:
        problem = f"{members} files (at most {MAX_MEMBERS}, result.json included)"
    elif len(contents[largest]) > MAX_FILE_BYTES:
        problem = f"{largest} is {len(contents[largest])} bytes (at most {MAX_FILE_BYTES} per file)"
    elif total > MAX_TOTAL_BYTES:
        problem = f"{total} bytes in all (at most {MAX_TOTAL_BYTES})"
    else:
        return
    raise SubmissionProblem(
        f"This bundle would hold {problem}: `course grade` refuses it. Submit fewer lessons "
        "(--lessons) or make the files smaller. Nothing was written."
    )


# -- opening a bundle ---------------------------------------------------------------------------
@dataclass
class Opened:
    """What a bundle held once opened into a folder. ``refused`` says why nothing was graded."""

    files: dict[str, str] = field(default_factory=dict)  # lesson file name -> sha256
    sources: dict[str, bytes] = field(default_factory=dict)  # lesson file name -> its bytes
    helpers: dict[str, bytes] = field(default_factory=dict)  # helper file name -> its bytes
    refused_helpers: list[str] = field(default_factory=list)  # NAME.py members never extracted
    claimed: dict | None = None  # the parsed result.json, untrusted
    problems: list[str] = field(default_factory=list)
    refused: str = ""


def _unsafe(info: zipfile.ZipInfo) -> str:
    name = info.filename
    mode = info.external_attr >> 16
    if (
        "\\" in name
        or name.startswith("/")
        or PurePosixPath(name).is_absolute()
        or (len(name) > 1 and name[1] == ":")
    ):
        return f"absolute or Windows path {name!r}"
    if ".." in PurePosixPath(name).parts:
        return f"path traversal {name!r}"
    if stat.S_ISLNK(mode):
        return f"symbolic link {name!r}"
    return ""


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A member's bytes, never more than its capped declared size (checksums verified)."""
    with archive.open(info) as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise zipfile.BadZipFile(f"{info.filename} is larger than declared")
    return data


def open_bundle(path: Path, into: Path, catalog: Catalog) -> Opened:
    """Check ``path`` and extract its lesson files into ``into``; never raises for a bad
    bundle (the problem is on ``refused`` or ``problems``)."""
    opened = Opened()
    try:
        handle = _open_file(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            opened.refused = "refused: a symbolic link, not a bundle file (not followed)"
        else:
            opened.refused = f"refused: not a readable file ({_short(error)})"
        return opened
    with handle:
        _open_archive(handle, into, catalog, opened)
    return opened


def _open_file(path: Path) -> BinaryIO:
    """``path`` opened for reading without following a symbolic link (OSError ELOOP) nor
    waiting on a FIFO or a device (opened non-blocking, then refused as not a regular file)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    return cast("BinaryIO", os.fdopen(os.open(path, flags), "rb"))


def _announced(handle: BinaryIO, size: int) -> tuple[int, int] | None:
    """(entries, central directory bytes) as the end of the archive announces them, read from
    the file's last 64 KiB as ``zipfile._EndRecData`` finds them: the EOCD record ending the
    file (no comment), else the last EOCD signature there; and the zip64 EOCD record before the
    zip64 locator that precedes it, when there is one. The larger of the counts the records give
    (this disk's and the total). None when there is no EOCD record: ``zipfile`` refuses that."""
    eocd_size, locator_size, zip64_size = 22, 20, 56
    tail_start = max(0, size - eocd_size - 0xFFFF)
    handle.seek(tail_start)
    tail = handle.read(size - tail_start)
    if len(tail) >= eocd_size and tail[-eocd_size:][:4] == b"PK\x05\x06" and tail[-2:] == b"\0\0":
        at = len(tail) - eocd_size
    else:
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < eocd_size:
            return None
    _, _, _, here, total, directory, _, _ = struct.unpack("<4s4H2LH", tail[at : at + eocd_size])
    entries = max(here, total)
    end = tail_start + at  # where the EOCD record starts in the file
    if end >= locator_size + zip64_size:
        handle.seek(end - locator_size)
        locator = handle.read(locator_size)
        if locator[:4] == b"PK\x06\x07":
            handle.seek(end - locator_size - zip64_size)
            record = handle.read(zip64_size)
            if len(record) == zip64_size and record[:4] == b"PK\x06\x06":
                here64, total64, directory64 = struct.unpack("<3Q", record[24:48])
                entries, directory = max(here64, total64), directory64
    return entries, directory


def _refused_unread(handle: BinaryIO) -> str:
    """Why the file is refused before ``zipfile`` parses its central directory, or ""."""
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode):
        return "refused: not a regular file"
    if info.st_size > MAX_BUNDLE_BYTES:
        return f"refused: {info.st_size} bytes (a bundle is at most {MAX_BUNDLE_BYTES})"
    announced = _announced(handle, info.st_size)
    if announced is not None:
        entries, directory = announced
        if entries > MAX_MEMBERS:
            return f"refused: {entries} members (at most {MAX_MEMBERS})"
        if directory > MAX_DIRECTORY_BYTES:
            return (
                f"refused: a central directory of {directory} bytes (at most {MAX_DIRECTORY_BYTES}): "
                "a zip bomb?"
            )
    handle.seek(0)
    return ""


def _open_archive(handle: BinaryIO, into: Path, catalog: Catalog, opened: Opened) -> None:
    known = {lesson.file_name for lesson in catalog.lessons}
    try:
        opened.refused = _refused_unread(handle)
        if opened.refused:
            return
        with zipfile.ZipFile(handle) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                opened.refused = f"refused: {len(infos)} members (at most {MAX_MEMBERS})"
                return
            total = sum(info.file_size for info in infos)
            if total > MAX_TOTAL_BYTES or any(i.file_size > MAX_FILE_BYTES for i in infos):
                opened.refused = (
                    f"refused: {total} bytes uncompressed (at most {MAX_TOTAL_BYTES}, "
                    f"{MAX_FILE_BYTES} per file): a zip bomb?"
                )
                return
            unsafe = [reason for reason in map(_unsafe, infos) if reason]
            if unsafe:
                opened.refused = "refused: unsafe member name: " + "; ".join(unsafe[:3])
                return
            names = [info.filename for info in infos]
            if len(set(names)) != len(names):
                opened.refused = "refused: the same member name appears twice"
                return
            for info in infos:
                if info.filename in known:
                    opened.sources[info.filename] = _read(archive, info)
                elif info.filename == RESULT_FILE:
                    opened.claimed = _parse_claim(_read(archive, info), opened.problems)
            opened.helpers = _helpers(archive, infos, opened, catalog)
            taken = {*known, *opened.helpers, *opened.refused_helpers, RESULT_FILE}
            extra = [n for n in names if n not in taken and not n.endswith("/")]
            if extra:
                opened.problems.append(
                    "extra files ignored: "
                    + ", ".join(sorted(extra)[:5])
                    + (" ..." if len(extra) > 5 else "")
                )
            for file, data in {**opened.sources, **opened.helpers}.items():
                (into / file).write_bytes(data)
                if file in opened.sources:
                    opened.files[file] = sha256(data)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        zlib.error,
        struct.error,
        EOFError,
        ValueError,
        NotImplementedError,
        RuntimeError,
        OSError,
    ) as error:
        # not a zip, truncated, bad CRC or deflate data, unsupported compression, encrypted
        opened.refused = f"refused: not a readable zip file ({_short(error)})"
        opened.files.clear()
        opened.sources.clear()
        opened.helpers.clear()
        return
    if RESULT_FILE not in names:
        opened.problems.append(f"no {RESULT_FILE} (not made by `course submit`?)")
    if not opened.files:
        opened.problems.append("no lesson files in the bundle")
    _check_claim_header(opened, catalog)


def _helpers(
    archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo], opened: Opened, catalog: Catalog
) -> dict[str, bytes]:
    """The top-level ``NAME.py`` members that the bundle's lesson files import, directly or
    through one another (file name -> bytes), as `course submit` finds helpers. One that cannot
    be a helper (``learner_imports.not_a_helper``) is never read: the row says why."""
    lessons = {lesson.module for lesson in catalog.lessons}
    offered: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        stem = info.filename[:-3]
        if info.filename.endswith(".py") and stem.isidentifier() and stem not in lessons:
            why = learner_imports.not_a_helper(stem, lessons)
            if why:
                opened.refused_helpers.append(info.filename)
                opened.problems.append(f"{info.filename} not extracted: it is {why}")
            else:
                offered[stem] = info

    def lookup(name: str) -> bytes | None:
        return _read(archive, offered[name]) if name in offered else None

    found = learner_imports.reach(opened.sources.values(), lookup, lessons)
    return {f"{name}.py": source for name, source in found.items()}


def _short(error: BaseException) -> str:
    return (str(error) or type(error).__name__).splitlines()[0][:120]


def _parse_claim(data: bytes, problems: list[str]) -> dict | None:
    try:
        claim = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        problems.append(f"{RESULT_FILE} is not valid JSON")
        return None
    if not isinstance(claim, dict):
        problems.append(f"{RESULT_FILE} is not a JSON object")
        return None
    return claim


def _check_claim_header(opened: Opened, catalog: Catalog) -> None:
    claim = opened.claimed
    if claim is None:
        return
    version = claim.get("course_version")
    if version != __version__:
        opened.problems.append(f"made with course version {version!r}, graded with {__version__}")
    if claim.get("course") not in (None, catalog.title):
        opened.problems.append(f"made for another course ({str(claim.get('course'))[:60]!r})")
    files = claim.get("files")
    hashes: dict = files if isinstance(files, dict) else {}
    held = {**opened.files, **{file: sha256(data) for file, data in opened.helpers.items()}}
    changed = [f for f, digest in held.items() if hashes.get(f) != digest]
    if changed:
        opened.problems.append("sha256 in result.json does not match: " + ", ".join(changed))


def disagreements(claim: dict | None, regraded: dict[str, dict]) -> list[str]:
    """Where ``result.json`` claims another status or score than the re-grade found."""
    if not claim or not isinstance(claim.get("lessons"), list):
        return []
    found = []
    for entry in claim["lessons"]:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("lesson"), str)
            or entry["lesson"] not in regraded
        ):
            continue
        actual = regraded[entry["lesson"]]
        if (entry.get("status"), entry.get("points")) != (actual["status"], actual["points"]):
            found.append(
                f"result.json claims {entry['lesson']} {str(entry.get('status'))[:20]} "
                f"{str(entry.get('points'))[:10]} points; re-graded {actual['status']} "
                f"{actual['points']}/{actual['max_points']}"
            )
    return found
