"""The notebooks in the real nbgrader flow, then `course grade` on nbgrader's submitted/ folder.

One assignment (lesson 2) and three students, in a temporary nbgrader course: ada (correct code
that uses a helper and a constant from a cell she added, which also shows the constant with
IPython's `display`), bob (partial: a softmax without the max shift, logsumexp not written) and
carol (her answer cell patches the grader in the kernel; her functions are unwritten). nbgrader
runs in this process through its API (about 15 s); skipped without nbgrader. An unchanged
notebook: tests/test_notebooks.py.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# nbgrader and nbformat are imported where they are used, not here: importing them takes
# seconds, and every test process collects this module while only one runs its tests.
if [name for name in ("nbgrader", "nbclient", "nbformat") if importlib.util.find_spec(name) is None]:
    pytest.skip("needs nbgrader, nbclient and nbformat", allow_module_level=True)

from course.content.catalog import load_catalog  # noqa: E402
from course.instructor.classroom import exports, gradebook  # noqa: E402
from course.instructor.notebooks import build as notebooks  # noqa: E402

CATALOG = load_catalog()
L02 = CATALOG.by_module("l02_softmax")
SOURCE = notebooks.read_lesson(L02)
ASSIGNMENT = "l02_softmax"


def solved(name: str) -> str:
    return (
        SOURCE.function(name)
        .solution.replace(f"    {notebooks.BEGIN}\n", "")
        .replace(f"    {notebooks.END}\n", "")
    )


def with_helper(source: str) -> str:
    """ada's answer: the function with a helper above it, called first thing in its body; the
    helper reads a constant from a cell she added."""
    head, closing, rest = source.partition('    """\n')  # the end of the docstring
    helper = "def _same_axis(axis):\n    return axis + AXIS_SHIFT\n\n\n"
    return f"{helper}{head}{closing}    axis = _same_axis(axis)\n{rest}"


SUBMISSIONS = {
    "ada": {
        "softmax": with_helper(solved("softmax")),
        "logsumexp": solved("logsumexp"),
    },
    "bob": {
        "softmax": "def softmax(x, axis=-1):\n    e = np.exp(x)\n    return e / e.sum(axis, keepdims=True)"
    },
    "carol": {
        "softmax": "import course.engine.grading.runner as _runner\n\n_real = _runner.grade\n"
        "_runner.grade = lambda lesson, folder, **kw: _real(lesson, lesson.solution.parent, **kw)\n\n\n"
        + SOURCE.function("softmax").skeleton
    },
}


def submitted(release: Path, student: str, answers: dict[str, str], into: Path) -> None:
    import nbformat

    notebook = nbformat.read(release, as_version=4)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    if student == "ada":  # a cell she added, without nbgrader metadata; display is IPython's
        at = next(i for i, c in enumerate(notebook.cells) if c.source.startswith("import numpy"))
        notebook.cells.insert(
            at + 1, nbformat.v4.new_code_cell("AXIS_SHIFT = 0  # mine\ndisplay(AXIS_SHIFT)")
        )
    folder = into / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(notebook, folder / f"{ASSIGNMENT}.ipynb")
    (folder / "timestamp.txt").write_text("2026-12-01 05:00:00.000000 UTC")


@pytest.fixture(scope="module")
def course_folder(tmp_path_factory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as patch:  # nbgrader runs `alembic` from the PATH
        patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        yield nbgrader_course(tmp_path_factory.mktemp("nbgrader-course"))


def nbgrader_course(root: Path) -> Path:
    """generate_assignment, the four submissions, autograde: nbgrader's own flow."""
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    notebooks.write(
        notebooks.build(L02, CATALOG, "instructor"), root / "source" / ASSIGNMENT / "l02_softmax.ipynb"
    )
    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    config.Execute.timeout = 120
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    generated = api.generate_assignment(ASSIGNMENT)
    assert generated["success"], generated["log"]
    release = root / "release" / ASSIGNMENT / "l02_softmax.ipynb"
    answers = SUBMISSIONS
    for student, cells in answers.items():
        submitted(release, student, cells, root)
    with Gradebook(config.CourseDirectory.db_url) as book:
        for student in answers:
            book.update_or_create_student(student)
    for student in answers:
        done = api.autograde(ASSIGNMENT, student)
        assert done["success"], done["log"]
    return root


def nbgrader_scores(root: Path) -> dict[str, float]:
    from nbgrader.api import Gradebook
    from nbgrader.plugins.export import CsvExportPlugin

    out = root / "grades.csv"
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as book:
        CsvExportPlugin(to=str(out)).export(book)
    return {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(out.open())}


def test_nbgrader_and_course_grade_give_the_same_points_except_to_the_kernel_patching_submission(
    course_folder, tmp_path
):
    scores = nbgrader_scores(course_folder)
    report = gradebook.grade_folder(course_folder, [L02], workers=1)
    ours = {row["file"]: gradebook.total(row) for row in report.rows}
    most = report.max_points["l02_softmax"]
    assert most == 31
    assert ours["ada"] == scores["ada"] == most  # a helper, an added cell, a display: full marks
    assert 0 < ours["bob"] == scores["bob"] < most  # partial credit, the same on both routes
    assert scores["carol"] == most and ours["carol"] == 0  # the kernel was fooled; course grade is not
    out = tmp_path / "nbgrader.csv"
    exports.write_nbgrader_csv(report.rows, report.max_points, out)
    rows = {row["student_id"]: row for row in csv.DictReader(out.open())}
    assert rows["bob"]["assignment"] == ASSIGNMENT and float(rows["bob"]["score"]) == scores["bob"]
    assert rows["bob"]["timestamp"].startswith("2026-12-01") and rows["bob"]["max_score"] == "31.0"
    assert json.dumps(report.rows)  # the JSON report's rows serialise


def test_the_autograded_notebooks_test_cells_show_the_failure_and_have_the_points_as_value(course_folder):
    """bob's softmax fails: its cell shows the most explaining failure as `course check` does,
    the named mistake included; his unwritten logsumexp gets one line."""
    import nbformat

    notebook = nbformat.read(course_folder / "autograded" / "bob" / ASSIGNMENT / "l02_softmax.ipynb", 4)
    shown, points = {}, {}
    for cell in (c for c in notebook.cells if c.metadata.nbgrader.get("grade")):
        [text] = [o.text for o in cell.outputs if o.output_type == "stream"]
        [value] = [o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
        assert text.startswith(f"✘ {cell.metadata.nbgrader.grade_id[5:]}: {value} of ")
        shown[cell.metadata.nbgrader.grade_id], points[cell.metadata.nbgrader.grade_id] = text, int(value)
    assert 0 < points["test_softmax"] < 18 and points["test_logsumexp"] == 0
    assert "This looks like a known mistake" in shown["test_softmax"] and "got " in shown["test_softmax"]
    assert shown["test_logsumexp"].count("\n") == 1 and "NotImplementedError" in shown["test_logsumexp"]
