"""A class graded as a stream (course/instructor/classroom/class_stream.py,
course/engine/grading/one_session.py): the same grades as lesson-by-lesson grading, imports
loaded ahead under their own limit, and a grading process that dies costing no other bundle its
grade."""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from course.content.catalog import load_catalog
from course.engine.calls.learner_module import LearnerModule
from course.engine.grading import one_session, runner
from course.engine.sandbox import landlock
from course.engine.testing.compare import isclose
from course.instructor.classroom import class_stream, gradebook
from tests.helpers import LESSONS, SOLUTIONS, classic_mistakes, mistaken_source, solutions_with

CATALOG = load_catalog()
FIRST_THREE = [CATALOG.by_module(m) for m in ("l01_projections", "l02_softmax", "l03_attention")]
L01 = FIRST_THREE[0]
SOLVED = (SOLUTIONS / "l01_projections.py").read_text()
LOOP_IN_LINEAR = "def linear(x, w, b=None):\n    while True:\n        pass\n"


def comparable(result: dict) -> str:
    """A result without its duration, and without the addresses of objects a failed
    assertion's message may print (``<built-in method all of ... at 0x7f...>``)."""
    timings = ("duration", "learner_seconds")
    text = json.dumps({key: value for key, value in result.items() if key not in timings}, sort_keys=True)
    return re.sub(r"0x[0-9a-f]+", "0x", text)


def statuses(entry: dict) -> set[str]:
    """The statuses of a row entry's checks."""
    return {check["status"] for exercise in entry["result"]["exercises"] for check in exercise["checks"]}


def graded_in_one_session(units: list[tuple]) -> list[dict]:
    """Each (lesson, folder) graded in one session, in order; their results as dicts."""
    queue = list(units)
    results: dict[int, dict] = {}

    def next_unit() -> one_session.Unit | None:
        if not queue:
            return None
        lesson, folder = queue.pop(0)
        tag = len(units) - len(queue) - 1
        return one_session.Unit(lesson, folder, LearnerModule(folder, lesson.module), tag=tag)

    def done(unit: one_session.Unit, result: object) -> None:
        assert not isinstance(result, Exception), result
        results[unit.tag] = result.to_dict()

    one_session.grade_units(FIRST_THREE, next_unit, done)
    return [results[index] for index in range(len(units))]


def test_a_class_graded_in_one_session_gets_the_grades_each_lesson_gets_alone(tmp_path):
    units = [(lesson, folder.resolve()) for folder in (SOLUTIONS, LESSONS) for lesson in FIRST_THREE]
    for number, (module, mistake) in enumerate(classic_mistakes()):
        if module in ("l01_projections", "l02_softmax", "l03_attention"):
            folder = solutions_with(tmp_path / str(number), module, mistaken_source(module, mistake))
            # the mistaken lesson, and lesson 3, which imports the learner's softmax
            units += [
                (lesson, folder.resolve())
                for lesson in FIRST_THREE
                if lesson.module in (module, "l03_attention")
            ]
    together = graded_in_one_session(units)
    assert len(together) == len(units) > 30
    failed = 0
    for (lesson, folder), result in zip(units, together, strict=True):
        alone = runner.grade(lesson, folder).to_dict()
        assert comparable(result) == comparable(alone), (lesson.module, folder)
        failed += result["status"] == "failed"
    assert failed >= 10  # the mistakes are graded, not only the solutions


