"""Grading tests for lesson 9 (l09_kv_cache): kv_cache_bytes, decode_step.

decode_step is checked against slow oracles written here: full causal grouped-query attention
over a whole sequence, and one decoding step, both computed one batch element, head, query and
key at a time. Decoding a sequence token by token from an empty cache must reproduce the full
causal attention row by row, and the caches must grow by one position per token.

Sizes: B=2 sequences, H=4 query heads sharing G=2 key/value heads, head width K=3, model width
D = H*K = 12, sequences of L=5 tokens, ready-made caches of S0=6 positions. K differs from every
other size and H from G, so a cache of H repeated heads, a cache extended along the wrong axis or a
1/sqrt(D) scale shows as a wrong shape or wrong numbers instead of passing by coincidence.
The same oracles, run with one rule changed (which keys a query may see, the scale, the key/value
head a query head reads), compute the classic WRONG answers, only to name a mistake when an answer
matches one of them; they run only when an answer is wrong.
"""

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    Mistake,
    check_array,
    check_tuple,
    diagnose,
    exercise,
    hand_checked,
    remembered,
    rng,
    rule_out,
    variation,
)

B, H, G, K = 2, 4, 2, 3
D = H * K  # 12
L = 5  # tokens decoded one at a time
S0 = 6  # positions in a ready-made cache


# The letters of each function's array arguments (their last axes), in parameter order: a raw
# numpy error in the learner's code is shown with the shapes of the call in these letters.
DIMS = {"decode_step": {"x_t": "D", "cache_k": "B G S K", "cache_v": "B G S K"}}


# ---------------------------------------------------------------- oracles (slow and obvious)
def project_loop(x, w, b=None):
    """x @ w + b for x (B, T, d_in), one output number at a time, in float64."""
    n_b, n_t, d_in = x.shape
    out = np.zeros((n_b, n_t, w.shape[1]))
    for bi in range(n_b):
        for t in range(n_t):
            for j in range(w.shape[1]):
                total = sum(float(x[bi, t, i]) * float(w[i, j]) for i in range(d_in))
                out[bi, t, j] = total + (0.0 if b is None else float(b[j]))
    return out


def heads_loop(y, n_heads):
    """(B, T, n_heads*K) -> (B, n_heads, T, K): head h is columns h*K:(h+1)*K."""
    n_b, n_t, width = y.shape
    n_k = width // n_heads
    out = np.zeros((n_b, n_heads, n_t, n_k))
    for bi in range(n_b):
        for h in range(n_heads):
            for t in range(n_t):
                out[bi, h, t] = y[bi, t, h * n_k : (h + 1) * n_k]
    return out


