"""How long a learner waits: `course check 3` on a solved workspace vs a bare numpy import.

All commands are measured side by side in one run (interleaved, same machine state), as wall
time of a fresh process each, and reported as medians and ratios. `course check 3` is measured
twice: as a learner gets it (the warm grader, which the first check starts, answers) and cold
(COURSE_SERVER=off: pytest, hypothesis and numpy imported by the command itself). Also times the
start-up of `course list` and `course next` (fresh workspace: lesson 1 not started).

    python benchmarks/check_latency.py [--runs 15]

Targets (issue 2): check median <= 0.8 s and <= 4x the bare import; list/next < 0.35 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COURSE = [sys.executable, "-m", "course"]


COLD = dict(os.environ, COURSE_SERVER="off")


def wall(command: list[str], cwd: Path, env: dict | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(
        command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="course-bench-"))
    try:
        subprocess.run([*COURSE, "init", "solved"], cwd=root, check=True, capture_output=True)
        subprocess.run([*COURSE, "init", "fresh"], cwd=root, check=True, capture_output=True)
        for module in ("l01_projections", "l02_softmax", "l03_attention"):
            shutil.copy(REPO / "solutions" / f"{module}.py", root / "solved")
        check = subprocess.run([*COURSE, "check", "3"], cwd=root / "solved", capture_output=True)
        if check.returncode != 0:
            print("course check 3 did not pass on the solved workspace:\n" + check.stdout.decode())
            return 2
        from course.engine import server

        if not server.ready(timeout=120):  # the check above started it
            print("the warm grader did not start; is COURSE_SERVER=off set?")
            return 2
        commands = {
            "python -c 'import numpy'": ([sys.executable, "-c", "import numpy"], root, None),
            "course check 3 (solved)": ([*COURSE, "check", "3"], root / "solved", None),
            "course check 3 (cold)": ([*COURSE, "check", "3"], root / "solved", COLD),
            "course list": ([*COURSE, "list"], root / "fresh", None),
            "course next (fresh)": ([*COURSE, "next"], root / "fresh", None),
        }
        for command, cwd, env in commands.values():  # warm the file cache and bytecode
            wall(command, cwd, env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, (command, cwd, env) in commands.items():
                times[name].append(wall(command, cwd, env))
        server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:28s} median {value * 1000:7.1f} ms   (min {min(times[name]) * 1000:.1f} ms)")
    bare, check_3 = medians["python -c 'import numpy'"], medians["course check 3 (solved)"]
    ratio = check_3 / bare
    print(
        f"\ncourse check 3 / bare numpy import: {ratio:.2f}x "
        f"(cold, without the warm grader: {medians['course check 3 (cold)'] / bare:.2f}x)"
    )
    verdicts = [
        ("check median <= 0.8 s", check_3 <= 0.8),
        ("check <= 4x bare import", ratio <= 4.0),
        ("course list < 0.35 s", medians["course list"] < 0.35),
        ("course next < 0.35 s", medians["course next (fresh)"] < 0.35),
    ]
    for label, ok in verdicts:
        print(f"  {'met ' if ok else 'MISSED'}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
