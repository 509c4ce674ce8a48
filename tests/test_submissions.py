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


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory, workspace) -> Path:
    """A class: good, wrong, lying, foreign, extra-file, hostile and corrupt bundles."""
    folder = tmp_path_factory.mktemp("class")
    submissions.build_bundle(workspace, folder / "good.zip", CATALOG, "alice", lessons=[L01])
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
    assert extra["problems"][0] == "extra files ignored: numpy.py"
    assert extra["lessons"]["l01_projections"]["status"] == "passed"  # no numpy.py shadowing


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
