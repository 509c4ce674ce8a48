"""Submission bundles and class-wide grading: `course submit`, `course grade`, the JUnit and
GitHub Classroom exports. Only lesson 1 is graded, so the whole file runs in seconds."""

from __future__ import annotations

import csv
import json
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from course import __version__
from course.cli.instructor import register
from course.content.catalog import load_catalog
from course.instructor.classroom import exports, gradebook, submissions
from tests.helpers import LESSONS, SOLUTIONS, classic_mistakes, mistaken_source

CASES = classic_mistakes()

CATALOG = load_catalog()
L01 = CATALOG.resolve("1")
SOLVED = (SOLUTIONS / "l01_projections.py").read_bytes()
# A learner's own solution: never flagged as the same code as the reference (SOLVED is).
OWN = (
    SOLVED.decode()
    .replace("out = x @ w  #", "out = np.matmul(x, w)  #")
    .replace("by_row = np.transpose(w_heads, (1, 0, 2))", "by_row = w_heads.transpose(1, 0, 2)")
    .encode()
)
MISTAKE = next(m for module, m in CASES if module == "l01_projections")
WRONG = mistaken_source("l01_projections", MISTAKE).encode()
OS_EXIT = b"import os\n\n\ndef linear(x, w, b=None):\n    os._exit(0)\n"
FROM_UTILS = b"from utils import *  # noqa: F403 (the learner's own helper module)\n"


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in members.items():
            bundle.writestr(name, data)
    return path


def claim(
    name: str, source: bytes, status: str = "passed", points: int = 18, version: str = __version__
) -> bytes:
    """A result.json as `course submit` writes it, saying whatever the test wants."""
    return json.dumps(
        {
            "schema": 1,
            "course": CATALOG.title,
            "course_version": version,
            "name": name,
            "submitted_at": "2026-01-01T00:00:00+00:00",
            "files": {"l01_projections.py": submissions.sha256(source)},
            "lessons": [
                {
                    "lesson": "l01_projections",
                    "status": status,
                    "points": points,
                    "max_points": 18,
                    "exercises": [],
                }
            ],
        }
    ).encode()


def said(done) -> str:
    """What a command printed, with rich's line wrapping undone."""
    return " ".join(done.output.split())


