"""Examples kept between cold checks (course/engine/grading/kept_examples.py): every value a property
check draws comes back exactly, anything else is left out, a file that is not ours is ignored,
and a grade that replays kept examples is the grade hypothesis gives."""

from __future__ import annotations

import enum
import json
import math

import numpy as np
import pytest

from course.content.catalog import load_catalog
from course.engine.grading import kept_examples, replay, runner
from course.engine.results import LessonResult
from course.workspace import actions, result_cache
from tests.helpers import SOLUTIONS, classic_mistakes, grade_folder, mistaken_source, solutions_with

LESSON = "l03_attention"


def round_trip(value):
    return kept_examples.unpack(json.loads(json.dumps(kept_examples.pack(value))))


def same(a, b) -> bool:
    """Equal in type and in every bit (NaN, -0.0 and array layouts included)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and a.flags.c_contiguous == b.flags.c_contiguous
            and a.flags.f_contiguous == b.flags.f_contiguous
            and a.flags.writeable == b.flags.writeable
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return a.hex() == b.hex() if not math.isnan(a) else math.isnan(b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


DRAWN = [
    np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7,
    np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    np.array([[True, False]]),
    np.array([-0.0, np.nan, np.inf, -np.inf, 5e-324]),
    np.zeros((0, 3), dtype=np.int16),
    np.array([1 + 2j], dtype=np.complex64),
    np.array(3.5),
    np.float32(0.1),
    np.int64(-7),
    True,
    2**80,
    -0.0,
    float("nan"),
    1e-310,
    complex(1.5, -0.0),
    "TestX",
    b"\x00\xff",
    None,
    (1, (2.5, [np.ones(2), {"a": None}])),
    {"mask": np.eye(2, dtype=bool), "scale": 0.125, 3: (None,)},
]


@pytest.mark.parametrize("value", DRAWN, ids=range(len(DRAWN)))
def test_every_kind_of_drawn_value_comes_back_exactly(value):
    assert same(round_trip(value), value)


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    "value",
    [np.array([object()]), {1, 2}, Colour.RED, np.datetime64("2026-01-01"), object(), [np.array(["a"])]],
    ids=["object array", "set", "int enum", "datetime", "object", "string array in a list"],
)
def test_a_value_of_any_other_kind_is_not_kept(value, tmp_path):
    with pytest.raises(kept_examples.Unkeepable):
        kept_examples.pack(value)
    path = tmp_path / "kept.json"
    checks = {"TestA::test_kept": [{"x": 1.0}], "TestB::test_left_out": [{"x": value}]}
    kept_examples.save(path, "key", checks)
    assert list(kept_examples.load(path, "key")) == ["TestA::test_kept"]


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        json.dumps({"key": "another", "checks": {"T::t": [{"x": {"f": "0x1p0"}}]}}).encode(),
        json.dumps({"key": "key", "checks": {"T::t": [{"x": {"q": 1}}]}}).encode(),
        json.dumps({"key": "key", "checks": {"T::t": [{"x": {"a": ["|O", [1], "C", "AA=="]}}]}}).encode(),
        json.dumps({"key": "key", "checks": {"T::t": [{"x": {"a": ["<f8", [2], "C", "AA=="]}}]}}).encode(),
        json.dumps({"key": "key", "checks": {"T::t": [{"x": {"i": 5}}]}}).encode(),
        json.dumps({"key": "key", "checks": {"T::t": [["not", "by", "name"]]}}).encode(),
        json.dumps({"key": "key", "checks": {"T::t": [{"x": {"d": [[{"l": []}, {"n": 0}]]}}]}}).encode(),
    ],
    ids=[
        "not json",
        "not a dict",
        "another key",
        "unknown tag",
        "object array",
        "bytes short of the shape",
        "int not as text",
        "example not by name",
        "unhashable key",
    ],
)
def test_a_file_that_is_not_ours_is_ignored(content, tmp_path):
    path = tmp_path / "kept.json"
    path.write_bytes(content)
    assert kept_examples.load(path, "key") == {}


def test_an_oversized_or_missing_file_is_ignored_unread(tmp_path, monkeypatch):
    path = tmp_path / "kept.json"
    kept_examples.save(path, "key", {"T::t": [{"x": np.ones(100)}]})
    assert kept_examples.load(path, "key")
    monkeypatch.setattr(kept_examples, "FILE_LIMIT", path.stat().st_size - 1)
    assert kept_examples.load(path, "key") == {}
    assert kept_examples.load(tmp_path / "missing.json", "key") == {}


def test_the_key_changes_with_the_test_file_and_the_build(tmp_path):
    test_file = tmp_path / "test_x.py"
    test_file.write_text("def test_a(): pass\n")
    first = kept_examples.file_key(test_file, "build-1")
    assert kept_examples.file_key(test_file, "build-2") != first
    test_file.write_text("def test_a(): assert True\n")
    assert kept_examples.file_key(test_file, "build-1") != first


def differences(a: dict, b: dict) -> list:
    return [
        (x["name"], key, x[key], y[key])
        for ea, eb in zip(a["exercises"], b["exercises"], strict=True)
        for x, y in zip(ea["checks"], eb["checks"], strict=True)
        for key in x
        if x[key] != y.get(key)
    ]


def lesson():
    return load_catalog().by_module(LESSON)


@pytest.fixture
def fresh_process():
    """This process's recordings put aside: each grade below starts as a new process would."""
    saved = dict(replay.RECORDED)
    replay.RECORDED.clear()
    yield
    replay.RECORDED.clear()
    replay.RECORDED.update(saved)


