"""`course grade` flags a submission whose code is the same as a reference solution or as a
classmate's, up to formatting and comments; the submission keeps its points (the instructor
decides). Only lesson 1 is graded: the class below takes a few seconds."""

import csv
import hashlib
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from course import __version__
from course.content.catalog import load_catalog
from tests.helpers import LESSONS, SOLUTIONS

CATALOG = load_catalog()
L01 = CATALOG.resolve("1")
REFERENCE = (SOLUTIONS / "l01_projections.py").read_text()

# The reference, as a copier hides it: no comments or markers, 2-space indents, other quotes,
# parentheses, blank lines, a docstring of their own and a comment claiming the work.
COPIED = "\n".join(
    " " * ((len(line) - len(line.lstrip(" "))) // 2) + line.lstrip(" ")
    for line in REFERENCE.split("\n")
    if not line.strip().startswith("#")
)
COPIED = (
    COPIED.replace('"btd,hdk->bhtk"', "'btd,hdk->bhtk'")
    .replace("out = x @ w  #", "out = (x @ w)  #")
    .replace("  # (..., d_in) @ (d_in, d_out) -> (..., d_out)", "")
    .replace("import numpy as np", "# All my own work.\nimport numpy as np\n\n")
    .replace('"""Lesson 1: linear projections', '"""My lesson 1 (linear projections')
)

# Amy's own solution, and Ben's copy of it, reformatted and recommented.
AMY = '''"""Lesson 1, by Amy."""
import numpy as np


def linear(x, w, b=None):
    """x @ w + b"""
    y = np.matmul(x, w)
    return y if b is None else y + b


def head_projections(x, w_heads):
    return np.stack([x @ w_heads[h] for h in range(w_heads.shape[0])], axis=1)


def fuse_head_weights(w_heads):
    return np.concatenate(list(w_heads), axis=1)
'''
BEN = """# lesson one -- Ben
import numpy as np
def linear(x,w,b=None):
  y=np.matmul(x,w)   # the product
  return (y if b is None else y+b)
def head_projections(x,w_heads):
  return np.stack([x@w_heads[h] for h in range(w_heads.shape[0])],axis=1,)
def fuse_head_weights(w_heads):
  '''Heads side by side.'''
  return np.concatenate(list(w_heads),axis=1)
"""
# Dan's own solution: the same ideas as the reference, in his own code.
DAN = """import numpy as np


def linear(x, w, b=None):
    product = np.dot(x, w)
    if b is not None:
        product = product + b
    return product


def head_projections(x, w_heads):
    return np.einsum("btd,hdk->bhtk", x, w_heads)


def fuse_head_weights(w_heads):
    heads, width, size = w_heads.shape
    return w_heads.transpose(1, 0, 2).reshape(width, heads * size)
"""
SKELETON = (LESSONS / "l01_projections.py").read_text()


def bundle(folder: Path, file: str, name: str, source: str) -> None:
    data = source.encode()
    claim = {
        "schema": 1,
        "course": CATALOG.title,
        "course_version": __version__,
        "name": name,
        "files": {"l01_projections.py": hashlib.sha256(data).hexdigest()},
        "lessons": [],
    }
    with zipfile.ZipFile(folder / file, "w") as archive:
        archive.writestr("l01_projections.py", data)
        archive.writestr("result.json", json.dumps(claim))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[dict, dict, ET.Element, str]:
    """The class graded with `course grade`: the CSV rows, the JSON report's rows and the
    JUnit document, by file; and what the command printed."""
    folder = tmp_path_factory.mktemp("class")
    for file, name, source in [
        ("amy.zip", "amy", AMY),
        ("ben.zip", "ben", BEN),
        ("cole.zip", "cole", COPIED),
        ("dan.zip", "dan", DAN),
    ]:
        bundle(folder, file, name, source)
    out = tmp_path_factory.mktemp("out")
    done = subprocess.run(
        [sys.executable, "-m", "course", "grade", str(folder), "--out", str(out / "g.csv")]
        + ["--json", str(out / "r.json"), "--junit", str(out / "j.xml"), "--workers", "2", "--lessons", "1"],
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_COLOR="1", COLUMNS="200"),
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # rows with problems
    with open(out / "g.csv", newline="") as handle:
        table = {row["file"]: row for row in csv.DictReader(handle)}
    report = {row["file"]: row for row in json.loads((out / "r.json").read_text())["submissions"]}
    return table, report, ET.parse(out / "j.xml").getroot(), " ".join(done.stdout.split())


def test_the_copied_files_are_really_reformatted_not_byte_copies():
    assert COPIED != REFERENCE and "### BEGIN SOLUTION" not in COPIED and "# `@` treats" not in COPIED
    assert "\n  def" not in COPIED and "\n  return" in COPIED and "'btd,hdk->bhtk'" in COPIED
    assert BEN != AMY and "  y=np.matmul(x,w)" in BEN


def test_a_reformatted_reference_solution_is_flagged_and_keeps_its_points(graded):
    table, report, _, _ = graded
    expected = "l01_projections.py is the reference solution up to formatting and comments"
    assert expected in table["cole.zip"]["problems"]
    assert table["cole.zip"]["total"] == "18"
    assert expected in report["cole.zip"]["problems"] and report["cole.zip"]["total"] == 18
    assert report["cole.zip"]["similar"] == {"l01_projections": ["reference solution"]}


def test_two_classmates_with_the_same_code_are_both_flagged_and_keep_their_points(graded):
    table, report, junit, printed = graded
    for file, other in (("amy.zip", "ben.zip"), ("ben.zip", "amy.zip")):
        expected = f"l01_projections.py is the same code as {other} up to formatting and comments"
        assert expected in table[file]["problems"] and table[file]["total"] == "18"
        assert report[file]["problems"] == [expected]
        assert report[file]["similar"] == {"l01_projections": [other]}
        suite = junit.find(f"testsuite[@name='{file}: l01_projections']")
        assert suite is not None and suite.get("failures") == "0"
        assert expected in suite.find("properties/property[@name='problems']").get("value")
    assert "3 with the same code as a reference solution or another submission (flagged)." in printed


def test_an_own_solution_with_the_same_ideas_is_not_flagged(graded):
    table, report, _, _ = graded
    assert table["dan.zip"]["problems"] == "" and table["dan.zip"]["total"] == "18"
    assert "similar" not in report["dan.zip"]


def test_untouched_skeletons_are_never_flagged_as_the_same_code():
    from course.instructor.classroom import similarity

    rows = [
        {"file": f"{name}.zip", "problems": [], "fingerprints": similarity.fingerprints(files, [L01])}
        for name, files in (
            ("a", {"l01_projections.py": SKELETON.encode()}),
            ("b", {"l01_projections.py": SKELETON.replace("    ", "  ").encode()}),
            ("c", {"l01_projections.py": b"def broken(:\n"}),
            ("d", {"l01_projections.py": b"def broken(:\n"}),
        )
    ]
    similarity.flag(rows, [L01])
    assert [row["problems"] for row in rows] == [[], [], [], []]