def attend_loop(q, keys, values, allowed, scale=None, kv_head=None):
    """Attention head by head and query by query; returns the heads side by side (B, T, H*K).

    q (B, H, T, K); keys and values (B, G, S, K); allowed(i, j) says whether query i may attend
    key j. Query head h reads key/value head kv_head(h), by default h // (H // G).
    """
    n_b, n_h, n_t, n_k = q.shape
    n_g, n_s = keys.shape[1], keys.shape[2]
    scale = 1.0 / math.sqrt(n_k) if scale is None else scale
    kv_head = kv_head or (lambda h: h // (n_h // n_g))
    out = np.zeros((n_b, n_t, n_h * n_k))
    for bi in range(n_b):
        for h in range(n_h):
            g = kv_head(h)
            for i in range(n_t):
                js = [j for j in range(n_s) if allowed(i, j)]
                if not js:  # no key to attend: zero output
                    continue
                scores = [
                    scale * sum(float(q[bi, h, i, c]) * float(keys[bi, g, j, c]) for c in range(n_k))
                    for j in js
                ]
                top = max(scores)
                e = [math.exp(s - top) for s in scores]
                for j, weight in zip(js, e, strict=True):
                    out[bi, i, h * n_k : (h + 1) * n_k] += weight / sum(e) * values[bi, g, j]
    return out


def qkv_loop(x, params, n_heads, n_kv_heads):
    """The projections of x split into heads: q (B, H, T, K), k and v (B, G, T, K)."""
    q = heads_loop(project_loop(x, params["w_q"], params.get("b_q")), n_heads)
    k = heads_loop(project_loop(x, params["w_k"], params.get("b_k")), n_kv_heads)
    v = heads_loop(project_loop(x, params["w_v"], params.get("b_v")), n_kv_heads)
    return q, k, v


@remembered
def causal_gqa_loop(x, params, n_heads, n_kv_heads):
    """Full causal grouped-query attention over the whole sequence x (B, T, D): query i sees
    positions j <= i. Returns (out (B, T, D), keys (B, G, T, K), values (B, G, T, K))."""
    q, k, v = qkv_loop(x, params, n_heads, n_kv_heads)
    heads = attend_loop(q, k, v, allowed=lambda i, j: j <= i)
    return project_loop(heads, params["w_o"], params.get("b_o")), k, v


@remembered
def step_loop(x_new, cache_k, cache_v, params, n_heads, n_kv_heads, allowed=None, scale=None, kv_head=None):
    """One decoding step: (out (B, T_new, D), keys and values (B, G, S + T_new, K)).

    The T_new new tokens sit at positions S .. S + T_new - 1, so new query i sees key j when
    j <= S + i: all the cache, and the new tokens up to itself. `allowed`, `scale` and `kv_head`
    replace the right rule only to compute a named wrong answer.
    """
    n_s = cache_k.shape[2]
    q, k, v = qkv_loop(x_new, params, n_heads, n_kv_heads)
    keys = np.concatenate([cache_k, k], axis=2)
    values = np.concatenate([cache_v, v], axis=2)
    allowed = allowed or (lambda i, j: j <= n_s + i)
    heads = attend_loop(q, keys, values, allowed, scale, kv_head)
    return project_loop(heads, params["w_o"], params.get("b_o")), keys, values


# ---------------------------------------------------------------- data
def make_params(r, d=D, n_heads=H, n_kv_heads=G, k=K, bias=True, dtype=np.float64):
    """Random attention parameters: w_q (D, H*K), w_k and w_v (D, G*K), w_o (H*K, D)."""
    s = 1.0 / math.sqrt(d)
    params = {
        "w_q": r.standard_normal((d, n_heads * k)) * 2 * s,
        "w_k": r.standard_normal((d, n_kv_heads * k)) * 2 * s,
        "w_v": r.standard_normal((d, n_kv_heads * k)) * s,
        "w_o": r.standard_normal((n_heads * k, d)) * s,
    }
    if bias:
        params.update(
            b_q=r.standard_normal(n_heads * k) * 0.5,
            b_k=r.standard_normal(n_kv_heads * k) * 0.5,
            b_v=r.standard_normal(n_kv_heads * k) * 0.5,
            b_o=r.standard_normal(d) * 0.5,
        )
    return {name: w.astype(dtype) for name, w in params.items()}


def empty_cache(b=B, n_kv_heads=G, k=K, dtype=np.float64):
    return np.zeros((b, n_kv_heads, 0, k), dtype=dtype)


def random_cache(r, s=S0, b=B, n_kv_heads=G, k=K, dtype=np.float64):
    """A ready-made cache (keys, values) of s positions."""
    return (
        r.standard_normal((b, n_kv_heads, s, k)).astype(dtype),
        r.standard_normal((b, n_kv_heads, s, k)).astype(dtype),
    )


# ---------------------------------------------------------------- classic mistakes, by name
K_ONLY = Mistake(
    "k-only-cache-bytes",
    "K-only cache bytes: the factor 2 is missing (every position caches a key AND a value)",
    misconception="k-only-cache",
    exercises=("kv_cache_bytes",),
)
NO_LAYERS = Mistake(
    "no-layers",
    "n_layers is missing from the product: that is one layer's cache, and every layer has its own",
    exercises=("kv_cache_bytes",),
)
NO_BATCH = Mistake(
    "no-batch",
    "batch is missing from the product: every sequence of the batch has its own cache",
    exercises=("kv_cache_bytes",),
)
NO_SEQ = Mistake(
    "no-seq",
    "seq_len is missing from the product: every position has its own keys and values",
    exercises=("kv_cache_bytes",),
)
NO_HEADS = Mistake(
    "no-heads",
    "n_kv_heads is missing from the product: every key/value head has its own keys and values",
    exercises=("kv_cache_bytes",),
)
NO_HEAD_DIM = Mistake(
    "no-head-dim",
    "head_dim is missing from the product: a key holds head_dim numbers",
    exercises=("kv_cache_bytes",),
)
NO_BYTES = Mistake(
    "no-bytes",
    "bytes_per_value is missing from the product: that counts numbers, not bytes",
    exercises=("kv_cache_bytes",),
)
DEFAULT_NOT_2 = Mistake(
    "default-not-2",
    "bytes_per_value does not default to 2 (fp16 and bf16 take 2 bytes per number)",
    exercises=("kv_cache_bytes",),
)

PROMOTED = Mistake(
    "promoted",
    "float32 came back as float64: a float64 array or numpy float64 number (such as "
    "1 / np.sqrt(K), or np.zeros without a dtype) promoted the result; keep the dtype of "
    "x_t",
    exercises=("decode_step",),
)
NOT_APPENDED = Mistake(
    "not-appended",
    "the cache came back unchanged: the new key/value was not appended (return the "
    "extended caches, not the ones passed in)",
    exercises=("decode_step",),
)
NEW_ONLY = Mistake(
    "new-only",
    "the returned cache holds only the new key/value: the cached positions were dropped "
    "(concatenate the old cache and the new entries)",
    exercises=("decode_step",),
)
REPEATED = Mistake(
    "repeated",
    "the cache stores the keys/values repeated to the H query heads, (B, H, S, K), instead "
    "of the G key/value heads (B, G, S, K): repeat_kv is for the attention only, the cache "
    "keeps G heads (that is the memory GQA saves)",
    exercises=("decode_step",),
)
PREPENDED = Mistake(
    "prepended",
    "the new entries were put in front of the cache instead of after it: "
    "np.concatenate([cache, new], axis=2)",
    exercises=("decode_step",),
)
SWAPPED_KV = Mistake(
    "swapped-kv",
    "keys and values are swapped: return (out_t, cache_k, cache_v) in that order",
    exercises=("decode_step",),
)
WRONG_AXIS = Mistake(
    "append-wrong-axis",
    "the new entries were appended along axis {axis} ({letter}) instead of axis 2 (S, the positions)",
    exercises=("decode_step",),
)
CONCAT_AXIS = Mistake(
    "append-wrong-axis",
    "the cache was concatenated along an axis other than 2: the cache is (B, H, S, K) and the "
    "new entries (B, H, 1, K), so only the positions S (axis 2, or -2) can grow: "
    "np.concatenate([cache_k, k], axis=2)",
    exercises=("decode_step",),
)
# Mistakes that raise instead of returning a wrong answer, named from the learner's code on a line
# the error went through (the grading plugin applies these to every check; testing.named_by_code).
CODE_MISTAKES = {CONCAT_AXIS: r"concatenate\(.*axis\s*=\s*(?!(?:2|-2)\b)-?\d"}
OFF_BY_ONE = Mistake(
    "off-by-one",
    "off by one: the new query attends only to the cached positions, not to its own key "
    "and value (append the new key and value to the cache BEFORE attending)",
    exercises=("decode_step",),
)
ONLY_NEW = Mistake(
    "only-new",
    "the new query attends only to the new token(s), not to the cached positions: "
    "attend to the extended cache",
    exercises=("decode_step",),
)
SCALE_D = Mistake(
    "scale-d",
    "the scores are scaled by 1/sqrt(D), D the model width, instead of 1/sqrt(K), K the head width",
    exercises=("decode_step",),
)
NO_SCALE = Mistake(
    "missing-scale",
    "the scores are not scaled: the 1/sqrt(K) factor is missing",
    misconception="missing-scale",
    exercises=("decode_step",),
)
TILED = Mistake(
    "tiled",
    "the key/value heads were repeated by tiling (query head h read key/value head h % G) "
    "instead of repeat-interleave (h // (H // G)): use lesson 8's repeat_kv",
    exercises=("decode_step",),
)
TOP_LEFT = Mistake(
    "causal-top-left",
    "the causal mask is aligned top-left (np.tril(np.ones((T_new, S + T_new))) or "
    "PyTorch's is_causal) instead of bottom-right: new query i sits at position S + i and "
    "sees every cached position; use causal_mask(T_new, S + T_new)",
    misconception="top-left-causal",
    exercises=("decode_step",),
)
NO_MASK = Mistake(
    "no-mask",
    "the new tokens attend to each other without a causal mask: new query i must not see "
    "the new tokens after it; use causal_mask(T_new, S + T_new)",
    exercises=("decode_step",),
)


def bytes_mistakes(batch, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_value=2):
    """Named wrong answers of kv_cache_bytes; mistakes that give the same number share it."""
    full = 2 * batch * seq_len * n_layers * n_kv_heads * head_dim * bytes_per_value
    dropped = {
        K_ONLY: 2,
        NO_LAYERS: n_layers,
        NO_BATCH: batch,
        NO_SEQ: seq_len,
        NO_HEADS: n_kv_heads,
        NO_HEAD_DIM: head_dim,
        NO_BYTES: bytes_per_value,
    }
    by_value: dict[int, list[Mistake]] = {}
    for name, factor in dropped.items():
        if factor != 1:
            by_value.setdefault(full // factor, []).append(name)
    return {Mistake.any_of(*names): value for value, names in by_value.items()}


def check_bytes(actual, expected, *, what, mistakes=None):
    """Fail unless the learner's answer is the int ``expected``; name a known mistake if any."""
    if isinstance(actual, np.ndarray) and actual.ndim == 0:
        actual = actual[()]
    if isinstance(actual, (bool, np.bool_)) or not isinstance(actual, (int, np.integer)):
        shown = "None (is a `return` missing?)" if actual is None else repr(actual)[:80]
        hint = (
            " Multiply the int arguments (no division, no float factors) so that the count "
            "stays an exact int."
            if isinstance(actual, (float, np.floating))
            else ""
        )
        raise AssertionError(f"{what} returned {shown}; expected the int {expected:,}.{hint}")
    actual = int(actual)
    if actual == expected:
        rule_out(mistakes, np.asarray(expected))
        return
    message = f"{what} returned {actual:,}; expected {expected:,} bytes."
    known = diagnose(np.asarray(actual), mistakes, np.asarray(expected))
    if known:
        raise KnownMistake(message, known)
    if 0 < actual < expected and expected % actual == 0:
        message += f" That is {expected // actual} times too small: is a factor missing?"
    raise AssertionError(message)


ARGUMENTS = ("x_t", "cache_k", "cache_v", "params", "n_heads", "n_kv_heads")


def check_inputs_unchanged(lesson, what):
    """check_not_modified, naming each changed input by decode_step's parameter names."""
    if not lesson.mutated:
        return
    changed = []
    for label in lesson.mutated:  # "argument 4['w_q']": the position, then any key inside
        head, _, rest = label.partition("[")
        number = head.rpartition(" ")[2]
        index = int(number) - 1 if number.isdigit() else -1
        name = ARGUMENTS[index] if 0 <= index < len(ARGUMENTS) else head
        changed.append(name + (f"[{rest}" if rest else ""))
    raise AssertionError(
        f"{what} changed its input in place ({', '.join(changed)}). Functions "
        "must leave their inputs untouched: np.concatenate builds new caches, "
        "and `w = w * s` builds a new array where `w *= s` overwrites the "
        "caller's."
    )


def tokens(n):
    """n tokens in words, for what= texts: "one token", "2 tokens", ..."""
    return "one token" if n == 1 else f"{n} tokens"


def triple(result, what):
    """The learner's (out_t, cache_k, cache_v), or a failure that says what came back instead."""
    return check_tuple(result, what, ("out_t", "cache_k", "cache_v"))


def out_mistakes(x_new, cache_k, cache_v, params, n_heads, n_kv_heads):
    """Named wrong outputs of one decoding step (computed only when an answer is wrong)."""
    n_s, n_t = cache_k.shape[2], x_new.shape[1]
    d = x_new.shape[2]

    def wrong(**how):
        return lambda: step_loop(x_new, cache_k, cache_v, params, n_heads, n_kv_heads, **how)[0]

    mistakes = {}
    if n_s > 0:
        mistakes[OFF_BY_ONE] = wrong(allowed=lambda i, j: j < n_s + i)
        mistakes[ONLY_NEW] = wrong(allowed=lambda i, j: n_s <= j <= n_s + i)
        # one new token after one cached position: both mistakes attend to position 0 only
        top_left = Mistake.any_of(OFF_BY_ONE, TOP_LEFT) if n_s == n_t == 1 else TOP_LEFT
        mistakes[top_left] = wrong(allowed=lambda i, j: j <= i)
    if n_t > 1:
        mistakes[NO_MASK] = wrong(allowed=lambda i, j: True)
    if n_s + n_t > 1:  # with a single key every scale gives the same answer
        mistakes[SCALE_D] = wrong(scale=1.0 / math.sqrt(d))
        mistakes[NO_SCALE] = wrong(scale=1.0)
    if 1 < n_kv_heads < n_heads:
        mistakes[TILED] = wrong(kv_head=lambda h: h % n_kv_heads)
    return mistakes


def cache_mistakes(old, full, other, n_rep):
    """Named wrong caches: `old` passed in, `full` the right answer, `other` the right other cache."""
    n_s = old.shape[2]
    new = full[:, :, n_s:]
    mistakes = {
        NOT_APPENDED: old,
        NEW_ONLY: new,
        REPEATED: lambda: np.repeat(full, n_rep, axis=1),
        PREPENDED: lambda: np.concatenate([new, old], axis=2),
        SWAPPED_KV: other,
    }
    for axis, letter in ((0, "B"), (1, "G"), (3, "K")):
        mistakes[WRONG_AXIS.format(axis=axis, letter=letter)] = lambda axis=axis: np.concatenate(
            [old, new], axis=axis
        )
    return mistakes


def check_step(
    result, x_new, cache_k, cache_v, params, n_heads, n_kv_heads, *, what, expected=None, dtype=None
):
    """Check one decoding step: out (B, T_new, D), then both caches (B, G, S + T_new, K).

    ``expected`` = (out, keys, values) when already known (from the full causal oracle)."""
    out, new_k, new_v = triple(result, what)
    if expected is None:
        expected = step_loop(x_new, cache_k, cache_v, params, n_heads, n_kv_heads)
    exp_out, exp_k, exp_v = expected
    dtype = dtype or x_new.dtype
    n_rep = n_heads // n_kv_heads
    promoted = dtype == np.float32  # a float64 answer with the right values was promoted
    check_array(
        out,
        exp_out.astype(dtype),
        what=f"out_t of {what}",
        dims="B T D",
        mistakes={
            **({PROMOTED: exp_out} if promoted else {}),
            **out_mistakes(x_new, cache_k, cache_v, params, n_heads, n_kv_heads),
        },
    )
    check_array(
        new_k,
        exp_k.astype(dtype),
        what=f"the cache_k returned by {what}",
        dims="B G S K",
        mistakes={**({PROMOTED: exp_k} if promoted else {}), **cache_mistakes(cache_k, exp_k, exp_v, n_rep)},
    )
    check_array(
        new_v,
        exp_v.astype(dtype),
        what=f"the cache_v returned by {what}",
        dims="B G S K",
        mistakes={**({PROMOTED: exp_v} if promoted else {}), **cache_mistakes(cache_v, exp_v, exp_k, n_rep)},
    )
    return out, new_k, new_v


def decode_sequence(lesson, x, params, n_heads, n_kv_heads, chunks, *, what):
    """Decode x chunk by chunk from an empty cache, checking every step against the full causal
    oracle; the learner's own (already checked) caches are fed back into the next step."""
    n_b, n_t, _ = x.shape
    n_k = params["w_q"].shape[1] // n_heads
    full_out, full_k, full_v = causal_gqa_loop(x, params, n_heads, n_kv_heads)
    cache_k = cache_v = empty_cache(n_b, n_kv_heads, n_k, x.dtype)
    start = 0
    for size in chunks:
        stop = start + size
        step = (
            f"{what}, step at positions {start}..{stop - 1}"
            if size > 1
            else f"{what}, step {start} (token {start} after {start} cached)"
        )
        x_new = x[:, start:stop]
        expected = (full_out[:, start:stop], full_k[:, :, :stop], full_v[:, :, :stop])
        result = lesson.decode_step(x_new, cache_k, cache_v, params, n_heads, n_kv_heads)
        _, cache_k, cache_v = check_step(
            result,
            x_new,
            full_k[:, :, :start].astype(x.dtype),
            full_v[:, :, :start].astype(x.dtype),
            params,
            n_heads,
            n_kv_heads,
            what=step,
            expected=expected,
        )
        start = stop


# ---------------------------------------------------------------- kv_cache_bytes
MAX_SEQ_LEN = 3000  # the longest sequence the property check draws


@exercise("kv_cache_bytes")
class TestKvCacheBytes:
    def test_kv_cache_bytes_returns_an_int(self, lesson):
        """kv_cache_bytes returns an int: 4 for kv_cache_bytes(1, 1, 1, 1, 1)"""
        # Under an instructor's secret: n = 2 to 9 layers instead of 1.
        n = variation("bytes of one number").integers(2, 10, public=1)
        layers = "" if n == 1 else f" in each of {n} layers"
        check_bytes(
            lesson.kv_cache_bytes(1, 1, n, 1, 1),
            4 * n,
            what=f"kv_cache_bytes(1, 1, {n}, 1, 1) (one number of K and one of V{layers}, 2 bytes each)",
            mistakes=bytes_mistakes(1, 1, n, 1, 1),
        )

    @hand_checked
    def test_kv_cache_bytes_small_case_by_hand(self, lesson):
        """a small case by hand: 2 * 3 * 5 * 7 * 11 * 13 * 4 = 120,120 bytes"""
        # every factor a different prime, so each missing factor gives a different number:
        # 2 * 3 * 5 * 7 * 11 * 13 * 4 = 120,120
        # Under an instructor's secret: the five primes given to the sizes in another order.
        order = variation("bytes by hand").permutation(5)
        batch, seq_len, n_layers, n_kv_heads, head_dim = np.array([3, 5, 7, 11, 13])[order].tolist()
        args = (batch, seq_len, n_layers, n_kv_heads, head_dim, 4)
        check_bytes(
            lesson.kv_cache_bytes(*args),
            120_120,
            what=f"kv_cache_bytes(batch={batch}, seq_len={seq_len}, n_layers={n_layers}, "
            f"n_kv_heads={n_kv_heads}, head_dim={head_dim}, bytes_per_value=4)",
            mistakes=bytes_mistakes(*args),
        )

    def test_gpt3_175b_caches_4_718_592_bytes_per_token_in_fp16(self, lesson):
        """GPT-3 175B caches 4,718,592 bytes per token in fp16"""
        # GPT-3 175B: 96 layers, 96 heads (MHA: 96 key/value heads), head_dim 128, d_model 12,288
        # 2 * 96 * 96 * 128 * 2 = 4,718,592 bytes = 4.5 MiB, about 4.7 MB per token
        # Under an instructor's secret: n = 2 to 16 tokens, and b = 2 to 8 full-context sequences.
        v = variation("GPT-3 cache")
        n, b = v.integers(2, 17, public=1), v.integers(2, 9, public=1)
        assert 96 * 128 == 12_288
        check_bytes(
            lesson.kv_cache_bytes(1, n, 96, 96, 128),
            4_718_592 * n,
            what=f"kv_cache_bytes(batch=1, seq_len={n}, n_layers=96, n_kv_heads=96, "
            f"head_dim=128) for {tokens(n)} of GPT-3 175B",
            mistakes=bytes_mistakes(1, n, 96, 96, 128),
        )
        # its 2,048-token context: 2048 * 4.5 MiB = 9 GiB for a single sequence
        check_bytes(
            lesson.kv_cache_bytes(b, 2048, 96, 96, 128),
            9 * 2**30 * b,
            what=f"kv_cache_bytes({b}, 2048, 96, 96, 128): GPT-3's full 2,048-token context"
            + ("" if b == 1 else f", for {b} sequences"),
            mistakes=bytes_mistakes(b, 2048, 96, 96, 128),
        )

    def test_gqa_8_would_make_gpt3s_cache_12_times_smaller(self, lesson):
        """GQA-8 would make GPT-3's cache 12 times smaller"""
        # 96 query heads sharing 8 key/value heads: 2 * 96 * 8 * 128 * 2 = 393,216 = 4,718,592 / 12
        # Under an instructor's secret: n = 2 to 16 tokens instead of 1.
        n = variation("GPT-3 GQA-8 cache").integers(2, 17, public=1)
        check_bytes(
            lesson.kv_cache_bytes(1, n, 96, 8, 128),
            4_718_592 // 12 * n,
            what=f"kv_cache_bytes(1, {n}, n_layers=96, n_kv_heads=8, head_dim=128): GPT-3 with GQA-8",
            mistakes=bytes_mistakes(1, n, 96, 8, 128),
        )

    def test_llama_2_70b_caches_327_680_bytes_per_token_and_80_gib_hold_262_144(self, lesson):
        """Llama 2 70B caches 327,680 bytes per token; 80 GiB hold 262,144"""
        # Llama 2 70B: 80 layers, 64 query heads sharing 8 key/value heads, head_dim 128
        # 2 * 80 * 8 * 128 * 2 = 327,680 bytes = 320 KiB per token
        # Under an instructor's secret: n = 2 to 16 tokens, and the 262,144 tokens in other
        # sequences of at most the 4,096-token context.
        v = variation("Llama 2 cache")
        n = v.integers(2, 17, public=1)
        batch, seq_len = v.pick(((64, 4096), (128, 2048), (256, 1024), (512, 512)))
        check_bytes(
            lesson.kv_cache_bytes(1, n, 80, 8, 128),
            327_680 * n,
            what=f"kv_cache_bytes(1, {n}, n_layers=80, n_kv_heads=8, head_dim=128) for {tokens(n)} of "
            "Llama 2 70B",
            mistakes=bytes_mistakes(1, n, 80, 8, 128),
        )
        # 80 GiB / 320 KiB = 262,144 tokens: 64 sequences at the full 4,096-token context
        assert 80 * 2**30 // 327_680 == 262_144 == 64 * 4096 == batch * seq_len
        check_bytes(
            lesson.kv_cache_bytes(batch, seq_len, 80, 8, 128),
            80 * 2**30,
            what=f"kv_cache_bytes(batch={batch}, seq_len={seq_len}, 80, 8, 128): Llama 2 70B, {batch} "
            f"sequences of {seq_len:,} tokens (80 GiB)",
            mistakes=bytes_mistakes(batch, seq_len, 80, 8, 128),
        )

    def test_bytes_per_value_defaults_to_2_and_is_used(self, lesson):
        """bytes_per_value defaults to 2 and is used"""
        # Under an instructor's secret: the five primes given to the sizes in another order.
        args = tuple(np.array([3, 5, 7, 11, 13])[variation("bytes per value").permutation(5)].tolist())
        listed = ", ".join(str(a) for a in args)
        values = 2 * 3 * 5 * 7 * 11 * 13  # 30,030 numbers
        for bpv, name in ((4, "fp32"), (1, "int8"), (2, "fp16")):
            check_bytes(
                lesson.kv_cache_bytes(*args, bytes_per_value=bpv),
                values * bpv,
                what=f"kv_cache_bytes({listed}, bytes_per_value={bpv}) ({name})",
                mistakes=bytes_mistakes(*args, bpv),
            )
        default_wrong = {DEFAULT_NOT_2.plus(f" (it acts as {bpv})"): values * bpv for bpv in (1, 4, 8)}
        check_bytes(
            lesson.kv_cache_bytes(*args),
            values * 2,
            what=f"kv_cache_bytes({listed}) without bytes_per_value",
            mistakes={**bytes_mistakes(*args), **default_wrong},
        )

    @given(
        batch=st.integers(1, 6),
        seq_len=st.integers(1, MAX_SEQ_LEN),
        n_layers=st.integers(1, 100),
        n_kv_heads=st.integers(1, 64),
        head_dim=st.integers(1, 256),
        bytes_per_value=st.sampled_from([1, 2, 4]),
    )
    def test_kv_cache_bytes_counts_every_key_and_value_of_every_layer(
        self, lesson, batch, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_value
    ):
        """counts every key and value of every layer, for any sizes"""
        # Under an instructor's secret: every sequence MAX_SEQ_LEN tokens longer, so that no call
        # is one of a public grade (whose simplest examples, all sizes 1, recur under any seed).
        seq_len += variation("longer sequences").pick((0, MAX_SEQ_LEN))
        expected = 0
        for _tensor in ("K", "V"):  # the cache of keys, then the cache of values
            for _layer in range(n_layers):
                expected += batch * seq_len * n_kv_heads * head_dim * bytes_per_value
        args = (batch, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_value)
        check_bytes(
            lesson.kv_cache_bytes(*args),
            expected,
            what=f"kv_cache_bytes{args}",
            mistakes=bytes_mistakes(*args),
        )


# ---------------------------------------------------------------- decode_step
@exercise("decode_step")
class TestDecodeStep:
    def test_first_step_from_an_empty_cache_gives_out_b_1_d_and_caches_b_g_1_k(self, lesson):
        """a first step from empty caches gives out (B, 1, D), caches (B, G, 1, K)"""
        r = rng(40)
        params = make_params(r)
        x_t = r.standard_normal((B, 1, D))
        cache_k, cache_v = empty_cache(), empty_cache()
        check_step(
            lesson.decode_step(x_t, cache_k, cache_v, params, H, G),
            x_t,
            cache_k,
            cache_v,
            params,
            H,
            G,
            what="decode_step(x_t (B, 1, D) = (2, 1, 12), empty caches "
            "(B, G, 0, K) = (2, 2, 0, 3), params, n_heads=4, "
            "n_kv_heads=2)",
        )

    @hand_checked
    def test_new_token_attends_to_the_cache_and_to_itself_small_case_by_hand(self, lesson):
        """the new token attends to the cache and to itself, checked by hand"""
        # Under an instructor's secret: the cached keys scaled by s, every value (cached and new)
        # scaled by s and shifted by c, and so out too (the weights stay uniform and sum to 1).
        v = variation("decode_step by hand")
        s, c = v.scale(), v.shift()
        one = np.array([[1.0]])
        params = {"w_q": one, "w_k": one, "w_v": one, "w_o": one, "b_v": np.array([6.0]) * s + c}
        x_t = np.zeros((1, 1, 1))  # q = 0 and k = 0: every score is 0, the weights are uniform
        cache_k = np.array([1.0, 2.0]).reshape(1, 1, 2, 1) * s  # (B=1, G=1, S=2, K=1)
        cache_v = np.array([0.0, 3.0]).reshape(1, 1, 2, 1) * s + c
        # the new value is 0 * 1 + 6 = 6; uniform weights over the 3 positions:
        # out = (0 + 3 + 6) / 3 = 3   (the cache alone would give 1.5, the new token alone 6,
        # a top-left causal mask, which lets the query see position 0 only, 0)
        what = (
            "decode_step on the hand-checked case: D = K = 1, H = G = 1, cached values "
            f"[{cache_v[0, 0, 0, 0]:g}, {cache_v[0, 0, 1, 0]:g}], new value {params['b_v'][0]:g}, "
            "all scores 0"
        )
        out, new_k, new_v = triple(lesson.decode_step(x_t, cache_k, cache_v, params, 1, 1), what)
        check_array(
            out,
            np.array([[[3.0]]]) * s + c,
            what=f"out_t of {what}",
            dims="B T D",
            mistakes={
                OFF_BY_ONE: np.array([[[1.5]]]) * s + c,
                ONLY_NEW: np.array([[[6.0]]]) * s + c,
                TOP_LEFT: np.array([[[0.0]]]) * s + c,
            },
        )
        check_array(
            new_k,
            np.array([1.0, 2.0, 0.0]).reshape(1, 1, 3, 1) * s,
            what=f"the cache_k returned by {what}",
            dims="B G S K",
            mistakes={NOT_APPENDED: cache_k, PREPENDED: np.array([0.0, 1.0, 2.0]).reshape(1, 1, 3, 1) * s},
        )
        check_array(
            new_v,
            np.array([0.0, 3.0, 6.0]).reshape(1, 1, 3, 1) * s + c,
            what=f"the cache_v returned by {what}",
            dims="B G S K",
            mistakes={
                NOT_APPENDED: cache_v,
                PREPENDED: np.array([6.0, 0.0, 3.0]).reshape(1, 1, 3, 1) * s + c,
            },
        )

    def test_the_new_key_and_value_are_appended_after_the_cache(self, lesson):
        """the new key and value are appended after the cache"""
        r = rng(41)
        params = make_params(r)
        x_t = r.standard_normal((B, 1, D))
        cache_k, cache_v = random_cache(r)
        check_step(
            lesson.decode_step(x_t, cache_k, cache_v, params, H, G),
            x_t,
            cache_k,
            cache_v,
            params,
            H,
            G,
            what="decode_step(x_t (2, 1, 12), caches (B, G, S, K) = "
            "(2, 2, 6, 3), params, n_heads=4, n_kv_heads=2)",
        )

    def test_caches_grow_along_the_position_axis_s(self, lesson):
        """the caches grow along the position axis S"""
        r = rng(42)
        params = make_params(r)
        x_t = r.standard_normal((B, 1, D))
        cache_k, cache_v = random_cache(r, s=1)  # S = 1: other axes would fit too
        what = "decode_step(x_t (2, 1, 12), caches (B, G, S, K) = (2, 2, 1, 3), params, 4, 2)"
        _, new_k, new_v = triple(lesson.decode_step(x_t, cache_k, cache_v, params, H, G), what)
        _, exp_k, exp_v = step_loop(x_t, cache_k, cache_v, params, H, G)
        check_array(
            new_k,
            exp_k,
            what=f"the cache_k returned by {what}",
            dims="B G S K",
            mistakes=cache_mistakes(cache_k, exp_k, exp_v, H // G),
        )
        check_array(
            new_v,
            exp_v,
            what=f"the cache_v returned by {what}",
            dims="B G S K",
            mistakes=cache_mistakes(cache_v, exp_v, exp_k, H // G),
        )

    def test_the_caches_passed_in_are_left_unchanged(self, lesson):
        """the caches passed in are left unchanged"""
        r = rng(43)
        params = make_params(r)
        x_t = r.standard_normal((B, 1, D))
        cache_k, cache_v = random_cache(r)
        lesson.decode_step(x_t, cache_k, cache_v, params, H, G)
        check_inputs_unchanged(lesson, "decode_step(x_t, cache_k, cache_v, params, 4, 2)")
        lesson.decode_step(x_t, empty_cache(), empty_cache(), params, H, G)
        check_inputs_unchanged(lesson, "decode_step(x_t, empty caches, params, 4, 2)")

    def test_the_new_query_attends_to_every_cached_position_and_to_its_own(self, lesson):
        """the new query attends to every cached position and to its own"""
        r = rng(44)
        params = make_params(r)
        x_t = r.standard_normal((B, 1, D))
        cache_k, cache_v = random_cache(r)
        cache_k = cache_k * 2.0  # sharper scores: a wrong scale or a missing key shows clearly
        check_step(
            lesson.decode_step(x_t, cache_k, cache_v, params, H, G),
            x_t,
            cache_k,
            cache_v,
            params,
            H,
            G,
            what="decode_step(x_t (2, 1, 12), caches (2, 2, 6, 3), params, n_heads=4, n_kv_heads=2)",
        )

    def test_decoding_token_by_token_equals_full_causal_attention(self, lesson):
        """decoding token by token equals full causal attention"""
        r = rng(45)
        params = make_params(r)
        x = r.standard_normal((B, L, D))
        decode_sequence(
            lesson,
            x,
            params,
            H,
            G,
            [1] * L,
            what="decoding x (B, T, D) = (2, 5, 12) token by token from an empty "
            "cache (n_heads=4, n_kv_heads=2)",
        )

    def test_decoding_without_biases(self, lesson):
        """decoding token by token works with params without biases"""
        r = rng(46)
        params = make_params(r, bias=False)
        x = r.standard_normal((B, 4, D))
        decode_sequence(
            lesson,
            x,
            params,
            H,
            G,
            [1] * 4,
            what="decoding x (2, 4, 12) token by token with params without biases",
        )

    def test_multi_head_and_multi_query_attention_are_the_two_ends(self, lesson):
        """both ends decode right: multi-head (G = H) and multi-query (G = 1)"""
        r = rng(47)
        for n_kv_heads, name in ((H, "MHA, G = H = 4"), (1, "MQA, G = 1")):
            params = make_params(r, n_kv_heads=n_kv_heads)
            x = r.standard_normal((B, 4, D))
            decode_sequence(
                lesson,
                x,
                params,
                H,
                n_kv_heads,
                [1] * 4,
                what=f"decoding x (2, 4, 12) token by token ({name})",
            )

    def test_a_chunk_of_new_tokens_sees_the_cache_and_the_earlier_new_tokens(self, lesson):
        """a chunk of new tokens sees the cache and the earlier new tokens"""
        r = rng(48)
        params = make_params(r)
        x_new = r.standard_normal((B, 3, D))
        cache_k, cache_v = random_cache(r)
        check_step(
            lesson.decode_step(x_new, cache_k, cache_v, params, H, G),
            x_new,
            cache_k,
            cache_v,
            params,
            H,
            G,
            what="decode_step(x_t (B, T_new, D) = (2, 3, 12), caches (2, 2, 6, 3), params, "
            "4, 2) with three new tokens",
        )

    def test_a_prefill_then_single_tokens_equals_full_causal_attention(self, lesson):
        """a prefill, then single tokens, equals full causal attention"""
        r = rng(49)
        params = make_params(r)
        x = r.standard_normal((B, 6, D))
        decode_sequence(
            lesson,
            x,
            params,
            H,
            G,
            [3, 1, 2],
            what="decoding x (2, 6, 12) in chunks of 3, 1 and 2 tokens from an empty cache",
        )

    def test_decode_step_keeps_float32(self, lesson):
        """decode_step keeps float32 while decoding token by token"""
        r = rng(50)
        params = make_params(r, dtype=np.float32)
        x = r.standard_normal((B, 3, D)).astype(np.float32)
        decode_sequence(
            lesson, x, params, H, G, [1, 1, 1], what="decoding x (2, 3, 12) in float32 token by token"
        )

    @given(
        b=st.integers(1, 2),
        n_kv_heads=st.integers(1, 3),
        n_rep=st.integers(1, 3),
        k=st.integers(1, 3),
        chunks=st.lists(st.integers(1, 3), min_size=1, max_size=3),
        bias=st.booleans(),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_decoding_in_any_chunks_equals_full_causal_attention(
        self, lesson, b, n_kv_heads, n_rep, k, chunks, bias, seed
    ):
        """decoding in any chunks equals full causal attention"""
        r = rng(seed)
        n_heads = n_kv_heads * n_rep
        d = n_heads * k
        params = make_params(r, d=d, n_heads=n_heads, n_kv_heads=n_kv_heads, k=k, bias=bias)
        x = r.standard_normal((b, sum(chunks), d))
        decode_sequence(
            lesson,
            x,
            params,
            n_heads,
            n_kv_heads,
            chunks,
            what=f"decoding x {x.shape} in chunks {chunks} (n_heads={n_heads}, "
            f"n_kv_heads={n_kv_heads}, bias={bias})",
        )
