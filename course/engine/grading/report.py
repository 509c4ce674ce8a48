"""What a grade reports: the ``LessonResult`` made from a pytest run's records, the result of a
lesson file that is not graded, and the notices about the learner's folder.

``assemble`` turns what the grading plugin recorded during ``runner.grade`` into the lesson's
result, with the messages for a module that cannot be imported, a function whose signature does
not match the skeleton's, and an earlier lesson still unfinished. The notices are about a file
that is not valid UTF-8 and files named like a lesson that the worker ignores.
"""

from __future__ import annotations

import ast
import codecs
import importlib.machinery
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from course.content.catalog import Lesson, load_catalog
from course.engine.calls import errors, learner_module
from course.engine.grading import blame
from course.engine.results import (
    ERROR,
    NAMING,
    CheckResult,
    ExerciseResult,
    LessonResult,
    combine,
    lesson_status,
)

if TYPE_CHECKING:
    from course.engine.grading.plugin import GradingPlugin

LESSON_FILE_LIMIT = 2**20  # a lesson file is code: anything larger is not graded


def missing_file_result(lesson: Lesson, source_dir: Path) -> LessonResult:
    """The result when the lesson file is not in ``source_dir``: every check an error, not run."""
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


def oversized_file_result(lesson: Lesson, source_dir: Path) -> LessonResult | None:
    """An error result when the lesson file, or an earlier lesson's file it imports, is not
    under ``LESSON_FILE_LIMIT`` (found by its size alone, nothing of it is read); else None."""
    for name in [lesson.file_name, *(entry.file_name for entry in _imported_lessons(lesson))]:
        try:
            size = (source_dir / name).stat().st_size
        except OSError:
            continue
        if size >= LESSON_FILE_LIMIT:
            shown = f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"
            result = missing_file_result(lesson, source_dir)
            result.message = (
                f"{name} is {shown}; a lesson file must be under {LESSON_FILE_LIMIT // 2**20} MiB, "
                "so it was not graded. It holds your code, not data: remove what made it so "
                "large (data pasted or written into it), then check again."
            )
            return result
    return None


def assemble(lesson: Lesson, plugin: GradingPlugin, printed: str) -> LessonResult:
    """The lesson's result from what the grading plugin recorded; ``printed`` (pytest's own
    output) is shown only when the grading tests themselves could not run."""
    by_exercise: dict[str, list[CheckResult]] = {e.name: [] for e in lesson.exercises}
    strays = []
    mismatched = any(record.mismatched for record in plugin.records.values())
    signatures = skeleton_signatures(lesson) if mismatched else {}
    for record in plugin.records.values():
        check = CheckResult(
            record.name,
            record.status,
            record.message,
            mistake=record.mistake,
            misconception=record.misconception,
            mistake_id=record.mistake_id,
            kind=record.kind,
            title=record.title,
            raised_in=record.raised_in,
            call_line=record.call_line,
        )
        ruled_out = plugin.ruled_out.get(record.exercise, set())
        if record.mistake_id and not ruled_out.issuperset(record.claims):
            check.name_mistake("\n" + NAMING.format(record.mistake))
        else:  # a mistake a passed check of the exercise ruled out is no evidence
            check.mistake = check.mistake_id = check.misconception = ""
            check.message += f"\n{record.shapes}" if record.shapes else ""
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
        result.fix_first, result.message = _import_message(lesson, plugin.import_problem)
        for exercise in exercises:
            exercise.status = ERROR
            for check in exercise.checks:
                check.status = ERROR
    if result.status != ERROR:  # each check ran: one failing may explain another
        blame.same_lesson(result, lesson)
    result.note = _dependency_note(lesson, plugin)
    result.uses = [m for m in plugin.import_report.get("lesson_modules", []) if m != lesson.module]
    return result


def skeleton_signatures(lesson: Lesson) -> dict[str, str]:
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


def _import_message(lesson: Lesson, problem: errors.LearnerProblem) -> tuple[str, str]:
    """(the earlier lesson module to fix first, if the fault is in one; what to tell)."""
    info = getattr(problem, "info", {}) or {}
    earlier, sentence = _earlier_lesson_at_fault(lesson, info)
    if earlier:
        return earlier, sentence
    if info.get("type") == "NotImplementedError":
        return "", (
            f"{lesson.file_name} raised NotImplementedError while being imported: "
            "keep `raise NotImplementedError` inside the functions.\n" + str(problem)
        )
    if info.get("syntax"):
        return "", f"{lesson.file_name} has a syntax error, so none of it can run:\n{problem}"
    if isinstance(problem, errors.LearnerTimeout):
        return "", str(problem)
    return "", f"{lesson.file_name} could not be imported:\n{problem}"


def _earlier_lesson_at_fault(lesson: Lesson, info: dict) -> tuple[str, str]:
    """(module, one line) when the import failed in another lesson's file: a syntax error
    there, or the file missing. The cause is named, not the graded file, which may be fine."""
    modules = learner_module.lesson_modules(lesson.module)
    syntax = info.get("syntax") or {}
    broken = str(syntax.get("file", "")).removesuffix(".py") if isinstance(syntax, dict) else ""
    number_of = load_catalog().number_of
    if broken in modules and broken != lesson.module:
        return broken, (
            f"{lesson.file_name} imports your {broken}.py, which has a syntax error (line "
            f"{syntax.get('line')}), so none of this lesson can run: fix it first "
            f"(`course check {number_of(broken)}`)."
        )
    missing = str(info.get("missing_module", ""))
    if info.get("type") == "ModuleNotFoundError" and missing in modules and missing != lesson.module:
        return missing, (
            f"{lesson.file_name} imports your {missing}.py, which is not in your workspace: "
            f"`course reset {number_of(missing)}` brings back its fresh skeleton, or put your own "
            "copy back."
        )
    return "", ""


def _dependency_note(lesson: Lesson, plugin: GradingPlugin) -> str:
    """One line when a check ran into an earlier lesson's function that is still a stub."""
    for record in plugin.records.values():
        if record.dependency:
            number = load_catalog().number_of(record.dependency)
            return (
                f"This lesson uses your {record.dependency}.py, which is not finished yet: "
                f"finish that lesson first (`course check {number}`)."
            )
    return ""


def encoding_notice(path: Path) -> str:
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


def ignored_files_notice(lesson: Lesson, source_dir: Path) -> str:
    """What in the folder is named like a lesson module (this lesson or an earlier one it may
    import) but is not its ``.py``: the worker never imports it, so say so. Found by listing
    the folder here, never from the worker's report."""
    modules = learner_module.lesson_modules(lesson.module)
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
