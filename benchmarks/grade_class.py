"""How fast `course grade` grades a class: 100 generated submissions, 1 worker vs 2 workers.

The class (fixed seed): correct bundles (the solutions), wrong ones (a classic mistake from
tests/mistakes/ applied to one lesson's solution), hostile ones (an endless loop in a function,
an endless loop at import, os._exit in a function, output floods) and corrupt ones (not a zip,
truncated, path traversal, a zip bomb). Both runs grade the same folder in one invocation, one
after the other (then again in the other order with --repeat 2), and must produce the same
gradebook. Hostile code runs under COURSE_LIMITS="call=1,import=2,run=20" (it only tightens
the limits) so that it costs seconds, not minutes.

Only lessons 1-3 are graded by default (the generated bundles hold those three files), which
keeps the run to a few minutes; --lessons 1,2,3,4 grades more.

    python benchmarks/grade_class.py [--count 100] [--lessons 1,2,3] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ["COURSE_SERVER"] = "off"
os.environ["COURSE_LIMITS"] = "call=1,import=2,run=20"

from course import __version__  # noqa: E402
from course.catalog import load_catalog  # noqa: E402
from course.instructor import gradebook, submissions  # noqa: E402

HOSTILE = {
    "loop_in_a_function": "def linear(x, w, b=None):\n    while True:\n        pass\n",
    "loop_at_import": "while True:\n    pass\n",
    "os_exit_in_a_function": "import os\n\n\ndef softmax(x, axis=-1):\n    os._exit(0)\n",
    "output_flood": "def linear(x, w, b=None):\n    while True:\n        print('x' * 10000)\n",
}
HOSTILE_TARGET = {
    "loop_in_a_function": "l01_projections",
    "loop_at_import": "l03_attention",
    "os_exit_in_a_function": "l02_softmax",
    "output_flood": "l01_projections",
}


def mistakes(modules: list[str]) -> list[tuple[str, str, str]]:
    """(module, mistake name, mistaken source) for every classic mistake of these lessons."""
    found = []
    for module in modules:
        with open(REPO / "tests" / "mistakes" / f"{module}.toml", "rb") as handle:
            for mistake in tomllib.load(handle)["mistake"]:
                source = (REPO / "solutions" / f"{module}.py").read_text()
                for edit in mistake["edit"]:
                    source = source.replace(edit["old"], edit["new"])
                found.append((module, mistake["name"], source))
    return found


def write_bundle(path: Path, name: str, files: dict[str, str]) -> None:
    claim = {
        "schema": 1,
        "course_version": __version__,
        "name": name,
        "files": {f"{m}.py": submissions.sha256(s.encode()) for m, s in files.items()},
        "lessons": [{"lesson": m, "status": "passed", "points": 0} for m in files],
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        for module, source in files.items():
            bundle.writestr(f"{module}.py", source)
        bundle.writestr("result.json", json.dumps(claim))


def generate(folder: Path, count: int, modules: list[str]) -> dict[str, int]:
    """Write ``count`` bundles: 50% correct, 25% wrong, 15% hostile, 10% corrupt."""
    rng = random.Random(6)
    solved = {m: (REPO / "solutions" / f"{m}.py").read_text() for m in modules}
    wrong = mistakes(modules)
    kinds = ["correct"] * 50 + ["wrong"] * 25 + ["hostile"] * 15 + ["corrupt"] * 10
    made = dict.fromkeys(("correct", "wrong", "hostile", "corrupt"), 0)
    for index in range(count):
        kind = kinds[index * len(kinds) // count]
        made[kind] += 1
        path = folder / f"s{index:03d}_{kind}.zip"
        files = dict(solved)
        if kind == "wrong":
            module, _, source = rng.choice(wrong)
            files[module] = source
        elif kind == "hostile":
            which = list(HOSTILE)[made[kind] % len(HOSTILE)]
            if HOSTILE_TARGET[which] in files:
                files[HOSTILE_TARGET[which]] = HOSTILE[which]
        if kind != "corrupt":
            write_bundle(path, f"student{index:03d}", files)
            continue
        flavour = made[kind] % 4
        if flavour == 0:
            path.write_text("not a zip\n")
        elif flavour == 1:
            write_bundle(path, "t", files)
            path.write_bytes(path.read_bytes()[:300])
        elif flavour == 2:
            with zipfile.ZipFile(path, "w") as bundle:
                bundle.writestr("../../evil.py", "x = 1\n")
        else:
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
                bundle.writestr(f"{modules[0]}.py", b"#" * (64 * 1024**2))
    return made


def summary(report: gradebook.Report) -> list[tuple]:
    return [
        (
            row["file"],
            row["outcome"],
            tuple((m, e["status"], e["points"]) for m, e in sorted(row["lessons"].items())),
        )
        for row in report.rows
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--lessons", default="1,2,3")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of (1 worker, 2 workers)")
    args = parser.parse_args()
    catalog = load_catalog()
    lessons = [catalog.resolve(name) for name in args.lessons.split(",")]
    root = Path(tempfile.mkdtemp(prefix="course-class-"))
    try:
        made = generate(root, args.count, [lesson.module for lesson in lessons])
        print(
            f"{args.count} submissions ({', '.join(f'{n} {k}' for k, n in made.items())}), "
            f"lessons {', '.join(lesson.id for lesson in lessons)}, {os.cpu_count()} cores, "
            f"COURSE_LIMITS={os.environ['COURSE_LIMITS']}"
        )
        gradebook.max_points(lessons)  # warm the file cache and bytecode
        times: dict[int, list[float]] = {1: [], 2: []}
        results = {}
        for round_ in range(args.repeat):
            for workers in (1, 2) if round_ % 2 == 0 else (2, 1):
                report = gradebook.grade_folder(root, lessons, workers)
                times[workers].append(report.seconds)
                results[workers] = summary(report)
                rate = len(report.rows) / report.seconds
                print(
                    f"  {workers} worker{'s' if workers > 1 else ' '}: {report.seconds:6.1f} s, "
                    f"{rate:5.2f} submissions/s"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if results[1] != results[2]:
        print("the two runs disagree on some gradebook rows: grading is not deterministic")
        return 1
    one, two = min(times[1]), min(times[2])
    outcomes: dict[str, int] = {}
    for _, outcome, _lessons in results[1]:
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(
        f"\nbest of each: 1 worker {args.count / one:.2f}/s, 2 workers {args.count / two:.2f}/s; "
        f"speed-up {one / two:.2f}x. Same gradebook from both runs; outcomes {outcomes}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
