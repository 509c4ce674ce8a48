"""What `course bench` runs inside a course worker, beside the lesson files it times.

The bench copies this file into a scratch folder next to a copy of the lesson files (the
learner's, or the reference solutions) and calls ``run`` there through the course's worker, as
the grader calls a learner's function. It builds its inputs itself from a few sizes (so no
large array travels between processes), calls the lesson's function once to warm up, and
returns the wall time of each further call and, on request, the peak of the memory Python
allocated during one call (tracemalloc, which counts numpy's buffers).

It runs in the same process as the code it times, so that code could change what it reports:
a bench of the learner's code can only fool the learner, and grades nothing. It imports only
numpy and the standard library: it must run in a worker, never in the course's own process.
"""

from __future__ import annotations

import importlib
import time
import tracemalloc
from typing import Any

import numpy as np

MAX_CALLS = 50  # the replies of the course's worker hold at most 64 items


def _params(rng: np.random.Generator, d: int, hk: int, gk: int) -> dict[str, np.ndarray]:
    def weight(d_in: int, d_out: int) -> np.ndarray:
        return (rng.standard_normal((d_in, d_out)) / np.sqrt(d_in)).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (0.1 * rng.standard_normal(n)).astype(np.float32)

    return {
        "w_q": weight(d, hk),
        "w_k": weight(d, gk),
        "w_v": weight(d, gk),
        "w_o": weight(hk, d),
        "b_q": bias(hk),
        "b_k": bias(gk),
        "b_v": bias(gk),
        "b_o": bias(d),
    }


def call_for(kind: str, dims: dict[str, int], module: str) -> tuple[Any, tuple]:
    """The lesson function a bench ``kind`` times (found in the lesson file ``module``, which the
    course reads from its catalog) and its float32 arguments at ``dims``."""
    lesson = importlib.import_module(module)
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    if kind in ("mha", "gqa"):
        b, t, d, h = dims["B"], dims["T"], dims["D"], dims["H"]
        g = dims.get("G", h)
        x = normal(b, t, d)
        params = _params(rng, d, d, g * (d // h))
        if kind == "mha":
            return lesson.multi_head_attention, (x, x, params, h)
        return lesson.grouped_query_attention, (x, x, params, h, g)
    if kind == "decode":
        b, s, d, h, g = dims["B"], dims["S"], dims["D"], dims["H"], dims["G"]
        k = d // h
        args = (normal(b, 1, d), normal(b, g, s, k), normal(b, g, s, k), _params(rng, d, d, g * k), h, g)
        return lesson.decode_step, args
    if kind in ("online", "full"):
        b, h, t, k = dims["B"], dims["H"], dims["T"], dims["K"]
        q, keys, v = normal(b, h, t, k), normal(b, h, t, k), normal(b, h, t, k)
        if kind == "online":
            return lesson.online_softmax_attention, (q, keys, v)
        return lesson.scaled_dot_product_attention, (q, keys, v)
    raise ValueError(f"no bench kind {kind!r}")


def run(kind: str, dims: dict, module: str, budget: float = 0.3, memory: bool = False) -> dict:
    """Time the lesson function of ``kind`` at ``dims``: one warm-up call, then calls until
    ``budget`` seconds have passed (at least 3, at most ``MAX_CALLS``). Returns
    ``{"seconds": [...], "peak_bytes": int or None}``; the peak (when ``memory``) is what
    Python allocated during one call beyond what it held before."""
    function, args = call_for(kind, {str(key): int(value) for key, value in dims.items()}, str(module))
    function(*args)
    peak = None
    if memory:
        tracemalloc.start()
        try:
            function(*args)
            peak = int(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    seconds: list[float] = []
    started = time.perf_counter()
    while len(seconds) < 3 or (time.perf_counter() - started < budget and len(seconds) < MAX_CALLS):
        before = time.perf_counter()
        function(*args)
        seconds.append(time.perf_counter() - before)
    return {"seconds": seconds, "peak_bytes": peak}
