"""`course grade` on notebooks, and the rule that makes a notebook's cells the lesson module (the
same in the kernel and in `course grade`). No kernel and no nbgrader: lesson 1 only, in seconds.
The real nbgrader flow is tests/test_nbgrader.py."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

from course.cli.instructor import register
from course.content.catalog import load_catalog
from course.instructor.classroom import gradebook, notebook_submissions
from course.instructor.notebooks import build as notebooks
from course.instructor.notebooks import cells as notebook_cells
from course.instructor.notebooks import pictures
from course.instructor.notebooks import text as notebook_text

CATALOG = load_catalog()
L01 = CATALOG.by_module("l01_projections")


def code(source: str, grade_id: str | None = None) -> dict:
    meta = {"nbgrader": {"grade_id": grade_id}} if grade_id else {}
    return {"cell_type": "code", "source": source, "metadata": meta, "outputs": []}


def test_the_module_is_every_code_cell_but_the_courses_in_order_with_magics_as_comments():
    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": "# text", "metadata": {}},
            code("# course: setup.\nrecord()", "setup"),
            code(["import numpy as np\n", "%matplotlib inline"], "imports"),
            code("SHIFT = 1  # a cell the learner added"),
            code("def f(x):\n    return _g(x)\n\n\ndef _g(x):\n    !echo hi\n    return x + SHIFT", "f"),
            code("print('grading')", "grading"),  # a course cell by its grade_id alone
            code("# course: test of f\ncheck_exercise('f')", "test_f"),
        ]
    }
    module = notebook_cells.notebook_module(notebook)
    assert module == (
        "import numpy as np\n# %matplotlib inline\n\n\nSHIFT = 1  # a cell the learner added\n\n\n"
        "def f(x):\n    return _g(x)\n\n\ndef _g(x):\n    # !echo hi\n    return x + SHIFT\n"
    )


def test_the_kernel_keeps_each_cell_in_its_latest_version_in_the_order_first_run():
    recorder = notebook_cells._Recorder()

    def run(source: str, cell_id: str | None) -> None:
        recorder.after(SimpleNamespace(info=SimpleNamespace(raw_cell=source, cell_id=cell_id, silent=False)))

    run("import numpy as np", "a")
    run("def f():\n    return 1", "b")
    run("# course: grading\ngrade()", "c")
    run("X = 2", None)
    run("def f():\n    return 2", "b")  # edited and run again
    assert notebook_cells.module_source(recorder.cells.values()) == (
        "import numpy as np\n\n\ndef f():\n    return 2\n\n\nX = 2\n"
    )


def test_course_grade_reads_a_folder_of_notebooks_and_writes_nbgrader_scores_and_feedback(tmp_path):
    from nbformat.v4 import new_code_cell  # here: importing nbformat takes seconds

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    solved = notebooks.build(L01, CATALOG, "instructor")
    solved["cells"].insert(3, new_code_cell("SCALE = 1.0  # a cell ada added"))
    (inbox / "ada.ipynb").write_text(json.dumps(solved))
    (inbox / "bob.ipynb").write_text(json.dumps(notebooks.build(L01, CATALOG, "student")))
    (inbox / "eve.ipynb").write_text("{ not json")
    runner = CliRunner()
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)
    out, scores, feedback = tmp_path / "gradebook.csv", tmp_path / "nbgrader.csv", tmp_path / "feedback"
    done = runner.invoke(
        app,
        ["grade", str(inbox), "--out", str(out), "--nbgrader-csv", str(scores), "--lessons", "1"]
        + ["--feedback", str(feedback)],
    )
    assert done.exit_code == 1, done.output  # eve's notebook is a problem
    rows = {row["file"]: row for row in csv.DictReader(out.open())}
    assert rows["ada.ipynb"]["l01_projections status"] == "passed"
    assert rows["ada.ipynb"]["l01_projections points (of 18)"] == "18"
    assert rows["ada.ipynb"]["name"] == "ada" and rows["ada.ipynb"]["problems"] == ""
    assert rows["bob.ipynb"]["l01_projections status"] == "not-started"
    assert rows["eve.ipynb"]["total"] == "0" and "not a readable notebook" in rows["eve.ipynb"]["problems"]
    exported = {row["student_id"]: row for row in csv.DictReader(scores.open())}
    assert (exported["ada"]["assignment"], exported["ada"]["score"]) == ("l01_projections", "18.0")
    assert exported["bob"]["max_score"] == "18.0" and exported["eve"]["score"] == "0.0"
    assert sorted(path.name for path in feedback.iterdir()) == ["ada.md", "bob.md", "eve.md"]
    assert "18 of 18 points" in (feedback / "ada.md").read_text(encoding="utf-8")
    assert "not started" in (feedback / "bob.md").read_text(encoding="utf-8")
    assert "eve.ipynb: not a readable notebook" in (feedback / "eve.md").read_text(encoding="utf-8")


def test_a_solved_notebook_with_ipython_scratch_cells_gets_full_points_and_prints_nothing(tmp_path):
    """`display` and `get_ipython` are IPython's builtins: the graded module gets stand-ins that
    do nothing (a scratch cell, and a function that calls one, run without a NameError)."""
    from nbformat.v4 import new_code_cell

    solved = notebooks.build(L01, CATALOG, "instructor")
    at = next(i for i, c in enumerate(solved["cells"]) if c["source"].startswith("def linear("))
    scratch = (
        "display(linear(np.ones((1, 2)), np.eye(2)))\n"
        "get_ipython().run_line_magic('matplotlib', 'inline')\n\n\n"
        "def shown(x):\n    display(x)\n    return x\n\n\nshown(SCALE)"
    )
    solved["cells"][at + 1 : at + 1] = [new_code_cell("SCALE = 2.0"), new_code_cell(scratch)]
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "ada.ipynb").write_text(json.dumps(solved))
    [row] = gradebook.grade_folder(inbox, [L01], workers=1).rows
    graded = row["lessons"]["l01_projections"]
    assert (graded["status"], gradebook.total(row)) == ("passed", 18), graded["result"]["message"]
    assert graded["result"]["output"] == "" and row["problems"] == []


def test_the_stand_ins_come_after_a_docstring_and_future_imports_and_only_for_names_used():
    code = '"""Mine."""\nfrom __future__ import annotations\n\nimport numpy as np\ndisplay(np.ones(2))\n'
    graded = notebook_cells.graded_source(code)
    assert graded.startswith('"""Mine."""\nfrom __future__ import annotations\n')
    assert graded.endswith("\nimport numpy as np\ndisplay(np.ones(2))\n")
    namespace: dict = {}
    exec(compile(graded, "l01_projections.py", "exec"), namespace)
    assert namespace["display"](1, raw=True) is None and "get_ipython" not in namespace
    namespace = {}
    exec(notebook_cells.graded_source("get_ipython().system('ls')\n"), namespace)
    assert namespace["get_ipython"]().run_cell_magic("timeit", "", "1") is None
    assert "display" not in namespace
    for unchanged in ("x = 1\n", "def f(:\n    display(1)\n"):  # nothing named; a syntax error
        assert notebook_cells.graded_source(unchanged) == unchanged


def test_course_grade_finds_nbgraders_submitted_layout_and_says_when_there_is_nothing(tmp_path):
    for student in ("ada", "bob"):
        folder = tmp_path / "submitted" / student / "week1"
        folder.mkdir(parents=True)
        (folder / "l01_projections.ipynb").write_text("{}")
    (tmp_path / "submitted" / ".hidden" / "week1").mkdir(parents=True)
    found = notebook_submissions.submissions_in(tmp_path)
    assert [(s.key, [a for a, _ in s.notebooks]) for s in found] == [("ada", ["week1"]), ("bob", ["week1"])]
    empty = tmp_path / "empty"
    empty.mkdir()
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    register(app)
    done = CliRunner().invoke(app, ["grade", str(empty)])
    assert done.exit_code == 2 and "No submissions in" in done.output


def test_the_pictures_cell_draws_the_maps_of_the_cells_code_or_says_in_one_line_why_not():
    pytest.importorskip("matplotlib")
    lesson = CATALOG.by_module("l03_attention")
    earlier = {"l02_softmax": notebook_text.reference_code(CATALOG.by_module("l02_softmax"))}
    for variant, expected in (("instructor", 1), ("student", 0)):
        module = notebook_cells.notebook_module(notebooks.build(lesson, CATALOG, variant))
        images, note = pictures.draw(lesson.module, module, earlier)
        assert len(images) == expected and all(png.startswith(b"\x89PNG") for png in images)
        assert note == (
            "" if expected else "Your function still raises NotImplementedError: nothing to draw yet."
        )
