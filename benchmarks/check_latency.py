"""How long a learner waits, as ratios to a bare `python -c "import numpy"` measured beside it.

Every command is a fresh process, timed wall-clock, all of them interleaved in each round (the
same machine state for all), medians over ``--runs`` rounds. Real work: before every timed
check or next, the lesson file it grades gets a byte-changing edit (a comment line), so no
cache can answer it; "unchanged" rows are the exception, timed right after a graded run.

  course check 3 (warm)        the warm grader answers (the first check starts it)
  course check 3 (cold)        COURSE_SERVER=off: pytest, hypothesis and numpy imported here
  course next (fresh)          a fresh workspace: grades lesson 1's skeleton, introduces it
  course list                  start-up and the lesson table
  course check --all (edited)  every lesson of a solved workspace, one file edited first
  course check --all (unchanged) the same, nothing changed since the run before
  course next (all passed)     re-grades every lesson, nothing changed: from the cache
  course watch: save to redraw one `course watch` in a pseudo-terminal, watching lesson 3: from
                               the write of the file to the end of the redrawn screen

The cache (see course/workspace/result_cache.py) and the warm grader's socket live in folders of this
run's own. Bytecode is written as on a learner's machine (PYTHONDONTWRITEBYTECODE is dropped
for the timed commands; the warm-up round writes it). Targets (issue 16): check warm <= 2x,
cold <= 5x, next <= 2x, list <= 1.5x, check --all edited <= 12x, unchanged <= 2x, next (all
passed) no slower than unchanged --all.

With --baseline REF the same commands also run with the course as of that commit (exported
with `git archive`, on PYTHONPATH, its own warm grader), in the same rounds.

    python benchmarks/check_latency.py [--runs 11] [--skip-all] [--baseline 80f4076]

Every lesson's check, passing and with each classic mistake, the grader's own time apart from the
learner's calls: `--per-lesson` (benchmarks/lesson_latency.py, which takes the same --runs and
--baseline, and --lessons 3,11 / --no-mistakes).
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

from trees import baseline_tree, wait_for_warm_grader

REPO = Path(__file__).resolve().parent.parent
COURSE = [sys.executable, "-m", "course"]
BARE = "python -c 'import numpy'"
WATCH = "course watch: save to redraw"


def wall(command: list[str], cwd: Path, env: dict) -> float:
    started = time.perf_counter()
    quiet = subprocess.DEVNULL
    subprocess.run(command, cwd=cwd, stdout=quiet, stderr=quiet, check=False, env=env)
    return time.perf_counter() - started


def touch(path: Path) -> None:
    """A byte-changing edit: one more comment line at the end."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"# edited {time.time_ns()}\n")


class Watch:
    """`course watch` in a pseudo-terminal: ``redraw_after_save`` edits the lesson file and
    times until the screen is redrawn (its last line, "N of M lessons passed", printed anew)."""

    END = b"lessons passed"

    def __init__(self, workspace: Path, lesson_file: Path, env: dict) -> None:
        import fcntl
        import pty
        import struct
        import termios

        self.lesson_file = lesson_file
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 100, 0, 0))
        self.process = subprocess.Popen(
            [*COURSE, "watch"],
            cwd=workspace,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=dict(env, TERM="xterm-256color"),
            start_new_session=True,
        )
        os.close(slave)
        self._wait_for(self.END, 120)

    def _wait_for(self, marker: bytes, timeout: float) -> None:
        import select

        seen = b""
        deadline = time.perf_counter() + timeout
        while marker not in seen:
            left = deadline - time.perf_counter()
            ready, _, _ = select.select([self.master], [], [], max(left, 0))
            if not ready:
                raise TimeoutError(f"course watch did not draw {marker!r} within {timeout} s")
            seen = (seen + os.read(self.master, 1 << 16))[-4096:]

    def _drain(self) -> None:
        import select

        while select.select([self.master], [], [], 0.05)[0]:
            os.read(self.master, 1 << 16)

    def redraw_after_save(self) -> float:
        self._drain()
        started = time.perf_counter()
        touch(self.lesson_file)
        self._wait_for(self.END, 60)
        return time.perf_counter() - started

    def close(self) -> None:
        try:
            os.write(self.master, b"q")
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
        os.close(self.master)


