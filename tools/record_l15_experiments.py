"""Record the reference figures of lesson 15's experiments: course/tiny_model/l15_experiments.json.

    python tools/record_l15_experiments.py              # about 5 minutes on 2 cores
    python tools/record_l15_experiments.py --seeds 8    # the heads runs of seeds 0 .. 7
    python tools/record_l15_experiments.py --check      # a short prefix against the file (seconds)
    python tools/record_l15_experiments.py --mistakes   # uptraining with each classic mistake (12 min)

Runs both experiments of tests/lessons/pictures_l15_training.py with the reference solution
(solutions/, imported here: no worker, the same numpy code the worker would run): "uptraining"
(the shipped model converted by lesson 12's convert_model, uptrained 400 steps per G and method)
and "heads" (trained from init_model) for every seed 0 .. SEEDS-1, none left out. The experiments
show these figures beside the learner's. ``--check`` reruns a short prefix of both (50
uptraining steps of G = 2 mean, the heads run of seed 0 to its first measurement) and compares it
with the file, writing nothing: tests/test_l15_experiments.py runs it, so the recorded figures
cannot drift from the solution unnoticed. ``--mistakes`` runs the uptraining with each classic
mistake of tests/mistakes/l15_training.toml applied to the solution and prints how far each lands
from PyTorch's figures: the measurement behind the experiment's TOLERANCE.

The file lives beside the weights it was measured on (course/tiny_model, with the shipped
PyTorch figures of gqa_uptraining.json): it is data about the shipped model read through
importlib.resources, not a grading input, so it stays out of the hashed grading folder. Float64,
one thread per process, glibc keeping freed memory as an experiment's worker does: a rerun on
the same numpy build writes the same numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course.engine.sandbox.limits import ONE_THREAD  # noqa: E402

if __name__ == "__main__":  # (not when a test imports it)
    os.environ.update(ONE_THREAD)  # before numpy loads its BLAS: one thread, as the worker runs

import numpy as np  # noqa: E402

from course import tiny_model  # noqa: E402
from course.engine.sandbox.worker import allocator  # noqa: E402

PICTURES = ROOT / "tests" / "lessons" / "pictures_l15_training.py"
SOLUTIONS = ROOT / "solutions"
OUT = ROOT / "course" / "tiny_model" / "l15_experiments.json"
SEEDS = 5
CHECK_STEPS = 50  # --check: the uptraining steps rerun
ROUNDING = 1e-4 + 1e-9  # the recorded figures have 4 decimals


def pictures() -> ModuleType:
    """The lesson's pictures module, loaded from its file as the engine loads it."""
    spec = importlib.util.spec_from_file_location("course_pictures_l15_training", PICTURES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up here
    spec.loader.exec_module(module)
    return module


def solutions(*modules: str, folder: Path = SOLUTIONS) -> tuple[ModuleType, ...]:
    """The lesson modules of ``folder`` (the reference solution), imported by name as a
    learner's are."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    import importlib

    return tuple(importlib.import_module(name) for name in modules)


def quiet(done: float, total: float, status: str = "") -> None:
    """An experiment's progress, unprinted."""


def uptraining(_: Any = None) -> tuple[list[dict], float]:
    """The "uptraining" runs of the reference solution, and their seconds."""
    allocator.keep_freed_memory()
    lesson_15, lesson_12 = solutions("l15_training", "l12_gqa_conversion")
    start = time.perf_counter()
    runs = pictures().uptraining_runs(lesson_15, quiet, lesson_12=lesson_12)
    return runs, time.perf_counter() - start


def heads(seed: int) -> tuple[dict, float]:
    """The "heads" run of the reference solution from ``seed``, and its seconds."""
    allocator.keep_freed_memory()
    (lesson_15,) = solutions("l15_training")
    module = pictures()
    start = time.perf_counter()
    run = module.heads_run(lesson_15, quiet, module.HeadsPlan(seed=seed))
    return run, time.perf_counter() - start


def record(seeds: int, jobs: int) -> dict:
    """Both experiments' reference figures (the heads runs of seeds 0 .. seeds-1)."""
    module = pictures()
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        pending = pool.map_async(uptraining, [None])
        runs = pool.map(heads, range(seeds))
        (uptrained, seconds), *_ = pending.get()
    print(f"uptraining: {seconds:.0f} s", flush=True)
    for (run, took), seed in zip(runs, range(seeds), strict=True):
        print(f"heads, seed {seed}: {took:.0f} s, accuracy {run['accuracy'][-1]:.3f}", flush=True)
    plan = asdict(module.HEADS)
    plan.pop("seed")
    return {
        "what": (
            "lesson 15's experiments run with the reference solution (float64 numpy): 'uptraining' the "
            "shipped model converted by lesson 12's convert_model and uptrained with tools/uptrain_gqa.py's "
            "recipe, accuracy and loss on the model card's evaluation sequences; 'heads' the model trained "
            "from init_model of each seed, per head in card order (layer by layer) the card's role, "
            "confidence, previous-token share and copy share at each step"
        ),
        "tool": "tools/record_l15_experiments.py",
        "weights_sha256": hashlib.sha256(
            (ROOT / "course" / "tiny_model" / "weights.npz").read_bytes()
        ).hexdigest(),
        "numpy": np.__version__,
        "eval": tiny_model.card()["eval"],
        "uptraining": {"plan": asdict(module.UPTRAINING), "runs": uptrained},
        "heads": {"plan": plan, "runs": [run for run, _ in runs]},
    }


def drift(path: Path) -> list[str]:
    """A short prefix of both experiments rerun with the reference solution, against the figures
    recorded in ``path``: one line per figure that differs by more than their rounding."""
    allocator.keep_freed_memory()
    module = pictures()
    lesson_15, lesson_12 = solutions("l15_training", "l12_gqa_conversion")
    recorded = json.loads(path.read_text(encoding="utf-8"))
    plan = replace(module.UPTRAINING, kv_heads=(2,), methods=("mean",), until=CHECK_STEPS)
    (run,) = module.uptraining_runs(lesson_15, quiet, plan, lesson_12=lesson_12)
    (want,) = [r for r in recorded["uptraining"]["runs"] if (r["n_kv_heads"], r["method"]) == (2, "mean")]
    problems = differences("uptraining G = 2 mean", run["curve"], want["curve"][: len(run["curve"])])
    heads = module.heads_run(lesson_15, quiet, replace(module.HEADS, until=module.HEADS.every))
    (seed,) = [r for r in recorded["heads"]["runs"] if r["seed"] == module.HEADS.seed]
    return problems + differences(f"heads seed {seed['seed']}", heads, prefix(seed, len(heads["steps"])))


def prefix(value: Any, n: int) -> Any:
    """``value`` with every list of numbers or strings in it cut to its first ``n`` entries."""
    if isinstance(value, dict):
        return {key: prefix(item, n) for key, item in value.items()}
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        return [prefix(item, n) for item in value]
    return value[:n] if isinstance(value, list) else value


def differences(where: str, got: Any, want: Any) -> list[str]:
    """Where ``got`` and ``want`` (JSON-like) differ: numbers by more than ROUNDING, else at all."""
    if isinstance(want, dict) and isinstance(got, dict) and got.keys() == want.keys():
        return [line for key in want for line in differences(f"{where} {key}", got[key], want[key])]
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return [
            line
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for line in differences(f"{where}[{i}]", g, w)
        ]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (got, want))
    if (numbers and abs(got - want) <= ROUNDING) or (not numbers and got == want):
        return []
    return [f"{where}: {got!r} now, {want!r} recorded"]


