"""How fast `course grade` grades a class: 100 generated submissions, 1 worker vs 2 workers.

The class (fixed seed): correct bundles (the solutions), wrong ones (a classic mistake from
tests/mistakes/ applied to one lesson's solution), hostile ones (an endless loop in a function,
an endless loop at import, os._exit in a function, output floods) and corrupt ones (not a zip,
truncated, path traversal, a zip bomb). Both runs grade the same folder in one invocation, one
after the other (then again in the other order with --repeat 2), and must produce the same
gradebook. Hostile code runs under COURSE_LIMITS="call=1,import=2,run=20" (it only tightens
the limits) so that it costs seconds, not minutes.

With --honest the class holds correct and wrong bundles only (two to one): hostile code costs
wall time its time limits allow, not CPU, so it dilutes what a second core is worth; run both
to report the two side by side.

Only lessons 1-3 are graded by default (the generated bundles hold those three files), which
keeps the run to a few minutes; --lessons 1,2,3,4 grades more.

Every run is a fresh process (`grade_folder` as `course grade` calls it, the points counted
too), interleaved: 1 and 2 workers without de-duplication of identical lesson files, then 2
with it; with --baseline REF the course as of that commit (exported with `git archive`, not
checked out) is timed beside, on the same class, and every run must give the same gradebook.

    python benchmarks/grade_class.py [--count 40] [--lessons 1,2,3] [--repeat 1] [--baseline 80f4076]
    python benchmarks/grade_class.py --honest   # correct and wrong bundles only: what 2 cores are worth
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

from trees import baseline_tree

REPO = Path(__file__).resolve().parent.parent
os.environ["COURSE_SERVER"] = "off"
os.environ["COURSE_LIMITS"] = "call=1,import=2,run=20"

from course import __version__  # noqa: E402

# A --baseline tree may predate the packages: course/content/ and instructor/classroom/ (86badc7),
# course/instructor/ (95b940c).
try:
    from course.content.catalog import load_catalog
    from course.instructor.classroom import gradebook, submissions
except ImportError:
    from course.catalog import load_catalog  # type: ignore[no-redef]

    try:
        from course.instructor import gradebook, submissions  # type: ignore[no-redef]
    except ImportError:
        from course import gradebook, submissions  # type: ignore[no-redef]

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


def generate(folder: Path, count: int, modules: list[str], honest: bool = False) -> dict[str, int]:
    """Write ``count`` bundles: 50% correct, 25% wrong, 15% hostile, 10% corrupt; ``honest``:
    two thirds correct, one third wrong, nothing hostile or corrupt."""
    rng = random.Random(6)
    solved = {m: (REPO / "solutions" / f"{m}.py").read_text() for m in modules}
    wrong = mistakes(modules)
    kinds = ["correct"] * 50 + ["wrong"] * 25 + ([] if honest else ["hostile"] * 15 + ["corrupt"] * 10)
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


def grade_once(folder: Path, lessons: str, workers: int, same: bool) -> None:
    """One timed `grade_folder` in this process (the course on PYTHONPATH: this tree or the
    baseline's); prints {"seconds", "rows"} as JSON."""
    import inspect
    import time

    chosen = [load_catalog().resolve(name) for name in lessons.split(",")]
    busy = machine_cpu()
    started = time.monotonic()
    options = {"same": same} if "same" in inspect.signature(gradebook.grade_folder).parameters else {}
    report = gradebook.grade_folder(folder, chosen, workers, **options)
    seconds = time.monotonic() - started  # includes counting the points, as `course grade` does
    print(json.dumps({"seconds": seconds, "cpu": machine_cpu() - busy, "rows": summary(report)}))


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (user, nice, system) since it started:
    the grader, its workers, and anything else running (Linux; 0 elsewhere)."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
        return sum(int(field) for field in fields[1:4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def timed_run(folder: Path, lessons: str, workers: int, same: bool, tree: Path) -> tuple[float, float, list]:
    import subprocess

    command = [sys.executable, __file__, "--grade-only", str(folder), "--lessons", lessons]
    command += ["--workers", str(workers)] + (["--same"] if same else [])
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["seconds"], answer["cpu"], json.loads(json.dumps(answer["rows"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--lessons", default="1,2,3")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every configuration")
    parser.add_argument("--baseline", metavar="GITREF", help="also time the course as of this commit")
    parser.add_argument(
        "--honest",
        action="store_true",
        help="a class of correct and wrong bundles only (no hostile, no corrupt)",
    )
    parser.add_argument("--grade-only", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--same", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.grade_only:
        grade_once(Path(args.grade_only), args.lessons, args.workers, args.same)
        return 0
    catalog = load_catalog()
    lessons = [catalog.resolve(name) for name in args.lessons.split(",")]
    root = Path(tempfile.mkdtemp(prefix="course-class-"))
    # (label, tree, workers, same): de-duplication off unless said; the baseline has none.
    runs = [
        ("this tree", REPO, 1, False),
        ("this tree", REPO, 2, False),
        ("this tree, de-dup", REPO, 2, True),
    ]
    try:
        if args.baseline:
            (root / "baseline").mkdir()
            tree = baseline_tree(args.baseline, root / "baseline")
            runs = [
                (f"baseline {args.baseline}", tree, 1, False),
                (f"baseline {args.baseline}", tree, 2, False),
                *runs,
            ]
        (root / "class").mkdir()
        made = generate(root / "class", args.count, [lesson.module for lesson in lessons], honest=args.honest)
        print(
            f"{args.count} submissions ({', '.join(f'{n} {k}' for k, n in made.items())}), "
            f"lessons {', '.join(lesson.id for lesson in lessons)}, {os.cpu_count()} cores, "
            f"COURSE_LIMITS={os.environ['COURSE_LIMITS']}; each run a fresh process, interleaved"
        )
        times: dict[tuple, list[float]] = {run: [] for run in runs}
        rows: dict[tuple, list] = {}
        for round_ in range(args.repeat):
            for run in runs if round_ % 2 == 0 else runs[::-1]:
                label, tree, workers, same = run
                seconds, cpu, rows[run] = timed_run(root / "class", args.lessons, workers, same, tree)
                times[run].append(seconds)
                print(
                    f"  {label:28s} {workers} worker(s): {seconds:6.1f} s, {args.count / seconds:5.2f}/s"
                    f" (machine CPU {cpu:5.1f} s)"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    reference = rows[runs[0]]
    if any(found != reference for found in rows.values()):
        print("the runs disagree on some gradebook rows (outcome, status or points)")
        for run, found in rows.items():
            for mine, theirs in zip(found, reference, strict=True):
                if mine != theirs:
                    print(f"  {run[0]}, {run[2]} worker(s): {mine} vs {theirs}")
        return 1
    print("\nbest of each (submissions/s, seconds per submission):")
    best = {run: min(values) for run, values in times.items()}
    for (label, _, workers, _), seconds in best.items():
        print(
            f"  {label:28s} {workers} worker(s): {args.count / seconds:5.2f}/s, {seconds / args.count:5.2f} s"
        )
    one, two = best[runs[-3]], best[runs[-2]]
    print(f"  2 workers against 1, no de-dup: {one / two:.2f}x as fast")
    print(
        f"  bundles per hour per core (lessons {args.lessons}, 2 workers): {args.count / two * 3600 / 2:,.0f}"
    )
    if args.baseline:
        for workers in (1, 2):
            old = best[runs[workers - 1]]
            new = best[runs[workers + 1]]
            print(f"  speed-up over the baseline, {workers} worker(s), no de-dup: {old / new:.2f}x")
    print("Every run gave the same gradebook (outcome, status and points of every row).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
