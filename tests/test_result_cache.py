"""A lesson whose files and course build did not change gets its last grade again; any change,
a forged or corrupt entry, `--fresh`, `course grade` and GitHub Classroom's command all grade."""

import ast
import json
import os
import shutil
from pathlib import Path

import pytest

from course.content.catalog import load_catalog
from course.engine.grading import runner
from course.engine.results import LessonResult
from course.instructor.classroom import exports
from course.workspace import actions, result_cache
from tests.helpers import SOLUTIONS

L01 = "l01_projections"


@pytest.fixture
def cached(monkeypatch, tmp_path):
    """The cache switched on, in a cache folder of this test's own; counts real grades."""
    monkeypatch.setenv("COURSE_CACHE", "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    graded: list[str] = []
    real = runner.grade

    def counting(lesson, folder, *args, **kwargs):
        graded.append(lesson.module)
        return real(lesson, folder, *args, **kwargs)

    monkeypatch.setattr(runner, "grade", counting)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    shutil.copy(SOLUTIONS / f"{L01}.py", workspace)
    shutil.copy(SOLUTIONS / "l02_softmax.py", workspace)
    return workspace, graded


def lesson(module=L01):
    return load_catalog().by_module(module)


def entry_file(cache_home: Path) -> Path:
    (found,) = (cache_home / "attention-course" / "results").glob("*.json")
    return found


def test_an_unchanged_lesson_is_not_graded_again_and_any_byte_changed_in_the_folder_regrades(cached):
    workspace, graded = cached
    first = actions.grade_lesson(lesson(), workspace)
    again = actions.grade_lesson(lesson(), workspace)
    assert first.passed and again.passed and graded == [L01]
    assert [e.status for e in again.exercises] == [e.status for e in first.exercises]
    with open(workspace / "l02_softmax.py", "a") as other:  # another lesson's file: l01 may import it
        other.write("\n# changed\n")
    actions.grade_lesson(lesson(), workspace)
    (workspace / "notes.txt").write_text("a file added next to the lessons\n")
    actions.grade_lesson(lesson(), workspace)
    (workspace / "helpers").mkdir()  # a package of the learner's own, which a lesson may import
    (workspace / "helpers" / "__init__.py").write_text("SCALE = 1\n")
    actions.grade_lesson(lesson(), workspace)
    (workspace / "helpers" / "__init__.py").write_text("SCALE = 2\n")
    actions.grade_lesson(lesson(), workspace)
    (workspace / ".course" / "anything").parent.mkdir(exist_ok=True)
    (workspace / ".course" / "anything").write_text("progress, backups: not what grades depend on\n")
    actions.grade_lesson(lesson(), workspace)
    actions.grade_lesson(lesson(), workspace, fresh=True)
    assert graded == [L01] * 6


def test_the_cache_lives_outside_the_workspace_in_a_folder_only_we_may_enter(cached, tmp_path):
    workspace, _ = cached
    before = sorted(os.listdir(workspace))
    actions.grade_lesson(lesson(), workspace)
    assert sorted(os.listdir(workspace)) == before
    folder = entry_file(tmp_path / "cache").parent
    assert folder.stat().st_mode & 0o077 == 0
    assert (folder.parent.stat().st_mode & 0o077) == 0


def test_a_cache_folder_others_may_enter_is_not_used(cached, tmp_path):
    workspace, graded = cached
    (tmp_path / "cache" / "attention-course").mkdir(parents=True)
    os.chmod(tmp_path / "cache" / "attention-course", 0o777)
    actions.grade_lesson(lesson(), workspace)
    actions.grade_lesson(lesson(), workspace)
    assert graded == [L01, L01]
    assert not list((tmp_path / "cache").rglob("*.json"))


FORGERIES = {
    "not json": lambda data: b"not json",
    "wrong shape": lambda data: json.dumps({"key": data["key"], "result": {"lesson": L01}}).encode(),
    "another key": lambda data: json.dumps(dict(data, key="0" * 64)).encode(),
    "another lesson": lambda data: json.dumps(
        {"key": data["key"], "result": dict(data["result"], lesson="l02_softmax")}
    ).encode(),
    "oversized": lambda data: b" " * (result_cache.ENTRY_LIMIT + 1),
}


def test_a_corrupt_or_forged_entry_is_ignored_and_the_lesson_graded(cached, tmp_path):
    workspace, graded = cached
    actions.grade_lesson(lesson(), workspace)
    entry = entry_file(tmp_path / "cache")
    genuine = json.loads(entry.read_bytes())
    for name, forge in FORGERIES.items():
        entry.write_bytes(forge(genuine))
        graded.clear()
        assert actions.grade_lesson(lesson(), workspace).passed, name
        assert graded == [L01], name


def forge_a_pass_for_a_failing_file(workspace: Path, tmp_path: Path) -> None:
    """The entry a local attacker could write: the current key, a pass for a broken file."""
    source = (SOLUTIONS / f"{L01}.py").read_text()
    (workspace / f"{L01}.py").write_text(source.replace("out = out + b", "pass"))
    actions.grade_lesson(lesson(), workspace)
    entry = entry_file(tmp_path / "cache")
    data = json.loads(entry.read_text())
    passed = runner.grade(lesson(), SOLUTIONS).to_dict()
    entry.write_text(json.dumps({"key": data["key"], "result": passed}))


def test_fresh_as_github_classroom_runs_it_never_reads_the_cache(cached, tmp_path):
    workspace, _ = cached
    forge_a_pass_for_a_failing_file(workspace, tmp_path)
    assert actions.grade_lesson(lesson(), workspace).passed  # the learner's own cache, trusted locally
    assert not actions.grade_lesson(lesson(), workspace, fresh=True).passed
    assert "--fresh" in exports.check_command(lesson()).split()


def test_course_grade_and_the_engine_never_import_the_cache():
    root = Path(__file__).resolve().parents[1] / "course"
    for path in [*root.glob("engine/*.py"), *root.glob("instructor/*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        assert "course.workspace.result_cache" not in names, path
        assert not any(
            isinstance(node, ast.ImportFrom) and any(a.name == "result_cache" for a in node.names)
            for node in ast.walk(tree)
        ), path


def test_the_key_covers_the_course_build_and_the_folder(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    keys = {
        result_cache.key(tmp_path / "a", L01, "build-1"),
        result_cache.key(tmp_path / "a", L01, "build-2"),
        result_cache.key(tmp_path / "b", L01, "build-1"),
        result_cache.key(tmp_path / "a", "l02_softmax", "build-1"),
    }
    assert len(keys) == 4


def test_a_timed_out_grade_is_not_kept():
    timed_out = LessonResult.from_dict(
        {
            "lesson": L01,
            "status": "failed",
            "exercises": [
                {
                    "name": "linear",
                    "status": "timeout",
                    "checks": [{"name": "c", "status": "timeout", "message": "did not return"}],
                }
            ],
        }
    )
    assert not result_cache.keepable(timed_out)


FORGER = '''
import json
from pathlib import Path


def forge():
    """Write a pass for lesson 2 into the cache, with the key its unchanged files will have."""
    from course.engine.warm import client
    from course.workspace import result_cache

    folder = Path(__file__).resolve().parent
    module = "l02_softmax"
    key = result_cache.key(folder, module, client.fingerprint())
    entry = result_cache._entry(folder, module)  # makes the folder, if it may
    # As an attacker who knows the cache folder would (the worker's environment does not hold it).
    entry = entry or Path(CACHE_HOME) / "attention-course/results/x.json"
    passed = {"lesson": module, "status": "passed", "exercises": []}
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(json.dumps({"key": key, "result": passed}))
    except OSError as problem:
        print("refused:", type(problem).__name__)

'''


def test_learner_code_cannot_write_a_grade_into_the_cache(cached, tmp_path):
    workspace, graded = cached
    source = (SOLUTIONS / f"{L01}.py").read_text()
    forging = source.replace("def linear(x, w, b=None):\n", "def linear(x, w, b=None):\n    forge()\n", 1)
    (workspace / f"{L01}.py").write_text(
        forging + FORGER.replace("CACHE_HOME", repr(str(tmp_path / "cache")))
    )
    result = actions.grade_lesson(lesson(), workspace)
    assert "refused" in result.output  # the worker may write no file (see course/engine/sandbox/landlock.py)
    assert not list((tmp_path / "cache").rglob("x.json"))
    actions.grade_lesson(lesson("l02_softmax"), workspace)
    assert graded == [L01, "l02_softmax"]  # lesson 2 was graded, not answered by a forged entry
