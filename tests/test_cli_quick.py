"""`course list`, `next` and `check` start without typer (course.cli.quick) and import only what
they use; typer reads every command line the quick path accepts into the same arguments.

Nothing here is timed: what is held is which modules a command imports, read from
``python -X importtime`` (every module a process imports, one line each, on stderr).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from course.cli import app, everyday, quick
from tests.helpers import run_course

FUNCTIONS = {"list": everyday.list_, "next": everyday.next_, "check": everyday.check}


def accepted_lines() -> list[list[str]]:
    """Every flag of every command alone, the three spellings of the workspace, a lesson, and
    some mixtures in other orders."""
    lines: list[list[str]] = []
    for name, (flags, takes_lesson) in quick.COMMANDS.items():
        lines.append([name])
        lines += [[name, flag] for flag in flags]
        lines += [[name, "--workspace", "ws"], [name, "-w", "ws"], [name, "--workspace=ws"]]
        lines += [[name, "--workspace="], [name, "--workspace=-odd"], [name, "-w", ""]]
        if takes_lesson:
            lines += [[name, "3"], [name, ""], [name, "attention", "-v"], [name, "--all", "03"]]
            lines.append([name, "--json", "-w", "ws", "l03_attention", "--fresh", "--debug", "--verbose"])
    return lines


@pytest.mark.parametrize("argv", accepted_lines(), ids=" ".join)
def test_typer_reads_every_line_the_quick_path_accepts_into_the_same_arguments(argv, monkeypatch):
    monkeypatch.delenv("COURSE_WORKSPACE", raising=False)
    parsed = quick.parse(argv)
    assert parsed is not None
    name, arguments = parsed
    defaults = {
        key: parameter.default for key, parameter in inspect.signature(FUNCTIONS[name]).parameters.items()
    }
    command = get_command(app).commands[name]  # a click Group: its commands by name
    with command.make_context(name, argv[1:]) as context:
        assert context.params == dict(defaults, **arguments)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["list", "--help"],
        ["check", "-h"],
        ["show", "3"],
        ["hint"],
        ["check", "3", "4"],
        ["check", "--", "3"],
        ["check", "-"],
        ["check", "-wws"],
        ["check", "-vw", "ws"],
        ["check", "--bogus"],
        ["check", "--all=1"],
        ["check", "--json", "--json"],
        ["check", "-w", "a", "--workspace", "b"],
        ["list", "-w"],
        ["list", "-w", "--json"],
        ["list", "3"],
        ["list", "--fresh"],
        ["next", "1"],
        ["next", "--all"],
        ["check", "--verb"],
        ["check", "--no-fresh"],
    ],
    ids=lambda argv: " ".join(argv) or "(nothing)",
)
def test_anything_else_is_left_to_the_typer_app(argv):
    assert quick.parse(argv) is None


def test_a_shell_completion_request_is_left_to_the_typer_app(monkeypatch):
    monkeypatch.setenv("_COURSE_COMPLETE", "bash_complete")
    assert quick.parse(["list"]) is None


def imported(args: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `course ARGS` and return it with the names of every module it imported."""
    done = run_course(*args, cwd=cwd, env=env, python=("-X", "importtime"))
    names = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "course.cli" in names, done.stderr[-2000:]  # the importtime lines were read
    return done, names


def heavy(names: set[str], *prefixes: str) -> set[str]:
    return {name for name in names if name.split(".")[0] in prefixes or name.startswith(prefixes)}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quick")
    done = subprocess.run(
        [sys.executable, "-m", "course", "init", "ws"], cwd=folder, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return folder / "ws"


def test_course_list_imports_neither_typer_nor_syntax_highlighting_nor_the_grading_path(workspace):
    done, names = imported(["list"], workspace)
    assert done.returncode == 0 and "l01_projections" in done.stdout
    assert heavy(names, "typer", "click", "pygments", "numpy", "pytest") == set()
    assert (
        heavy(names, "rich.syntax", "course.engine", "course.workspace.actions", "course.cli.learner")
        == set()
    )


def test_a_check_answered_from_the_result_cache_imports_neither_typer_nor_numpy(
    workspace, tmp_path, monkeypatch
):
    """The cache entry is written here, as a check would have left it (grading to fill it could
    time out on a busy machine, and a timeout is never kept): the command finds it and grades
    nothing, so it never needs the engine's heavy half."""
    from course.engine.results import CheckResult, ExerciseResult, LessonResult
    from course.engine.warm import client
    from course.workspace import result_cache

    cache = {"COURSE_CACHE": "on", "COURSE_SERVER": "off", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for name, value in cache.items():
        monkeypatch.setenv(name, value)
    folder, module = workspace.resolve(), "l01_projections"
    kept = LessonResult(
        module,
        "not-started",
        [ExerciseResult("linear", "not-started", [CheckResult("test_linear_kept", "not-started")])],
    )
    result_cache.store(folder, module, result_cache.key(folder, module, client.fingerprint()), kept)
    as_json, names = imported(["check", "1", "--json"], workspace, **cache)
    assert as_json.returncode == 1 and "test_linear_kept" in as_json.stdout  # the kept result
    assert heavy(names, "typer", "click", "numpy", "pytest", "rich") == set()
    screen, names = imported(["check", "1"], workspace, **cache)
    assert screen.returncode == 1 and "not-started" in screen.stdout
    assert heavy(names, "typer", "click", "numpy", "pytest", "pygments", "rich.syntax") == set()


def test_course_version_answers_without_importing_typer_or_rich(workspace):
    from course import __version__

    done, names = imported(["--version"], workspace)
    assert done.returncode == 0 and done.stdout == f"course {__version__}\n"
    assert heavy(names, "typer", "click", "rich", "numpy", "course.content") == set()


def test_a_command_the_quick_path_leaves_alone_still_gets_typers_answer(workspace):
    done, names = imported(["check", "--bogus"], workspace)
    assert done.returncode == 2 and "No such option: --bogus" in done.stderr
    assert "typer" in names
