"""Results in the formats other graders read: JUnit XML and GitHub Classroom autograding.

JUnit: one ``<testsuite>`` per submission and lesson (``alice.zip: l01_projections``), one
``<testcase>`` per check; a failed or not-started check is a ``<failure>``, an error or a timeout
an ``<error>``, with the grader's message. A refused bundle is one suite with one erroring case.

nbgrader: a CSV with the columns of ``nbgrader export`` (scores from `course grade`).

In both, every text a submission gave (names, file names, problems, a check's message) is
written made safe (``safe_text``: controls, bidi controls and lone surrogates escaped, valid XML),
and a row that cannot be written is said on its own line: it never stops the others.

GitHub Classroom: ``.github/classroom/autograding.json`` (the autograding action's test list)
and ``.github/workflows/classroom.yml`` (the workflow GitHub Classroom runs today, one
command-grader step per lesson), both running ``course check N`` in the student's repository.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from course.content.catalog import Lesson
from course.engine.results import ERROR, FAILED, NOT_STARTED, PASSED, TIMEOUT
from course.instructor.classroom.safe_text import safe_text


def _text(value: object, limit: int = 4000, lines: bool = False) -> str:
    """Learner-influenced text made safe (``safe_text``: controls escaped, valid XML 1.0) and
    bounded; ``lines``: keep newlines (an element's text, never an attribute)."""
    return safe_text(value, lines)[:limit]


def junit_tree(rows: Sequence[dict]) -> ET.ElementTree:
    """The JUnit document for gradebook rows (as ``course.instructor.classroom.gradebook.grade_bundle``
    makes them). Each row's suites are made apart and added whole: a row that cannot be written
    becomes one erroring suite that says so, and every other row is written."""
    root = ET.Element("testsuites", name="course grade")
    totals = dict.fromkeys(("tests", "failures", "errors"), 0)
    for row in rows:
        holder, counted = ET.Element("testsuites"), dict.fromkeys(totals, 0)
        try:
            _row_suites(holder, row, counted)
        except Exception as error:  # a malformed row: said on its own suite
            holder, counted = ET.Element("testsuites"), dict.fromkeys(totals, 0)
            file = row.get("file", "") if isinstance(row, dict) else ""
            suite = ET.SubElement(holder, "testsuite", name=_text(file, 300))
            case = ET.SubElement(suite, "testcase", name="bundle", classname=_text(file, 300))
            why = _text(f"this row could not be written: {type(error).__name__}: {error}", 500)
            ET.SubElement(case, "error", message=why, type="grader-failed")
            _count(suite, 1, 0, 1, counted)
        root.extend(list(holder))
        for key, value in counted.items():
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.ElementTree(root)


def _row_suites(root: ET.Element, row: dict, totals: dict) -> None:
    """One row's suites, added to ``root``: one per lesson, or one erroring case if none."""
    if not row["lessons"]:
        suite = _suite(root, f"{row['file']}", row)
        case = ET.SubElement(suite, "testcase", name="bundle", classname=_text(row["file"]))
        ET.SubElement(
            case, "error", message=_text("; ".join(row["problems"]), 500), type=_text(row["outcome"])
        ).text = _text("\n".join(row["problems"]), lines=True)
        _count(suite, 1, 0, 1, totals)
        return
    for module, entry in row["lessons"].items():
        suite = _suite(root, f"{row['file']}: {module}", row)
        tests = failures = errors = 0
        checks = [(e["name"], c) for e in (entry["result"] or {}).get("exercises", []) for c in e["checks"]]
        # why nothing of the lesson could run (it could not be imported): told with each error
        why = _text((entry["result"] or {}).get("message") or "", lines=True)
        if not checks:  # the lesson file was not in the bundle
            checks = [
                (
                    "bundle",
                    {
                        "name": f"{module}.py",
                        "status": ERROR,
                        "message": f"{module}.py is not in the bundle.",
                    },
                )
            ]
        for exercise, check in checks:
            case = ET.SubElement(
                suite,
                "testcase",
                name=_text(check["name"], 200),
                classname=_text(f"{row['file']}.{module}.{exercise}", 300),
            )
            tests += 1
            status = _text(check["status"], 40)
            message = _text(check.get("message") or status, lines=True)
            first = message.splitlines()[0][:500] if message else status
            if status in (FAILED, NOT_STARTED):
                failures += 1
                ET.SubElement(case, "failure", message=first, type=status).text = message
            elif status in (ERROR, TIMEOUT):
                errors += 1
                told = f"{message}\n{why}" if why and why not in message else message
                ET.SubElement(case, "error", message=first, type=status).text = told
            elif status != PASSED:
                errors += 1
                ET.SubElement(case, "error", message=status, type="unknown")
        _count(suite, tests, failures, errors, totals)


def _suite(root: ET.Element, name: str, row: dict) -> ET.Element:
    suite = ET.SubElement(root, "testsuite", name=_text(name, 300))
    properties = ET.SubElement(suite, "properties")
    for key in ("name", "course_version", "outcome"):
        ET.SubElement(properties, "property", name=key, value=_text(row.get(key, ""), 200))
    if row["problems"]:  # e.g. the same code as a reference solution or a classmate's
        ET.SubElement(properties, "property", name="problems", value=_text(" | ".join(row["problems"])))
    return suite


def _count(suite: ET.Element, tests: int, failures: int, errors: int, totals: dict) -> None:
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    totals["tests"] += tests
    totals["failures"] += failures
    totals["errors"] += errors


def write_junit(rows: Sequence[dict], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    junit_tree(rows).write(out, encoding="utf-8", xml_declaration=True)


# -- nbgrader --------------------------------------------------------------------------------------
NBGRADER_COLUMNS = [
    "assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
    "raw_score", "late_submission_penalty", "score", "max_score",
]  # fmt: skip


def write_nbgrader_csv(rows: Sequence[dict], max_points: dict[str, int], out: Path) -> None:
    """Scores in nbgrader's terms (the columns of `nbgrader export`): one line per student and
    lesson; the assignment is nbgrader's assignment folder (else the lesson's module), the score
    the re-grade's points (one per passed check) and max_score the lesson's number of checks."""
    import csv

    from course.instructor.classroom.gradebook import spreadsheet_cell

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = csv.writer(handle)
        writer.writerow(NBGRADER_COLUMNS)
        for row in rows:
            for module, most in max_points.items():
                try:
                    entry = row["lessons"].get(module) or {"points": 0}
                    where = row.get("assignments", {}).get(module, {})
                    student = row["name"] or row["file"]
                    points = float(entry["points"])
                    cells = [where.get("assignment", module), "", where.get("timestamp", ""), student]
                    cells += ["", "", "", points, 0.0, points, float(most)]
                except Exception:  # a malformed row: no score, the others written
                    student = row.get("file", "") if isinstance(row, dict) else ""
                    cells = [module, "", "", student, "", "", "", 0.0, 0.0, 0.0, float(most)]
                writer.writerow([spreadsheet_cell(cell) for cell in cells])


# -- GitHub Classroom ---------------------------------------------------------------------------
def check_command(lesson: Lesson) -> str:
    """The test command: the repository root is the workspace (the marker folder is created if
    the student's repository lacks it); no warm grader is left behind on the runner, no earlier
    grade is reused (``--fresh``: the runner's cache folder is not ours to trust), and the code
    is graded sealed, as ``course grade`` grades it (``--sealed``: it may read nothing of the
    installed course but its engine, so not the reference solutions), with the instructor's
    secret if the workflow kept one (``SECRET_FILE``: the grader actions hand a command PATH
    and HOME only, never the workflow's secrets)."""
    return (
        f'mkdir -p .course && COURSE_SERVER=off COURSE_GRADING_SECRET="$(cat {SECRET_FILE} 2>/dev/null)" '
        f"course check {lesson.number} --workspace . --fresh --sealed"
    )


SECRET_FILE = '"$HOME/.course-grading-secret"'  # as the check command's shell reads it
SECRET_STEP = (  # the workflow's step that keeps the repository's or organisation's secret there
    "    - name: Keep the instructor's grading secret for the checks",
    "      env:",
    "        COURSE_GRADING_SECRET: ${{ secrets.COURSE_GRADING_SECRET }}",
    "      run: " + json.dumps(f"umask 077 && printf '%s' \"$COURSE_GRADING_SECRET\" > {SECRET_FILE}"),
)


TIMEOUT_MINUTES = 10  # one lesson's check on GitHub's runner, in autograding.json and the workflow


def classroom_tests(lessons: Sequence[Lesson], points: dict[str, int], install: str) -> list[dict]:
    """autograding.json's tests: one per lesson, all-or-nothing (the check's exit code)."""
    return [
        {
            "name": f"Lesson {lesson.id}: {lesson.title}",
            "setup": install if index == 0 else "",
            "run": check_command(lesson),
            "input": "",
            "output": "",
            "comparison": "included",
            "timeout": TIMEOUT_MINUTES,
            "points": points[lesson.module],
        }
        for index, lesson in enumerate(lessons)
    ]


def _workflow(lessons: Sequence[Lesson], points: dict[str, int], install: str) -> str:
    q = json.dumps  # a JSON string is a valid YAML scalar
    lines = [
        "name: Autograding Tests",
        "'on': [push, repository_dispatch, workflow_dispatch]",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    steps:",
        "    - name: Checkout code",
        "      uses: actions/checkout@v4",
        "    - uses: actions/setup-python@v5",
        "      with:",
        "        python-version: '3.11'",
        "    - name: Install the course",
        f"      run: {q(install)}",
        *SECRET_STEP,
    ]
    ids = []
    for lesson in lessons:
        step = f"lesson-{lesson.id}"
        ids.append(step)
        lines += [
            f"    - name: {q('Lesson ' + lesson.id + ': ' + lesson.title)}",
            f"      id: {step}",
            "      uses: classroom-resources/autograding-command-grader@v1",
            "      with:",
            f"        test-name: {q('lesson ' + lesson.id)}",
            f"        command: {q(check_command(lesson))}",
            f"        timeout: {TIMEOUT_MINUTES}",
            f"        max-score: {points[lesson.module]}",
        ]
    lines += [
        "    - name: Autograding Reporter",
        "      uses: classroom-resources/autograding-grading-reporter@v1",
        "      env:",
    ]
    lines += [f'        {step.upper()}_RESULTS: "${{{{steps.{step}.outputs.result}}}}"' for step in ids]
    lines += ["      with:", f"        runners: {','.join(ids)}"]
    return "\n".join(lines) + "\n"


def add_wheel(folder: Path, wheel: Path) -> str:
    """Copy the course's ``wheel`` into the template repository ``folder`` (``.classroom/``):
    the course is on no package index, and the runner checks the repository out before the
    install step. Returns the wheel's path as the install step reads it, from the root."""
    target = folder / ".classroom" / wheel.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel, target)
    return target.relative_to(folder).as_posix()


def write_classroom(
    folder: Path, lessons: Sequence[Lesson], points: dict[str, int], install: str
) -> list[Path]:
    """Write the two GitHub Classroom files into ``folder`` (a template repository)."""
    config = folder / ".github" / "classroom" / "autograding.json"
    workflow = folder / ".github" / "workflows" / "classroom.yml"
    config.parent.mkdir(parents=True, exist_ok=True)
    workflow.parent.mkdir(parents=True, exist_ok=True)
    tests = classroom_tests(lessons, points, install)
    config.write_text(json.dumps({"tests": tests}, indent=2) + "\n", encoding="utf-8")
    workflow.write_text(_workflow(lessons, points, install), encoding="utf-8")
    return [config, workflow]
