"""Grade one lesson: run its tests under a trusted pytest configuration against a learner's folder.

The learner's module is imported only in a worker process (see ``client``). pytest runs here with
plugin autoloading off, the course's own ini file, no cache, no conftest from the learner's
folder, and the grading plugin, which records results as data.
"""

from __future__ import annotations

import ast
import codecs
import importlib.machinery
import importlib.util
import io
import os
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING

from course.catalog import Lesson
from course.engine import client, integrity, kept_examples, learner_errors, misconceptions, sandbox
from course.engine.limits import Limits
from course.engine.processes import Worker
from course.engine.results import (
    ERROR,
    CheckResult,
    ExerciseResult,
    LessonResult,
    combine,
    lesson_status,
)

if TYPE_CHECKING:
    from course.engine.plugin import GradingPlugin

TRUSTED_INI = Path(__file__).with_name("grading.ini")
LESSON_FILE_LIMIT = 2**20  # a lesson file is code: anything larger is not graded


def _pytest_args(test_file: Path) -> list[str]:
    return [
        str(test_file),
        "-c",
        str(TRUSTED_INI),
        "--rootdir",
        str(test_file.parent),
        "--confcutdir",
        str(test_file.parent),
        "--import-mode=importlib",
        "--assert=plain",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        "-p",
        "no:logging",
        "-p",
        "no:faulthandler",
        "-p",
        "no:doctest",
        "-p",
        "no:junitxml",
        "-p",
        "no:pastebin",
        "-p",
        "no:nose",
        "-p",
        "no:unittest",
        "-p",
        "no:stepwise",
        "-p",
        "no:warnings",
        "-p",
        "no:debugging",
        "-p",
        "no:unraisableexception",  # these two run gc.collect() twice per session
        "-p",
        "no:threadexception",
        # Grading tests use the `lesson` fixture and markers only: pytest's fixtures for files,
        # patching, warnings and output capture (a file per test) are not needed, and each
        # registered plugin costs its share of every grade.
        *("-p", "no:capture", "-p", "no:legacypath", "-p", "no:tmpdir", "-p", "no:monkeypatch"),
        *("-p", "no:recwarn", "-p", "no:setuponly", "-p", "no:setupplan", "-p", "no:subtests"),
        *("-p", "no:reports"),
    ]


_FROZEN = [False]


def _freeze_what_is_loaded() -> None:
    """Once per process, before its first grade: the objects of every module loaded so far
    (numpy, pytest, hypothesis, the course) are left out of the garbage collector's work from
    now on (``gc.freeze``). They live as long as the process anyway, and a cold check would
    otherwise walk them all in each full collection: one is hypothesis's, when it first seeds
    its random generator, about 15 ms."""
    if not _FROZEN[0]:
        import gc

        gc.freeze()
        _FROZEN[0] = True


