"""Commands running at once (`course watch` beside a manual `course check`) never lose each
other's progress: every change to .course/state.json is a read-modify-write under a lock."""

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from course.workspace import state
from tests.helpers import SOLUTIONS

LESSONS = ("l01_projections", "l02_softmax", "l03_attention")


def test_three_checks_run_at_once_all_record_their_lesson(tmp_path):
    environment = dict(os.environ, NO_COLOR="1", COURSE_SERVER="off")
    environment.pop("COURSE_WORKSPACE", None)
    done = subprocess.run(
        [sys.executable, "-m", "course", "init", "ws"], cwd=tmp_path, capture_output=True, env=environment
    )
    assert done.returncode == 0, done.stderr
    workspace = tmp_path / "ws"
    for module in LESSONS:
        shutil.copy(SOLUTIONS / f"{module}.py", workspace)
    # Each reads the state, grades for a second or more, then records its result.
    checks = [
        subprocess.Popen(
            [sys.executable, "-m", "course", "check", str(number)],
            cwd=workspace,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=environment,
        )
        for number in range(1, len(LESSONS) + 1)
    ]
    for check in checks:
        _, errors = check.communicate(timeout=180)
        assert check.returncode == 0, errors.decode()
    recorded = json.loads((workspace / ".course" / "state.json").read_text())["lessons"]
    assert {module: recorded.get(module, {}).get("status") for module in LESSONS} == dict.fromkeys(
        LESSONS, "passed"
    )


def _record_many(path: str, worker: int, start) -> None:
    start.wait()
    for count in range(10):

        def passed(current: state.State, name: str = f"w{worker}_{count}") -> None:
            current.lesson(name).status = "passed"

        state.update(Path(path), passed)


def test_updates_from_many_processes_at_once_are_all_kept(tmp_path):
    path = tmp_path / ".course" / "state.json"
    state.save(state.State(welcomed=True), path)
    context = multiprocessing.get_context("fork")
    start = context.Event()
    workers = [context.Process(target=_record_many, args=(str(path), n, start)) for n in range(6)]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    kept = state.load(path)
    assert kept.welcomed
    assert sorted(kept.lessons) == sorted(f"w{n}_{c}" for n in range(6) for c in range(10))
    assert {p.name for p in path.parent.iterdir()} == {"state.json", "state.lock"}  # no temporaries


def test_a_link_planted_as_the_lock_file_is_replaced_never_followed(tmp_path):
    folder = tmp_path / ".course"
    folder.mkdir()
    target = tmp_path / "elsewhere.txt"
    target.write_text("untouched\n")
    (folder / "state.lock").symlink_to(target)
    state.update(folder / "state.json", lambda current: setattr(current, "welcomed", True))
    assert target.read_text() == "untouched\n"
    assert not (folder / "state.lock").is_symlink() and (folder / "state.lock").is_file()
    assert state.load(folder / "state.json").welcomed


def test_a_fifo_or_link_planted_as_the_state_is_refused_at_once_and_saved_over(tmp_path):
    folder = tmp_path / ".course"
    folder.mkdir()
    path = folder / "state.json"
    os.mkfifo(path)  # opening it for reading would wait for a writer forever
    done = []
    reader = threading.Thread(target=lambda: done.append(_problem(path)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert done and "could not be read" in done[0], "reading a FIFO as the progress file blocked"
    state.update(path, lambda current: setattr(current, "welcomed", True))
    assert path.is_file() and state.load(path).welcomed
    secret = tmp_path / "secret.json"
    secret.write_text('{"format": 1, "welcomed": true}')
    path.unlink()
    path.symlink_to(secret)
    assert "could not be read" in _problem(path)


def _problem(path: Path) -> str:
    try:
        state.load(path)
    except state.StateProblem as problem:
        return str(problem)
    return ""
