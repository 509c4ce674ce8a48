"""`course dev check` passes on this tree and lists what is wrong in a broken copy of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from course.cli import dev as cli_dev
from course.instructor import devcheck
from tests.helpers import REPO

# Grading in this process runs the grading plugin, whose session fixture on an instance method
# (course/engine/plugin.py, GradingPlugin.lesson) pytest 9 deprecates; not this file's concern.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestRemovedIn10Warning")

COPIED = (
    "lessons",
    "solutions",
    "tests/lessons",
    "tests/mistakes",
    "course/catalog.toml",
    "course/grading_manifest.json",
    "course/grading_pristine.zip",
)


def run_cli(*args: str):
    app = typer.Typer()
    cli_dev.register(app)
    return CliRunner().invoke(app, ["dev", "check", *args])


def ids(problems: list[devcheck.Problem]) -> set[tuple[str, str]]:
    return {(problem.id, problem.file) for problem in problems}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of the parts of this repository that `course dev check` reads."""
    root = tmp_path / "repo"
    for name in COPIED:
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {path}"
    path.write_text(text.replace(old, new))


def test_this_repository_passes_the_check():
    assert devcheck.check(REPO) == []


def test_the_command_exits_0_on_this_repository():
    done = run_cli()
    assert done.exit_code == 0, done.output
    assert "agree" in done.output and "solutions pass" in done.output


def test_an_untouched_copy_passes_too(repo):
    assert devcheck.check(repo) == []


def test_a_removed_solution_is_reported_and_the_command_exits_1(repo):
    (repo / "solutions" / "l03_attention.py").unlink()
    problems = devcheck.check(repo)
    # lessons 6, 8 and 9 import lesson 3, so their solutions cannot be graded either
    assert ids(problems) == {
        ("missing-file", "solutions/l03_attention.py"),
        ("solution-fails", "solutions/l06_multi_head.py"),
        ("solution-fails", "solutions/l08_gqa.py"),
        ("solution-fails", "solutions/l09_kv_cache.py"),
    }
    assert "no solution file" in problems[0].message
    assert all("No module named 'l03_attention'" in p.message for p in problems[1:])
    done = run_cli("--root", str(repo))
    assert done.exit_code == 1
    lines = done.output.splitlines()
    assert lines[0].startswith("missing-file  solutions/l03_attention.py: Lesson 03")
    assert lines[1].startswith("solution-fails  solutions/l06_multi_head.py: Grading the")
    assert lines[-1].startswith("course dev check: 4 problem(s)")
    assert len(lines) == 5


def test_a_removed_grading_test_is_reported_with_the_stale_manifest(repo):
    (repo / "tests" / "lessons" / "test_l04_masks.py").unlink()
    problems = devcheck.check(repo)
    assert ids(problems) == {
        ("missing-file", "tests/lessons/test_l04_masks.py"),
        ("manifest-stale", "course/grading_manifest.json"),
    }
    stale = next(p for p in problems if p.id == "manifest-stale")
    assert "test_l04_masks.py" in stale.message
    assert "tools/update_grading_manifest.py" in stale.message


def test_an_empty_hint_is_reported(repo):
    edit(
        repo / "course" / "catalog.toml",
        "\"np.einsum('btd,hdk->bhtk', x, w_heads) names every axis and does it in one line.\"",
        '"  "',
    )
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {("missing-hints", "course/catalog.toml")}
    assert "l01_projections.head_projections" in problems[0].message
    assert "1 of them empty" in problems[0].message


def test_a_missing_summary_is_reported(repo):
    edit(
        repo / "course" / "catalog.toml",
        'summary = "softmax(x, axis=-1): stable, all -inf row -> zeros, keeps dtype."',
        'summary = ""',
    )
    problems = devcheck.check(repo, grade=False)
    assert [(p.id, p.message) for p in problems] == [
        ("missing-summary", "l02_softmax.softmax has no summary.")
    ]


