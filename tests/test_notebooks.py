"""`course notebooks`: student, instructor (nbgrader source format) and solved notebooks.

Executing a notebook starts a real ipykernel (about a second each): the notebooks are built once
per module and shared; only two lessons' solved notebooks and one student notebook run in a
kernel (the rest is shown without one).
"""

import importlib.util
import json
import re
import tomllib
from pathlib import Path

import pytest

# nbformat is imported where it is used, not here: with nbclient and ipykernel that takes
# seconds, and every test process collects this module while only one runs its tests.
if [name for name in ("nbformat", "nbclient", "ipykernel") if importlib.util.find_spec(name) is None]:
    pytest.skip("needs nbformat, nbclient and ipykernel", allow_module_level=True)

import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from course.cli.notebooks import register  # noqa: E402
from course.content import lesson_source  # noqa: E402
from course.content.catalog import load_catalog  # noqa: E402
from course.engine.results import LessonResult  # noqa: E402
from course.instructor.classroom import similarity  # noqa: E402
from course.instructor.notebooks import build as notebooks  # noqa: E402
from course.instructor.notebooks import cells as notebook_cells  # noqa: E402
from tests.helpers import REPO, mistaken_source, run_course  # noqa: E402

CATALOG = load_catalog()
LESSONS = list(CATALOG.available())
NBGRADER_KEYS = {"grade_id", "grade", "solution", "locked", "schema_version"}


# Executed with a kernel: a lesson without earlier lessons and one that is given four. The
# other lessons' notebook modules are shown to be their solution files (no kernel needed).
SOLVED = [CATALOG.by_module("l01_projections"), CATALOG.by_module("l06_multi_head")]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("notebooks")
    notebooks.generate(out, LESSONS, CATALOG, execute_solved=False)
    notebooks.generate(out, SOLVED, CATALOG)
    return out


def read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def outputs_text(cell) -> str:
    return "".join(
        o.get("text", "") + o.get("evalue", "") + o.get("ename", "") for o in cell.get("outputs", ())
    )


def test_every_lesson_gets_a_valid_student_instructor_and_solved_notebook(built):
    import nbformat

    for lesson in LESSONS:
        for variant in notebooks.VARIANTS[: 3 if lesson in SOLVED else 2]:
            notebook = read(built / variant / f"{lesson.module}.ipynb")
            nbformat.validate(notebook)
            assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5)
            assert notebook.metadata.course == {
                "lesson": lesson.module,
                "variant": variant,
                "version": CATALOG.version,
            }
            code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
            for exercise in lesson.exercises:
                assert f"def {exercise.name}(" in code or exercise.name in code


def test_the_student_notebook_holds_the_lesson_text_the_skeleton_and_no_outputs(built):
    notebook = read(built / "student" / "l03_attention.ipynb")
    markdown = [c.source for c in notebook.cells if c.cell_type == "markdown"]
    assert markdown[0].startswith("# Lesson 3: scaled dot-product attention")
    assert any(text.startswith("## Masks") for text in markdown)
    assert "same checks as `course check 3`, one point per passed check" in "\n".join(markdown)
    given = next(text for text in markdown if text.startswith("## Given: the earlier lessons' code"))
    assert "lesson 2 (`l02_softmax`)" in given and "the course's reference code" in given
    assert "Edit this file" not in "\n".join(markdown)  # the skeleton's line, not the notebook's
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    scores = next(c.source for c in code if c.source.startswith("def attention_scores("))
    assert scores.rstrip().endswith("raise NotImplementedError") and "TODO:" in scores
    assert "BEGIN SOLUTION" not in "\n".join(c.source for c in code)
    course_cells = [c for c in code if c.source.startswith(notebook_cells.TAG)]
    setup_given_grading_pictures = 4
    assert len(course_cells) == setup_given_grading_pictures + len(
        CATALOG.by_module("l03_attention").exercises
    )
    assert all(not c.metadata.editable and not c.metadata.deletable for c in course_cells)
    assert not any("earlier-lessons" in c.source or "tempfile.mkdtemp" in c.source for c in code)


