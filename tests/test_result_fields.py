"""What the grader knows is data on the result, not a sentence to parse: a check's mistake id and
misconception id, the tests tied to no exercise, and the signature a function must have (read
from the pristine skeleton; the worker only reports that the arguments did not bind)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from course.content.catalog import load_catalog
from course.engine.calls import errors
from course.engine.grading import plugin, report, runner
from course.engine.results import ERROR, LessonResult
from course.engine.sandbox.worker import main as worker
from tests.helpers import SOLUTIONS, grade_folder, solutions_with, solutions_with_mistake

L01 = load_catalog().resolve("1")


def test_a_named_mistake_is_in_the_json_by_id_with_its_misconception(tmp_path):
    result = grade_folder(solutions_with_mistake(tmp_path, "l03_attention", "missing_scale"), "l03_attention")
    checks = [c for e in result["exercises"] for c in e["checks"] if c["mistake_id"] == "missing-scale"]
    assert checks, json.dumps(result)[:2000]
    check = checks[0]
    assert check["misconception"] == "missing-scale"
    assert check["mistake"] == "the scores are not scaled: the 1/sqrt(K) factor is missing"
    assert check["status"] == "failed" and f"known mistake: {check['mistake']}." in check["message"]
    passed = [c for e in result["exercises"] for c in e["checks"] if c["status"] == "passed"]
    assert all(c["mistake"] == c["mistake_id"] == c["misconception"] == "" for c in passed)


def test_json_without_the_new_fields_still_reads():
    old = {
        "lesson": "l01_projections",
        "status": "failed",
        "exercises": [{"name": "linear", "status": "failed", "checks": [{"name": "t", "status": "failed"}]}],
    }
    result = LessonResult.from_dict(old)
    assert result.untied == [] and result.exercises[0].checks[0].mistake_id == ""
    again = LessonResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result


def test_tests_without_an_exercise_are_a_field_and_the_message_still_says_so(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    test_file = tests / "test_l01_projections.py"
    test_file.write_text(
        (Path(L01.grading_tests)).read_text()
        + "\n\ndef test_nobody_owns_me(lesson):\n    assert True\n"
        + "\n\n@exercise('no_such_exercise')\ndef test_an_unknown_exercise(lesson):\n    assert True\n"
    )
    result = runner.grade(L01, SOLUTIONS, test_file=test_file)
    assert result.status == ERROR
    assert result.untied == ["test_nobody_owns_me", "test_an_unknown_exercise"]
    assert "Tests without a known exercise: test_nobody_owns_me, test_an_unknown_exercise." in result.message
    assert LessonResult.from_dict(json.loads(json.dumps(result.to_dict()))).untied == result.untied


def test_a_lesson_without_stray_tests_has_no_untied_field_entries():
    assert runner.grade(L01, SOLUTIONS).untied == []


def test_the_required_signature_is_read_from_the_skeleton(tmp_path):
    skeleton = tmp_path / "l00_scratch.py"
    skeleton.write_text(
        '"""A lesson whose catalog prose says nothing about signatures."""\n\n'
        "def linear(x, w, b=None, *, scale=1.0):\n    raise NotImplementedError\n\n"
        "def _helper(a):\n    pass\n\n"
        "class NotAnExercise:\n    def method(self, q):\n        pass\n"
    )
    found = report.skeleton_signatures(SimpleNamespace(skeleton=skeleton))  # type: ignore[arg-type]
    assert found == {"linear": "linear(x, w, b=None, *, scale=1.0)", "_helper": "_helper(a)"}
    assert report.skeleton_signatures(SimpleNamespace(skeleton=tmp_path / "missing.py")) == {}  # type: ignore[arg-type]


def test_a_wrong_signature_gets_pythons_words_and_the_skeletons_signature(tmp_path):
    source = (SOLUTIONS / "l01_projections.py").read_text()
    source = source.replace("def linear(x, w, b=None):", "def linear(x, w):", 1)
    assert "def linear(x, w):" in source
    result = grade_folder(solutions_with(tmp_path, "l01_projections", source), "l01_projections")
    messages = [c["message"] for e in result["exercises"] if e["name"] == "linear" for c in e["checks"]]
    wanted = (
        "TypeError: linear() takes 2 positional arguments but 3 were given\n"
        "The function must accept: linear(x, w, b=None)"
    )
    assert any(wanted in message for message in messages), messages
    # Only the calls that did not bind get the line: linear(x, w) still grades the others.
    assert any(c["status"] == "passed" for e in result["exercises"] for c in e["checks"])


def test_a_type_error_inside_the_learners_code_is_not_called_a_signature_problem(tmp_path):
    source = (SOLUTIONS / "l01_projections.py").read_text()
    body = '    """'
    assert source.count("def linear(x, w, b=None):\n" + body) == 1
    source = source.replace(
        "def linear(x, w, b=None):\n", "def linear(x, w, b=None):\n    len(1, 2)  # TypeError: argument\n", 1
    )
    result = grade_folder(solutions_with(tmp_path, "l01_projections", source), "l01_projections")
    messages = " ".join(c["message"] for e in result["exercises"] for c in e["checks"])
    assert "len() takes exactly one argument" in messages and "must accept" not in messages