def mistaken(name: str) -> tuple[str, float]:
    """The largest |accuracy - PyTorch's| over the uptraining runs and checkpoints with the
    solution carrying the classic mistake ``name`` (NaN when it raises). Run in a fresh process
    (a pool's child): its lesson modules are imported from a folder of its own."""
    from tests.helpers import mistaken_source

    allocator.keep_freed_memory()
    module = pictures()
    with tempfile.TemporaryDirectory(prefix="l15-mistake-") as scratch:
        folder = Path(scratch)
        shutil.copytree(SOLUTIONS, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / "l15_training.py").write_text(mistaken_source("l15_training", name), encoding="utf-8")
        lesson_15, lesson_12 = solutions("l15_training", "l12_gqa_conversion", folder=folder)
        try:
            runs = module.uptraining_runs(lesson_15, quiet, lesson_12=lesson_12)
        except Exception:  # noqa: BLE001 - a mistake may raise anything: that is its outcome
            return name, math.nan
    shipped = json.loads((ROOT / "course" / "tiny_model" / "gqa_uptraining.json").read_text(encoding="utf-8"))
    return name, module.reference_gap(runs, shipped["runs"])


def mistakes(jobs: int) -> None:
    """Print how far the uptraining lands from PyTorch with each classic mistake of the lesson."""
    from tests.helpers import classic_mistakes

    names = [mistake["name"] for lesson, mistake in classic_mistakes() if lesson == "l15_training"]
    with multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=1) as pool:
        found = pool.map(mistaken, names, chunksize=1)
    tolerance = pictures().TOLERANCE
    for name, gap in sorted(found, key=lambda pair: -math.inf if math.isnan(pair[1]) else pair[1]):
        verdict = "raises" if math.isnan(gap) else "outside" if gap > tolerance else "within"
        print(f"{gap:8.4f}  {verdict:7s}  {name}")


def dumps(value: Any, indent: int = 0) -> str:
    """JSON with one entry per line, except that a list of numbers or strings, and a short dict
    of them (a curve's point), stay on one line."""
    pad = " " * (indent + 1)
    flat = json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict) and not any(isinstance(item, (dict, list)) for item in value.values()):
        if len(flat) <= 80:
            return flat
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(key)}: {dumps(item, indent + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        return "[\n" + ",\n".join(pad + dumps(item, indent + 1) for item in value) + "\n" + " " * indent + "]"
    return json.dumps(value, ensure_ascii=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS, help="the heads runs of seeds 0 .. SEEDS-1")
    parser.add_argument("--jobs", type=int, default=2, help="processes, one thread each")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--check", action="store_true", help="compare a short prefix with --out, write nothing"
    )
    parser.add_argument("--mistakes", action="store_true", help="uptrain with each classic mistake")
    args = parser.parse_args()
    if args.mistakes:
        mistakes(args.jobs)
        return
    if args.check:
        start = time.perf_counter()
        problems = drift(args.out)
        print("\n".join(problems) or f"no drift ({time.perf_counter() - start:.1f} s)")
        raise SystemExit(1 if problems else 0)
    data = record(args.seeds, args.jobs)
    args.out.write_text(dumps(data) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
