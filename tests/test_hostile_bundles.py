"""A class's hostile submissions against the instructor: their text reaches every output escaped
(``course.instructor.classroom.safe_text``), one row never empties a file, an archive whose end
announces too much is refused before its central directory is read, and nothing in a student
folder is read through a symbolic link. Lesson 1 only; one bundle and two notebooks are graded,
the rest re-use that grade or grade nothing, so the file runs in a few seconds."""

from __future__ import annotations

import csv
import json
import os
import re
import struct
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from course.content.catalog import load_catalog
from course.instructor.classroom import exports, gradebook, submissions
from course.instructor.classroom.safe_text import safe_text
from tests.test_submissions import SOLVED, app, claim, make_zip

CATALOG = load_catalog()
L01 = CATALOG.resolve("1")

# One of every class of character that must never reach an output as itself: C0 (NUL, BEL,
# backspace, tab, newline, CR, ESC with a CSI and an OSC), DEL, C1 (NEL, the one-byte CSI), the
# bidi marks, embeddings, overrides and isolates, the line and paragraph separators, lone
# surrogates (a low one as os.fsdecode keeps an undecodable byte; none next to a high one, which
# JSON would pair), and XML's non-characters.
EVERY = (
    "eve\x00\x07\x08\t\n\r\x1b[2J\x1b]0;owned\x07\x7f\x85\x9b31m"
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
    "\udfff\ud800 \udcff\ufffe\uffff 18 points"
)
NEVER = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff\ufffe\uffff]"
)
IN_LINES = re.compile(NEVER.pattern.replace("\x00-\x1f", "\x00-\x08\x0b-\x1f"))


def shown_safely(text: str, lines: bool = False) -> bool:
    return (IN_LINES if lines else NEVER).search(text) is None


def test_safe_text_escapes_every_class_and_keeps_the_rest():
    shown = safe_text(EVERY)
    assert shown == (
        r"eve\x00\x07\x08\t\n\r\x1b[2J\x1b]0;owned\x07\x7f\x85\x9b31m"
        r"\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
        r"\udfff\ud800 \xff\ufffe\uffff 18 points"
    )
    assert shown_safely(shown) and safe_text(shown) == shown  # idempotent
    assert safe_text("a\tb\nc\rd", lines=True) == "a\tb\nc\\rd"
    assert safe_text(b"caf\xe9.zip") == r"caf\xe9.zip"  # undecodable bytes, escaped
    assert safe_text("Zoë 🦊 \\x1b") == "Zoë 🦊 \\x1b"  # letters, emoji and backslashes kept
    assert safe_text(18) == "18"


# -- a class with hostile text, through `course grade` and its five outputs -----------------------
FILE = os.fsencode(EVERY.replace("\x00", "").replace("\udfff\ud800", "").replace("\udcff", "")) + b"\xff.zip"
MEMBER = "notes\x1b[1A\x1b[2K\r[9/9] a_good.zip: graded, 18 points\u202e.txt"


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, object]:
    """`course grade` on: a good bundle; one whose file name holds every class (and a byte
    that is not UTF-8), whose result.json name holds every class and which carries a member
    whose name redraws the terminal; and one whose result.json name is a lone surrogate."""
    folder = tmp_path_factory.mktemp("class")
    make_zip(folder / "a_good.zip", {"l01_projections.py": SOLVED, "result.json": claim("alice", SOLVED)})
    make_zip(
        Path(os.fsdecode(os.path.join(os.fsencode(folder), FILE))),
        {"l01_projections.py": SOLVED, MEMBER: b"", "result.json": claim(EVERY, SOLVED)},
    )
    make_zip(
        folder / "z_lone.zip", {"l01_projections.py": SOLVED, "result.json": claim("\udc80lone", SOLVED)}
    )
    out = tmp_path_factory.mktemp("out")
    done = CliRunner().invoke(
        app(),
        [
            "grade", str(folder), "--out", str(out / "g.csv"), "--json", str(out / "r.json"),
            "--junit", str(out / "j.xml"), "--nbgrader-csv", str(out / "n.csv"),
            "--workers", "1", "--lessons", "1",
        ],
    )  # fmt: skip
    assert done.exit_code == 1, done.output
    return out, done


