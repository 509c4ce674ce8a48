"""The text of a notebook's course cells: setup, the given earlier lessons' code, grading and
pictures (``course.instructor.notebooks.build`` puts them in order). Cells the course adds
start with ``TAG`` so that the kernel and `course grade` leave them out of the learner's module
(``course.instructor.notebooks.cells``).
"""

from __future__ import annotations

from course.content import lesson_source
from course.content.catalog import Catalog, Lesson
from course.instructor.notebooks.cells import TAG


class NotebookError(Exception):
    """A notebook could not be built or executed; the message is one screen for a person."""


SETUP_CELL = f"""\
{TAG} setup. Run this cell first (Run All does): from here on the kernel keeps the cells you run,
# which the grading cell below grades as your lesson module. Without the course installed (a class
# release) nothing is graded here: your instructor grades the notebook you hand in.
try:
    from course.instructor.notebooks.cells import exercise_line, grade_module, record_cells, recorded_module
except ImportError:
    record_cells = None
else:
    record_cells(get_ipython())
EARLIER = {{}}"""


def _lesson(module: str, catalog: Catalog) -> Lesson:
    lesson = catalog.by_module(module)
    if lesson is None:
        raise NotebookError(f"no lesson {module!r} in the catalog")
    return lesson


def given_text(modules: list[str], catalog: Catalog) -> str:
    """The markdown cell before the given code: whose code it is, said plainly."""
    named = ", ".join(
        f"lesson {lesson.number} (`{module}`)" for module in modules if (lesson := catalog.by_module(module))
    )
    return (
        "## Given: the earlier lessons' code\n\n"
        f"This lesson builds on {named}. The cell below gives you **the course's reference code** "
        "of those lessons, not your own: where the text says *your* function from an earlier "
        "lesson, in this notebook it is this given code. Read it; do not edit it. The imports "
        "below take their names from it, and `course grade` grades your code with the same given "
        "code."
    )


def earlier_cell(modules: list[str], catalog: Catalog) -> str:
    """The given code of the earlier lessons, as modules in the kernel's memory."""
    entries = "".join(
        f"    {module!r}: {_code_literal(reference_code(_lesson(module, catalog)))},\n" for module in modules
    )
    return f"""\
{TAG} given. The earlier lessons' code ({", ".join(modules)}): the course's reference, made
# into modules in this kernel's memory (no file is written), so that `from ... import` works.
import sys
import types

EARLIER = {{
{entries}}}
for _name, _code in EARLIER.items():
    sys.modules[_name] = types.ModuleType(_name)
    exec(compile(_code, f"<given {{_name}}>", "exec"), sys.modules[_name].__dict__)"""


def reference_code(lesson: Lesson) -> str:
    """An earlier lesson's reference solution as a learner reads it (no region markers): what
    the notebooks give, and what `course grade` grades a notebook with."""
    return lesson_source.without_markers(lesson.solution.read_text(encoding="utf-8"))


def _code_literal(text: str) -> str:
    """A readable string literal of Python source: raw triple quotes when the text allows."""
    if "'''" not in text and not text.rstrip("\n").endswith("\\"):
        return "r'''\n" + text + "'''"
    return repr(text)


def grading_cell(lesson: Lesson) -> str:
    """The cell that grades the cells run so far as the lesson's module, and the test helper."""
    return f'''\
{TAG} grading. The cells you ran (each in its latest version, in the order first run; not the
# course's own cells) make {lesson.file_name}; in a scratch folder next to the given earlier
# lessons' code, the course's tests grade it: the same checks as `course check {lesson.number}`.
# This is feedback while you work. Your grade comes from your instructor's `course grade` on the
# notebook you hand in, which reads the same cells from the file and grades them apart from any
# kernel (this kernel's tests can be fooled by code run in it; that grade cannot).


class NotebookProblem(Exception):
    """A problem shown as one line in Jupyter, not as a traceback."""

    def _render_traceback_(self):
        return [f"{{type(self).__name__}}: {{self}}"]


EXERCISES = {tuple(e.name for e in lesson.exercises)!r}
result, why = None, "no grader in this kernel"


def check_exercise(name):
    """A line about one exercise (and a failed check as `course check` shows it); the cell's
    value is its points (one per passed check)."""
    if result is None:
        print(f"{{name}}: not graded ({{why}}).")
        return 0
    points, line = exercise_line(result, name)
    print(line)
    return points


if record_cells is None:
    print("No grader in this kernel (the course is not installed): the tests below show 0 points.")
else:
    code = recorded_module()
    if not any(f"def {{name}}(" in code for name in EXERCISES):
        why = "the grading cell stopped"
        raise NotebookProblem(
            f"the setup cell has not seen the cell defining {{EXERCISES[0]}}: Restart the kernel and Run All."
        )
    result = grade_module({lesson.module!r}, code, EARLIER)
    print(f"Lesson {lesson.id} · {lesson.title}: {{result.status}}")
    for line in filter(None, [result.message, result.note]):
        print(line)
'''


def pictures_cell(lesson: Lesson) -> str:
    """The cell drawing what `course show --map` draws (``course.instructor.notebooks.pictures``)."""
    return f"""\
{TAG} pictures. What `course show --map {lesson.number}` draws, from the cells you ran: your
# attention weights beside the right ones, and the lesson's other figures. Changes no points.
if record_cells is not None:
    from IPython.display import Image, display

    from course.instructor.notebooks.pictures import draw

    images, note = draw({lesson.module!r}, recorded_module(), EARLIER)
    for image in images:
        display(Image(image))
    if note:
        print(note)"""
