"""Experiments (`course experiment LESSON [NAME]`): a lesson's pictures module defines
``EXPERIMENTS``; each runs the learner's code through a worker under raised limits, many calls
long, reports its progress and ends with figures. Here on a scratch lesson 98 whose experiment
calls the learner's ``train`` in chunks, in this process (the engine) and as a learner runs it
(the command, in a copy of the course with the lesson added)."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import pytest

from course.content.catalog import Lesson
from course.engine.calls.learner_module import LearnerModule
from course.engine.pictures import experiments, load
from course.engine.pictures.figures import LineChart, NumberTable
from course.engine.sandbox import process, zygote
from course.engine.sandbox.limits import EXPERIMENT_CALL_SECONDS, EXPERIMENT_RUN_SECONDS, Limits
from course.engine.sandbox.worker import allocator
from tests.course_copy import copy_course as copy_of_course
from tests.course_copy import course, environment, ready_workspace

CATALOG_ENTRY = """
[[lessons]]
id = "98"
module = "l98_experiment"
title = "A scratch lesson with an experiment"
goals = ["Train in chunks, resuming from the state each chunk returns."]

[[lessons.exercises]]
name = "train"
summary = "train(state, start_step, steps) -> (state, losses (steps,))."
hints = ["Return state + steps and 1 / (1 + step) for each step."]
"""

HEADER = '''"""Lesson 98: a stand-in for training, resumable in chunks."""

import time

import numpy as np


def wait(seconds):
    """Sleep, then return the seconds slept (for the experiment that is stopped)."""
    time.sleep(seconds)
    return seconds


def train(state, start_step, steps):
    """(state, losses): the state moved on by ``steps``, the loss 1 / (1 + step) of each step."""
'''
SKELETON = HEADER + "    raise NotImplementedError\n"
SOLUTION = HEADER + "    return state + steps, 1.0 / (1.0 + np.arange(start_step, start_step + steps))\n"

GRADING_TEST = '''"""Grading tests for lesson 98 (l98_experiment)."""

import numpy as np

from course.engine.testing import check_array, exercise


@exercise("train")
class TestTrain:
    def test_the_losses_of_a_chunk(self, lesson):
        state, losses = lesson.train(np.zeros(2), 3, 2)
        check_array(losses, np.array([1 / 4, 1 / 5]), what="train(state, 3, 2) losses", dims="S")
'''

PICTURES = '''"""Pictures of lesson 98: two experiments, one that trains in chunks, one that waits."""

import numpy as np

from course.engine.testing import Experiment, LearnerError, LineChart, NumberTable

STEPS, CHUNK = 40, 10
SEEN = []  # the LearnerModule each run got, for the project's tests


def loss_curve(module, progress):
    """train 10 steps at a time, resuming from the state it returned."""
    SEEN.append(module)
    state, losses = np.zeros(2), []
    progress(0, STEPS, "starting")
    for start in range(0, STEPS, CHUNK):
        state, chunk = module.train(state, start, CHUNK)
        chunk = np.asarray(chunk, dtype=float)
        if chunk.shape != (CHUNK,):
            raise LearnerError(f"train returned losses of shape {chunk.shape}; expected ({CHUNK},).")
        losses += chunk.tolist()
        progress(start + CHUNK, STEPS, f"step {start + CHUNK} of {STEPS}, loss {chunk[-1]:.3f}")
    return [
        LineChart("loss by step", tuple(range(STEPS)), {"yours": tuple(losses)}, x_label="step"),
        NumberTable("final loss", ("steps", "loss"), ((STEPS, losses[-1]),), ("d", ".4f")),
        "not a figure",
    ]


def waiting(module, progress):
    """One long call: the experiment a learner stops."""
    SEEN.append(module)
    progress(0, 1, "waiting")
    module.wait(60)
    progress(1, 1, "done")
    return []


EXPERIMENTS = (
    Experiment("loss", "Loss by step", "Trains 40 steps in chunks of 10 (a second).", loss_curve),
    "not an experiment",
    Experiment("wait", "A long wait", "Waits a minute; stop it with Ctrl-C.", waiting),
)
'''

LESSON = Lesson("98", "l98_experiment", "A scratch lesson with an experiment", (), ())


# -- the engine, in this process -------------------------------------------------------------------
@pytest.fixture
def pictures(monkeypatch) -> ModuleType:
    """The scratch pictures module, as ``load.load`` would give it for lesson 98."""
    module = ModuleType("course_pictures_l98_experiment")
    exec(compile(PICTURES, "pictures_l98_experiment.py", "exec"), module.__dict__)
    monkeypatch.setattr(load, "load", lambda lesson: module if lesson == LESSON else None)
    return module


def learner_folder(tmp_path: Path, source: str) -> Path:
    (tmp_path / "l98_experiment.py").write_text(source)
    return tmp_path


def test_a_lessons_experiments_are_the_experiments_of_its_tuple_in_order(pictures):
    assert [each.name for each in experiments.experiments(LESSON)] == ["loss", "wait"]
    with pytest.raises(LookupError, match="no experiment named 'nope': its experiments are loss, wait"):
        experiments.find(LESSON, "nope")


def test_an_experiment_returns_its_figures_and_reports_progress_up_to_its_total(pictures, tmp_path):
    reports: list[tuple[float, float, str]] = []
    found, problem = experiments.run(
        LESSON, learner_folder(tmp_path, SOLUTION), "loss", lambda d, t, s="": reports.append((d, t, s))
    )
    assert problem == ""
    assert [type(f) for f in found] == [LineChart, NumberTable]  # what is not a figure is dropped
    assert found[0].series["yours"][:3] == (1.0, 0.5, 1 / 3) and len(found[0].series["yours"]) == 40
    done = [d for d, _, _ in reports]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 40
    assert {t for _, t, _ in reports} == {40} and reports[-1][2] == "step 40 of 40, loss 0.025"


def test_the_learners_module_runs_under_the_raised_limits_and_is_closed_after(pictures, tmp_path):
    experiments.run(LESSON, learner_folder(tmp_path, SOLUTION), "loss", lambda *_: None)
    module: LearnerModule = pictures.SEEN[-1]
    assert module.limits == Limits.for_experiments()
    assert module.limits.call_seconds == EXPERIMENT_CALL_SECONDS == 120.0
    assert module.limits.run_seconds == EXPERIMENT_RUN_SECONDS == 1800.0
    assert module.limits.keep_freed_memory
    assert module.workers and not any(worker.running() for worker in module.workers)
    assert not module.scratch.exists()


def test_the_raised_limits_are_tightened_by_course_limits_never_loosened(monkeypatch):
    monkeypatch.setenv("COURSE_LIMITS", "call=2,run=3000,import=1,memory=1G,bogus=1,call=x")
    limits = Limits.for_experiments()
    assert (limits.call_seconds, limits.run_seconds) == (2.0, EXPERIMENT_RUN_SECONDS)
    assert (limits.import_seconds, limits.memory_bytes) == (1.0, 1024**3)
    assert Limits.from_env() == Limits(call_seconds=2.0, import_seconds=1.0, memory_bytes=1024**3)
    monkeypatch.delenv("COURSE_LIMITS")
    assert Limits.for_experiments().import_seconds == Limits().import_seconds
    assert Limits.for_experiments().memory_bytes == Limits().memory_bytes
    assert not Limits.from_env().keep_freed_memory


@pytest.mark.parametrize(
    "source, words",
    [
        (SKELETON, "Your function still raises NotImplementedError: nothing to run yet."),
        (HEADER + "    return state, np.zeros(3)\n", "train returned losses of shape (3,); expected (10,)."),
        (HEADER + "    return None\n", "Your function did not return what the experiment needs."),
    ],
)
def test_a_learner_problem_is_one_line_and_no_figure(pictures, tmp_path, source, words):
    found, problem = experiments.run(LESSON, learner_folder(tmp_path, source), "loss", lambda *_: None)
    assert (found, problem) == ([], words)


def test_raising_from_progress_stops_the_experiment_and_its_worker(pictures, tmp_path):
    def stop(done: float, total: float, status: str = "") -> None:
        if done >= 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        experiments.run(LESSON, learner_folder(tmp_path, SOLUTION), "loss", stop)
    module: LearnerModule = pictures.SEEN[-1]
    assert module.workers and not any(worker.running() for worker in module.workers)
    assert not module.scratch.exists()


# -- the allocator of an experiment's worker -------------------------------------------------------
HEAP = '''"""How many bytes glibc maps on their own for an array while it is held (mallinfo2)."""

import ctypes

import numpy as np


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


def mapped_while_holding(n_bytes):
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = MallInfo2
    before = mallinfo2().hblkhd
    held = np.ones(n_bytes // 8)
    mapped = mallinfo2().hblkhd - before
    del held
    return int(mapped)
'''


def glibc_with_mallinfo2() -> bool:
    import ctypes

    return os.confstr("CS_GNU_LIBC_VERSION") is not None and hasattr(ctypes.CDLL(None), "mallinfo2")


@pytest.mark.skipif(not glibc_with_mallinfo2(), reason="glibc 2.33+ only (mallinfo2)")
@pytest.mark.parametrize("forked", [False, True], ids=["exec", "forked"])
def test_a_worker_that_keeps_freed_memory_serves_an_8_mib_array_from_its_heap(tmp_path, monkeypatch, forked):
    """With glibc's defaults an 8 MiB array is mapped on its own (and unmapped when freed, so
    every training step maps it again); in an experiment's worker it comes from the heap,
    however the worker was started (the setting is made after the zygote's fork)."""
    (tmp_path / "l00_heap.py").write_text(HEAP)
    if forked:
        monkeypatch.setattr(zygote, "_failures", 0)  # other tests break zygotes on purpose
        deadline = time.monotonic() + 30
        while zygote.zygote(process.worker_environment()) is None:
            assert time.monotonic() < deadline, "no zygote came up"
            time.sleep(0.02)
    eight = 8 * 1024**2
    for keep in (False, True):
        scratch = Path(tempfile.mkdtemp(prefix="course-"))
        spare = None if forked else (process.Worker(scratch, may_fork=False), scratch)
        module = LearnerModule(tmp_path, "l00_heap", Limits(keep_freed_memory=keep), spare=spare)
        try:
            assert module.workers[0].forked == forked
            mapped = module.mapped_while_holding(eight)
        finally:
            module.close()
            shutil.rmtree(scratch, ignore_errors=True)
        assert (mapped == 0) if keep else (mapped >= eight), (keep, mapped)


def test_keep_freed_memory_is_accepted_by_this_machines_c_library_in_a_fresh_process():
    code = "from course.engine.sandbox.worker import allocator; print(allocator.keep_freed_memory())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    expected = os.confstr("CS_GNU_LIBC_VERSION") is not None  # glibc: accepted; elsewhere: False
    assert done.stdout.strip() == str(expected), done.stderr
    assert allocator.KEPT_BYTES == 32 * 1024**2


# -- the command, in a copy of the course with lesson 98 added ---------------------------------------
@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    root = copy_of_course(tmp_path_factory.mktemp("experiments") / "copy")
    with open(root / "course" / "content" / "catalog.toml", "a", encoding="utf-8") as catalog:
        catalog.write(CATALOG_ENTRY)
    (root / "lessons" / "l98_experiment.py").write_text(SKELETON)
    (root / "solutions" / "l98_experiment.py").write_text(SOLUTION)
    (root / "tests" / "lessons" / "test_l98_experiment.py").write_text(GRADING_TEST)
    (root / "tests" / "lessons" / "pictures_l98_experiment.py").write_text(PICTURES)
    return root, ready_workspace(root)


def test_the_command_lists_a_lessons_experiments_or_says_it_has_none(scratch):
    root, workspace = scratch
    listed = course(root, "experiment", "98", cwd=workspace)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "loss · Loss by step" in listed.stdout and "wait · A long wait" in listed.stdout
    assert "Trains 40 steps in chunks of 10" in listed.stdout and "not an experiment" not in listed.stdout
    assert "course experiment 98 NAME" in listed.stdout
    none = course(root, "experiment", "3", cwd=workspace)
    assert (none.returncode, none.stdout.strip()) == (0, "Lesson 03 has no experiments.")


@pytest.mark.parametrize(
    "args, words",
    [
        (("98", "nope"), "Lesson 98 has no experiment named 'nope': its experiments are loss, wait."),
        (("3", "loss"), "Lesson 03 has no experiments."),
        (("77",), "77"),
    ],
)
def test_an_unknown_lesson_or_experiment_is_one_line_and_exit_two(scratch, args, words):
    root, workspace = scratch
    done = course(root, "experiment", *args, cwd=workspace)
    assert done.returncode == 2 and words in " ".join(done.stdout.split()), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_the_command_runs_an_experiment_with_plain_progress_lines_then_draws_its_figures(scratch):
    root, workspace = scratch
    done = course(root, "experiment", "98", "loss", cwd=workspace)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["Loss by step", "Trains 40 steps in chunks of 10 (a second)."]
    progress = [line for line in lines if "%  0:00:" in line]
    assert progress[0].split() == ["0%", progress[0].split()[1], "starting"]
    assert progress[-1].split()[0] == "100%" and progress[-1].endswith("step 40 of 40, loss 0.025")
    assert "loss by step" in done.stdout and "final loss" in done.stdout and "0.0250" in done.stdout
    assert "\x1b[" not in done.stdout


def test_a_learner_problem_exits_one_with_one_line(scratch):
    root, workspace = scratch
    (workspace / "l98_experiment.py").write_text(SKELETON)
    try:
        done = course(root, "experiment", "98", "loss", cwd=workspace)
    finally:
        (workspace / "l98_experiment.py").write_text(SOLUTION)
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == (
        "Error: Your function still raises NotImplementedError: nothing to run yet."
    )


def test_ctrl_c_stops_the_experiment_says_so_in_one_line_and_leaves_nothing_running(scratch, tmp_path):
    root, workspace = scratch
    env = dict(environment(root), TMPDIR=str(tmp_path))  # the workers' scratch folders go here
    process = subprocess.Popen(
        [sys.executable, "-m", "course", "experiment", "98", "wait"],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    seen = b""
    deadline = time.monotonic() + 30
    while b"waiting" not in seen and time.monotonic() < deadline:
        if select.select([process.stdout], [], [], 1)[0]:
            seen += os.read(process.stdout.fileno(), 4096)
    assert b"waiting" in seen, seen
    time.sleep(0.3)  # into the learner's call
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130, (seen + out, err)
    assert (seen + out).decode().splitlines()[-1] == "Stopped." and b"Traceback" not in err
    assert not list(tmp_path.glob("course-*")), "the experiment's scratch folder was left"
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and in_folder(int(pid), tmp_path)]


def in_folder(pid: int, folder: Path) -> bool:
    """Whether process ``pid`` works in ``folder`` or below (a worker works in its scratch)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(folder)
    except OSError:
        return False