_NOT_REPRODUCIBLE = object()


def _mismatch(function, *args, **kwargs):
    return worker.mismatch(function, args, kwargs)


def test_the_worker_binds_the_arguments_before_calling():
    def linear(x, w):
        raise AssertionError("never run")

    info = _mismatch(linear, 1, 2, 3)
    assert info is not None and info["type"] == "SignatureMismatch"
    assert info["message"].endswith(".<locals>.linear() takes 2 positional arguments but 3 were given")
    assert info["signature"] == "(x, w)" and info["frames"] == []
    missing = _mismatch(lambda x, w, b: 0, 1, 2)
    assert missing is not None and "missing 1 required positional argument: 'b'" in missing["message"]
    keyword = _mismatch(lambda x, *, scale=None: 0, 1, factor=2)
    assert keyword is not None and "unexpected keyword argument 'factor'" in keyword["message"]
    assert _mismatch(lambda x, w, b=None: 0, 1, 2) is None
    assert _mismatch(lambda *args, **kwargs: 0, 1, 2, z=3) is None
    assert _mismatch(np.add, 1, 2) is None  # no signature to read: the call itself will tell


def test_the_learners_defaults_and_annotations_are_not_evaluated_again():
    def linear(x: int, w=_NOT_REPRODUCIBLE):  # its repr, <object at 0x...>, is not Python
        pass

    info = _mismatch(linear, 1, 2, 3)
    assert info is not None and info["signature"] == "(x, w=None)"


def test_a_forged_signature_mismatch_can_only_fail_a_check():
    forged = {"type": "SignatureMismatch", "message": "anything", "signature": "(x)", "frames": []}
    problem = errors.problem_for(forged, "linear", "l01_projections", [], 2**30)
    assert isinstance(problem, errors.SignatureMismatch)
    assert isinstance(problem, errors.LearnerError)
    assert problem.kind == "SignatureMismatch" and problem.function == "linear"
    assert plugin.classify(problem) == (ERROR, "TypeError: anything")


def test_the_time_inside_the_learners_calls_is_measured_by_the_grader_and_kept_in_the_json(tmp_path):
    source = (SOLUTIONS / "l01_projections.py").read_text()
    slow = source.replace(
        "def fuse_head_weights(",
        "def fuse_head_weights(*a, **k):\n    import time\n\n"
        "    time.sleep(0.05)\n    return _fuse(*a, **k)\n\n\ndef _fuse(",
        1,
    )
    quick = grade_folder(SOLUTIONS, "l01_projections")
    slowed = grade_folder(solutions_with(tmp_path, "l01_projections", slow), "l01_projections")
    assert slowed["status"] == quick["status"] == "passed", slowed
    calls = sum(
        c["status"] == "passed"
        for e in slowed["exercises"]
        if e["name"] == "fuse_head_weights"
        for c in e["checks"]
    )
    assert 0 < quick["learner_seconds"] < quick["duration"]  # the grader's own time is the rest
    assert calls >= 1 and slowed["learner_seconds"] >= 0.05 * calls  # every sleep is inside a call
    assert slowed["learner_seconds"] <= slowed["duration"]
    assert LessonResult.from_dict(slowed).learner_seconds == slowed["learner_seconds"]
