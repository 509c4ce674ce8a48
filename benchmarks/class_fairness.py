"""How much a submission that hogs the CPU slows everyone else's grade in `course grade`.

A class of correct bundles (lessons 1-3) is graded with two processes, alone and with one
bundle whose three lessons loop at import, side by side in one run: once as `course grade`
does it (imports past ``class_stream.AHEAD_CPU_SECONDS`` of CPU wait for their turn) and once
with that turn-taking switched off. Printed: each run's class time and the mean and largest
per-submission grading time of the correct bundles, as ratios to the class without the hog.
Grades are never reused between identical files (``same=False``), so each is measured.

    python benchmarks/class_fairness.py [--count 16] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["COURSE_SERVER"] = "off"
os.environ["COURSE_LIMITS"] = "call=2,import=4,run=20"

from grade_class import write_bundle  # noqa: E402

from course.content.catalog import load_catalog  # noqa: E402
from course.instructor.classroom import class_stream, gradebook  # noqa: E402

MODULES = ["l01_projections", "l02_softmax", "l03_attention"]


def run(count: int, hog: bool) -> tuple[float, list[float]]:
    """(class seconds, each correct bundle's grading seconds)."""
    solved = {m: (REPO / "solutions" / f"{m}.py").read_text() for m in MODULES}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for index in range(count):
            write_bundle(folder / f"s{index:03d}.zip", f"student{index}", solved)
        if hog:
            write_bundle(folder / "s000_hog.zip", "hog", {m: "while True:\n    pass\n" for m in MODULES})
        lessons = [load_catalog().resolve(m) for m in MODULES]
        started = time.monotonic()
        report = gradebook.grade_folder(folder, lessons, 2, same=False)
        seconds = time.monotonic() - started
    each = [
        sum(entry["result"]["duration"] for entry in row["lessons"].values() if entry.get("result"))
        for row in report.rows
        if "hog" not in row["file"]
    ]
    return seconds, each


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    budget = class_stream.AHEAD_CPU_SECONDS
    for round_ in range(args.repeat):
        for label, ahead in (("turns", budget), ("no turns", float("inf"))):
            class_stream.AHEAD_CPU_SECONDS = ahead  # the grading processes are forked: they see it
            alone, alone_each = run(args.count, hog=False)
            hogged, hogged_each = run(args.count, hog=True)
            mean = statistics.mean(hogged_each) / statistics.mean(alone_each)
            worst = max(hogged_each) / max(alone_each)
            print(
                f"round {round_ + 1}, {label:8}: class {alone:.2f} s -> {hogged:.2f} s with the hog; "
                f"a correct submission's grade, mean {mean:.2f}x, largest {worst:.2f}x"
            )
    class_stream.AHEAD_CPU_SECONDS = budget
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
