"""PyTorch's own attention at the bench's sizes, timed in the course's process (no learner code
runs here): ``nn.MultiheadAttention`` for lesson 6, ``F.scaled_dot_product_attention`` (with
its grouped-query option) for lessons 8, 9 and 13. Optional: without torch there is no row.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

NAMES = {  # what each bench kind times in torch; F.sdpa gives no weights where the lesson's do
    "mha": "torch nn.MultiheadAttention",
    "gqa": "torch F.sdpa, no weights",
    "decode": "torch F.sdpa",
    "online": "torch F.sdpa",
}


def torch_module() -> ModuleType | None:
    """torch when it is installed, else None (the bench then leaves out its rows)."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def _step(torch: ModuleType, kind: str, dims: dict[str, int]) -> Callable[[], Any]:
    """One call of torch's equivalent of the bench ``kind`` at ``dims``, inputs made ahead."""
    nn, functional = torch.nn, torch.nn.functional
    torch.manual_seed(0)
    if kind in ("online", "full"):
        b, h, t, k = dims["B"], dims["H"], dims["T"], dims["K"]
        q, keys, v = (torch.randn(b, h, t, k) for _ in range(3))
        return lambda: functional.scaled_dot_product_attention(q, keys, v)
    d, h = dims["D"], dims["H"]
    g, k = dims.get("G", h), d // dims["H"]
    if kind == "mha":
        module = nn.MultiheadAttention(d, h, batch_first=True)
        x = torch.randn(dims["B"], dims["T"], d)
        return lambda: module(x, x, x, need_weights=True, average_attn_weights=False)
    w_q, w_k, w_v, w_o = nn.Linear(d, h * k), nn.Linear(d, g * k), nn.Linear(d, g * k), nn.Linear(h * k, d)

    def heads(x: Any, n: int) -> Any:
        return x.unflatten(-1, (n, k)).transpose(1, 2)

    if kind == "gqa":
        x = torch.randn(dims["B"], dims["T"], d)

        def gqa() -> Any:
            q, keys, v = heads(w_q(x), h), heads(w_k(x), g), heads(w_v(x), g)
            out = functional.scaled_dot_product_attention(q, keys, v, enable_gqa=True)
            return w_o(out.transpose(1, 2).flatten(2))

        return gqa
    b, s = dims["B"], dims["S"]
    x_t, cache_k, cache_v = torch.randn(b, 1, d), torch.randn(b, g, s, k), torch.randn(b, g, s, k)

    def decode() -> Any:
        keys = torch.cat([cache_k, heads(w_k(x_t), g)], dim=2)
        v = torch.cat([cache_v, heads(w_v(x_t), g)], dim=2)
        out = functional.scaled_dot_product_attention(heads(w_q(x_t), h), keys, v, enable_gqa=True)
        return w_o(out.transpose(1, 2).flatten(2)), keys, v

    return decode


def time_torch(torch: ModuleType, kind: str, dims: dict[str, int], budget: float = 0.3) -> list[float]:
    """Seconds of each call of torch's equivalent (one warm-up call first), as the harness
    times the numpy versions: at least 3 calls, more until ``budget`` seconds have passed.
    On one thread: torch's thread pool waits badly on a machine busy with other work, and the
    learner's numpy runs its own small products on one thread too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _timed(torch, kind, dims, budget)
    finally:
        torch.set_num_threads(threads)


def _timed(torch: ModuleType, kind: str, dims: dict[str, int], budget: float) -> list[float]:
    with torch.inference_mode():
        step = _step(torch, kind, dims)
        step()
        seconds: list[float] = []
        started = time.perf_counter()
        while len(seconds) < 3 or (time.perf_counter() - started < budget and len(seconds) < 50):
            before = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - before)
    return seconds
