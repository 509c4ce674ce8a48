"""Shared helpers of the project's own tests: grade a folder the way a learner's check does."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from _pytest.assertion.rewrite import AssertionRewritingHook

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
LESSONS = REPO / "lessons"
MISTAKES = REPO / "tests" / "mistakes"
UNCATALOGUED = REPO / "tests" / "uncatalogued"


def grade_folder(folder: Path, lesson: str, examples: tuple[Path, str] | None = None) -> dict:
    """Grade ``folder`` as ``lesson`` in this process, as a cold check does: nested pytest
    against the trusted grading tests, the learner's code in a worker process. The result is
    what ``python -m course.engine`` prints (``grade_folder_cold``; one test compares them).

    The grading test module stays loaded for the next grade, as in the warm grader (pytest's
    importlib mode reuses it, with its remembered oracles, see course/engine/testing/memo.py); it is
    imported without the outer pytest's assertion rewriter (a cold check runs with
    ``--assert=plain``, so the bare asserts of grading tests must raise plain messages here
    too), and hypothesis gets its previous profile back (the grading plugin loads the
    "grading" profile globally). ``examples``: see ``runner.grade``."""
    from hypothesis import settings

    from course.content.catalog import load_catalog
    from course.engine.grading.runner import grade

    entry = load_catalog().resolve(lesson)
    stem = entry.grading_tests.stem
    profile = settings.get_current_profile_name()
    rewriters = [hook for hook in sys.meta_path if isinstance(hook, AssertionRewritingHook)]
    sys.meta_path[:] = [hook for hook in sys.meta_path if hook not in rewriters]
    loaded = sys.modules.get(stem)
    if loaded is not None and type(getattr(loaded, "__loader__", None)).__name__ == "AssertionRewritingHook":
        sys.modules.pop(stem, None)  # imported by the outer pytest, rewritten: not the grader's
    try:
        result = grade(entry, folder, examples=examples)
    finally:
        sys.meta_path[:0] = rewriters
        settings.load_profile(profile)
    return json.loads(json.dumps(result.to_dict()))


def grade_folder_cold(folder: Path, lesson: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m course.engine FOLDER LESSON`` in a fresh process (its exit code and stdout)."""
    return subprocess.run(
        [sys.executable, "-m", "course.engine", str(folder), lesson],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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


# The lessons whose classic mistakes tests/test_replay.py grades (and checks with
# `fails_naming_the_mistake`); tests/test_classic_mistakes.py grades the others.
REPLAYED_LESSONS = ("l02_softmax", "l03_attention")


def fails_naming_the_mistake(module: str, mistake: dict, result: dict) -> None:
    """The grade of ``module`` with the classic ``mistake`` fails, with a message that names it
    (tests/test_classic_mistakes.py); a mistake tied to a misconception of the registry labels
    its failing checks with exactly that id and its fix idea."""
    from course.engine.testing import misconceptions

    assert result["status"] != "passed", f"{mistake['name']} passed lesson {module}"
    messages = " ".join(all_messages(result).split())
    assert mistake["expect"].lower() in messages.lower(), (
        f"no failure message of {module} mentions {mistake['expect']!r}:\n{messages[:3000]}"
    )
    if "misconception" in mistake:  # tied to the registry: labelled with exactly that id
        entry = misconceptions.find(mistake["misconception"])
        assert entry is not None, f"{mistake['misconception']!r} is not in course/content/misconceptions.toml"
        failing = [c for e in result["exercises"] for c in e["checks"] if c["status"] != "passed"]
        labelled = [check for check in failing if check["misconception"]]
        assert labelled, f"no check names {entry.id}"
        assert {check["misconception"] for check in labelled} == {entry.id}
        for check in labelled:
            assert check["mistake_id"] and check["mistake"], "a labelled check names its mistake"
            assert f"This looks like a known mistake: {check['mistake']}." in check["message"]
            assert f"Misconception: {entry.name}. Fix idea: {entry.fix}" in check["message"]


def import_lessons(*modules: str, folder: Path = SOLUTIONS) -> tuple[ModuleType, ...]:
    """``folder/<module>.py`` for each module, imported by name as a learner's are, together with
    the lesson modules they import from ``folder``. sys.path and sys.modules are restored
    afterwards, so solutions and skeletons imported by different tests never mix."""
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if LESSON_MODULE.fullmatch(name)}
    sys.path.insert(0, str(folder))
    try:
        return tuple(importlib.import_module(module) for module in modules)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if LESSON_MODULE.fullmatch(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def classic_mistakes(folder: Path = MISTAKES) -> list[tuple[str, dict]]:
    """(lesson module, mistake) for every classic mistake in tests/mistakes/*.toml (or in the
    same format in ``folder``: tests/uncatalogued/ holds the mistakes written blind)."""
    cases = []
    for path in sorted(folder.glob("l*.toml")):
        with open(path, "rb") as handle:
            cases += [(path.stem, mistake) for mistake in tomllib.load(handle)["mistake"]]
    return cases


def mistaken_source(module: str, mistake: dict | str) -> str:
    """The solution of ``module`` with one classic mistake (given, or named) applied; each edit
    must match the solution exactly once, so a stale mistake fails loudly."""
    if isinstance(mistake, str):
        mistake = next(m for lesson, m in classic_mistakes() if lesson == module and m["name"] == mistake)
    source = (SOLUTIONS / f"{module}.py").read_text()
    for number, edit in enumerate(mistake["edit"], 1):
        found = source.count(edit["old"])
        assert found == 1, (
            f"edit {number} of {module}/{mistake['name']} matches the solution "
            f"{found} times (it must match once): update its .toml"
        )
        source = source.replace(edit["old"], edit["new"])
    return source


def solutions_with_mistake(tmp_path: Path, module: str, name: str) -> Path:
    """A copy of every solution, with ``module`` carrying the classic mistake ``name``."""
    return solutions_with(tmp_path, module, mistaken_source(module, name))


def run_course(
    *args: str, cwd: Path, env: dict | None = None, python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """``python [PYTHON...] -m course ARGS`` in a fresh process, no colour, 100 columns, no
    COURSE_WORKSPACE of the caller's; ``env`` adds to the environment."""
    environment = dict(os.environ, NO_COLOR="1", COLUMNS="100")
    environment.pop("COURSE_WORKSPACE", None)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, *python, "-m", "course", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=environment,
        timeout=120,
    )


def named_ids(result: dict) -> list[set[str]]:
    """The mistakes each failing check names: one set per naming check (a check that names
    several together, "one of ...", gives them all)."""
    named = []
    for exercise in result["exercises"]:
        for check in exercise["checks"]:
            if check["status"] != "passed" and check["mistake_id"]:
                named.append(set(check["mistake_id"].split("-or-")))
    return named


def feedback_kind(result: dict, mistake: dict) -> str:
    """How the grade of an uncatalogued ``mistake`` reads to the learner, by a rule (so before
    and after compare): "false pass"; "wrong" (some check names a mistake that is not one of
    its ``may_name``); "named right" (a check names one of them); "inferable" (no name, but a
    check points at the cause: the learner's own failing line, a function it uses that fails,
    or a hand-checked case worked out in the message); "generic" (only wrong values); "harmless"
    (marked so: it passes, equal to the reference on every graded input)."""
    if result["status"] == "passed":
        return "harmless" if "harmless" in mistake else "false pass"
    allowed = set(mistake.get("may_name", []))
    named = named_ids(result)
    if any(not (ids & allowed) for ids in named):
        return "wrong"
    if named:
        return "named right"
    failing = [c for e in result["exercises"] for c in e["checks"] if c["status"] != "passed"]
    pointed = result.get("note") or result.get("message")
    shown = (
        c["call_line"] or c.get("blamed") or c["kind"] == "hand-checked" or ", line " in c["message"]
        for c in failing
    )
    if pointed or any(shown):
        return "inferable"
    return "generic"
