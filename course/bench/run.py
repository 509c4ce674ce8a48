"""`course bench N`: time a passing lesson's function against the reference solution and, when
PyTorch is installed, against torch's own attention, with GFLOP/s beside this machine's matmul
rate, and for lesson 13 the peak memory beside the full-matrix attention of lesson 3.

The learner's code runs only in the course's worker
(``course.engine.calls.learner_module.LearnerModule``), on a copy of their lesson files plus
``course.bench.harness``, which times the calls in that process: learner code could forge
those numbers (or slow the reference down from a thread it leaves running), which would only
fool the learner (a bench grades nothing). The reference runs the same way on a copy of the
solutions, in a worker with no learner code; the matmul rate and torch are timed here.
Rows are plain data; ``course.render.bench`` draws them.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from course.bench import pytorch
from course.bench.advice import FULL, REFERENCE, TORCH, YOURS, Row, advise
from course.content import resources
from course.content.catalog import Catalog, Lesson
from course.engine.results import PASSED
from course.workspace.session import Session

HARNESS = "course_bench_harness"
PROBE = 16  # tokens (the cached length for lesson 9) of the heads probe
BUDGET = 0.2  # seconds of timed calls per function and size, after one warm-up call


class BenchProblem(Exception):
    """Why the bench cannot run or finish: one line for the learner."""


class BadSizes(BenchProblem):
    """``--sizes`` is not a list of lengths the bench takes (a usage error)."""


@dataclass(frozen=True)
class Plan:
    """What the bench times for one lesson: ``function`` (the harness's ``kind``) at each size
    n of ``sizes`` (``dims(n)``), and, with ``heads_probe``, at ``PROBE`` tokens with its heads
    and with 4x the heads: at so few tokens a Python loop over heads costs most, and how time
    grows with H, beside how the reference's grows, tells one (read by the advice)."""

    function: str
    kind: str
    dims: Callable[[int], dict[str, int]]
    sizes: tuple[int, ...]
    largest: int
    heads_probe: bool = True


PLANS = (
    Plan("multi_head_attention", "mha", lambda n: {"B": 2, "T": n, "D": 128, "H": 8}, (128, 256), 1024),
    Plan(
        "grouped_query_attention",
        "gqa",
        lambda n: {"B": 2, "T": n, "D": 128, "H": 8, "G": 2},
        (128, 256),
        1024,
    ),
    Plan("decode_step", "decode", lambda n: {"B": 4, "S": n, "D": 128, "H": 8, "G": 2}, (256, 2048), 16384),
    Plan(
        "online_softmax_attention",
        "online",
        lambda n: {"B": 1, "H": 4, "T": n, "K": 64},
        (256, 1024),
        2048,
        heads_probe=False,
    ),
)
FULL_FUNCTION = "scaled_dot_product_attention"  # the full-matrix attention lesson 13 is measured against


def _lesson_with(catalog: Catalog, function: str) -> Lesson:
    """The lesson whose exercise ``function`` is: lessons are found by their catalog, never named."""
    lesson = next((lesson for lesson in catalog.lessons if lesson.exercise(function)), None)
    if lesson is None:
        raise BenchProblem(f"No lesson of the catalog has the exercise {function}.")
    return lesson


@dataclass
class BenchReport:
    lesson: Lesson
    rows: list[Row]
    matmul_gflops: float
    advice: str
    torch_version: str | None

    def to_dict(self) -> dict:
        return {
            "lesson": self.lesson.id,
            "matmul_gflops": round(self.matmul_gflops, 2),
            "torch": self.torch_version,
            "rows": [asdict(row) for row in self.rows],
            "advice": self.advice,
        }


def plan_for(session: Session, lesson: Lesson) -> Plan:
    """The lesson's plan, or BenchProblem when it has none or has not passed."""
    plan = next((plan for plan in PLANS if lesson.exercise(plan.function)), None)
    if plan is None:
        *first, last = (str(_lesson_with(session.catalog, each.function).number) for each in PLANS)
        numbers = f"{', '.join(first)} and {last}"
        raise BenchProblem(f"Lesson {lesson.id} has no bench: `course bench` times lessons {numbers}.")
    if session.state.status(lesson.module) != PASSED:
        raise BenchProblem(
            f"Lesson {lesson.id} has not passed yet: the bench times a passing lesson. "
            f"`course check {lesson.number}` first."
        )
    return plan


def parse_sizes(text: str | None, plan: Plan) -> tuple[int, ...]:
    """``--sizes 128,512`` as sequence lengths (T; for the KV cache, the cached length S)."""
    if text is None:
        return plan.sizes
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or len(sizes) > 6 or not all(8 <= n <= plan.largest for n in sizes):
        raise BadSizes(
            f"--sizes takes 1 to 6 comma-separated lengths from 8 to {plan.largest}, e.g. "
            f"{','.join(map(str, plan.sizes))}; got {text!r}."
        )
    return sizes


def flops(kind: str, dims: dict[str, int]) -> float:
    """Multiply-adds (x2) of the attention computation: projections and the two products with
    the keys and the values (the softmax is not counted)."""
    d, h = dims.get("D", 0), dims["H"]
    k = dims.get("K") or d // h
    g = dims.get("G", h)
    if kind in ("online", "full"):
        return 4.0 * dims["B"] * h * dims["T"] * dims["T"] * k
    if kind == "decode":
        b, s = dims["B"], dims["S"] + 1
        return 2.0 * b * d * (2 * h * k + 2 * g * k) + 4.0 * b * h * s * k
    b, t = dims["B"], dims["T"]
    return 2.0 * b * t * d * (2 * h * k + 2 * g * k) + 4.0 * b * h * t * t * k


def matmul_gflops(n: int = 512, budget: float = 0.2) -> float:
    """This machine's float32 matmul rate: the best of (n, n) @ (n, n) products for about
    ``budget`` seconds (the best, as other work on the machine only ever slows one down)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    best, started, tries = math.inf, time.perf_counter(), 0
    while tries < 3 or (time.perf_counter() - started < budget and tries < 100):
        tries += 1
        before = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - before)
    return 2.0 * n**3 / max(best, 1e-9) / 1e9


def size_label(dims: dict[str, int]) -> str:
    return " ".join(f"{key}={value}" for key, value in dims.items())


def _cases(plan: Plan, sizes: tuple[int, ...]) -> list[tuple[dict[str, int], bool]]:
    """Each size, then the two sizes of the heads probe (``Plan``)."""
    cases = [(plan.dims(n), False) for n in sizes]
    if plan.heads_probe:
        narrow = plan.dims(PROBE)
        wide = {key: value * 4 if key in ("H", "G") else value for key, value in narrow.items()}
        cases += [(narrow, True), (wide, True)]
    return cases


def _seconds(reply: object) -> tuple[list[float], int | None]:
    """The harness's reply as numbers, or BenchProblem (learner code can reply anything)."""
    seconds = reply.get("seconds") if isinstance(reply, dict) else None
    peak = reply.get("peak_bytes") if isinstance(reply, dict) else None
    if (
        not isinstance(seconds, list)
        or not seconds
        or not all(type(s) is float and 0 < s < 1e4 for s in seconds)
        or not (peak is None or (type(peak) is int and 0 <= peak < 2**50))
    ):
        raise BenchProblem(
            "The bench's timings came back malformed: does your code change the course's modules?"
        )
    return seconds, peak


class _Worker:
    """A course worker running the harness beside a copy of the lesson files of ``folder``."""

    def __init__(self, folder: Path, impl: str) -> None:
        from course.engine.calls import learner_module

        self.impl = impl
        self.scratch = Path(tempfile.mkdtemp(prefix="course-bench-"))
        try:
            for source in folder.glob("*.py"):
                shutil.copyfile(source, self.scratch / source.name)
            shutil.copyfile(Path(__file__).with_name("harness.py"), self.scratch / f"{HARNESS}.py")
            self.module = learner_module.LearnerModule(self.scratch, HARNESS)
        except BaseException:
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise

    def row(
        self, lesson: Lesson, plan: Plan, dims: dict[str, int], probe: bool, kind: str, module: str
    ) -> Row:
        """Time ``kind`` at ``dims``: the function of the lesson file ``module``."""
        from course.engine.calls import errors

        name = FULL_FUNCTION if kind == "full" else plan.function
        # Each size gets the call limit; the limit of a whole check does not apply to a bench.
        self.module.deadline = time.monotonic() + self.module.limits.run_seconds
        try:
            reply = self.module.run(kind, dims, module, budget=BUDGET, memory=plan.kind == "online")
        except errors.LearnerTimeout:
            limit = self.module.limits.call_seconds
            raise BenchProblem(
                f"{name} ({self.impl}) took longer than the bench's {limit:g} s at {size_label(dims)} "
                "(a warm-up call and at least 3 timed ones): try smaller --sizes, or look for a loop "
                "that never ends."
            ) from None
        except errors.LearnerProblem as problem:
            raise BenchProblem(
                f"{name} ({self.impl}) failed in the bench at {size_label(dims)}: {problem}"
            ) from None
        seconds, peak = _seconds(reply)
        return _row(lesson, name, dims, self.impl, kind, seconds, peak, probe)

    def close(self) -> None:
        self.module.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _row(
    lesson: Lesson,
    name: str,
    dims: dict[str, int],
    impl: str,
    kind: str,
    seconds: list[float],
    peak: int | None = None,
    probe: bool = False,
) -> Row:
    median = statistics.median(seconds)
    gflops = flops(kind, dims) / median / 1e9
    best = min(seconds) * 1e3
    return Row(lesson.id, name, size_label(dims), impl, median * 1e3, best, gflops, peak, probe, dict(dims))


def run_bench(session: Session, lesson: Lesson, sizes_text: str | None = None) -> BenchReport:
    """Time the lesson's function: the learner's, the reference's, torch's when installed.
    Each size is timed for every implementation in turn, so that a machine busy with
    something else slows them alike."""
    plan = plan_for(session, lesson)
    module = _lesson_with(session.catalog, plan.function).module
    full_module = _lesson_with(session.catalog, FULL_FUNCTION).module if plan.kind == "online" else ""
    cases = _cases(plan, parse_sizes(sizes_text, plan))
    torch = pytorch.torch_module()
    rate = matmul_gflops()
    rows: list[Row] = []
    workers: list[_Worker] = []
    try:
        workers.append(_Worker(session.workspace.root, YOURS))
        workers.append(_Worker(resources.data_dir("solutions"), REFERENCE))
        yours, reference = workers
        for dims, probe in cases:
            rows.append(yours.row(lesson, plan, dims, probe, plan.kind, module))
            rows.append(reference.row(lesson, plan, dims, probe, plan.kind, module))
            if plan.kind == "online":
                full = reference.row(lesson, plan, dims, probe, "full", full_module)
                rows.append(dataclasses.replace(full, impl=FULL))
            if torch is not None and not probe:
                seconds = pytorch.time_torch(torch, plan.kind, dims, BUDGET)
                rows.append(_row(lesson, pytorch.NAMES[plan.kind], dims, TORCH, plan.kind, seconds))
    finally:
        for worker in workers:
            worker.close()
    rate = max(rate, matmul_gflops())  # again at the end: a busy machine may have slowed one
    order = [YOURS, REFERENCE, FULL, TORCH]
    rows.sort(key=lambda row: order.index(row.impl))  # stable: sizes stay in order
    version = str(getattr(torch, "__version__", "")) if torch is not None else None
    return BenchReport(lesson, rows, rate, advise(plan.function, rows), version)