HOSTILE_FILE = safe_text(os.fsdecode(FILE))


def test_the_progress_lines_show_the_submissions_text_escaped(graded):
    _, done = graded
    assert shown_safely(done.output, lines=True)  # no escape sequence, bidi control or CR
    shown = " ".join(done.output.split())
    assert [shown.count(f"[{done}/3] ") for done in (1, 2, 3)] == [1, 1, 1]  # a line a submission
    assert r"\x1b[2J\x1b]0;owned\x07" in shown and r"\u202e" in shown and r"\xff.zip" in shown
    assert r"notes\x1b[1A\x1b[2K\r[9/9] a_good.zip: graded, 18 points\u202e.txt" in shown


def test_the_csv_gradebook_has_every_row_with_the_text_escaped(graded):
    out, _ = graded
    with open(out / "g.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert [row["file"] for row in table] == ["a_good.zip", HOSTILE_FILE, "z_lone.zip"]
    good, hostile, lone = table
    assert good["name"] == "alice" and good["total"] == "18" and good["outcome"] == "graded"
    assert hostile["name"] == safe_text(EVERY) and hostile["total"] == "18"
    assert lone["name"] == r"\x80lone" and lone["total"] == "18"
    assert safe_text(MEMBER) in hostile["problems"]
    assert all(shown_safely(cell) for row in table for cell in row.values())


def strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [*value.keys(), *(s for item in value.values() for s in strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return [value] if isinstance(value, str) else []


def test_the_json_report_has_every_row_with_the_text_escaped(graded):
    out, _ = graded
    report = json.loads((out / "r.json").read_text(encoding="utf-8"))
    rows = report["submissions"]
    assert [row["file"] for row in rows] == ["a_good.zip", HOSTILE_FILE, "z_lone.zip"]
    assert [row["name"] for row in rows] == ["alice", safe_text(EVERY), r"\x80lone"]
    assert [row["total"] for row in rows] == [18, 18, 18]
    assert all(shown_safely(text, lines=True) for text in strings(report))


def test_the_junit_xml_has_every_row_with_the_text_escaped(graded):
    out, _ = graded
    root = ET.parse(out / "j.xml").getroot()
    suites = root.findall("testsuite")
    assert [suite.get("name") for suite in suites] == [
        f"{file}: l01_projections" for file in ("a_good.zip", HOSTILE_FILE, "z_lone.zip")
    ]
    names = [suite.find("properties/property[@name='name']").get("value") for suite in suites]
    assert names == ["alice", safe_text(EVERY), r"\x80lone"]
    assert all(suite.get("tests") == "18" and suite.get("failures") == "0" for suite in suites)
    for element in root.iter():
        assert all(shown_safely(value) for value in element.attrib.values())
        assert shown_safely(element.text or "", lines=True)


def test_the_nbgrader_csv_has_every_row_with_the_text_escaped(graded):
    out, _ = graded
    with open(out / "n.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert [(row["student_id"], row["score"]) for row in table] == [
        ("alice", "18.0"),
        (safe_text(EVERY), "18.0"),
        (r"\x80lone", "18.0"),
    ]
    assert all(shown_safely(cell) for row in table for cell in row.values())


def test_a_row_that_cannot_be_written_is_said_and_the_others_are_written(tmp_path):
    good = {"file": "a.zip", "name": "a", "course_version": "", "outcome": "graded", "problems": []}
    good["lessons"] = {"l01_projections": {"status": "passed", "points": 18, "result": None}}
    broken = {"file": "b\x1b.zip", "lessons": {"l01_projections": {"points": "x"}}}  # no name, bad points
    report = gradebook.Report([good, broken, dict(good, file="c.zip")], {"l01_projections": 18}, 1, 0.0)
    gradebook.write_csv(report, tmp_path / "g.csv")
    gradebook.write_json(report, tmp_path / "r.json")
    exports.write_junit(report.rows, tmp_path / "j.xml")
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert [(row["file"], row["outcome"]) for row in table] == [
        ("a.zip", "graded"),
        (r"b\x1b.zip", "grader-failed"),
        ("c.zip", "graded"),
    ]
    assert "could not be written" in table[1]["problems"] and table[2]["total"] == "18"
    rows = json.loads((tmp_path / "r.json").read_text())["submissions"]
    assert [row["file"] for row in rows] == ["a.zip", r"b\x1b.zip", "c.zip"]
    suites = ET.parse(tmp_path / "j.xml").getroot().findall("testsuite")
    assert [suite.get("name") for suite in suites] == [
        "a.zip: l01_projections",
        r"b\x1b.zip",
        "c.zip: l01_projections",
    ]


# -- archives whose end announces too much: refused before their central directory is read --------
def announcing(path: Path, entries: int, directory: int | None = None, zip64: bool = True) -> Path:
    """A small real bundle whose end-of-central-directory record (with a zip64 record and
    locator, as a zip of more than 65535 entries needs) announces ``entries`` entries and a
    central directory of ``directory`` bytes (default: the real one's)."""
    data = make_zip(path, {"l01_projections.py": SOLVED, "result.json": claim("x", SOLVED)}).read_bytes()
    at = data.rfind(b"PK\x05\x06")
    _, _, _, _, _, size, offset, _ = struct.unpack("<4s4H2LH", data[at : at + 22])
    size = size if directory is None else directory
    if not zip64:
        end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, size, offset, 0)
        path.write_bytes(data[:at] + end)
        return path
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, size, offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    path.write_bytes(data[:at] + record + locator + end)
    return path


@pytest.mark.parametrize(
    "entries, directory, zip64, words",
    [
        (2_000_000, None, True, "2000000 members (at most 32)"),
        (65535, None, False, "65535 members (at most 32)"),
        (3, 100 * 1024**2, True, "a central directory of 104857600 bytes"),
        (3, 0xFFFF_FFF0, False, "a central directory of 4294967280 bytes"),
    ],
)
def test_an_archive_announcing_too_much_is_refused_at_once_without_parsing_it(
    tmp_path, monkeypatch, entries, directory, zip64, words
):
    bundle = announcing(tmp_path / "b.zip", entries, directory, zip64)
    monkeypatch.setattr(zipfile, "ZipFile", None)  # never reached: nothing parses the directory
    started = time.perf_counter()
    opened = submissions.open_bundle(bundle, tmp_path, CATALOG)
    assert time.perf_counter() - started < 1
    assert opened.refused.startswith("refused: ") and words in opened.refused
    assert opened.files == {} and opened.claimed is None


def test_an_honest_archive_patched_the_same_way_still_opens(tmp_path):
    bundle = announcing(tmp_path / "b.zip", 2)  # what it really holds, in zip64 records
    opened = submissions.open_bundle(bundle, tmp_path, CATALOG)
    assert not opened.refused and opened.files.keys() == {"l01_projections.py"}


def test_a_bundle_larger_than_any_honest_one_is_refused_unread(tmp_path, monkeypatch):
    bundle = make_zip(tmp_path / "big.zip", {"l01_projections.py": SOLVED})
    with open(bundle, "r+b") as handle:  # 101 MiB, sparse: the real data stays at the start
        tail = handle.read()[-22:]
        handle.truncate(101 * 1024**2 - 22)
        handle.seek(0, 2)
        handle.write(tail)
    monkeypatch.setattr(zipfile, "ZipFile", None)
    started = time.perf_counter()
    opened = submissions.open_bundle(bundle, tmp_path, CATALOG)
    assert time.perf_counter() - started < 1
    assert (
        opened.refused
        == f"refused: {101 * 1024**2} bytes (a bundle is at most {submissions.MAX_BUNDLE_BYTES})"
    )


def test_a_bundle_that_is_a_symbolic_link_or_a_fifo_is_refused_unread(tmp_path):
    make_zip(tmp_path / "secret.zip", {"l01_projections.py": SOLVED})
    (tmp_path / "link.zip").symlink_to(tmp_path / "secret.zip")
    os.mkfifo(tmp_path / "fifo.zip")  # opening it for reading would wait for a writer
    into = tmp_path / "into"
    into.mkdir()
    linked = submissions.open_bundle(tmp_path / "link.zip", into, CATALOG)
    assert linked.refused == "refused: a symbolic link, not a bundle file (not followed)"
    assert (
        submissions.open_bundle(tmp_path / "fifo.zip", into, CATALOG).refused == "refused: not a regular file"
    )
    assert list(into.iterdir()) == []


# -- nbgrader student folders: no link followed, hostile names escaped ----------------------------
def notebook(source: str) -> str:
    cell = {"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_nbgrader_folders_follow_no_link_and_their_names_reach_the_outputs_escaped(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-4711 from outside the submissions\n")
    root = tmp_path / "course" / "submitted"
    skeleton = notebook(L01.skeleton.read_text())
    hostile = os.fsencode(root) + b"/bob\xff\x1b[2J\xe2\x80\xae"  # not UTF-8; ESC; U+202E
    students = {"ada": "2026-01-01 10:00:00 UTC", os.fsdecode(os.path.basename(hostile)): "2026\x1b[31m"}
    for student, stamp in students.items():
        folder = root / student / "week1"
        folder.mkdir(parents=True)
        (folder / "l01_projections.ipynb").write_text(skeleton)
        (folder / "timestamp.txt").write_text(stamp)
    linked = root / "carol" / "week1"
    linked.mkdir(parents=True)
    (linked / "l01_projections.ipynb").write_text(skeleton)
    (linked / "timestamp.txt").symlink_to(secret)
    (root / "dan").mkdir()
    (root / "dan" / "week1").symlink_to(linked)  # a whole assignment folder that is a link
    (root / "erin" / "week1").mkdir(parents=True)
    (root / "erin" / "week1" / "l01_projections.ipynb").symlink_to(linked / "l01_projections.ipynb")

    report = gradebook.grade_folder(tmp_path / "course", [L01], workers=2)
    rows = {row["file"]: row for row in report.rows}
    bob = safe_text(os.fsdecode(os.path.basename(hostile)))
    assert bob == r"bob\xff\x1b[2J\u202e"
    assert sorted(rows) == sorted(["ada", bob, "carol", "dan", "erin"])
    assert rows["carol"]["assignments"]["l01_projections"]["timestamp"] == ""
    assert "week1/timestamp.txt: not read (a symbolic link: not followed)" in rows["carol"]["problems"]
    assert rows["carol"]["lessons"]["l01_projections"]["status"] == "not-started"  # still graded
    assert "week1/: a symbolic link: not followed" in rows["dan"]["problems"]
    assert rows["dan"]["lessons"]["l01_projections"]["status"] == "missing"
    assert (
        "l01_projections.ipynb: not a readable notebook (a symbolic link: not followed)"
        in rows["erin"]["problems"]
    )
    assert rows[bob]["assignments"]["l01_projections"]["timestamp"] == r"2026\x1b[31m"
    assert rows[bob]["lessons"]["l01_projections"]["status"] == "not-started"

    gradebook.write_csv(report, tmp_path / "g.csv")
    gradebook.write_json(report, tmp_path / "r.json")
    exports.write_nbgrader_csv(report.rows, report.max_points, tmp_path / "n.csv")
    with open(tmp_path / "n.csv", newline="", encoding="utf-8") as handle:
        scores = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert sorted(scores) == sorted(rows)
    assert scores[bob]["timestamp"] == r"2026\x1b[31m" and scores["ada"]["timestamp"] == students["ada"]
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as handle:
        assert sorted(row["file"] for row in csv.DictReader(handle)) == sorted(rows)
    for written in ("g.csv", "r.json", "n.csv"):
        assert "SECRET" not in (tmp_path / written).read_text(encoding="utf-8")