def test_no_line_of_a_solution_region_appears_in_any_student_notebook(built):
    for lesson in LESSONS:
        solution = notebooks.solution_lines(read(built / "instructor" / f"{lesson.module}.ipynb"))
        assert len(solution) >= len(lesson.exercises)
        student = read(built / "student" / f"{lesson.module}.ipynb")
        learner = [c for c in student.cells if not notebook_cells.is_machinery(c.source)]  # course code
        student_lines = {line.strip() for cell in learner for line in cell.source.splitlines()}
        given = {line.strip() for line in lesson.skeleton.read_text().splitlines()}
        for earlier in notebooks.earlier_modules(lesson, CATALOG):  # given as reference code
            given |= set(map(str.strip, CATALOG.by_module(earlier).solution.read_text().splitlines()))
        leaked = [line for line in solution if line in student_lines and line not in given]
        assert leaked == [], f"{lesson.module}: {leaked[:3]}"


def test_every_cell_of_an_instructor_notebook_carries_nbgrader_schema_3_metadata(built):
    for lesson in LESSONS:
        notebook = read(built / "instructor" / f"{lesson.module}.ipynb")
        metas = [cell.metadata.nbgrader for cell in notebook.cells]
        assert all(NBGRADER_KEYS <= set(meta) and meta.schema_version == 3 for meta in metas)
        ids = [meta.grade_id for meta in metas]
        assert len(set(ids)) == len(ids) and all(ids)
        graded = [meta for meta in metas if meta.grade]
        assert [m.grade_id for m in graded] == [f"test_{e.name}" for e in lesson.exercises]
        checks = notebooks.exercise_checks(lesson)
        assert [m.points for m in graded] == [checks[e.name] for e in lesson.exercises]
        assert all(m.points > 0 and m.locked and not m.solution for m in graded)
        assert all("points" not in m for m in metas if not m.grade)  # nbgrader's v3 schema
        for cell, meta in zip(notebook.cells, metas, strict=True):
            if meta.solution:
                assert cell.cell_type == "code" and not meta.locked
                assert notebooks.BEGIN in cell.source and notebooks.END in cell.source
            elif cell.cell_type == "markdown":
                assert meta.locked and not meta.grade


