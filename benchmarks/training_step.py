"""One training step of lesson 15's reference (numpy) against one PyTorch CPU step of the same
model, as ratios to the PyTorch float64 step timed in the same rounds.

The model is the tiny model of course.tiny_model.config() (V 32, L 24, D 64, H 4, 2 layers),
started by the reference's init_model, on a batch of 64 sequences of the copy task, in float64,
one thread everywhere (torch.set_num_threads(1) and the BLAS variables of
course/engine/sandbox/limits.py's ONE_THREAD). The rows:

  reference step, memory kept     model_gradients + adamw_step of solutions/l15_training.py, in a
                                  process that first calls keep_freed_memory()
                                  (course/engine/sandbox/worker/allocator.py: glibc keeps freed
                                  blocks up to 32 MiB), as an experiment's worker runs learner code
  reference step, glibc defaults  the same in a process with the C library's default thresholds
  reference train(), per step     the whole train() of the reference divided by its steps (a new
                                  make_task batch and the schedule each step), both ways
  torch float64                   the same model in PyTorch (tools/train_tiny_model.py's TinyModel,
                                  .double()): forward, F.cross_entropy(ignore_index=-1), zero_grad,
                                  backward, torch.optim.AdamW.step(); glibc defaults
  torch float32                   the same in float32, the precision PyTorch trains in

Four processes, started once and warmed up: the reference with memory kept, the reference with
glibc's defaults (each also times its train()), torch float64 and torch float32. In every round
each row times a block of --steps steps, one row after the other, never two at once, in an order
that rotates from round to round, so that all rows see the same machine state. Reported per row:
the median over the rounds of a block's time per step and its ratio to torch float64's median,
and the same for the minimum (steadier on a busy machine). Target: the reference step with
memory kept <= 1.0x a PyTorch float64 step, by the medians.

    python benchmarks/training_step.py [--rounds 15] [--steps 10] [--batch 64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.0
ROWS = {
    "numpy-kept": "reference step, memory kept",
    "numpy": "reference step, glibc defaults",
    "train-kept": "reference train() per step, memory kept",
    "train": "reference train() per step, glibc defaults",
    "torch64": "torch float64",
    "torch32": "torch float32",
}
LR, SEED, DATA_SEED = 3e-3, 0, 10_000


# ---------------------------------------------------------------- the worker side (one process)
def numpy_worker(batch: int, kept: bool):
    """(step(n), train(n)) timing n steps of the reference, each returning seconds per step."""
    if kept:
        from course.engine.sandbox.worker.allocator import keep_freed_memory

        if not keep_freed_memory():
            raise SystemExit("keep_freed_memory() refused: not glibc?")
    sys.path.insert(0, str(REPO / "solutions"))
    import l15_training as sol

    from course import tiny_model

    config = tiny_model.config()
    H = config["n_heads"]
    tokens, targets, _ = tiny_model.make_task(batch, DATA_SEED)
    state = {"model": sol.init_model(config, SEED), "optimizer": None, "step": 0}

    def step(n: int) -> float:
        model, optimizer = state["model"], state["optimizer"]
        started = time.perf_counter()
        for _ in range(n):
            _, grads = sol.model_gradients(model, tokens, targets, H)
            model, optimizer = sol.adamw_step(model, grads, optimizer, LR)
        elapsed = time.perf_counter() - started
        state["model"], state["optimizer"] = model, optimizer
        return elapsed / n

    def train(n: int) -> float:
        started = time.perf_counter()
        model, _, optimizer = sol.train(
            state["model"], n, batch, LR, DATA_SEED, H, state=state["optimizer"], start_step=state["step"]
        )
        elapsed = time.perf_counter() - started
        state["model"], state["optimizer"], state["step"] = model, optimizer, state["step"] + n
        return elapsed / n

    return step, train


def torch_worker(batch: int, dtype_name: str):
    """step(n) timing n PyTorch steps of the same model, seconds per step."""
    import numpy as np
    import torch

    sys.path.insert(0, str(REPO / "solutions"))
    import l15_training as sol

    from course import tiny_model
    from tools.train_tiny_model import TinyModel

    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    config = tiny_model.config()
    model = TinyModel(**config).to(dtype)
    start = sol.init_model(config, SEED)  # the reference's first weights
    with torch.no_grad():
        for name in ("tok_emb", "pos_emb", "unembed", "b_unembed"):
            getattr(model, name).copy_(torch.from_numpy(start[name]))
        for layer, weights in zip(model.layers, start["layers"], strict=True):
            for key, value in weights.items():
                layer[key].copy_(torch.from_numpy(value))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    tokens, targets, _ = tiny_model.make_task(batch, DATA_SEED)
    tokens, targets = torch.from_numpy(tokens), torch.from_numpy(np.ascontiguousarray(targets.reshape(-1)))
    V = config["vocab_size"]

    def step(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            logits, _ = model(tokens)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, V), targets, ignore_index=tiny_model.IGNORE
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return (time.perf_counter() - started) / n

    return step, None


def serve(kind: str, batch: int) -> None:
    """Answer "step N" / "train N" lines on stdin with one JSON line of seconds per step."""
    sys.path.insert(0, str(REPO))
    if kind.startswith("numpy"):
        step, train = numpy_worker(batch, kept=kind == "numpy-kept")
    else:
        step, train = torch_worker(batch, "float64" if kind == "torch64" else "float32")
    print(json.dumps({"ready": kind}), flush=True)
    for line in sys.stdin:
        what, n = line.split()
        seconds = (step if what == "step" else train)(int(n))
        print(json.dumps({"seconds": seconds}), flush=True)


# ---------------------------------------------------------------- the parent side
def one_thread_env() -> dict[str, str]:
    sys.path.insert(0, str(REPO))
    from course.engine.sandbox.limits import ONE_THREAD

    env = dict(os.environ, **ONE_THREAD)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


class Worker:
    def __init__(self, kind: str, batch: int, env: dict[str, str]):
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, "--batch", str(batch)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        self.ask_line()  # {"ready": kind}

    def ask_line(self, line: str | None = None) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        if line is not None:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise SystemExit(f"a worker ended early (exit {self.process.wait()})")
        return json.loads(answer)

    def time(self, what: str, steps: int) -> float:
        return float(self.ask_line(f"{what} {steps}")["seconds"])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument(
        "--worker", choices=["numpy-kept", "numpy", "torch64", "torch32"], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        serve(args.worker, args.batch)
        return 0

    env = one_thread_env()
    workers = {kind: Worker(kind, args.batch, env) for kind in ("numpy-kept", "numpy", "torch64", "torch32")}
    # (row, worker, what): the numpy processes time both their step and their whole train()
    jobs = [
        ("numpy-kept", "numpy-kept", "step"),
        ("numpy", "numpy", "step"),
        ("train-kept", "numpy-kept", "train"),
        ("train", "numpy", "train"),
        ("torch64", "torch64", "step"),
        ("torch32", "torch32", "step"),
    ]
    samples: dict[str, list[float]] = {row: [] for row in ROWS}
    try:
        for _, kind, what in jobs:  # warm-up: first calls, caches, the allocator's pools
            workers[kind].time(what, 3)
        for round_ in range(args.rounds):
            shift = round_ % len(jobs)
            for row, kind, what in jobs[shift:] + jobs[:shift]:
                samples[row].append(workers[kind].time(what, args.steps))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for worker in workers.values():
            worker.close()
    report(samples, args)
    return 0


def report(samples: dict[str, list[float]], args: argparse.Namespace) -> None:
    from course import tiny_model

    c = tiny_model.config()
    print(
        f"training step of the tiny model (V {c['vocab_size']}, L {c['max_len']}, D {c['d_model']}, "
        f"H {c['n_heads']}, {c['n_layers']} layers), batch {args.batch}, one thread; per step over "
        f"{args.rounds} rounds of {args.steps} steps: the median, and the minimum; each as a ratio "
        "to torch float64's"
    )
    medians = {row: statistics.median(times) for row, times in samples.items()}
    least = {row: min(times) for row, times in samples.items()}
    for row, label in ROWS.items():
        print(
            f"  {label:42s} {medians[row] * 1e3:7.2f} ms {medians[row] / medians['torch64']:5.2f}x"
            f"   min {least[row] * 1e3:6.2f} ms {least[row] / least['torch64']:5.2f}x"
        )
    ratio = medians["numpy-kept"] / medians["torch64"]
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"target: reference step with memory kept <= {TARGET:g}x torch float64: {ratio:.2f}x, {verdict}")


if __name__ == "__main__":
    sys.exit(main())
