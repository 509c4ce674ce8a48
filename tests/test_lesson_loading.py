"""What is graded is the learner's lesson file: each lesson module (the one graded and the
earlier ones it imports) is loaded from its ``.py`` source by path, compiled from source. A
package, bytecode, an extension module or a ``.pth`` named like a lesson is never imported, and
the grader's own listing of the folder adds a notice saying it is ignored.

(tests/hostile/package_named_like_* grade package folders through the real `course check`.)
"""

import json
import os
import py_compile
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from tests.helpers import LESSONS, SOLUTIONS, grade_folder

MODULE = "l01_projections"
IGNORED = "is ignored: only l01_projections.py is graded"


def cheat_with_bytecode(folder: Path) -> None:
    """The untouched skeleton, with a solution beside it as an unchecked-hash .pyc (which plain
    Python imports in place of the source, whatever the source says)."""
    shutil.copy(LESSONS / f"{MODULE}.py", folder / f"{MODULE}.py")
    py_compile.compile(
        str(SOLUTIONS / f"{MODULE}.py"),
        cfile=str(folder / "__pycache__" / f"{MODULE}.{sys.implementation.cache_tag}.pyc"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        doraise=True,
    )


def test_an_unchecked_hash_pyc_of_a_solution_beside_the_skeleton_is_not_graded(tmp_path):
    cheat_with_bytecode(tmp_path)
    result = grade_folder(tmp_path, "1")
    assert result["status"] == "not-started"
    assert f"__pycache__/{MODULE}.{sys.implementation.cache_tag}.pyc" in result["notice"]
    assert IGNORED in result["notice"]


def test_an_extension_module_named_like_the_lesson_is_ignored_and_pythons_own_cache_not_mentioned(
    tmp_path,
):
    shutil.copy(SOLUTIONS / f"{MODULE}.py", tmp_path)
    py_compile.compile(str(tmp_path / f"{MODULE}.py"), doraise=True)  # as `python l01_...py` would
    # Any extension module will do: importing it under this name fails, so it must not be tried.
    import _bz2

    extension = f"{MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"
    shutil.copy(_bz2.__file__, tmp_path / extension)
    (tmp_path / f"{MODULE}.pth").write_text("import os\n")
    result = grade_folder(tmp_path, "1")
    assert result["status"] == "passed", result["message"]
    assert f"{extension} (an extension module named like a lesson) {IGNORED}" in result["notice"]
    assert f"{MODULE}.pth (a .pth file named like a lesson) {IGNORED}" in result["notice"]
    assert "__pycache__" not in result["notice"]


def test_a_lesson_file_still_imports_the_learners_own_helper_module(tmp_path):
    source = (SOLUTIONS / f"{MODULE}.py").read_text()
    (tmp_path / "my_helpers.py").write_text("def add_bias(out, b):\n    return out + b\n")
    (tmp_path / f"{MODULE}.py").write_text(
        "from my_helpers import add_bias\n" + source.replace("out = out + b", "out = add_bias(out, b)")
    )
    result = grade_folder(tmp_path, "1")
    assert result["status"] == "passed", result["message"]
    assert result["notice"] == ""


@pytest.fixture
def workspace(tmp_path):
    env = dict(os.environ, NO_COLOR="1", COURSE_SERVER="off")
    init = subprocess.run(
        [sys.executable, "-m", "course", "init", "ws"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stdout
    folder = tmp_path / "ws"
    cheat_with_bytecode(folder)
    (folder / MODULE).mkdir()  # and a package holding the solution
    shutil.copy(SOLUTIONS / f"{MODULE}.py", folder / MODULE / "__init__.py")
    return folder


def assert_graded_the_skeleton(result: dict) -> None:
    assert result["status"] == "not-started"
    assert f"{MODULE}/ (a package named like a lesson) {IGNORED}" in result["notice"]
    assert f"__pycache__/{MODULE}.{sys.implementation.cache_tag}.pyc (compiled bytecode" in result["notice"]


def test_github_classrooms_command_grades_the_skeleton_not_the_package_or_bytecode(workspace):
    done = subprocess.run(
        [sys.executable, "-m", "course", "check", "1", "--json", "--workspace", "."],
        cwd=workspace,
        env=dict(os.environ, NO_COLOR="1", COURSE_SERVER="off"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert_graded_the_skeleton(json.loads(done.stdout))


def test_the_warm_grader_grades_the_skeleton_not_the_package_or_bytecode(workspace, monkeypatch):
    folder = tempfile.mkdtemp(prefix="srv", dir="/tmp")  # short: socket paths are limited
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    monkeypatch.setenv("COURSE_SERVER", "on")
    from course.engine.warm import client

    try:
        client.start_in_background()
        assert client.ready(timeout=90), "the warm grader did not come up"
        answer = client.request(MODULE, workspace, timeout=60)
        assert answer is not None, "the warm grader did not answer"
        assert_graded_the_skeleton(answer)
    finally:
        client.stop()
        shutil.rmtree(folder, ignore_errors=True)