def test_the_solved_notebooks_ran_and_their_test_cells_passed_with_full_points(built):
    for lesson in SOLVED:
        notebook = read(built / "solved" / f"{lesson.module}.ipynb")
        tests = [c for c in notebook.cells if c.metadata.nbgrader.grade]
        assert len(tests) == len(lesson.exercises)
        for cell in tests:
            assert not any(o.output_type == "error" for o in cell.outputs)
            assert "checks passed." in outputs_text(cell)
            [value] = [o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
            assert value == str(cell.metadata.nbgrader.points)  # nbgrader reads it: full marks
        grading = next(c for c in notebook.cells if c.metadata.nbgrader.grade_id == "grading")
        assert f"Lesson {lesson.id} · {lesson.title}: passed" in outputs_text(grading)
        pictures = [c for c in notebook.cells if c.metadata.nbgrader.grade_id == "pictures"]
        assert len(pictures) == lesson.pictures.is_file()  # lesson 6 draws its maps; lesson 1 none
        for cell in pictures:
            assert not any(o.output_type == "error" for o in cell.outputs)
            if importlib.util.find_spec("matplotlib"):
                assert any("image/png" in o.get("data", {}) for o in cell.outputs)


def test_an_unchanged_student_notebook_runs_shows_one_line_per_test_and_leaves_no_folder(
    tmp_path, monkeypatch
):
    """Lesson 3 (it imports lesson 2, given in the notebook); the kernel's temporary folders
    go to tmp_path, which is empty afterwards. The other lessons: the next test, without a kernel."""
    lesson = CATALOG.by_module("l03_attention")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    executed = notebooks.execute(notebooks.build(lesson, CATALOG, "student"), "student", timeout=60)
    assert list(tmp_path.iterdir()) == []
    grading = next(c for c in executed.cells if c.metadata.nbgrader.grade_id == "grading")
    assert "Lesson 03 · Scaled dot-product attention: not-started" in outputs_text(grading)
    for cell in (c for c in executed.cells if c.metadata.nbgrader.grade):
        [line] = [o.text for o in cell.outputs if o.output_type == "stream"]
        assert line.count("\n") == 1 and "0 of" in line and "still raises NotImplementedError" in line
        [value] = [o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
        assert value == "0" and not any(o.output_type == "error" for o in cell.outputs)


def test_a_class_release_kernel_without_the_course_runs_the_notebook_and_grades_nothing():
    """The class release: a kernel with numpy only (no course, so no reference solution in it);
    lesson 3's given lesson-2 code still imports, and the test cells say they cannot grade."""
    from nbformat import v4

    lesson = CATALOG.by_module("l03_attention")
    notebook = notebooks.build(lesson, CATALOG, "student")
    notebook.cells.insert(0, v4.new_code_cell("import sys\nsys.modules['course'] = None"))
    executed = notebooks.execute(notebook, "student", timeout=60)
    grading = next(c for c in executed.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "grading")
    assert outputs_text(grading).startswith("No grader in this kernel (the course is not installed)")
    for cell in (c for c in executed.cells if c.metadata.get("nbgrader", {}).get("grade")):
        assert [o.get("text") or o.data["text/plain"] for o in cell.outputs][1:] == ["0"]


def test_the_notebooks_are_split_from_the_solution_file_alone(tmp_path):
    """The student cells are the generated skeleton's functions; the instructor cells are the
    solution's functions, regions and all (the solution file is nbgrader's source format)."""
    for lesson in LESSONS:
        student = read_nb_source(lesson, "student")
        instructor = read_nb_source(lesson, "instructor")
        skeleton, solution = lesson.skeleton.read_text(), lesson.solution.read_text()
        for exercise in lesson.exercises:
            ours = next(c for c in student if c.startswith(f"def {exercise.name}("))
            theirs = next(c for c in instructor if c.startswith(f"def {exercise.name}("))
            assert ours in skeleton and ours.endswith("raise NotImplementedError")
            assert theirs in solution and theirs.rstrip().endswith(notebooks.END)


def read_nb_source(lesson, variant: str) -> list[str]:
    notebook = notebooks.build(lesson, CATALOG, variant)
    return [c.source for c in notebook.cells if c.cell_type == "code"]


def test_each_notebooks_lesson_module_is_the_solution_or_the_skeleton_up_to_docstrings():
    """The module the kernel and `course grade` take from the cells (``notebook_module``) is the
    solution file (instructor) or the skeleton (student): graded elsewhere, passed and
    not-started. Compared as syntax trees without docstrings and region markers."""
    for lesson in LESSONS:
        for variant, path in (("instructor", lesson.solution), ("student", lesson.skeleton)):
            module = notebook_cells.notebook_module(notebooks.build(lesson, CATALOG, variant))
            expected = lesson_source.without_markers(path.read_text())
            assert similarity.fingerprint(module.encode()) == similarity.fingerprint(expected.encode()), (
                lesson.module,
                variant,
            )


def test_a_failing_cell_stops_execution_with_one_screen_naming_notebook_and_cell():
    """The setup cell run last: the grading cell has seen none of the learner's cells and says
    so in one line (``_render_traceback_``), which is what execution stops on."""
    lesson = CATALOG.by_module("l01_projections")
    notebook = notebooks.build(lesson, CATALOG, "instructor")
    setup = next(c for c in notebook.cells if c.metadata.nbgrader.grade_id == "setup")
    notebook.cells.remove(setup)
    index = next(i for i, c in enumerate(notebook.cells) if c.metadata.nbgrader.grade_id == "grading")
    notebook.cells.insert(index, setup)
    with pytest.raises(notebooks.NotebookError) as caught:
        notebooks.execute(notebook, "instructor/l01_projections.ipynb", timeout=60)
    grading = notebook.cells[index + 1]
    assert str(caught.value) == (
        f"instructor/l01_projections.ipynb: cell {index + 1} ({grading.id}) raised NotebookProblem: "
        "the setup cell has not seen the cell defining linear: Restart the kernel and Run All.\n"
        "NotebookProblem: the setup cell has not seen the cell defining linear: Restart the kernel "
        "and Run All."
    )


def test_generating_twice_gives_identical_files_with_ids_from_lesson_and_index(tmp_path, built):
    # the second generation is the module's own (`built`: the same call, then the solved
    # notebooks of two lessons, which writes their student and instructor notebooks once more)
    first, second = tmp_path / "a", built
    notebooks.generate(first, LESSONS, CATALOG, execute_solved=False)
    files = sorted(p.relative_to(first) for p in first.rglob("*.ipynb"))
    assert len(files) == 2 * len(LESSONS)
    variants = [second / "student", second / "instructor"]
    assert files == sorted(p.relative_to(second) for variant in variants for p in variant.rglob("*.ipynb"))
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes()
    notebook = read(first / "student" / "l02_softmax.ipynb")
    assert [c.id for c in notebook.cells] == [f"l02_softmax-{i:02d}" for i in range(len(notebook.cells))]


def test_the_command_writes_one_lessons_notebooks_and_rejects_an_unknown_lesson(tmp_path):
    app = typer.Typer()
    register(app)
    app.command(name="noop", hidden=True)(lambda: None)  # keep `notebooks` a subcommand
    runner = CliRunner()
    done = runner.invoke(app, ["notebooks", str(tmp_path), "--lesson", "2", "--no-execute"])
    assert done.exit_code == 0, done.output
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.ipynb")) == [
        "instructor/l02_softmax.ipynb",
        "student/l02_softmax.ipynb",
    ]
    assert "2 notebooks for 1 lesson(s)" in done.output
    unknown = runner.invoke(app, ["notebooks", str(tmp_path), "--lesson", "99"])
    assert unknown.exit_code == 2 and "There is no lesson '99'" in unknown.output


def test_a_failing_test_cell_shows_what_course_check_shows_about_its_most_explaining_check(tmp_path):
    """A softmax that divides by a zero sum (a classic mistake): the test cell prints the check's
    title and message as `course check --json` gives them: the NaN count, the expected/got slice
    and the named mistake, not only "returned wrong values"."""
    mistaken = mistaken_source("l02_softmax", "divides_by_a_zero_sum")
    lesson = CATALOG.by_module("l02_softmax")
    assert run_course("init", "ws", cwd=tmp_path).returncode == 0
    (tmp_path / "ws" / lesson.file_name).write_text(mistaken)
    done = run_course("check", "2", "--json", cwd=tmp_path / "ws")
    assert done.returncode == 1, done.stderr
    result = LessonResult.from_dict(json.loads(done.stdout))
    exercise, check = result.first_problem()
    assert exercise.name == "softmax" and check.mistake and "NaN" in check.message

    notebook = notebooks.build(lesson, CATALOG, "instructor")
    function = lesson_source.parse(mistaken, "mistaken").function("softmax").solution
    next(c for c in notebook.cells if c.metadata.nbgrader.grade_id == "softmax").source = function
    executed = notebooks.execute(notebook, "instructor", timeout=60)
    cell = next(c for c in executed.cells if c.metadata.nbgrader.grade_id == "test_softmax")
    [shown] = [o.text for o in cell.outputs if o.output_type == "stream"]
    passed = sum(c.status == "passed" for c in exercise.checks)
    assert shown.startswith(f"✘ softmax: {passed} of {len(exercise.checks)} checks passed (failed).\n")
    assert f"\n{check.heading()}\n{check.message}\n" in shown
    assert "expected[1, :] = [0. 0. 0. 0. 0.]" in shown and "This looks like a known mistake" in shown


def test_without_a_kernel_the_command_names_the_extra_that_brings_one(tmp_path, monkeypatch):
    from course.cli import notebooks as command

    monkeypatch.setattr(command, "_importable", lambda name: name not in ("nbclient", "ipykernel"))
    app = typer.Typer()
    register(app)
    app.command(name="noop", hidden=True)(lambda: None)
    done = CliRunner().invoke(app, ["notebooks", str(tmp_path), "--lesson", "2"], env={"COLUMNS": "200"})
    assert done.exit_code == 2 and list(tmp_path.iterdir()) == []
    assert 'pip install "attention-course[instructor]"' in done.output and "--no-execute" in done.output
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"nbclient", "ipykernel"} <= {line.split(">")[0] for line in extras["instructor"]}


def test_the_documented_command_that_runs_a_student_notebook_comes_with_the_instructor_extra():
    """docs/instructors.md runs a notebook with `jupyter SUBCOMMAND`: the package behind that
    command (its `jupyter-SUBCOMMAND` script) is one the instructor extra installs."""
    from importlib.metadata import entry_points

    docs = (REPO / "docs" / "instructors.md").read_text()
    [subcommand] = set(re.findall(r"`jupyter (\w+) [^`]*\.ipynb`", docs))
    [script] = entry_points(group="console_scripts", name=f"jupyter-{subcommand}")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert script.dist.name in {re.split(r"[<>=]", line)[0] for line in extras["instructor"]}