def make_bundle(path: Path, sources: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as bundle:
        for module, source in sources.items():
            bundle.writestr(f"{module}.py", source)
    return str(path)


def stream(paths: list[str], modules: list[str], window: int | None = None) -> list[tuple[int, dict]]:
    """The rows of ``paths`` as one grading process emits them, in order: (index, row)."""
    taken = iter(range(len(paths)))
    rows: list[tuple[int, dict]] = []
    ahead = class_stream.Ahead(
        paths, modules, lambda: next(taken, None), lambda i, row: rows.append((i, row))
    )
    if window:
        ahead.window = window
    ahead.run()
    return rows


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """The lesson modules class_stream loads, one entry per load (a load again counts twice)."""
    loads: list[str] = []
    real = class_stream.LearnerModule

    def counting(folder, module, *args, **kwargs):
        loads.append(module)
        return real(folder, module, *args, **kwargs)

    monkeypatch.setattr(class_stream, "LearnerModule", counting)
    return loads


def test_a_module_that_loops_at_import_is_over_its_limit_while_the_bundles_after_it_are_graded(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("COURSE_LIMITS", "import=3")
    paths = [make_bundle(tmp_path / "a.zip", {"l01_projections": "while True:\n    pass\n"})]
    paths += [make_bundle(tmp_path / f"{n}.zip", {"l01_projections": SOLVED}) for n in "bcd"]
    rows = stream(paths, ["l01_projections"])
    assert rows[0][0] != 0  # the bundles after it were graded while its import ran out of time
    by_index = dict(rows)
    loop = by_index.pop(0)["lessons"]["l01_projections"]
    assert loop["status"] == "error" and "took longer than 3 s" in loop["result"]["message"]
    assert all(row["lessons"]["l01_projections"]["status"] == "passed" for row in by_index.values())


def behind_a_looping_call(tmp_path: Path, sleep: float) -> dict[int, dict]:
    """The rows of two bundles loaded at once and graded in one process: a's first call loops
    until the call limit, b's import sleeps ``sleep`` seconds first."""
    paths = [
        make_bundle(tmp_path / "a.zip", {"l01_projections": LOOP_IN_LINEAR}),
        make_bundle(tmp_path / "b.zip", {"l01_projections": f"import time\ntime.sleep({sleep})\n" + SOLVED}),
    ]
    return dict(stream(paths, ["l01_projections"]))


def test_an_import_that_ends_unseen_while_another_grade_runs_is_loaded_again_and_passes(
    tmp_path, monkeypatch, counted
):
    # b's import (1 s) is over within its limit (3 s), but only looked at again once a's grade
    # is over (its first call runs into the 4 s limit): when it ended, nobody saw; so it is
    # loaded again and waited for, never held against it.
    monkeypatch.setenv("COURSE_LIMITS", "import=3,call=4")
    rows = behind_a_looping_call(tmp_path, 1.0)
    assert "timeout" in statuses(rows[0]["lessons"]["l01_projections"])
    assert rows[1]["lessons"]["l01_projections"]["status"] == "passed"
    assert len(counted) == 3  # a, b, and b again


def test_an_import_seen_unfinished_past_its_limit_is_over_it_without_waiting_for_it(
    tmp_path, monkeypatch, counted
):
    monkeypatch.setenv("COURSE_LIMITS", "import=1,call=2")
    rows = behind_a_looping_call(tmp_path, 60)
    slow = rows[1]["lessons"]["l01_projections"]
    assert slow["status"] == "error" and "took longer than 1 s" in slow["result"]["message"]
    assert len(counted) == 2  # not loaded again: seen unfinished after its limit is enough


def test_a_function_that_ends_the_process_is_not_called_again_and_the_others_still_run(tmp_path):
    source = SOLVED.replace(
        "def linear(", "def linear(x, w, b=None):\n    import os\n    os._exit(3)\n\n\ndef _old(", 1
    )
    result = runner.grade(L01, solutions_with(tmp_path, "l01_projections", source)).to_dict()
    linear = [c for e in result["exercises"] if e["name"] == "linear" for c in e["checks"]]
    assert "exit code 3" in linear[0]["message"]
    assert all(
        c["message"] == "Not run: an earlier call to linear ended the Python process running your code"
        " (the first check that called it says how)."
        for c in linear[1:]
    )
    others = [c for e in result["exercises"] if e["name"] != "linear" for c in e["checks"]]
    assert others and all(c["status"] == "passed" for c in others)


def test_a_bundle_that_kills_its_grading_process_takes_no_other_bundle_with_it(tmp_path, monkeypatch):
    real_open = class_stream.Ahead._open

    def dies_on_x(self, bundle, path):
        if path.name == "x.zip":
            os._exit(9)
        return real_open(self, bundle, path)

    monkeypatch.setattr(class_stream.Ahead, "_open", dies_on_x)
    for name in "abxcd":
        make_bundle(tmp_path / f"{name}.zip", {"l01_projections": SOLVED})
    report = gradebook.grade_folder(tmp_path, [L01], workers=1, same=False)
    rows = {row["file"]: row for row in report.rows}
    assert rows["x.zip"]["outcome"] == "grader-failed"
    assert "died twice" in rows["x.zip"]["problems"][0]
    for name in "abcd":
        assert rows[f"{name}.zip"]["lessons"]["l01_projections"]["status"] == "passed"


def test_a_class_in_two_processes_gets_every_row_once(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIMITS", "call=2")  # each looping bundle waits out its call limit
    for number in range(7):
        make_bundle(
            tmp_path / f"s{number}.zip", {"l01_projections": SOLVED if number % 2 else LOOP_IN_LINEAR}
        )
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    report = gradebook.grade_folder(tmp_path, [L01], workers=2, same=False)
    assert [row["file"] for row in report.rows] == sorted(p.name for p in tmp_path.glob("*.zip"))
    entries = [row["lessons"].get("l01_projections") for row in report.rows]
    assert entries[0] is None and report.rows[0]["outcome"] == "refused"
    for number, entry in enumerate(entries[1:]):
        assert ("timeout" in statuses(entry)) if number % 2 == 0 else entry["status"] == "passed"


finite_or_not = st.one_of(st.floats(), st.sampled_from([0.0, -0.0, 1e-300, 5e-324, np.inf, -np.inf, np.nan]))


@given(
    hnp.arrays(np.float64, st.integers(0, 6), elements=finite_or_not),
    st.sampled_from([(1e-5, 1e-8), (0.0, 0.0), (1e-3, 0.0), (0.0, 1e-6)]),
    st.data(),
)
def test_check_arrays_closeness_is_numpys_isclose_with_equal_nan(expected, tolerance, data):
    nearby = expected * (1 + data.draw(st.sampled_from([0.0, 1e-9, 1e-4, -1e-2])))
    actual = data.draw(st.sampled_from([expected, nearby, np.flip(expected)]))
    rtol, atol = tolerance
    with np.errstate(all="ignore"):
        wanted = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        assert np.array_equal(isclose(actual, expected, rtol, atol), wanted)


KILLS_EVERY_PROCESS_IT_CAN = """
import os
import signal

for pid in range(max(2, os.getpid() - 3000), os.getpid() + 3000):  # it may not list /proc
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


@pytest.mark.skipif(landlock._abi() < 6, reason="this kernel's Landlock cannot scope signals (ABI 6)")
def test_bundles_loaded_side_by_side_can_neither_read_nor_kill_each_other(tmp_path):
    from tests.test_confinement import COPIES_A_CLASSMATE

    make_bundle(tmp_path / "a_honest.zip", {"l01_projections": SOLVED})
    make_bundle(tmp_path / "b_killer.zip", {"l01_projections": KILLS_EVERY_PROCESS_IT_CAN + SOLVED})
    make_bundle(tmp_path / "c_copier.zip", {"l01_projections": "import os\n" + COPIES_A_CLASSMATE})
    make_bundle(tmp_path / "d_honest.zip", {"l01_projections": SOLVED})
    report = gradebook.grade_folder(tmp_path, [L01], workers=1, same=False)
    rows = {row["file"]: row for row in report.rows}
    assert all(row["outcome"] == "graded" for row in rows.values()), rows
    for name in ("a_honest.zip", "b_killer.zip", "d_honest.zip"):
        assert rows[name]["lessons"]["l01_projections"]["status"] == "passed", name
    assert rows["c_copier.zip"]["lessons"]["l01_projections"]["points"] == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_folder_named_relative_to_the_current_one_grades_every_bundle(tmp_path, monkeypatch, workers):
    """`course grade inbox`, as the docs type it: the grading processes change folder before
    they open the bundles, so the folder is taken as it was named from where the command ran."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inbox").mkdir()
    with zipfile.ZipFile(tmp_path / "inbox" / "ada.zip", "w") as bundle:
        bundle.writestr("l01_projections.py", SOLVED)
    report = gradebook.grade_folder(Path("inbox"), [L01], workers)
    [row] = report.rows
    assert row["outcome"] == "graded", row["problems"]
    assert row["lessons"]["l01_projections"]["status"] == "passed"
