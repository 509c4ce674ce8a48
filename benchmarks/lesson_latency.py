"""Every lesson's `course check N` after an edit, passing and with each catalogued mistake, as
ratios to a bare `python -c "import numpy"` timed in the same rounds.

A check's wall time holds the learner's own calls, so a slow wrong answer could hide a slow
grader. Each check here prints its JSON, whose ``learner_seconds`` is the time the grader spent
waiting for the learner's calls (measured by the grader, from request to reply); the grader's
own time is the wall time less that. Target (issue 25): the grader's time of every lesson within
2.5x, passing and failing.

  passing   the lesson's solution, a byte-changing edit before each timed check (no cache)
  mistakes  each classic mistake of tests/mistakes/<module>.toml applied to the solution (the
            file rewritten before each check, so nothing is cached); the median over every
            mistake and round, and the slowest mistake's median

Checks go to the warm grader, as a learner's do. With --baseline REF the passing checks also run
with the course as of that commit (its own warm grader; a commit whose results carry no
``learner_seconds`` counts all of the wall time as the grader's).

    python benchmarks/lesson_latency.py [--runs 5] [--lessons 3,11,13] [--no-mistakes] [--baseline REF]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trees import baseline_tree, stop_warm_grader, wait_for_warm_grader  # noqa: E402

from tests.helpers import classic_mistakes, mistaken_source  # noqa: E402

COURSE = [sys.executable, "-m", "course"]
TARGET = 2.5


def timed_check(number: int, cwd: Path, env: dict) -> tuple[float, float]:
    """(wall seconds, seconds inside the learner's calls) of one `course check N --json`."""
    started = time.perf_counter()
    done = subprocess.run(
        [*COURSE, "check", str(number), "--json"], cwd=cwd, env=env, capture_output=True, check=False
    )
    elapsed = time.perf_counter() - started
    try:
        learner = float(json.loads(done.stdout).get("learner_seconds", 0.0))
    except (ValueError, AttributeError):
        learner = 0.0
    return elapsed, learner


def bare_numpy() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import numpy"], check=True)
    return time.perf_counter() - started


def edit(path: Path, source: str | None = None) -> None:
    """A byte-changing rewrite: ``source`` (or the file as it is) plus a fresh comment line."""
    text = path.read_text(encoding="utf-8") if source is None else source
    path.write_text(text + f"\n# edited {time.time_ns()}\n", encoding="utf-8")


def workspace(root: Path, name: str, env: dict) -> Path:
    subprocess.run([*COURSE, "init", name], cwd=root, check=True, capture_output=True, env=env)
    for solution in (REPO / "solutions").glob("l*.py"):
        shutil.copy(solution, root / name)
    return root / name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lessons", help="lesson numbers, comma-separated (default: every lesson)")
    parser.add_argument("--no-mistakes", action="store_true", help="time the passing checks only")
    parser.add_argument("--baseline", metavar="GITREF", help="also time the course as of this commit")
    args = parser.parse_args()

    from course.content.catalog import load_catalog

    lessons = [
        (number, lesson)
        for number, lesson in enumerate(load_catalog().lessons, 1)
        if (REPO / "solutions" / lesson.file_name).is_file()
        and (not args.lessons or str(number) in args.lessons.split(","))
    ]
    mistakes = {module: [] for _, lesson in lessons for module in [lesson.module]}
    if not args.no_mistakes:
        for module, mistake in classic_mistakes():
            if module in mistakes:
                mistakes[module].append((mistake["name"], mistaken_source(module, mistake)))
    root = Path(tempfile.mkdtemp(prefix="course-lessons-", dir="/tmp"))
    env = dict(os.environ, XDG_CACHE_HOME=str(root / "cache"), XDG_RUNTIME_DIR=str(root / "run"))
    for key in ("COURSE_SERVER", "COURSE_CACHE", "PYTHONDONTWRITEBYTECODE"):
        env.pop(key, None)
    (root / "run").mkdir(mode=0o700)
    trees = {"": env}
    if args.baseline:
        tree = baseline_tree(args.baseline, root / "baseline-tree")
        trees[f" [{args.baseline}]"] = dict(env, PYTHONPATH=str(tree))
    passing: dict[str, list[tuple[float, float]]] = {}
    failing: dict[str, dict[str, list[tuple[float, float]]]] = {}
    bare: list[float] = []
    try:
        folders = {
            label: workspace(root, f"passing{i}", tree_env)
            for i, (label, tree_env) in enumerate(trees.items())
        }
        wrong = workspace(root, "mistakes", env)
        for label, tree_env in trees.items():  # starts each warm grader, writes bytecode
            timed_check(lessons[0][0], folders[label], tree_env)
            wait_for_warm_grader(tree_env)
            for number, lesson in lessons:
                edit(folders[label] / lesson.file_name)
                timed_check(number, folders[label], tree_env)
        for round_ in range(args.runs):
            for number, lesson in lessons:
                bare.append(bare_numpy())  # beside every lesson's checks, in the same state
                for label, tree_env in trees.items():
                    edit(folders[label] / lesson.file_name)
                    passing.setdefault(f"{number:02d} {lesson.module}{label}", []).append(
                        timed_check(number, folders[label], tree_env)
                    )
                for name, source in mistakes[lesson.module]:
                    edit(wrong / lesson.file_name, source)
                    failing.setdefault(lesson.module, {}).setdefault(name, []).append(
                        timed_check(number, wrong, env)
                    )
                shutil.copy(REPO / "solutions" / lesson.file_name, wrong / lesson.file_name)
            print(f"round {round_ + 1}/{args.runs} done", file=sys.stderr)
    finally:
        for tree_env in trees.values():
            stop_warm_grader(tree_env)
        shutil.rmtree(root, ignore_errors=True)
    report(statistics.median(bare), passing, failing)
    return 0


def grader(samples: list[tuple[float, float]]) -> float:
    """The median of the grader's own time (wall less the learner's calls)."""
    return statistics.median(wall - learner for wall, learner in samples)


def report(
    bare: float, passing: dict[str, list[tuple[float, float]]], failing: dict[str, dict[str, list]]
) -> None:
    print(f"bare numpy import: {bare * 1000:.0f} ms; ratios: the grader's time / that (<= {TARGET:g}x)")
    head = f"{'lesson':32s} {'wall':>7s} {'learner':>8s} {'grader':>7s} {'ratio':>6s}"
    print(head + "   mistakes: median, slowest")
    missed = 0
    for name, samples in passing.items():
        wall = statistics.median(w for w, _ in samples)
        learner = statistics.median(t for _, t in samples)
        ratio = grader(samples) / bare
        own = grader(samples)
        line = f"{name:32s} {wall * 1000:5.0f}ms {learner * 1000:6.0f}ms {own * 1000:5.0f}ms {ratio:5.2f}x"
        missed += ratio > TARGET
        module = name.split()[1]
        if module in failing and "[" not in name:
            per_mistake = {mistake: grader(s) / bare for mistake, s in failing[module].items()}
            everything = [w - t for s in failing[module].values() for w, t in s]
            slowest = max(per_mistake, key=per_mistake.__getitem__)
            median = statistics.median(everything) / bare
            line += f"   {median:5.2f}x, {per_mistake[slowest]:5.2f}x ({slowest})"
            missed += per_mistake[slowest] > TARGET
        print(line)
    print(f"over {TARGET:g}x: {missed}" if missed else f"every lesson within {TARGET:g}x")


if __name__ == "__main__":
    sys.exit(main())
