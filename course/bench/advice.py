"""The rows `course bench` measures, and the one sentence of advice read from them: what would
make the learner's function faster. Plain data in, a sentence out; nothing here runs code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

YOURS, REFERENCE, FULL, TORCH = "yours", "reference", "reference full-matrix", "torch"


@dataclass(frozen=True)
class Row:
    """One function at one size by one implementation: the median and the best of its timed
    calls, its GFLOP/s (at the median), and the peak bytes Python allocated in one call where
    that was measured."""

    lesson: str
    function: str
    size: str
    impl: str
    ms: float
    best_ms: float
    gflops: float
    peak_bytes: int | None = None
    probe: bool = False  # a size of the heads probe (read by the advice), not one asked for
    dims: dict[str, int] = field(default_factory=dict)  # the sizes, by letter


FUSED = {  # what is left to gain in numpy once a function keeps the reference's pace
    "multi_head_attention": "Left to gain in numpy: fused QKV, one x @ [w_q | w_k | w_v] GEMM "
    "for self-attention instead of three (nn.MultiheadAttention's in_proj_weight).",
    "grouped_query_attention": "Left to gain in numpy: fused QKV, one x @ [w_q | w_k | w_v] GEMM "
    "(D, (H + 2G) * K) for self-attention instead of three.",
    "decode_step": "Left to gain in numpy: one GEMM for the new token's q, k and v "
    "(x_t @ [w_q | w_k | w_v]) instead of three.",
}


NO_WEIGHTS = {  # torch's row computes less than the learner's function does
    "grouped_query_attention": ", and it returns no attention weights, where yours does",
}


def advise(function: str, rows: list[Row]) -> str:
    """What would make the learner's function faster, read from the rows (best calls, which a
    busy machine disturbs least): their time against the reference's (the size where they
    come closest), what 4x the heads at a few tokens adds to their time against what it adds
    to the reference's (a Python loop over heads pays for each head there, one GEMM per
    projection hardly), lesson 13's peak memory against the full matrix's, and torch's time against theirs."""

    def by(impl: str, probe: bool = False) -> list[Row]:
        return [row for row in rows if row.impl == impl and row.probe == probe]

    yours, reference = by(YOURS), by(REFERENCE)
    ratio, worst = min((y.best_ms / r.best_ms, y.size) for y, r in zip(yours, reference, strict=True))
    full = by(FULL)
    if full:
        mine, whole = yours[-1].peak_bytes or 0, full[-1].peak_bytes or 1
        if mine >= 0.5 * whole:
            return (
                f"Yours allocated {mine / whole:.0%} of the full-matrix attention's peak at {worst}: "
                "something (T, S)-sized is still built. Keep only the running max, sum and output "
                "per query, and give the mask its shape with np.broadcast_to (a view)."
            )
        if ratio > 2:
            return (
                f"Yours takes {ratio:.1f}x the reference's time at {worst}: keep the loop over blocks "
                "of keys the only Python loop; within a block, one matmul for every query and head."
            )
        return (
            f"Yours keeps the reference's pace ({ratio:.1f}x its time) in {mine / whole:.0%} of the "
            "full matrix's memory. A larger block_size takes fewer Python steps for more memory; "
            "FlashAttention picks the largest block that fits in the chip's fast memory."
        )
    probe_yours, probe_reference = by(YOURS, probe=True), by(REFERENCE, probe=True)
    if len(probe_yours) == len(probe_reference) == 2:
        narrow, wide = probe_yours
        more = wide.dims.get("H", 0) - narrow.dims.get("H", 0)
        cost = wide.best_ms - narrow.best_ms
        cost_reference = max(probe_reference[1].best_ms - probe_reference[0].best_ms, 0.0)
        grows = wide.best_ms / narrow.best_ms
        grows_reference = probe_reference[1].best_ms / probe_reference[0].best_ms
        if cost > 3 * cost_reference and grows > 1.3 * grows_reference:  # not just slower overall
            return (
                f"{more} more heads at {narrow.size} cost yours {cost:.2f} ms more, the reference "
                f"{cost_reference:.2f} ms: a Python loop over heads, which costs most when tokens are "
                f"few (at {worst} yours takes {ratio:.1f}x the reference's time). One GEMM per projection "
                "for all heads (x @ w_q, w_q (D, H*K)), split_heads, and attention with the head axis as "
                "a batch axis."
            )
    if ratio > 2:
        return (
            f"Yours takes {ratio:.1f}x the reference's time at {worst}, though not from a loop over "
            "heads: one GEMM per projection over the whole (B, T, D) input, no Python loop over "
            "batch elements or positions."
        )
    pace = f"Yours keeps the reference's pace ({ratio:.1f}x its time at {worst})."
    fuse = FUSED.get(function, "")
    torch = by(TORCH)
    if not torch:
        return f"{pace} {fuse}"
    faster, where = max((y.best_ms / t.best_ms, t.size) for y, t in zip(yours, torch, strict=True))
    if faster > 1.5:
        return (
            f"{pace} torch is {faster:.1f}x faster at {where}: its attention is compiled code, with "
            f"no Python between the steps{NO_WEIGHTS.get(function, '')}. {fuse}"
        )
    return (
        f"{pace} torch is no faster here ({faster:.1f}x): the GEMMs dominate; compare your "
        "GFLOP/s with this machine's matmul rate, the most any of them can reach."
    )
