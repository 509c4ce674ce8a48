"""What a keeper and worker forked by the zygote start from: the grader's environment as of the
worker's start, and a process with no module whose fork handler (threading's, random's) runs again
in each fork."""

import os
import signal
import time

import pytest

from course.engine.calls import learner_module
from course.engine.sandbox import process as processes
from course.engine.sandbox import zygote
from course.engine.sandbox.limits import Limits

LEARNER = """
import os, sys

PRELOADED = sorted(name for name in ("threading", "subprocess", "random", "tempfile") if name in sys.modules)

def environment():
    return [[key, value] for key, value in os.environ.items()]

def preloaded():
    return PRELOADED
"""


@pytest.fixture
def learner_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(zygote, "_failures", 0)  # other tests break zygotes on purpose
    (tmp_path / "l00_probe.py").write_text(LEARNER)
    deadline = time.monotonic() + 30
    while zygote.zygote(processes.worker_environment()) is None:
        assert time.monotonic() < deadline, "no zygote came up"
        time.sleep(0.02)
    return tmp_path


def forked_module(folder):
    learner = learner_module.LearnerModule(folder, "l00_probe", Limits(call_seconds=5))
    assert learner.workers[0].forked, "this process's workers should come from its zygote"
    return learner


def environment(learner) -> list[tuple[str, str]]:
    return [(key, value) for key, value in learner.environment()]


def without_scratch(pairs) -> list[tuple[str, str]]:
    return [(key, value) for key, value in pairs if key not in ("HOME", "TMPDIR")]


def test_a_forked_worker_has_the_allowed_part_of_the_graders_environment_in_its_order(learner_folder):
    learner = forked_module(learner_folder)
    try:
        expected = without_scratch(processes.worker_environment().items())
        assert without_scratch(environment(learner)) == expected
        home = dict(environment(learner))["HOME"]
        assert dict(environment(learner))["TMPDIR"] == home and "course" in home  # its scratch folder
    finally:
        learner.close()


def test_a_forked_worker_gets_no_secret_of_the_graders_environment_and_the_locale_as_changed_since(
    learner_folder, monkeypatch
):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a key the grading machine holds")
    monkeypatch.setenv("GITHUB_TOKEN", "a token")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")  # changed since the zygote started
    learner = forked_module(learner_folder)
    try:
        found = dict(environment(learner))
        assert "AWS_SECRET_ACCESS_KEY" not in found and "GITHUB_TOKEN" not in found
        assert found["LC_ALL"] == "C.UTF-8" and found["PYTHONHASHSEED"] == "0"
        assert set(found) <= {"PATH", "LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR", "PYTHONHASHSEED"} | {
            key for key in found if key.startswith(("LC_", "OPENBLAS_", "MKL_", "OMP_"))
        }
    finally:
        learner.close()


def test_learner_code_forked_by_the_zygote_finds_no_module_with_a_fork_handler_loaded(learner_folder):
    learner = forked_module(learner_folder)
    try:
        assert learner.preloaded() == []
    finally:
        learner.close()


def test_a_forked_worker_that_was_killed_is_no_longer_running_and_says_how_it_ended(learner_folder):
    learner = forked_module(learner_folder)
    try:
        worker = learner.workers[0]
        learner.preloaded()  # imported and answering
        assert worker.running()
        os.kill(worker.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while worker.running():
            assert time.monotonic() < deadline, "a killed worker still looks alive"
            time.sleep(0.01)
        assert worker.exit_code() == -signal.SIGKILL
        assert worker.process.wait(timeout=10) == 0  # its keeper swept and ended
    finally:
        learner.close()