def main() -> int:
    if "--per-lesson" in sys.argv[1:]:
        import lesson_latency

        sys.argv.remove("--per-lesson")
        return lesson_latency.main()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--skip-all", action="store_true", help="leave out the --all and all-passed rows")
    parser.add_argument("--baseline", metavar="GITREF", help="also time the course as of this commit")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="course-bench-", dir="/tmp"))
    env = dict(os.environ, XDG_CACHE_HOME=str(root / "cache"), XDG_RUNTIME_DIR=str(root / "run"))
    env.pop("COURSE_SERVER", None)
    env.pop("COURSE_CACHE", None)
    # A learner's Python writes the course's bytecode on its first run (a wheel's install does
    # it at once); a machine set never to write it (PYTHONDONTWRITEBYTECODE, as some CI images
    # are) would recompile the course on every command. The warm-up round below writes it.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    (root / "run").mkdir(mode=0o700)
    cold = dict(env, COURSE_SERVER="off")
    times: dict[str, list[float]] = {}
    try:
        for name in ("solved", "fresh", "all", "watched"):
            subprocess.run([*COURSE, "init", name], cwd=root, check=True, capture_output=True, env=env)
        for module in ("l01_projections", "l02_softmax", "l03_attention"):
            shutil.copy(REPO / "solutions" / f"{module}.py", root / "solved")
        for solution in (REPO / "solutions").glob("l*.py"):
            shutil.copy(solution, root / "all")
        for number, module in enumerate(("l01_projections", "l02_softmax", "l03_attention"), 1):
            shutil.copy(REPO / "solutions" / f"{module}.py", root / "watched")
            if number < 3:  # lessons 1 and 2 passed: `course watch` watches lesson 3
                subprocess.run(
                    [*COURSE, "check", str(number)], cwd=root / "watched", capture_output=True, env=env
                )
        check = subprocess.run([*COURSE, "check", "3"], cwd=root / "solved", capture_output=True, env=env)
        if check.returncode != 0:
            print("course check 3 did not pass on the solved workspace:\n" + check.stdout.decode())
            return 2
        os.environ.update(XDG_RUNTIME_DIR=env["XDG_RUNTIME_DIR"])
        from course.engine.warm import client

        if not client.ready(timeout=120):  # the check above started it
            print("the warm grader did not start")
            return 2
        l03, l01 = root / "solved" / "l03_attention.py", root / "fresh" / "l01_projections.py"
        l06 = root / "all" / "l06_multi_head.py"
        rows: list[tuple[str, list[str], Path, dict, Path | None]] = [
            (BARE, [sys.executable, "-c", "import numpy"], root, env, None),
            ("course check 3 (warm)", [*COURSE, "check", "3"], root / "solved", env, l03),
            ("course check 3 (cold)", [*COURSE, "check", "3"], root / "solved", cold, l03),
            ("course next (fresh)", [*COURSE, "next"], root / "fresh", env, l01),
            ("course list", [*COURSE, "list"], root / "fresh", env, None),
        ]
        if not args.skip_all:
            rows += [
                ("course check --all (edited)", [*COURSE, "check", "--all"], root / "all", env, l06),
                ("course check --all (unchanged)", [*COURSE, "check", "--all"], root / "all", env, None),
                ("course next (all passed)", [*COURSE, "next"], root / "all", env, None),
            ]
        if args.baseline:  # the same commands with the course as of that commit, in each round
            tree = baseline_tree(args.baseline, root / "baseline")
            old = dict(env, PYTHONPATH=str(tree))
            subprocess.run([*COURSE, "check", "3"], cwd=root / "solved", capture_output=True, env=old)
            wait_for_warm_grader(old)
            rows += [
                (
                    f"{name} [{args.baseline}]",
                    command,
                    cwd,
                    old if environment is env else dict(cold, **old),
                    edited,
                )
                for name, command, cwd, environment, edited in rows[1:]
            ]
        for _, command, cwd, environment, edited in rows:  # warm the file cache and bytecode
            if edited:
                touch(edited)
            wall(command, cwd, environment)
        times = {name: [] for name, *_ in rows}
        watch = Watch(root / "watched", root / "watched" / "l03_attention.py", env)
        times[WATCH] = []
        try:
            for round_ in range(args.runs):
                for name, command, cwd, environment, edited in rows:
                    if edited:
                        touch(edited)
                    times[name].append(wall(command, cwd, environment))
                times[WATCH].append(watch.redraw_after_save())
                print(f"round {round_ + 1}/{args.runs} done", file=sys.stderr)
        finally:
            watch.close()
        client.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(times)
    return 0


TARGETS = {
    "course check 3 (warm)": 2.0,
    "course check 3 (cold)": 5.0,
    "course next (fresh)": 2.0,
    "course list": 1.5,
    "course check --all (edited)": 12.0,
    "course check --all (unchanged)": 2.0,
    WATCH: 2.0,
}


def report(times: dict[str, list[float]]) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    bare = medians[BARE]
    print(f"{'command':32s} {'median':>9s} {'min':>9s} {'ratio':>7s}  target")
    for name, value in medians.items():
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            verdict = f"<= {target:g}x {'met' if value / bare <= target else 'MISSED'}"
        print(
            f"{name:32s} {value * 1000:7.0f}ms {min(times[name]) * 1000:7.0f}ms "
            f"{value / bare:6.2f}x  {verdict}"
        )
    if "course next (all passed)" in medians:
        slower = medians["course next (all passed)"] / medians["course check --all (unchanged)"]
        print(f"course next (all passed) / check --all (unchanged): {slower:.2f} (target <= 1, noise aside)")


if __name__ == "__main__":
    sys.exit(main())
