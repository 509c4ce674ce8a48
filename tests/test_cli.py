"""The `course` command as a learner uses it: in a subprocess, without a terminal."""

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from course import __version__
from course.cli import app
from course.content.catalog import load_catalog
from course.content.glossary import load_glossary
from course.content.lesson_source import without_markers
from tests.helpers import SOLUTIONS, run_course, solutions_with_mistake


def course(*args, cwd, env=None):
    return run_course(*args, cwd=cwd, env=env)


@pytest.fixture
def workspace(tmp_path) -> Path:
    done = course("init", "ws", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "ws"


def test_next_without_a_workspace_creates_one_and_introduces_lesson_one(tmp_path):
    done = course("next", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Created your workspace in workspace/" in done.stdout
    assert "Lesson 01" in done.stdout and "workspace/l01_projections.py" in done.stdout
    assert (tmp_path / "workspace" / "l01_projections.py").is_file()
    assert (tmp_path / "workspace" / ".course" / "state.json").is_file()
    assert "\x1b[" not in done.stdout and done.stderr == ""


def test_check_json_is_not_started_then_passed_after_the_solution_is_copied(workspace):
    first = course("check", "1", "--json", cwd=workspace)
    assert first.returncode == 1
    assert json.loads(first.stdout)["status"] == "not-started"
    shutil.copy(SOLUTIONS / "l01_projections.py", workspace)
    second = course("check", "1", "--json", cwd=workspace)
    payload = json.loads(second.stdout)
    assert second.returncode == 0 and payload["status"] == "passed"
    assert payload["lesson"] == "l01_projections" and payload["course_version"]
    state = json.loads((workspace / ".course" / "state.json").read_text())
    assert state["lessons"]["l01_projections"]["status"] == "passed"


def test_version_prints_the_course_version_and_exits_zero(tmp_path):
    done = course("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"course {__version__}\n", "")
    typed = CliRunner().invoke(app, ["--version"])  # the typer app answers it too, and lists it
    assert typed.exit_code == 0 and typed.output == f"course {__version__}\n"
    assert "--version" in CliRunner().invoke(app, ["--help"]).output


def on_a_terminal(*args: str, cwd: Path, env: dict) -> str:
    """What `course ARGS` writes to a pseudo-terminal (where rich styles its output)."""
    environment = dict(os.environ, COLUMNS="100", TERM="xterm-256color", COURSE_SERVER="off")
    for name in ("NO_COLOR", "FORCE_COLOR", "COURSE_WORKSPACE", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        environment.pop(name, None)
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "course", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=dict(environment, **env),
    )
    os.close(slave)
    written, deadline = b"", time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1.0)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the program ended: the terminal is closed
                    break
                if not chunk:
                    break
                written += chunk
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        os.close(master)
    return written.decode("utf-8", "replace")


@pytest.mark.parametrize("command, words", [("list", "l01_projections"), ("next", "Lesson 01")])
def test_no_color_on_a_terminal_leaves_no_escape_sequence_not_even_bold_dim_or_italic(
    workspace, command, words
):
    styled = on_a_terminal(command, cwd=workspace, env={})
    assert "\x1b[" in styled and words in styled  # a terminal: styled
    plain = on_a_terminal(command, cwd=workspace, env={"NO_COLOR": "1"})
    assert words in plain and "\x1b[" not in plain, plain


def test_list_and_show_print_the_documented_json(workspace):
    shutil.copy(SOLUTIONS / "l01_projections.py", workspace)
    assert course("check", "1", cwd=workspace).returncode == 0
    assert course("hint", "2", cwd=workspace).returncode == 0
    catalog = load_catalog()
    listed = course("list", "--json", cwd=workspace)
    payload = json.loads(listed.stdout)
    assert listed.returncode == 0 and payload["course_version"] == __version__
    assert payload["title"] == catalog.title and payload["current"] == "l02_softmax"
    assert payload["notices"] == []
    assert [each["module"] for each in payload["lessons"]] == [each.module for each in catalog.lessons]
    first, second = payload["lessons"][:2]
    assert first == {
        "id": "01",
        "number": 1,
        "module": "l01_projections",
        "title": catalog.lessons[0].title,
        "available": True,
        "status": "passed",
        "current": False,
        "needs_recheck": False,
    }
    assert (second["status"], second["current"]) == ("not-started", True)
    shown = course("show", "2", "--json", cwd=workspace)
    page = json.loads(shown.stdout)
    lesson = catalog.resolve("2")
    assert shown.returncode == 0 and page["course_version"] == __version__
    assert {key: page[key] for key in first} == dict(second)
    assert page["goals"] == list(lesson.goals) and page["recheck_after"] == ""
    assert Path(page["file"]) == (workspace / "l02_softmax.py").resolve()
    assert page["terms"] == [term.name for term in load_glossary().terms_of(lesson.id)]
    exercises = page["exercises"]
    assert [each["name"] for each in exercises] == [each.name for each in lesson.exercises]
    assert exercises[0] == {
        "name": lesson.exercises[0].name,
        "summary": lesson.exercises[0].summary,
        "status": "not-started",
        "hints_seen": 1,
        "hints_total": len(lesson.exercises[0].hints),
    }
    both = course("show", "2", "--json", "--map", cwd=workspace)
    assert both.returncode == 2 and "--map" in both.stdout


def test_check_all_ends_with_one_line_counting_the_lessons_and_checks_passed(workspace, tmp_path):
    shutil.copy(SOLUTIONS / "l01_projections.py", workspace)
    cache = {"COURSE_CACHE": "on", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    as_json = course("check", "--all", "--json", cwd=workspace, env=cache)
    lessons = json.loads(as_json.stdout)["lessons"]  # one JSON object: no summary line in it
    passed = sum(each["status"] == "passed" for each in lessons)
    checks = sum(each["counts"]["passed"] for each in lessons)
    total = sum(sum(each["counts"].values()) for each in lessons)
    assert passed == 1 and 0 < checks < total
    done = course("check", "--all", cwd=workspace, env=cache)
    assert done.returncode == 1
    assert done.stdout.strip().splitlines()[-1] == (
        f"{passed} of {len(lessons)} lessons passed; {checks} of {total} checks passed."
    )


def test_next_marks_a_passed_lesson_done_and_moves_on(workspace):
    shutil.copy(SOLUTIONS / "l01_projections.py", workspace)
    done = course("next", cwd=workspace)
    assert done.returncode == 0
    assert "Lesson 01 passed" in done.stdout


def test_a_failing_check_exits_one_and_names_the_problem(workspace):
    source = (SOLUTIONS / "l01_projections.py").read_text()
    (workspace / "l01_projections.py").write_text(source.replace("out = out + b", "pass"))
    done = course("check", "projections", cwd=workspace)
    assert done.returncode == 1
    assert "failed" in done.stdout and "the bias b is not added" in done.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (("check", "42"), "There is no lesson '42'"),
        (("show", "nonsense"), "There is no lesson 'nonsense'"),
        (("check", "--bogus"), "No such option"),
    ],
)
def test_usage_errors_exit_two_with_one_clear_line(workspace, args, words):
    done = course(*args, cwd=workspace)
    assert done.returncode == 2
    assert words in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr


def test_commands_outside_a_workspace_say_how_to_make_one(tmp_path):
    done = course("check", "1", cwd=tmp_path)
    assert done.returncode == 2 and "No course workspace here" in done.stdout


def test_workspace_option_and_environment_variable_find_the_workspace(workspace, tmp_path):
    assert course("check", "1", "--workspace", str(workspace), cwd=tmp_path).returncode == 1
    done = course("list", cwd=tmp_path, env={"COURSE_WORKSPACE": str(workspace)})
    assert done.returncode == 0 and "l01_projections" in done.stdout


def test_hints_are_revealed_one_tier_at_a_time_and_remembered(workspace):
    first = course("hint", "1", cwd=workspace)
    assert "1." in first.stdout and "2." not in first.stdout and "2 more hints" in first.stdout
    second = course("hint", "1", cwd=workspace)
    assert "2." in second.stdout
    state = json.loads((workspace / ".course" / "state.json").read_text())
    assert state["lessons"]["l01_projections"]["hints"] == {"linear": 2}
    other = course("hint", "1", "--exercise", "fuse_head_weights", cwd=workspace)
    assert "Hints for fuse_head_weights" in other.stdout


def test_reset_restores_the_skeleton_and_keeps_a_backup(workspace):
    (workspace / "l01_projections.py").write_text("# my work\n")
    done = course("reset", "1", cwd=workspace)
    assert done.returncode == 0 and "fresh skeleton" in done.stdout
    assert "raise NotImplementedError" in (workspace / "l01_projections.py").read_text()
    backups = list((workspace / ".course" / "backups").glob("l01_projections-*.py"))
    assert len(backups) == 1 and backups[0].read_text() == "# my work\n"


def test_solution_is_hidden_until_passed_and_a_peek_is_recorded(workspace):
    hidden = course("solution", "1", cwd=workspace)
    assert hidden.returncode == 1 and "--peek" in hidden.stdout and "def linear" not in hidden.stdout
    peek = course("solution", "1", "--peek", cwd=workspace)
    assert peek.returncode == 0 and "def linear" in peek.stdout and "recorded" in peek.stderr
    state = json.loads((workspace / ".course" / "state.json").read_text())
    assert state["lessons"]["l01_projections"]["solution_peeked"] is True


def test_solution_to_a_pipe_is_the_source_byte_for_byte_even_at_a_narrow_width(workspace):
    done = course("solution", "6", "--peek", cwd=workspace, env={"COLUMNS": "40"})
    expected = without_markers((SOLUTIONS / "l06_multi_head.py").read_text(encoding="utf-8"))
    assert max(map(len, expected.splitlines())) > 40  # lines that a 40-column screen would wrap
    assert done.returncode == 0 and done.stdout == expected


@pytest.mark.parametrize("content", ["{not json", "", '{"format": 7}'])
def test_a_corrupt_or_future_state_is_rebuilt_by_regrading_and_said(workspace, content):
    shutil.copy(SOLUTIONS / "l01_projections.py", workspace)
    (workspace / ".course" / "state.json").write_text(content)
    done = course("list", cwd=workspace)
    assert done.returncode == 0 and "it was rebuilt by re-grading" in " ".join(done.stdout.split())
    state = json.loads((workspace / ".course" / "state.json").read_text())
    assert state["lessons"]["l01_projections"]["status"] == "passed"


def test_show_lists_goals_file_and_exercises(workspace):
    done = course("show", "01", cwd=workspace)
    assert done.returncode == 0
    assert "You will learn to" in done.stdout and "fuse_head_weights" in done.stdout


def with_a_future_lesson(monkeypatch) -> str:
    """The real catalog plus one more lesson whose files are not written yet; returns its id."""
    from course.content.catalog import Exercise, Lesson
    from course.workspace import session

    real = load_catalog()
    number = len(real.lessons) + 1
    future = Lesson(
        id=f"{number:02d}",
        module=f"l{number:02d}_future",
        title="A lesson still being written",
        goals=("Wait for it.",),
        exercises=(Exercise("later", "later()", ("a", "b")),),
    )
    catalog = real._replace(lessons=real.lessons + (future,))
    monkeypatch.setattr(session, "load_catalog", lambda: catalog)  # what open_session reads
    return future.id


def test_list_marks_lessons_without_files_as_coming_soon(workspace, monkeypatch):
    number = with_a_future_lesson(monkeypatch)
    monkeypatch.chdir(workspace)
    done = CliRunner().invoke(app, ["list"], env={"NO_COLOR": "1", "COLUMNS": "120"})
    assert done.exit_code == 0
    line = next(line for line in done.output.splitlines() if f"l{number}_future" in line)
    assert "coming soon" in line
    assert "coming soon" not in next(row for row in done.output.splitlines() if "l01_projections" in row)


def test_a_coming_soon_lesson_is_refused_politely(workspace, monkeypatch):
    number = with_a_future_lesson(monkeypatch)
    monkeypatch.chdir(workspace)
    done = CliRunner().invoke(app, ["check", number], env={"NO_COLOR": "1", "COLUMNS": "120"})
    assert done.exit_code == 2 and "coming soon" in done.output


def test_a_later_lesson_names_the_unfinished_earlier_lesson_it_uses(workspace):
    shutil.copy(SOLUTIONS / "l03_attention.py", workspace)  # l02_softmax.py is still a skeleton
    done = course("check", "3", "--json", cwd=workspace)
    payload = json.loads(done.stdout)
    assert done.returncode == 1 and payload["status"] != "passed"
    assert payload["note"].startswith("This lesson uses your l02_softmax.py, which is not finished")
    assert "(`course check 2`)" in payload["note"]  # the lesson's number, as learners name it
    screen = course("check", "3", cwd=workspace).stdout
    assert "l02_softmax.py" in " ".join(screen.split())


def test_a_later_lesson_names_an_earlier_lesson_that_fails_its_own_check(workspace):
    shutil.copy(SOLUTIONS / "l03_attention.py", workspace)
    source = (SOLUTIONS / "l02_softmax.py").read_text()
    broken = source.replace("def softmax(x, axis=-1):", "def softmax(x, axis=-1):\n    return x * 0")
    (workspace / "l02_softmax.py").write_text(broken)
    assert course("check", "2", cwd=workspace).returncode == 1
    payload = json.loads(course("check", "3", "--json", cwd=workspace).stdout)
    assert payload["status"] == "failed"
    assert "l02_softmax.py, which has not passed its own check yet (`course check 2`)" in payload["note"]
    # scaled_dot_product_attention calls softmax: its failures point there, naming no mistake
    attention = next(e for e in payload["exercises"] if e["name"] == "scaled_dot_product_attention")
    failing = [c for c in attention["checks"] if c["status"] != "passed"]
    assert failing and all(c["blamed"] == "l02_softmax.softmax" and not c["mistake"] for c in failing)


def test_a_later_lesson_whose_earlier_file_does_not_parse_sends_the_learner_to_that_file(workspace):
    shutil.copy(SOLUTIONS / "l03_attention.py", workspace)
    (workspace / "l02_softmax.py").write_text("def softmax(x, axis=-1)\n    return x\n")
    payload = json.loads(course("check", "3", "--json", cwd=workspace).stdout)
    assert (payload["status"], payload["fix_first"]) == ("error", "l02_softmax")
    screen = " ".join(course("check", "3", cwd=workspace).stdout.split())
    assert "l03_attention.py imports your l02_softmax.py, which has a syntax error (line 1)" in screen
    assert "Edit l02_softmax.py, then `course check 3` again." in screen


def test_check_passes_with_an_own_helper_and_warns_in_one_line_about_an_import_from_elsewhere(workspace):
    solved = (SOLUTIONS / "l01_projections.py").read_text()
    (workspace / "utils.py").write_text(solved)
    (workspace / "l01_projections.py").write_text("import math  # noqa\nfrom utils import *  # noqa\n")
    own = course("check", "1", "--json", cwd=workspace)
    assert own.returncode == 0 and json.loads(own.stdout)["notice"] == ""  # its own module, the stdlib
    # pluggy is installed (pytest needs it), so the check passes: a warning, not a failure.
    (workspace / "utils.py").write_text("import pluggy  # noqa\n" + solved)
    (workspace / "l01_projections.py").write_text("import hypothesis  # noqa\nfrom utils import *  # noqa\n")
    done = course("check", "1", cwd=workspace)
    assert done.returncode == 0, done.stdout
    screen = " ".join(done.stdout.split())
    assert screen.count("Notice:") == 1 and screen.count("neither numpy nor") == 1
    assert (
        "Notice: l01_projections.py imports hypothesis, pluggy, neither numpy nor the standard library: "
        "`course submit` refuses it, and a class is graded without it." in screen
    )


def test_debug_runs_in_process_shows_prints_and_records_nothing(workspace):
    source = (SOLUTIONS / "l01_projections.py").read_text()
    (workspace / "l01_projections.py").write_text(
        source.replace("    out = x @ w  #", "    print('DEBUG-ME', x.shape)\n    out = x @ w  #")
    )
    before = (workspace / ".course" / "state.json").read_text()
    done = course("check", "1", "--debug", cwd=workspace)
    assert done.returncode == 0
    assert "NOT A GRADE" in done.stdout and "DEBUG-ME (2, 3, 4)" in done.stdout
    assert (workspace / ".course" / "state.json").read_text() == before


def test_debug_exits_one_unless_every_check_passes_as_check_does(workspace):
    source = (SOLUTIONS / "l01_projections.py").read_text()
    lesson_file = workspace / "l01_projections.py"
    lesson_file.write_text(source)
    assert course("check", "1", "--debug", cwd=workspace).returncode == 0
    # A skipped check counts as not passed in a grade: in a debug run too.
    lesson_file.write_text(
        source.replace(
            "    out = x @ w  #", "    import pytest\n    pytest.skip('later')\n    out = x @ w  #"
        )
    )
    assert course("check", "1", cwd=workspace).returncode == 1
    skipped = course("check", "1", "--debug", cwd=workspace)
    assert skipped.returncode == 1 and "skipped" in skipped.stdout
    # A file that ends the process while it is imported: its own error, not the course's.
    lesson_file.write_text(source + "\nimport sys\nsys.exit(0)\n")
    exits = course("check", "1", "--debug", cwd=workspace)
    assert exits.returncode == 1, exits.stdout + exits.stderr
    assert "l01_projections.py could not be imported" in exits.stdout and "SystemExit" in exits.stdout
    lesson_file.write_text("def linear(x, w, b=None)\n    return x\n")
    broken = course("check", "1", "--debug", cwd=workspace)
    assert broken.returncode == 1 and "SyntaxError" in broken.stdout
    assert "Traceback" not in broken.stdout + broken.stderr and "course/" not in broken.stdout
    # --debug runs one lesson's tests here: with --all (or --json) it would answer another question.
    for other in ("--all", "--json"):
        done = course("check", "--debug", other, cwd=workspace)
        assert done.returncode == 2 and "--debug" in done.stdout


def test_the_welcome_is_shown_once(tmp_path):
    first = course("next", cwd=tmp_path)
    assert "Welcome to" in first.stdout and "The loop" in first.stdout
    second = course("next", cwd=tmp_path)
    assert "Welcome to" not in second.stdout and "Lesson 01" in second.stdout


def test_finish_comes_after_regrading_everything_and_a_broken_lesson_reopens(workspace, tmp_path):
    for solution in SOLUTIONS.glob("l*.py"):
        shutil.copy(solution, workspace)
    # With the result cache (tests/test_result_cache.py): the next right after --all reuses
    # its grades, the one after an edit grades again.
    cache = {"COURSE_CACHE": "on", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert course("check", "--all", cwd=workspace, env=cache).returncode == 0  # all passed
    done = course("next", cwd=workspace, env=cache)
    assert "Every lesson passes, re-graded just now" in " ".join(done.stdout.split())
    source = (SOLUTIONS / "l04_masks.py").read_text()
    (workspace / "l04_masks.py").write_text(
        source.replace("def causal_mask(t, s=None):", "def causal_mask(t, s=None):\n    return None")
    )
    reopened = course("next", cwd=workspace, env=cache)
    assert "Every lesson passes" not in reopened.stdout and "Lesson 04" in reopened.stdout


def test_catalog_text_is_shown_literally_never_as_markup(workspace):
    done = course("show", "4", cwd=workspace)
    assert "lengths[b]" in done.stdout


def test_show_map_draws_the_learners_attention_weights(workspace):
    for module in ("l02_softmax", "l03_attention"):
        shutil.copy(SOLUTIONS / f"{module}.py", workspace)
    done = course("show", "3", "--map", cwd=workspace)
    assert done.returncode == 0
    assert "yours" in done.stdout and "reference" in done.stdout
    assert "stays within the mask" in done.stdout


def test_a_failing_attention_check_shows_a_small_map_that_flags_the_rows(workspace):
    shutil.copy(SOLUTIONS / "l02_softmax.py", workspace)
    source = (SOLUTIONS / "l03_attention.py").read_text()
    (workspace / "l03_attention.py").write_text(
        source.replace("np.where(mask, scores, -np.inf)", "np.where(mask, -np.inf, scores)")
    )
    done = course("check", "3", cwd=workspace)
    assert done.returncode == 1 and "Your attention weights" in done.stdout
    assert "weight on a key the mask forbids" in done.stdout
    assert "Your attention weights" not in course("check", "1", cwd=workspace).stdout


def test_a_failing_multi_head_check_shows_the_shape_trace(workspace):
    for module in ("l01_projections", "l02_softmax", "l03_attention", "l06_multi_head"):
        shutil.copy(SOLUTIONS / f"{module}.py", workspace)
    broken = solutions_with_mistake(workspace.parent / "mistake", "l05_heads", "split_no_swap")
    shutil.copy(broken / "l05_heads.py", workspace)
    done = course("check", "6", cwd=workspace)
    flat = " ".join(done.stdout.split())
    assert done.returncode == 1 and "Shapes through your code" in flat
    assert "split_heads gave (B, T, H, K) where (B, H, T, K) was expected" in flat


def test_reset_marks_the_passed_lessons_that_use_it_and_next_rechecks_them_on_the_way(workspace, monkeypatch):
    for module in ("l01_projections", "l02_softmax", "l03_attention", "l04_masks"):
        shutil.copy(SOLUTIONS / f"{module}.py", workspace)
    path = workspace / ".course" / "state.json"
    saved = dict(json.loads(path.read_text()), welcomed=True)
    for module in ("l01_projections", "l02_softmax", "l03_attention", "l04_masks"):
        saved["lessons"][module] = {"status": "passed"}
    path.write_text(json.dumps(saved))
    monkeypatch.chdir(workspace)
    env = {"NO_COLOR": "1", "COLUMNS": "120"}
    reset = CliRunner().invoke(app, ["reset", "2"], env=env)
    assert reset.exit_code == 0 and "Lesson 03 uses lesson 02, so its pass needs a re-check" in " ".join(
        reset.output.split()
    )
    rows = {
        row.split()[0]: row
        for row in CliRunner().invoke(app, ["list"], env=env).output.splitlines()
        if row.strip()[:2].isdigit()
    }
    assert "needs re-check" in rows["03"] and "passed" in rows["04"] and "current" in rows["02"]
    page = " ".join(CliRunner().invoke(app, ["show", "3"], env=env).output.split())
    assert "Needs a re-check: it uses l02_softmax.py, which was reset since it passed." in page
    shutil.copy(SOLUTIONS / "l02_softmax.py", workspace)
    done = " ".join(course("next", cwd=workspace).stdout.split())
    assert "Lesson 02 passed" in done
    assert "Lesson 03 re-checked and passed (it uses l02_softmax.py, which was reset)" in done
    assert "Lesson 05" in done  # lesson 4 passed and never used lesson 2: the next new lesson
    state = json.loads(path.read_text())["lessons"]
    assert state["l03_attention"]["recheck_after"] == "" and state["l03_attention"]["status"] == "passed"


def test_a_lessons_screen_names_its_glossary_terms(workspace, monkeypatch):
    monkeypatch.chdir(workspace)
    done = CliRunner().invoke(app, ["show", "6"], env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert done.exit_code == 0
    assert "Glossary: self-attention, cross-attention, multi-head attention" in done.output


def test_a_sealed_check_gives_no_points_to_a_file_that_runs_the_installed_reference(workspace):
    """GitHub Classroom's command (`course check N --workspace . --fresh --sealed`) grades as
    `course grade` does: a lesson file that only runs the course's own reference solution
    passes an ordinary check (the learner's machine holds the solutions) and fails this one."""
    from course.instructor.classroom.exports import check_command

    lesson = load_catalog().by_module("l01_projections")
    assert "--sealed" in check_command(lesson) and "--fresh" in check_command(lesson)
    reference = SOLUTIONS / "l01_projections.py"
    (workspace / "l01_projections.py").write_text(f"exec(open({str(reference)!r}).read())\n")
    plain = course("check", "1", "--workspace", ".", "--fresh", "--json", cwd=workspace)
    assert plain.returncode == 0, plain.stdout[-500:]
    sealed = course("check", "1", "--workspace", ".", "--fresh", "--sealed", "--json", cwd=workspace)
    assert sealed.returncode == 1
    payload = json.loads(sealed.stdout)
    assert payload["status"] != "passed" and payload["counts"]["passed"] == 0
    said = " ".join(payload["message"].split())
    assert "may read only your own folder" in said and "may write no file" not in said