def _run_pytest(test_file: Path, plugin: GradingPlugin) -> str:
    """Run pytest in this (trusted) process; returns what pytest printed, for grader bugs only."""
    # The environment must not reconfigure the trusted run (PYTEST_ADDOPTS, plugin autoload).
    saved = {
        k: os.environ.get(k) for k in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    }
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ.pop("PYTEST_PLUGINS", None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import pytest
    from hypothesis import configuration

    from course.engine import plugin as plugin_module  # holds the `lesson` fixture
    from course.engine.replay import Replayer

    _freeze_what_is_loaded()

    # pytest (importlib mode) reuses a loaded module of the same name: a test file of the same
    # name elsewhere (the pristine copy, a maintainer's copy) must not be served from the cache.
    cached = sys.modules.get(test_file.stem)
    if cached is not None and Path(getattr(cached, "__file__", "") or "").resolve() != test_file.resolve():
        del sys.modules[test_file.stem]

    # Nothing of the grader's may land in the learner's folder, nor in one learner code could
    # write (the worker's scratch folder, where a symlink could send the grader's writes
    # anywhere): pytest runs from a folder of the grader's own, made here and removed after,
    # where hypothesis's own cache (written even without a database) goes too.
    import shutil
    import tempfile

    here = os.getcwd()
    own = Path(tempfile.mkdtemp(prefix="course-grader-"))
    configuration.set_hypothesis_home_dir(str(own / ".hypothesis"))
    try:
        os.chdir(own)
        printed = io.StringIO()
        with redirect_stdout(printed), redirect_stderr(printed):
            code = pytest.main(
                _pytest_args(test_file), plugins=[plugin, plugin_module, Replayer(plugin.learner)]
            )
        if code == pytest.ExitCode.INTERRUPTED:
            # pytest turns a ^C into an exit code; the caller (course watch, a check) must stop.
            # Learner code runs in the worker, so only a signal to this process gets here.
            raise KeyboardInterrupt
        return f"pytest exit code {int(code)}. {printed.getvalue()[-1500:]}"
    finally:
        os.chdir(here)
        shutil.rmtree(own, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _missing_file_result(lesson: Lesson, source_dir: Path) -> LessonResult:
    exercises = [
        ExerciseResult(e.name, ERROR, [CheckResult(e.name, ERROR, "Not run.")]) for e in lesson.exercises
    ]
    return LessonResult(
        lesson=lesson.module,
        status=ERROR,
        exercises=exercises,
        message=f"{lesson.file_name} is missing from {source_dir}. "
        f"`course reset {lesson.number}` puts a fresh copy of the lesson there.",
    )


def _imported_lessons(lesson: Lesson) -> list[Lesson]:
    """The earlier lessons ``lesson`` imports, directly or not, as the course's own skeletons
    import them (read from those trusted sources, never from the learner's files)."""
    from course.catalog import load_catalog

    by_module = {entry.module: entry for entry in load_catalog().lessons}
    found: list[Lesson] = []
    pending = [lesson]
    while pending:
        try:
            tree = ast.parse(pending.pop().skeleton.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                entry = by_module.get(name)
                if entry is not None and entry not in found and entry.module != lesson.module:
                    found.append(entry)
                    pending.append(entry)
    return found


def _oversized_file_result(lesson: Lesson, source_dir: Path) -> LessonResult | None:
    """An error result when the lesson file, or an earlier lesson's file it imports, is not
    under ``LESSON_FILE_LIMIT`` (found by its size alone, nothing of it is read); else None."""
    for name in [lesson.file_name, *(entry.file_name for entry in _imported_lessons(lesson))]:
        try:
            size = (source_dir / name).stat().st_size
        except OSError:
            continue
        if size >= LESSON_FILE_LIMIT:
            shown = f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"
            result = _missing_file_result(lesson, source_dir)
            result.message = (
                f"{name} is {shown}; a lesson file must be under {LESSON_FILE_LIMIT // 2**20} MiB, "
                "so it was not graded. It holds your code, not data: remove what made it so "
                "large (data pasted or written into it), then check again."
            )
            return result
    return None


def grade(
    lesson: Lesson,
    source_dir: Path | str,
    limits: Limits | None = None,
    test_file: Path | None = None,
    spare: tuple[Worker, Path] | None = None,
    sealed: bool = False,
    examples: tuple[Path, str] | None = None,
) -> LessonResult:
    """Grade ``source_dir/<lesson.module>.py`` with the lesson's grading tests.

    ``spare`` is a blank worker (and its scratch folder) started ahead of time by the warm
    grader; without it a worker is started here, in parallel with pytest's start-up.
    ``sealed`` (a class's submission): the learner's code may read nothing but Python, its
    libraries and ``source_dir`` (``sandbox.readable_paths``): no reference solution, no
    grading test, no other submission. ``examples``: a file where the examples of passing
    property checks are kept between processes, and the course build's fingerprint it is keyed
    by (``kept_examples``; the learner's own checks only).
    """
    from course.engine.plugin import GradingPlugin

    started = time.monotonic()
    source_dir = Path(source_dir).resolve()
    if not (source_dir / lesson.file_name).is_file():
        if spare:
            spare[0].kill()
        return _missing_file_result(lesson, source_dir)
    oversized = _oversized_file_result(lesson, source_dir)
    if oversized is not None:
        if spare:
            spare[0].kill()
        return oversized
    readable = sandbox.readable_paths(source_dir) if sealed else None
    learner = client.LearnerModule(source_dir, lesson.module, limits, spare, readable=readable)
    plugin = GradingPlugin(learner)
    tests = (
        integrity.trusted(lesson.grading_tests)
        if test_file is None
        else integrity.TrustedTests(test_file, [])
    )
    try:
        kept = kept_examples.adopt(tests.test_file, examples) if examples else {}
        printed = _run_pytest(tests.test_file, plugin)
        result = _assemble(lesson, plugin, printed)
        if examples:
            kept_examples.keep(tests.test_file, examples, kept)
        result.output = learner.output()
    finally:
        learner.close()
        tests.cleanup()
    misconceptions.label(result)
    notices = [_encoding_notice(source_dir / lesson.file_name), _ignored_files_notice(lesson, source_dir)]
    if tests.modified:
        notices.append(
            f"The course's grading tests were modified on this machine "
            f"({', '.join(tests.modified[:3])}); this check used the pristine copy "
            "that ships with the course."
        )
    result.notice = " ".join(notice for notice in notices if notice)
    result.duration = time.monotonic() - started
    return result


def _assemble(lesson: Lesson, plugin: GradingPlugin, printed: str) -> LessonResult:
    by_exercise: dict[str, list[CheckResult]] = {e.name: [] for e in lesson.exercises}
    strays = []
    mismatched = any(record.mismatched for record in plugin.records.values())
    signatures = _skeleton_signatures(lesson) if mismatched else {}
    for record in plugin.records.values():
        check = CheckResult(
            record.name,
            record.status,
            record.message,
            mistake=record.mistake,
            misconception=record.misconception,
            mistake_id=record.mistake_id,
            kind=record.kind,
            raised_in=record.raised_in,
            call_line=record.call_line,
        )
        if record.mismatched in signatures:
            check.message += f"\nThe function must accept: {signatures[record.mismatched]}"
        if record.exercise in by_exercise:
            by_exercise[record.exercise].append(check)
        else:
            strays.append(record.name)
    exercises = [
        ExerciseResult(name, combine([c.status for c in checks]), checks)
        for name, checks in by_exercise.items()
    ]
    result = LessonResult(
        lesson=lesson.module,
        status=lesson_status([e.status for e in exercises]),
        exercises=exercises,
        untied=strays,
    )
    if plugin.collection_errors or strays or not plugin.records:
        result.status = ERROR
        result.message = (
            "The grading tests of this lesson could not be run (a problem of the "
            "course, not of your code). Please report it."
        )
        if strays:
            result.message += f" Tests without a known exercise: {', '.join(strays)}."
        result.message += "\n" + (plugin.collection_errors or [printed])[0].strip()
    elif plugin.import_problem is not None:
        result.status = ERROR
        result.message = _import_message(lesson, plugin.import_problem)
        for exercise in exercises:
            exercise.status = ERROR
            for check in exercise.checks:
                check.status = ERROR
    result.note = _dependency_note(lesson, plugin)
    result.uses = [m for m in plugin.import_report.get("lesson_modules", []) if m != lesson.module]
    return result


def _skeleton_signatures(lesson: Lesson) -> dict[str, str]:
    """Each top-level function of the pristine skeleton as the learner must write its head
    (``{"linear": "linear(x, w, b=None)"}``), read from the source, not from any prose."""
    try:
        tree = ast.parse(lesson.skeleton.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {
        node.name: f"{node.name}({ast.unparse(node.args)})"
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _encoding_notice(path: Path) -> str:
    """Python forgives invalid UTF-8 in comments; editors and other tools do not. Reads at most
    ``LESSON_FILE_LIMIT`` bytes (the file may have grown since its size was checked)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(LESSON_FILE_LIMIT)
        codecs.getincrementaldecoder("utf-8")().decode(data, final=len(data) < LESSON_FILE_LIMIT)
        return ""
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return (
            f"{path.name} is not valid UTF-8 (line {line}); save it as UTF-8 in your "
            "editor's encoding setting."
        )
    except OSError:
        return ""


def _ignored_files_notice(lesson: Lesson, source_dir: Path) -> str:
    """What in the folder is named like a lesson module (this lesson or an earlier one it may
    import) but is not its ``.py``: the worker never imports it, so say so. Found by listing
    the folder here, never from the worker's report."""
    modules = client.lesson_modules(lesson.module)
    modules = modules[: modules.index(lesson.module) + 1]
    try:
        names = set(os.listdir(source_dir))
        cached = set(os.listdir(source_dir / "__pycache__")) if "__pycache__" in names else set()
    except OSError:
        return ""
    found: list[tuple[str, str, str]] = []  # (what, kind, module)
    for module in modules:
        for name in sorted(names):
            if name == module and (source_dir / name).is_dir():
                found.append((f"{name}/", "a package", module))
            elif name == f"{module}.pth":
                found.append((name, "a .pth file", module))
            elif name.startswith(module + ".") and name != f"{module}.py":
                suffix = name[len(module) :]
                if suffix in importlib.machinery.EXTENSION_SUFFIXES or suffix.endswith((".so", ".pyd")):
                    found.append((name, "an extension module", module))
                elif suffix.endswith(".pyc"):
                    found.append((name, "compiled bytecode", module))
        for name in sorted(cached):
            if name.startswith(module + ".") and name.endswith(".pyc"):
                if not _ordinary_cache(source_dir / "__pycache__" / name, source_dir / f"{module}.py"):
                    found.append((f"__pycache__/{name}", "compiled bytecode", module))
    sentences = [
        f"{what} ({kind} named like a lesson) is ignored: only {module}.py is graded."
        for what, kind, module in found[:3]
    ]
    if len(found) > 3:
        sentences.append(f"({len(found) - 3} more files named like a lesson are ignored too.)")
    return " ".join(sentences)


def _ordinary_cache(pyc: Path, source: Path) -> bool:
    """True for the cache Python itself writes when it imports ``source`` (or for another
    Python's cache): a timestamp-based or checked-hash .pyc that matches the source as it is
    now. Such a file is nothing to mention; an unchecked-hash or stale one is."""
    try:
        with open(pyc, "rb") as handle:
            header = handle.read(16)
        if header[:4] != importlib.util.MAGIC_NUMBER:
            return True
        flags = int.from_bytes(header[4:8], "little")
        if flags == 0:
            stat = source.stat()
            return header[8:16] == (
                (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
            )
        if flags == 3 and source.stat().st_size <= 16 * 2**20:  # checked hash
            return header[8:16] == importlib.util.source_hash(source.read_bytes())
    except OSError:
        return False
    return False


def _import_message(lesson: Lesson, problem: learner_errors.LearnerProblem) -> str:
    info = getattr(problem, "info", {}) or {}
    if info.get("type") == "NotImplementedError":
        return (
            f"{lesson.file_name} raised NotImplementedError while being imported: "
            "keep `raise NotImplementedError` inside the functions.\n" + str(problem)
        )
    if info.get("syntax"):
        return f"{lesson.file_name} has a syntax error, so none of it can run:\n{problem}"
    if isinstance(problem, learner_errors.LearnerTimeout):
        return str(problem)
    return f"{lesson.file_name} could not be imported:\n{problem}"


def _dependency_note(lesson: Lesson, plugin: GradingPlugin) -> str:
    """One line when a check ran into an earlier lesson's function that is still a stub."""
    for record in plugin.records.values():
        if record.dependency:
            return (
                f"This lesson uses your {record.dependency}.py, which is not finished yet: "
                f"finish that lesson first (`course check {record.dependency}`)."
            )
    return ""