def test_a_skeleton_solved_by_accident_is_reported(repo):
    shutil.copy(repo / "solutions" / "l02_softmax.py", repo / "lessons" / "l02_softmax.py")
    problems = devcheck.check(repo)
    assert ids(problems) == {
        ("skeleton-not-stub", "lessons/l02_softmax.py"),
        ("missing-todo", "lessons/l02_softmax.py"),
    }
    solved = next(p for p in problems if p.id == "skeleton-not-stub")
    assert "(passed)" in solved.message and "solved by accident" in solved.message


def test_a_different_signature_is_reported(repo):
    edit(
        repo / "solutions" / "l01_projections.py",
        "def linear(x, w, b=None):",
        "def linear(x, w, b=None, out=None):",
    )
    problems = devcheck.check(repo)
    assert ids(problems) == {("signature-differs", "solutions/l01_projections.py")}
    assert "linear(x, w, b=None, out=None)" in problems[0].message
    assert "linear(x, w, b=None)" in problems[0].message


def test_a_different_first_docstring_line_and_a_missing_function_are_reported(repo):
    solution = repo / "solutions" / "l05_heads.py"
    edit(solution, "def merge_heads(x):", "def merge_heads_(x):")
    edit(
        repo / "solutions" / "l04_masks.py",
        '    """The logical and of any number of masks',
        '    """The logical and of many masks',
    )
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {
        ("public-function-differs", "solutions/l05_heads.py"),
        ("public-function-differs", "lessons/l05_heads.py"),
        ("docstring-differs", "solutions/l04_masks.py"),
    }


def test_a_missing_todo_list_is_reported(repo):
    skeleton = repo / "lessons" / "l01_projections.py"
    edit(
        skeleton,
        """    TODO:
      1. Unpack H, D, K = w_heads.shape.
      2. Move the head axis after D: (H, D, K) -> (D, H, K).""",
        "    Steps:",
    )
    problems = devcheck.check(repo)
    assert ids(problems) == {("missing-todo", "lessons/l01_projections.py")}
    assert problems[0].message.startswith("fuse_head_weights's docstring has no numbered TODO")


def test_a_changed_lesson_text_in_a_solution_is_reported_against_the_skeleton(repo):
    edit(repo / "solutions" / "l02_softmax.py", "a softmax that never overflows", "a stable softmax")
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {("module-docstring-differs", "solutions/l02_softmax.py")}
    assert "the skeleton is the source of truth" in problems[0].message


def test_stray_files_are_reported(repo):
    (repo / "lessons" / "l10_notes.py").write_text("x = 1\n")
    (repo / "tests" / "mistakes" / "old.toml").write_text("")
    problems = devcheck.check(repo, grade=False)
    assert ids(problems) == {
        ("stray-file", "lessons/l10_notes.py"),
        ("stray-file", "tests/mistakes/old.toml"),
    }


def test_a_grading_test_without_an_exercise_marker_is_reported(repo):
    tests = repo / "tests" / "lessons" / "test_l02_softmax.py"
    tests.write_text(tests.read_text() + "\n\ndef test_floating_check(lesson):\n    pass\n")
    problems = devcheck.check(repo)
    assert ids(problems) == {
        ("untied-test", "tests/lessons/test_l02_softmax.py"),
        ("manifest-stale", "course/grading_manifest.json"),
    }
    untied = next(p for p in problems if p.id == "untied-test")
    assert "test_floating_check" in untied.message


def test_an_unreadable_catalog_is_one_problem(repo):
    (repo / "course" / "catalog.toml").write_text("[[lessons]\n")
    assert [p.id for p in devcheck.check(repo)] == ["catalog-unreadable"]


def test_a_folder_that_is_not_the_course_is_a_usage_error(tmp_path):
    done = run_cli("--root", str(tmp_path))
    assert done.exit_code == 2
    assert "not a clone of the course" in " ".join(done.output.split())
