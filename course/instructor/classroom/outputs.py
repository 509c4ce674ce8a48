"""Every file a graded class is written to, as `course grade` and `course gradebook merge` are
asked: the CSV gradebook, and on request the JSON report, JUnit XML, nbgrader's CSV and one
feedback file per submission."""

from __future__ import annotations

from pathlib import Path

from course.instructor.classroom import exports, feedback, gradebook


def write_all(
    report: gradebook.Report,
    out: Path,
    json_report: Path | None = None,
    junit: Path | None = None,
    nbgrader_csv: Path | None = None,
    feedback_dir: Path | None = None,
) -> list[str]:
    """Write ``report`` to each file asked for; what was written, for people."""
    gradebook.write_csv(report, out)
    written = [str(out)]
    if json_report:
        gradebook.write_json(report, json_report)
        written.append(str(json_report))
    if junit:
        exports.write_junit(report.rows, junit)
        written.append(str(junit))
    if nbgrader_csv:
        exports.write_nbgrader_csv(report.rows, report.max_points, nbgrader_csv)
        written.append(str(nbgrader_csv))
    if feedback_dir:
        files = feedback.write_feedback(report, feedback_dir)
        written.append(f"{len(files)} feedback files in {feedback_dir}")
    return written