def grade(folder, examples=None) -> dict:
    result = grade_folder(folder, LESSON, examples)
    for key in ("duration", "learner_seconds", "output"):
        result.pop(key, None)
    return result


def test_a_new_process_replays_the_examples_an_earlier_one_kept(tmp_path, fresh_process):
    folder = solutions_with(tmp_path, LESSON, (SOLUTIONS / f"{LESSON}.py").read_text())
    kept = (tmp_path / "kept.json", "build")
    first = grade(folder, kept)
    assert kept[0].is_file()
    replay.RECORDED.clear()  # a new process
    before = dict(replay.COUNTS)
    second = grade(folder, kept)
    replayed = replay.COUNTS["replayed"] - before["replayed"]
    assert replayed >= 4 and replay.COUNTS["recorded"] == before["recorded"]
    assert first == second


@pytest.mark.parametrize(
    "mistake", [m for module, m in classic_mistakes() if module == LESSON], ids=lambda m: m["name"]
)
def test_a_classic_mistake_with_kept_examples_gets_hypothesis_grade(mistake, tmp_path, fresh_process):
    solved = solutions_with(tmp_path / "solved", LESSON, (SOLUTIONS / f"{LESSON}.py").read_text())
    kept = (tmp_path / "kept.json", "build")
    grade(solved, kept)
    mistaken = solutions_with(tmp_path / "mistaken", LESSON, mistaken_source(LESSON, mistake))
    replay.RECORDED.clear()
    with_kept = grade(mistaken, kept)
    replay.RECORDED.clear()
    by_hypothesis = grade(mistaken)
    assert with_kept["status"] != "passed"
    assert with_kept == by_hypothesis, differences(with_kept, by_hypothesis)


def test_only_a_learners_cached_check_keeps_examples(tmp_path, monkeypatch):
    """`course check` with the cache on hands the runner a file in the private cache folder;
    --fresh (the GitHub Classroom command) and COURSE_CACHE=off do not, and `course grade`
    cannot: it never imports result_cache (tests/test_result_cache.py)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("COURSE_SERVER", "off")
    monkeypatch.setenv("COURSE_CACHE", "on")
    given = []

    def fake_grade(lesson, folder, examples=None):
        given.append(examples)
        return LessonResult(lesson=lesson.module, status="failed")

    monkeypatch.setattr(runner, "grade", fake_grade)
    folder = solutions_with(tmp_path, LESSON, (SOLUTIONS / f"{LESSON}.py").read_text())
    actions.grade_lesson(lesson(), folder)
    actions.grade_lesson(lesson(), folder, fresh=True)
    monkeypatch.setenv("COURSE_CACHE", "off")
    actions.grade_lesson(lesson(), folder)
    path, build = given[0]
    assert path == result_cache.examples_file(LESSON)
    assert path.parent.parent == tmp_path / "cache" / "attention-course" and build
    assert given[1:] == [None, None]


WRITER = """

def _overwrite_kept_examples():
    import os
    from pathlib import Path

    # The cache folder, as an attacker who knows it would write it (the worker's environment
    # does not hold it: only an allow-list of the grader's environment passes).
    kept = Path(CACHE_HOME) / "attention-course" / "examples" / "l03_attention.json"
    try:
        kept.write_text('{"key": "forged", "checks": {}}')
    except OSError as problem:
        print("refused:", type(problem).__name__)


_real_attention = scaled_dot_product_attention


def scaled_dot_product_attention(*args, **kwargs):
    _overwrite_kept_examples()
    return _real_attention(*args, **kwargs)
"""


def test_learner_code_cannot_write_the_kept_examples(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE", "on")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = solutions_with(tmp_path, LESSON, (SOLUTIONS / f"{LESSON}.py").read_text())
    assert actions.grade_lesson(lesson(), folder).passed  # writes the kept examples
    kept = result_cache.examples_file(LESSON)
    written = kept.read_bytes()
    writer = WRITER.replace("CACHE_HOME", repr(str(tmp_path / "cache")))
    (folder / f"{LESSON}.py").write_text((SOLUTIONS / f"{LESSON}.py").read_text() + writer)
    result = actions.grade_lesson(lesson(), folder)
    assert "refused" in result.output and result.passed
    assert kept.read_bytes() == written
