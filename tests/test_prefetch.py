"""A check's grading started early (course/workspace/prefetch.py): `course check N` and `--all` send the
warm grader their request before the rest of the command loads, keyed before anything is
graded; a started grading that is not the one the command ends up asking for is dropped."""

from __future__ import annotations

import socket

import pytest

from course.cli import everyday
from course.content.catalog import load_catalog
from course.workspace import actions, prefetch
from tests.helpers import SOLUTIONS, solutions_with


def lesson(module: str):
    return load_catalog().by_module(module)


def test_check_of_a_named_lesson_starts_grading_before_it_opens_the_session(tmp_path, monkeypatch):
    from course.workspace import folder as ws
    from course.workspace import session as session_module

    ws.init(tmp_path / "w", load_catalog())
    order = []
    real_start, real_open = prefetch.start, session_module.open_session

    def start(lessons, folder, fresh=False):
        order.append(("start", [entry.module for entry in lessons]))
        return real_start(lessons, folder, fresh)

    def open_session(*args, **kwargs):
        order.append(("open_session", None))
        return real_open(*args, **kwargs)

    monkeypatch.setattr(prefetch, "start", start)
    monkeypatch.setattr(session_module, "open_session", open_session)
    with pytest.raises(SystemExit):
        everyday.check("1", workspace=str(tmp_path / "w"), as_json=True)
    assert order == [("start", ["l01_projections"]), ("open_session", None)]
    order.clear()
    with pytest.raises(SystemExit):
        everyday.check(None, workspace=str(tmp_path / "w"), as_json=True)  # the current lesson
    assert order == [("open_session", None), ("start", ["l01_projections"])]


def test_a_started_grading_of_other_lessons_is_dropped_and_the_lessons_graded_anew(tmp_path):
    folder = solutions_with(tmp_path, "l02_softmax", (SOLUTIONS / "l02_softmax.py").read_text())
    ours, theirs = socket.socketpair()
    started = prefetch.Started(["l01_projections"], folder.resolve(), False, "", [None], [None], ours)
    results = actions.grade_lessons([lesson("l02_softmax")], folder, started=started)
    assert [result.lesson for result in results] == ["l02_softmax"] and results[0].passed
    assert started.connection is None and theirs.recv(1) == b""  # closed: its answer is not read
    theirs.close()


def test_a_started_grading_is_used_only_for_the_same_folder_lessons_and_freshness(tmp_path):
    folder = tmp_path.resolve()
    started = prefetch.Started(["l01_projections"], folder, False, "", [None], [None], None)
    assert started.serves([lesson("l01_projections")], folder, False)
    assert not started.serves([lesson("l01_projections")], folder, True)
    assert not started.serves([lesson("l02_softmax")], folder, False)
    assert not started.serves([lesson("l01_projections")], folder / "other", False)