def app() -> typer.Typer:
    instructor = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(instructor)
    return instructor


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A workspace holding an own solution of lesson 1 and the skeleton of lesson 2, and a file
    that is not a lesson (which a bundle must not take)."""
    folder = tmp_path_factory.mktemp("ws")
    (folder / ".course").mkdir()
    (folder / "l01_projections.py").write_bytes(OWN)
    (folder / "l02_softmax.py").write_bytes((LESSONS / "l02_softmax.py").read_bytes())
    (folder / "notes.py").write_text("print('mine')\n")
    return folder


def helper_workspace(folder: Path, lesson: bytes = FROM_UTILS, **helpers: bytes) -> Path:
    """A workspace whose lesson 1 file is ``lesson`` (by default: everything from utils.py),
    with the learner's own modules ``helpers`` (module name -> source) beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".course").mkdir(exist_ok=True)
    (folder / "l01_projections.py").write_bytes(lesson)
    for name, source in helpers.items():
        (folder / f"{name}.py").write_bytes(source)
    return folder


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory, workspace) -> Path:
    """A class: good, wrong, lying, foreign, extra-file, hostile, unimportable and corrupt
    bundles."""
    folder = tmp_path_factory.mktemp("class")
    submissions.build_bundle(workspace, folder / "good.zip", CATALOG, "alice", lessons=[L01])
    # helper.zip: the reference solution moved into utils.py; shadows.zip: helpers never extracted
    helped = helper_workspace(tmp_path_factory.mktemp("helped"), utils=SOLVED)
    submissions.build_bundle(helped, folder / "helper.zip", CATALOG, "hal", lessons=[L01])
    make_zip(
        folder / "shadows.zip",
        {
            "l01_projections.py": b"from utils import fuse_head_weights, head_projections, linear  # noqa\n",
            "utils.py": OWN,
            "random.py": b"raise SystemExit\n",
            "conftest.py": b"raise SystemExit\n",
            "notes.py": b"print('mine')\n",
        },
    )
    make_zip(
        folder / "wrong.zip", {"l01_projections.py": WRONG, "result.json": claim("bob", WRONG, "failed", 12)}
    )
    make_zip(folder / "liar.zip", {"l01_projections.py": WRONG, "result.json": claim("eve", SOLVED)})
    make_zip(
        folder / "foreign.zip",
        {"l01_projections.py": SOLVED, "result.json": claim("old", SOLVED, version="0.0.1")},
    )
    make_zip(
        folder / "extra.zip",
        {
            "l01_projections.py": SOLVED,
            "numpy.py": b"raise SystemExit\n",
            "result.json": claim("ext", SOLVED),
        },
    )
    make_zip(folder / "hostile.zip", {"l01_projections.py": OS_EXIT})
    make_zip(folder / "unimportable.zip", {"l01_projections.py": b"import utils\n"})
    (folder / "notazip.zip").write_text("this is not a zip file\n")
    good = (folder / "good.zip").read_bytes()
    (folder / "truncated.zip").write_bytes(good[: len(good) // 2])
    garbled = bytearray(good)
    garbled[40:200] = bytes(160)  # inside the first member's compressed data
    (folder / "garbled.zip").write_bytes(bytes(garbled))
    make_zip(
        folder / "formula.zip",
        {"l01_projections.py": SOLVED, "result.json": claim('=HYPERLINK("x")', SOLVED)},
    )
    make_zip(folder / "traversal.zip", {"../l01_projections.py": SOLVED, "result.json": b"{}"})
    make_zip(folder / "absolute.zip", {"/tmp/l01_projections.py": SOLVED})
    make_zip(folder / "toobig.zip", {"l01_projections.py": b"#" * (submissions.MAX_FILE_BYTES + 10)})
    make_zip(folder / "toomany.zip", {f"f{i}.txt": b"" for i in range(submissions.MAX_MEMBERS + 1)})
    (folder / "readme.txt").write_text("not a bundle: ignored\n")
    return folder


@pytest.fixture(scope="module")
def report(class_folder) -> gradebook.Report:
    return gradebook.grade_folder(class_folder, [L01], workers=2)


@pytest.fixture(scope="module")
def rows(report) -> dict[str, dict]:
    return {row["file"]: row for row in report.rows}


def test_submit_bundles_only_the_lesson_files_with_their_hashes_and_results(workspace, tmp_path):
    payload = submissions.build_bundle(workspace, tmp_path / "s.zip", CATALOG, "alice")
    with zipfile.ZipFile(tmp_path / "s.zip") as bundle:
        assert bundle.testzip() is None
        assert sorted(bundle.namelist()) == ["l01_projections.py", "l02_softmax.py", "result.json"]
        stored = json.loads(bundle.read("result.json"))
        for name in ("l01_projections.py", "l02_softmax.py"):
            assert stored["files"][name] == submissions.sha256(bundle.read(name))
            assert stored["files"][name] == submissions.sha256((workspace / name).read_bytes())
    assert stored == payload
    assert stored["course_version"] == __version__ and stored["name"] == "alice"
    assert stored["submitted_at"].endswith("+00:00")
    first, second = stored["lessons"]
    assert (first["lesson"], first["status"], first["points"], first["max_points"]) == (
        "l01_projections",
        "passed",
        18,
        18,
    )
    assert second["status"] == "not-started" and second["points"] == 0 and second["max_points"] > 0
    assert [e["name"] for e in first["exercises"]] == [e.name for e in L01.exercises]
    assert stored["total_points"] == 18


def test_submit_command_writes_the_bundle_and_says_where(workspace, tmp_path):
    out = tmp_path / "hand-in.zip"
    done = CliRunner().invoke(
        app(),
        ["submit", "--workspace", str(workspace), "--out", str(out), "--name", "Ada L", "--lessons", "1"],
    )
    assert done.exit_code == 0, done.output
    # The path is one long word: where rich folds it depends on the temporary folder's length.
    assert "hand-in.zip" in "".join(done.output.split()) and "18 of 18 points" in said(done)
    assert json.loads(zipfile.ZipFile(out).read("result.json"))["name"] == "Ada L"


def test_submit_without_lesson_files_is_a_clear_usage_error(tmp_path):
    (tmp_path / ".course").mkdir()
    done = CliRunner().invoke(app(), ["submit", "--workspace", str(tmp_path)])
    assert done.exit_code == 2 and "nothing to submit" in said(done)
    assert "Traceback" not in done.output


def test_grade_gives_every_bundle_a_row_in_name_order(report, class_folder):
    expected = sorted(p.name for p in class_folder.glob("*.zip"))
    assert [row["file"] for row in report.rows] == expected
    assert report.max_points == {"l01_projections": 18}


def test_good_wrong_and_foreign_bundles_are_re_graded(rows):
    good, wrong, foreign = rows["good.zip"], rows["wrong.zip"], rows["foreign.zip"]
    assert good["outcome"] == "graded" and good["problems"] == []
    assert good["lessons"]["l01_projections"]["status"] == "passed" and gradebook.total(good) == 18
    assert wrong["lessons"]["l01_projections"]["status"] == "failed"
    assert 0 < gradebook.total(wrong) < 18
    assert foreign["lessons"]["l01_projections"]["status"] == "passed"
    assert any("course version '0.0.1'" in problem for problem in foreign["problems"])


def test_a_result_file_that_lies_is_not_trusted(rows):
    liar = rows["liar.zip"]
    assert liar["lessons"]["l01_projections"]["status"] == "failed"
    assert gradebook.total(liar) < 18
    problems = " ".join(liar["problems"])
    assert "result.json claims l01_projections passed 18 points; re-graded failed" in problems
    assert "sha256 in result.json does not match: l01_projections.py" in problems


def test_extra_files_are_reported_and_never_extracted(rows):
    extra = rows["extra.zip"]
    assert extra["problems"][0].startswith("numpy.py not extracted: it is named like the installed numpy")
    assert extra["lessons"]["l01_projections"]["status"] == "passed"  # no numpy.py shadowing


# -- the learner's own helper modules ------------------------------------------------------------
def test_submit_bundles_the_helpers_lesson_files_import_following_their_imports(tmp_path):
    deep = b"import math\n\n\ndef unused():\n    import lazy  # imported late\n\n    return math.pi\n"
    utils = b"from deep import *  # noqa: F403\n" + SOLVED
    folder = helper_workspace(tmp_path / "ws", utils=utils, deep=deep, lazy=b"X = 1\n")
    (folder / "notes.py").write_text("print('mine')\n")  # imported by nothing: never taken
    payload = submissions.build_bundle(folder, tmp_path / "s.zip", CATALOG, "ada", lessons=[L01])
    with zipfile.ZipFile(tmp_path / "s.zip") as bundle:
        assert sorted(bundle.namelist()) == [
            "deep.py",
            "l01_projections.py",
            "lazy.py",
            "result.json",
            "utils.py",
        ]
        assert bundle.read("deep.py") == deep
    assert payload["helpers"] == ["deep.py", "lazy.py", "utils.py"]
    assert payload["files"]["utils.py"] == submissions.sha256(utils)
    assert payload["lessons"][0]["status"] == "passed"


def test_submit_command_names_the_helpers_it_bundled(tmp_path):
    folder = helper_workspace(tmp_path / "ws", utils=OWN)
    out = tmp_path / "s.zip"
    done = CliRunner().invoke(app(), ["submit", "--workspace", str(folder), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "1 lesson files and your utils.py for" in said(done) and "18 of 18 points" in said(done)


def test_a_bundle_is_graded_with_its_helpers_beside_its_lesson_files(rows):
    helper = rows["helper.zip"]
    assert helper["outcome"] == "graded"
    assert helper["lessons"]["l01_projections"]["status"] == "passed" and gradebook.total(helper) == 18


def test_a_helper_that_is_the_reference_solution_is_flagged(rows):
    assert rows["helper.zip"]["problems"] == [
        "utils.py is the reference solution of l01_projections.py up to formatting and comments"
    ]
    assert rows["helper.zip"]["similar"] == {"utils": ["reference solution"]}
    assert "similar" not in rows["good.zip"] and "similar" not in rows["shadows.zip"]


def test_grade_says_why_a_helper_named_like_a_library_or_hook_is_never_extracted(rows):
    shadows = rows["shadows.zip"]
    assert shadows["lessons"]["l01_projections"]["status"] == "passed"  # with its own utils.py
    problems = " | ".join(shadows["problems"])
    assert "random.py not extracted: it is named like the standard library's random" in problems
    assert "conftest.py not extracted: it is a file pytest or Python runs by itself" in problems
    assert "extra files ignored: notes.py" in problems and "utils.py" not in problems


def test_opening_a_bundle_extracts_imported_helpers_only_and_never_a_shadowing_one(tmp_path):
    bundle = make_zip(
        tmp_path / "b.zip",
        {
            "l01_projections.py": b"import hypothesis\nfrom utils import *  # noqa: F403\n",
            "utils.py": OWN,
            "hypothesis.py": b"raise SystemExit\n",
            "sitecustomize.py": b"raise SystemExit\n",
            "unused.py": b"X = 1\n",
        },
    )
    (tmp_path / "into").mkdir()
    opened = submissions.open_bundle(bundle, tmp_path / "into", CATALOG)
    assert sorted(p.name for p in (tmp_path / "into").iterdir()) == ["l01_projections.py", "utils.py"]
    assert opened.helpers == {"utils.py": OWN}
    problems = " | ".join(opened.problems)
    assert "hypothesis.py not extracted: it is named like the installed hypothesis" in problems
    assert "sitecustomize.py not extracted" in problems and "extra files ignored: unused.py" in problems


@pytest.mark.parametrize(
    "helper, words",
    [
        ("random", "named like the standard library's random"),
        ("numpy", "named like the installed numpy"),
        ("pytest", "named like the installed pytest"),
        ("hypothesis", "named like the installed hypothesis"),
        ("conftest", "a file pytest or Python runs by itself"),
        ("sitecustomize", "a file pytest or Python runs by itself"),
    ],
)
def test_submit_refuses_a_helper_that_shadows_a_library_or_a_hook_and_writes_nothing(tmp_path, helper, words):
    lesson = f"from {helper} import linear, head_projections, fuse_head_weights  # noqa: F401\n"
    folder = helper_workspace(tmp_path / "ws", lesson.encode(), **{helper: OWN})
    out = tmp_path / "s.zip"
    done = CliRunner().invoke(app(), ["submit", "--workspace", str(folder), "--out", str(out)])
    assert done.exit_code == 2, done.output
    assert f"import {helper}.py from your workspace, but it is {words}" in said(done)
    assert "Nothing was written" in said(done) and "Traceback" not in done.output
    assert list(tmp_path.glob("s.zip*")) == []


def test_submit_refuses_a_top_level_import_that_is_neither_numpy_nor_the_standard_library(tmp_path):
    lesson = b"import math\nimport pluggy  # noqa: F401\n" + SOLVED
    folder = helper_workspace(tmp_path / "ws", lesson, utils=b"X = 1\n")
    out = tmp_path / "s.zip"
    done = CliRunner().invoke(app(), ["submit", "--workspace", str(folder), "--out", str(out)])
    assert done.exit_code == 2, done.output
    assert "l01_projections.py imports pluggy, which is neither numpy, Python's standard" in said(done)
    assert not out.exists()
    (folder / "l01_projections.py").write_bytes(b"from utils import X  # noqa: F401\n")
    (folder / "utils.py").write_bytes(b"import scipy  # noqa: F401\n")  # a helper's top counts too
    done = CliRunner().invoke(app(), ["submit", "--workspace", str(folder), "--out", str(out)])
    assert done.exit_code == 2 and "utils.py imports scipy" in said(done) and not out.exists()


def test_submit_refuses_a_package_folder_it_cannot_bundle(tmp_path):
    folder = helper_workspace(tmp_path / "ws", b"from mine import linear  # noqa: F401\n")
    (folder / "mine").mkdir()
    (folder / "mine" / "__init__.py").write_bytes(OWN)
    done = CliRunner().invoke(app(), ["submit", "--workspace", str(folder), "--out", str(tmp_path / "s.zip")])
    assert done.exit_code == 2 and "the folder mine/" in said(done)
    assert not (tmp_path / "s.zip").exists()


@pytest.mark.parametrize(
    "helpers, words",
    [
        ({f"mine{i}": b"X = 1\n" for i in range(submissions.MAX_MEMBERS)}, "files \\(at most 32"),
        ({"big": b"#" * (submissions.MAX_FILE_BYTES + 1)}, "larger than"),
        ({f"mine{i}": b"#" * (submissions.MAX_FILE_BYTES - 10) for i in range(5)}, "bytes in all"),
    ],
)
def test_helpers_count_towards_the_bundle_limits_and_submit_refuses_past_them(tmp_path, helpers, words):
    lesson = "".join(f"import {name}  # noqa: F401\n" for name in helpers).encode() + SOLVED
    folder = helper_workspace(tmp_path / "ws", lesson, **helpers)
    graded = []
    with pytest.raises(submissions.SubmissionProblem, match=words):
        submissions.build_bundle(
            folder, tmp_path / "s.zip", CATALOG, "ada", grade=lambda *a: graded.append(a), lessons=[L01]
        )
    assert graded == [] and not (tmp_path / "s.zip").exists()


def test_hostile_code_is_graded_as_an_error_without_stopping_the_class(rows):
    hostile = rows["hostile.zip"]
    assert hostile["outcome"] == "graded"
    assert hostile["lessons"]["l01_projections"]["status"] != "passed"
    assert any("no result.json" in problem for problem in hostile["problems"])


@pytest.mark.parametrize(
    "file, words",
    [
        ("notazip.zip", "not a readable zip"),
        ("truncated.zip", "not a readable zip"),
        ("garbled.zip", "not a readable zip"),
        ("traversal.zip", "path traversal"),
        ("absolute.zip", "absolute"),
        ("toobig.zip", "zip bomb"),
        ("toomany.zip", "members"),
    ],
)
def test_corrupt_and_unsafe_bundles_are_refused_on_their_row(rows, file, words):
    row = rows[file]
    assert row["outcome"] == "refused" and row["lessons"] == {}
    assert words in row["problems"][0]


def test_a_refused_bundle_extracts_nothing_outside_its_folder(tmp_path):
    bundle = make_zip(tmp_path / "t.zip", {"../escaped.py": b"x", "l01_projections.py": SOLVED})
    (tmp_path / "into").mkdir()
    opened = submissions.open_bundle(bundle, tmp_path / "into", CATALOG)
    assert opened.refused and not (tmp_path / "escaped.py").exists()
    assert list((tmp_path / "into").iterdir()) == []


def test_the_csv_gradebook_has_one_row_per_submission(report, tmp_path):
    gradebook.write_csv(report, tmp_path / "gradebook.csv")
    with open(tmp_path / "gradebook.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == len(report.rows)
    by_file = {row["file"]: row for row in table}
    assert by_file["good.zip"]["name"] == "alice"
    assert by_file["good.zip"]["l01_projections points (of 18)"] == "18"
    assert by_file["good.zip"]["total"] == "18" and by_file["good.zip"]["max_total"] == "18"
    assert by_file["notazip.zip"]["outcome"] == "refused" and by_file["notazip.zip"]["total"] == "0"
    assert "claims" in by_file["liar.zip"]["problems"]
    assert by_file["formula.zip"]["name"] == '\'=HYPERLINK("x")'  # never a spreadsheet formula


def test_junit_xml_parses_with_one_testcase_per_check(report, tmp_path):
    exports.write_junit(report.rows, tmp_path / "junit.xml")
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert len(suites) == len(report.rows)  # one lesson graded: one suite per submission
    good = suites["good.zip: l01_projections"]
    assert (good.get("tests"), good.get("failures"), good.get("errors")) == ("18", "0", "0")
    wrong = suites["wrong.zip: l01_projections"]
    failures = wrong.findall("testcase/failure")
    assert len(wrong.findall("testcase")) == 18 and len(failures) == int(wrong.get("failures")) > 0
    assert all(failure.get("message") for failure in failures)
    refused = suites["notazip.zip"]
    assert refused.get("errors") == "1" and "not a readable zip" in refused.find("testcase/error").get(
        "message"
    )
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites.values())


def test_grade_command_writes_every_output_and_exits_1_when_a_bundle_has_problems(tmp_path):
    folder = tmp_path / "subs"
    folder.mkdir()
    make_zip(folder / "a.zip", {"l01_projections.py": OWN, "result.json": claim("a", OWN)})
    (folder / "b.zip").write_bytes(b"PK\x03\x04 broken")
    out = tmp_path / "out"
    done = CliRunner().invoke(
        app(),
        [
            "grade",
            str(folder),
            "--out",
            str(out / "g.csv"),
            "--json",
            str(out / "r.json"),
            "--junit",
            str(out / "j.xml"),
            "--workers",
            "1",
            "--lessons",
            "1",
        ],
    )
    assert done.exit_code == 1, done.output
    assert "Graded 2 submissions" in said(done) and "1 with problems" in said(done)
    data = json.loads((out / "r.json").read_text())
    assert [s["file"] for s in data["submissions"]] == ["a.zip", "b.zip"]
    assert data["submissions"][0]["total"] == 18 and data["workers"] == 1
    ET.parse(out / "j.xml")
    assert (out / "g.csv").read_text().count("\n") == 3


def test_grade_command_on_a_missing_folder_is_a_usage_error(tmp_path):
    done = CliRunner().invoke(app(), ["grade", str(tmp_path / "nowhere")])
    assert done.exit_code == 2 and "is not a folder" in said(done)


def test_classroom_config_is_valid_json_with_one_test_per_lesson(tmp_path):
    done = CliRunner().invoke(app(), ["classroom", str(tmp_path), "--points", "10"])
    assert done.exit_code == 0, done.output
    config = json.loads((tmp_path / ".github/classroom/autograding.json").read_text())
    available = CATALOG.available()
    assert len(config["tests"]) == len(available)
    for test, lesson in zip(config["tests"], available, strict=True):
        assert f"course check {lesson.number} " in test["run"] and test["points"] == 10
        assert set(test) >= {"name", "setup", "run", "timeout", "points"}
    assert "pip install" in config["tests"][0]["setup"]
    workflow = (tmp_path / ".github/workflows/classroom.yml").read_text()
    assert workflow.count("autograding-command-grader@v1") == len(available)
    assert "runners: " + ",".join(f"lesson-{lesson.id}" for lesson in available) in workflow


# -- what makes class grading faster: de-duplication and workers started ahead --------------------
def child_processes() -> set[int]:
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        found |= {int(pid) for pid in (task / "children").read_text().split()}
    return found


def test_identical_lesson_files_are_graded_once_per_process_and_other_files_again(tmp_path, monkeypatch):
    from course.engine.grading import one_session
    from course.instructor.classroom import class_stream

    monkeypatch.setattr(class_stream, "_GRADED_BEFORE", {})
    graded = []
    real = one_session.Unit
    monkeypatch.setattr(
        one_session, "Unit", lambda lesson, *a, **k: graded.append(lesson.module) or real(lesson, *a, **k)
    )
    make_zip(tmp_path / "a.zip", {"l01_projections.py": SOLVED, "result.json": claim("ann", SOLVED)})
    make_zip(tmp_path / "b.zip", {"l01_projections.py": SOLVED, "result.json": claim("ben", SOLVED)})
    make_zip(tmp_path / "c.zip", {"l01_projections.py": WRONG})
    rows = [gradebook.grade_bundle(str(tmp_path / f"{n}.zip"), [L01.module], same=True) for n in "abc"]
    assert graded == [L01.module, L01.module]  # b is a's files byte for byte: a's grade
    assert rows[0]["lessons"] == rows[1]["lessons"] and rows[1]["name"] == "ben"
    assert rows[0]["lessons"][L01.module]["status"] == "passed"
    assert rows[2]["lessons"][L01.module]["status"] == "failed"
    gradebook.grade_bundle(str(tmp_path / "b.zip"), [L01.module], same=False)
    assert len(graded) == 3


def test_a_grade_that_reached_a_time_limit_is_never_reused(tmp_path, monkeypatch):
    from course.engine.grading import one_session
    from course.instructor.classroom import class_stream

    monkeypatch.setenv("COURSE_LIMITS", "call=1")
    monkeypatch.setattr(class_stream, "_GRADED_BEFORE", {})
    graded = []
    real = one_session.Unit
    monkeypatch.setattr(
        one_session, "Unit", lambda lesson, *a, **k: graded.append(lesson.module) or real(lesson, *a, **k)
    )
    loops = b"def linear(x, w, b=None):\n    while True:\n        pass\n"
    for name in "ab":
        make_zip(tmp_path / f"{name}.zip", {"l01_projections.py": loops})
    rows = [gradebook.grade_bundle(str(tmp_path / f"{n}.zip"), [L01.module], same=True) for n in "ab"]
    assert graded == [L01.module, L01.module]  # b's files are a's byte for byte, but a timed out
    assert all("timeout" in json.dumps(row["lessons"][L01.module]["result"]) for row in rows)


def test_the_worker_started_ahead_for_the_next_lesson_never_outlives_its_bundle(tmp_path):
    from course.engine.sandbox import process, zygote

    while zygote.zygote(process.worker_environment()) is None:  # this process's own, kept: not the bundle's
        time.sleep(0.05)
    before = child_processes()
    make_zip(
        tmp_path / "h.zip",
        {"l01_projections.py": OS_EXIT, "l02_softmax.py": (LESSONS / "l02_softmax.py").read_bytes()},
    )
    row = gradebook.grade_bundle(str(tmp_path / "h.zip"), [L01.module, "l02_softmax"])
    assert row["lessons"]["l02_softmax"]["status"] == "not-started"
    assert child_processes() <= before


# -- why a row needs a look, the exit codes, and a feedback file per submission -------------------
IMPORT_PROBLEM = "l01_projections.py could not be imported: ModuleNotFoundError: No module named 'utils'"


def test_a_lesson_that_cannot_be_imported_says_why_in_one_line_in_every_output(report, rows, tmp_path):
    row = rows["unimportable.zip"]
    assert row["lessons"]["l01_projections"]["status"] == "error"
    assert any(problem.startswith(IMPORT_PROBLEM) for problem in row["problems"]), row["problems"]
    assert all("\n" not in problem for problem in row["problems"])
    gradebook.write_csv(report, tmp_path / "g.csv")
    with open(tmp_path / "g.csv", newline="") as handle:
        table = {line["file"]: line for line in csv.DictReader(handle)}
    assert IMPORT_PROBLEM in table["unimportable.zip"]["problems"]
    gradebook.write_json(report, tmp_path / "r.json")
    data = {s["file"]: s for s in json.loads((tmp_path / "r.json").read_text())["submissions"]}
    assert any(IMPORT_PROBLEM in problem for problem in data["unimportable.zip"]["problems"])
    exports.write_junit(report.rows, tmp_path / "j.xml")
    suite = next(
        s for s in ET.parse(tmp_path / "j.xml").iter("testsuite") if s.get("name").startswith("unimportable")
    )
    assert IMPORT_PROBLEM in suite.find("properties/property[@name='problems']").get("value")
    assert IMPORT_PROBLEM.split(": ", 1)[1] in suite.find("testcase/error").text


def test_code_that_ends_the_grading_process_is_a_problem_saying_so(rows):
    hostile = rows["hostile.zip"]
    assert hostile["lessons"]["l01_projections"]["status"] == "error"
    assert any(
        problem.startswith("l01_projections.py: no check could run: Your code ended the Python process")
        for problem in hostile["problems"]
    ), hostile["problems"]


def test_every_refused_row_and_every_lesson_in_error_has_a_problem_saying_why(report):
    for row in report.rows:
        if row["outcome"] != "graded":
            assert row["problems"], row["file"]
        for module, entry in row["lessons"].items():
            if entry["status"] == "error":
                assert any(module in problem for problem in row["problems"]), row["file"]


def test_a_lesson_that_reached_its_time_limit_says_so_on_its_row(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIMITS", "call=1")
    loops = b"def linear(x, w, b=None):\n    while True:\n        pass\n"
    make_zip(tmp_path / "loops.zip", {"l01_projections.py": loops})
    row = gradebook.grade_bundle(str(tmp_path / "loops.zip"), [L01.module])
    found = [problem for problem in row["problems"] if "time limit" in problem]
    assert found and found[0].startswith("l01_projections.py: "), row["problems"]
    assert "did not return within 1 s" in found[0] and "busy in l01_projections.py, line" in found[0]


def grade_command(folder: Path, *more: str):
    return CliRunner().invoke(
        app(), ["grade", str(folder), "--workers", "1", "--lessons", "1", *more], catch_exceptions=False
    )


def test_grade_exits_0_when_clean_1_when_a_row_needs_a_look_and_2_when_the_grader_fails(
    tmp_path, monkeypatch
):
    from course.instructor.classroom import class_stream

    folder = tmp_path / "subs"
    folder.mkdir()
    out = str(tmp_path / "g.csv")
    make_zip(folder / "a.zip", {"l01_projections.py": OWN, "result.json": claim("a", OWN)})
    done = grade_command(folder, "--out", out)
    assert done.exit_code == 0 and "No problems found" in said(done), done.output
    make_zip(folder / "b.zip", {"l01_projections.py": b"import utils\n", "result.json": claim("b", OWN)})
    done = grade_command(folder, "--out", out)
    assert done.exit_code == 1 and "1 with problems" in said(done), done.output
    real = class_stream.open_bundle

    def breaks_on_b(path, *args, **kwargs):
        if Path(path).name == "b.zip":
            raise RuntimeError("the grader broke")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(class_stream, "open_bundle", breaks_on_b)  # forked grading processes too
    done = grade_command(folder, "--out", out)
    assert done.exit_code == 2, done.output
    assert "grader itself failed on 1" in said(done)
    with open(out, newline="") as handle:
        table = {line["file"]: line for line in csv.DictReader(handle)}
    assert table["b.zip"]["outcome"] == "grader-failed"
    assert "the grader failed on this bundle: RuntimeError: the grader broke" in table["b.zip"]["problems"]


def test_feedback_holds_each_lessons_points_and_the_messages_course_check_json_gives(tmp_path):
    from tests.helpers import run_course

    named = mistaken_source("l01_projections", "head_projections_reshape_without_transpose").encode()
    folder = tmp_path / "subs"
    folder.mkdir()
    make_zip(folder / "ada.zip", {"l01_projections.py": named})
    make_zip(folder / "bob.zip", {"l01_projections.py": OWN, "result.json": claim("bob", OWN)})
    feedback = tmp_path / "feedback"
    done = grade_command(folder, "--out", str(tmp_path / "g.csv"), "--feedback", str(feedback))
    assert done.exit_code == 1, done.output  # ada's bundle has no result.json
    assert sorted(path.name for path in feedback.iterdir()) == ["ada.md", "bob.md"]
    text = (feedback / "ada.md").read_text(encoding="utf-8")

    workspace = tmp_path / "ws"
    (workspace / ".course").mkdir(parents=True)
    (workspace / "l01_projections.py").write_bytes(named)
    checked = run_course(
        "check", "1", "--json", "--workspace", str(workspace), cwd=tmp_path, env={"COURSE_SERVER": "off"}
    )
    result = json.loads(checked.stdout)
    failing = [c for e in result["exercises"] for c in e["checks"] if c["status"] != "passed"]
    assert failing and any(c["mistake"] for c in failing)
    for check in failing:
        assert check["message"] in text, check["name"]
    got = sum(c["status"] == "passed" for e in result["exercises"] for c in e["checks"])
    assert f"{got} of 18 points" in text
    assert "18 of 18 points" in (feedback / "bob.md").read_text(encoding="utf-8")


def test_feedback_files_are_named_after_their_submissions_safely_and_apart():
    from course.instructor.classroom import feedback

    files = ["ada.zip", "Ada.zip", "ada.ipynb", "../../etc/passwd.zip", "..", ".zip", "a/b", "\\x1b[2J.zip"]
    files += ["x" * 300 + ".zip", "ada"]
    names = feedback.file_names([{"file": file} for file in files])
    assert len(names) == len(files) and len({name.lower() for name in names}) == len(files)
    assert names[0] == "ada.md"
    for name in names:
        assert name.endswith(".md") and not name.startswith(".") and "/" not in name and "\\" not in name
        assert len(name.encode()) <= 100 and Path(name).name == name


def test_learner_text_in_a_feedback_file_cannot_leave_its_code_fence(tmp_path):
    from markdown_it import MarkdownIt

    from course.instructor.classroom import feedback

    hostile = (
        b"def linear(x, w, b=None):\n"
        b"    raise ValueError('\\n````\\n# Pwned heading\\n<script>x</script>\\x1b[2J\\n```')\n"
    )
    make_zip(tmp_path / "eve.zip", {"l01_projections.py": hostile})
    row = gradebook.grade_bundle(str(tmp_path / "eve.zip"), [L01.module])
    written = feedback.write_feedback(gradebook.Report([row], {L01.module: 18}, 1, 0.0), tmp_path / "fb")
    assert [path.name for path in written] == ["eve.md"]
    text = written[0].read_text(encoding="utf-8")
    assert "\x1b" not in text and "\\x1b[2J" in text
    tokens = MarkdownIt().parse(text)
    assert not any(token.type == "html_block" for token in tokens)
    headings = [tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "heading_open"]
    assert not any("Pwned" in heading for heading in headings)
    assert any(token.type == "fence" and "# Pwned heading" in token.content for token in tokens)
