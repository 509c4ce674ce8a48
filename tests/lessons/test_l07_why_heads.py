"""Grading tests for lesson 7 (l07_why_heads): count_parameters, two_head_weights.

count_parameters is compared with a count made from the list of parameter shapes; the known
wrong counts (biases forgotten, W_O forgotten, every head counted with its own D x D matrices) are
recognised by value and named. Lesson 7 grades multi-head attention only (n_kv_heads None or equal
to n_heads): the counts with fewer key/value heads are graded in lesson 8 (kv_parameter_saving),
which teaches grouped-query attention.

two_head_weights is MEASURED: the returned params go through this file's own multi-head attention
(a slow loop over sequences, heads, queries and keys) on random token sequences, and the output is
compared with the target at every graded position t >= 2. When it misses, the message says what
each half of the output holds instead (the token 0, 1 or 2 back, a position code, a blur) and
whether a head's attention is too soft. Sizes are all different (V=5, L=7, K=12, D=24, B=40).
"""

import math
import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from course.engine.testing import (
    KnownMistake,
    LearnerError,
    Mistake,
    check_scalar,
    diagnose,
    exercise,
    hand_checked,
    remembered,
    rng,
    variation,
)

TOL = 1e-9  # largest error allowed at a graded position: SCORE = 50 gives about 1e-21
FIRST_GRADED = 2  # positions 0 and 1 have no token two back: not graded
V, L = 5, 7  # vocab_size, max_len: K = V + L = 12, D = 2 * K = 24


# ---------------------------------------------------------------- count_parameters
def shapes_of_layer(d, h, g, bias):
    """Oracle: every parameter's shape, from the conventions (w_q (D, H*K), w_k (D, G*K), ...)."""
    k = d // h
    shapes = {"w_q": (d, h * k), "w_k": (d, g * k), "w_v": (d, g * k), "w_o": (h * k, d)}
    if bias:
        shapes.update({"b_q": (h * k,), "b_k": (g * k,), "b_v": (g * k,), "b_o": (d,)})
    return shapes


def count_oracle(d, h, g=None, bias=True):
    g = h if g is None else g
    return sum(math.prod(shape) for shape in shapes_of_layer(d, h, g, bias).values())


# ---------------------------------------------------------------- classic mistakes, by name
NO_BIASES = Mistake(
    "biases-not-counted",
    "the biases are not counted (b_q, b_k, b_v and b_o have D + G*K + G*K + D entries together)",
    exercises=("count_parameters",),
)
NO_OUT_PROJ_AND_BIAS = Mistake(
    "out-projection-not-counted",
    "W_O (and b_o) are not counted: the layer ends with the (H*K, D) output projection",
    exercises=("count_parameters",),
)
NO_OUT_PROJ = Mistake(
    "out-projection-not-counted",
    "W_O is not counted: the layer ends with the (H*K, D) output projection",
    exercises=("count_parameters",),
)
LAYER_PER_HEAD = Mistake(
    "layer-per-head",
    "every head was counted with the whole layer's parameters: the count changes with the number of heads",
    exercises=("count_parameters",),
)
SQUARE_PER_HEAD = Mistake(
    "square-matrices-per-head",
    "every head was counted with its own D x D matrices: the count changes with the "
    "number of heads, but head h only owns K = D // H columns of each matrix",
    exercises=("count_parameters",),
)
KV_WITHOUT_K = Mistake(
    "kv-counted-without-k",
    "W_K and W_V were counted as D x G instead of D x (G*K)",
    exercises=("count_parameters",),
)
FLOAT_COUNT = Mistake(
    "float-count", "the count is a float: / was used where // was needed", exercises=("count_parameters",)
)
CURRENT_TOKEN = Mistake(
    "keys-not-shifted",
    "a head attends to the current token: its keys are not shifted",
    exercises=("two_head_weights",),
)
WRONG_OFFSET = Mistake(
    "wrong-offset",
    "{half} holds the token {back} back instead of {wanted} back",
    exercises=("two_head_weights",),
)
COPIES_POSITION = Mistake(
    "values-copy-position",
    "the values copy the position code instead of the token",
    exercises=("two_head_weights",),
)
COPIES_WHOLE = Mistake(
    "values-copy-whole-code",
    "the values copy the whole [token | position] code",
    exercises=("two_head_weights",),
)
HALVES_SWAPPED = Mistake("halves-swapped", "the halves are swapped", exercises=("two_head_weights",))
SAME_OFFSET = Mistake("same-offset", "both heads look at the same offset", exercises=("two_head_weights",))
FUTURE_KEYS = Mistake(
    "keys-point-into-the-future",
    "a head's keys point into the future: the key its query matches is hidden by the causal mask",
    exercises=("two_head_weights",),
)
TOO_SOFT = Mistake(
    "attention-too-soft",
    "the attention is too soft: the scores are not far enough apart",
    exercises=("two_head_weights",),
)
NO_SQRT_K = Mistake(
    "query-without-sqrt-k",
    "the queries lack their sqrt(K) factor: after the 1/sqrt(K) scaling the right key scores "
    "SCORE / sqrt(K) instead of SCORE",
    exercises=("two_head_weights",),
)


def count_mistakes(d, h, g=None, bias=True):
    """Known wrong counts: each mistake -> the count it gives."""
    g = h if g is None else g
    k = d // h
    b = 1 if bias else 0
    right = count_oracle(d, h, g, bias)
    return {
        NO_BIASES: 2 * d * d + 2 * d * g * k,
        NO_OUT_PROJ_AND_BIAS: d * d + 2 * d * g * k + b * (d + 2 * g * k),
        NO_OUT_PROJ: d * d + 2 * d * g * k + b * (2 * d + 2 * g * k),
        LAYER_PER_HEAD: h * right,
        SQUARE_PER_HEAD: h * (d * d + 2 * d * g * k + b * (d + 2 * g * k)) + d * d + b * d,
        KV_WITHOUT_K: 2 * d * d + 2 * d * g + b * (2 * d + 2 * g),
    }


def check_count(actual, d, h, g=None, bias=True):
    what = (
        f"count_parameters({d}, {h}"
        + (f", n_kv_heads={g}" if g is not None else "")
        + (", bias=False" if not bias else "")
        + ")"
    )
    expected = count_oracle(d, h, g, bias)
    if isinstance(actual, np.ndarray) and actual.ndim == 0:
        actual = actual.item()
    if isinstance(actual, float) and actual == expected:
        raise KnownMistake(
            f"{what} returned the float {actual!r}; a count is an int. Use // "
            "(integer division) for K = D // H: / always gives a float.",
            FLOAT_COUNT,
        )
    if isinstance(actual, (int, np.integer)) and not isinstance(actual, bool) and actual != expected:
        known = diagnose(np.asarray(int(actual)), count_mistakes(d, h, g, bias), np.asarray(expected))
        if known:
            raise KnownMistake(f"{what} returned {actual}; expected {expected}.", known)
    check_scalar(actual, expected, what=what)
    assert isinstance(actual, (int, np.integer)), (
        f"{what} returned {actual!r}, a {type(actual).__name__}; a count is an int."
    )


def value_error_line(call):
    """Run call(); the learner's exception line if it raised, else None (and the value)."""
    try:
        value = call()
    except LearnerError as exc:
        return str(exc).strip().splitlines()[-1], None
    return None, value


def names_number(line, n):
    return re.search(rf"(?<![0-9.]){n}(?![0-9.])", line) is not None


@exercise("count_parameters")
class TestCountParameters:
    def test_count_parameters_of_multi_head_attention_is_4dd_plus_4d(self, lesson):
        """count_parameters of multi-head attention is 4*D*D + 4*D"""
        # D=12, H=3 (K=4): W_Q, W_K, W_V, W_O 12 x 12 = 4 * 144 = 576, biases 4 * 12 = 48: 624
        # Under an instructor's secret: K from 9 to 16, so D = 3K from 27 to 48.
        d = 3 * variation("count_parameters 4DD + 4D").integers(9, 17, 4)
        check_count(lesson.count_parameters(d, 3), d, 3)

    def test_count_parameters_without_bias_is_4dd(self, lesson):
        """count_parameters with bias=False is 4*D*D"""
        # D=20, H=5: 4 * 400 = 1600
        # Under an instructor's secret: another K than 4, so D = 5K another width than 20.
        d = 5 * variation("count_parameters 4DD").integers(2, 10, 4)
        check_count(lesson.count_parameters(d, 5, bias=False), d, 5, bias=False)

    def test_count_parameters_is_the_same_for_every_number_of_heads(self, lesson):
        """the count is the same for every number of heads H"""
        # Under an instructor's secret: another D with many divisors (36, 48, 60 or 72), each one an H.
        d = variation("count_parameters every H").pick([24, 36, 48, 60, 72])
        heads = [h for h in range(1, d + 1) if d % h == 0]  # D = 24: 1, 2, 3, 4, 6, 8, 12, 24
        counts = {h: lesson.count_parameters(d, h) for h in heads}
        values = {h: (c.item() if isinstance(c, np.ndarray) else c) for h, c in counts.items()}
        assert len(set(values.values())) == 1, (
            f"count_parameters({d}, H) for H = {', '.join(map(str, heads))} gives "
            f"{list(values.values())}: it changes with the number of heads. It should not: W_Q and "
            "W_O are (D, H*K) and (H*K, D) with H*K = D, and W_K, W_V are (D, H*K) too in "
            "multi-head attention. The heads split the D features, they do not multiply them: "
            f"the count is 4*D*D + 4*D = {count_oracle(d, 1)} for every H."
        )
        check_count(counts[4], d, 4)

    def test_count_parameters_of_the_transformer_base_model_and_gpt_3(self, lesson):
        """the counts of the Transformer base model (D=512) and GPT-3 (D=12288)"""
        # Vaswani et al. 2017 base: D=512, H=8 (K=64): 4 * 512 * 512 + 4 * 512 = 1,050,624
        # GPT-3 175B: D=12288, H=96 (K=128): 4 * 12288 * 12288 + 4 * 12288 = 604,028,928
        # Under an instructor's secret: other real models, BERT-base (768, 12) or BERT-large
        # (1024, 16), and LLaMA 7B (4096, 32), 13B (5120, 40) or 65B (8192, 64).
        v = variation("count_parameters of real models")
        for d, h in (
            v.pick([(512, 8), (768, 12), (1024, 16)]),
            v.pick([(12288, 96), (4096, 32), (5120, 40), (8192, 64)]),
        ):
            check_count(lesson.count_parameters(d, h), d, h)

    def test_count_parameters_with_n_kv_heads_none_or_equal_to_n_heads_is_mha(self, lesson):
        """n_kv_heads=None or n_kv_heads=n_heads counts multi-head attention"""
        # Under an instructor's secret: another H than 6 and another K than 5 (D = H * K).
        v = variation("count_parameters n_kv_heads")
        h, k = v.integers(2, 9, 6), v.integers(2, 9, 5)
        check_count(lesson.count_parameters(h * k, h, n_kv_heads=None), h * k, h)
        check_count(lesson.count_parameters(h * k, h, n_kv_heads=h), h * k, h, h)

    def test_count_parameters_raises_value_error_when_d_is_not_divisible_by_h(self, lesson):
        """D = 10, H = 4 raises a ValueError that names 10 and 4"""
        # Under an instructor's secret: another H than 4 and D = 2H + another remainder than 2.
        v = variation("count_parameters D not divisible by H")
        h = v.integers(3, 8, 4)
        d = 2 * h + v.integers(1, h, 2)
        line, value = value_error_line(lambda: lesson.count_parameters(d, h))
        assert line is not None, (
            f"count_parameters({d}, {h}) returned {value!r}; it should raise ValueError: d_model={d} "
            f"is not divisible by n_heads={h}, so there is no whole head width K = D // H."
        )
        assert line.startswith("ValueError"), (
            f"count_parameters({d}, {h}) raised `{line}`; it should raise ValueError (raise it "
            f"yourself before computing anything, with a message that names {d} and {h})."
        )
        assert names_number(line, d) and names_number(line, h), (
            f"count_parameters({d}, {h}) raised `{line}`: the message should name both numbers, "
            f"d_model={d} and n_heads={h}, so the caller sees what does not divide."
        )

    @given(k=st.integers(1, 8), h=st.integers(1, 16), bias=st.booleans(), explicit=st.booleans())
    def test_count_parameters_matches_the_parameter_shapes(self, lesson, k, h, bias, explicit):
        """the count matches the parameter shapes for any D, H and bias"""
        # Under an instructor's secret: K from 9 to 24, past every K of a public grade.
        k += variation("count_parameters for any sizes").pick([0, 8, 16])
        d = h * k
        g_arg = h if explicit else None  # multi-head attention: G = H, given or left out
        check_count(lesson.count_parameters(d, h, n_kv_heads=g_arg, bias=bias), d, h, g_arg, bias)


# ---------------------------------------------------------------- two_head_weights: oracles
def inputs(tokens, v, ln):
    """x[b, t] = [one_hot(token) (V) | one_hot(t) (L) | zeros (V + L)], one element at a time."""
    n_b, n_t = tokens.shape
    x = np.zeros((n_b, n_t, 2 * (v + ln)))
    for b in range(n_b):
        for t in range(n_t):
            x[b, t, tokens[b, t]] = 1.0
            x[b, t, v + t] = 1.0
    return x


def targets(tokens, v, ln):
    """y[b, t]: token t-1 one-hot in features 0:V, token t-2 in K:K+V (K = V + L), for t >= 2."""
    n_b, n_t = tokens.shape
    k = v + ln
    y = np.zeros((n_b, n_t, 2 * k))
    for b in range(n_b):
        for t in range(FIRST_GRADED, n_t):
            y[b, t, tokens[b, t - 1]] = 1.0
            y[b, t, k + tokens[b, t - 2]] = 1.0
    return y


@remembered
def multi_head_loop(x, params, n_heads):
    """Oracle: causal self-attention, sequence by sequence, head by head, query by query.

    Course conventions: w_q (D, H*K) etc., head h owns columns h*K:(h+1)*K, optional biases,
    scores scaled by 1/sqrt(K), softmax over the keys s <= t. Returns out (B, T, D) and
    weights (B, H, T, T).
    """
    n_b, n_t, _ = x.shape
    w_q, w_k, w_v, w_o = (params[n] for n in ("w_q", "w_k", "w_v", "w_o"))
    zeros = np.zeros(w_q.shape[1])
    b_q, b_k, b_v = (params.get(n, zeros) for n in ("b_q", "b_k", "b_v"))
    b_o = params.get("b_o", np.zeros(w_o.shape[1]))
    k = w_q.shape[1] // n_heads
    out = np.zeros((n_b, n_t, w_o.shape[1]))
    weights = np.zeros((n_b, n_heads, n_t, n_t))
    for b in range(n_b):
        q_all = x[b] @ w_q + b_q  # (T, H*K)
        k_all = x[b] @ w_k + b_k
        v_all = x[b] @ w_v + b_v
        concat = np.zeros((n_t, n_heads * k))
        for h in range(n_heads):
            cols = slice(h * k, (h + 1) * k)
            for t in range(n_t):
                scores = [float(q_all[t, cols] @ k_all[s, cols]) / math.sqrt(k) for s in range(t + 1)]
                top = max(scores)
                e = [math.exp(sc - top) for sc in scores]
                total = sum(e)
                for s in range(t + 1):
                    weights[b, h, t, s] = e[s] / total
                    concat[t, cols] += weights[b, h, t, s] * v_all[s, cols]
        out[b] = concat @ w_o + b_o
    return out, weights


# ---------------------------------------------------------------- two_head_weights: checks
def checked_params(params, v, ln, what):
    """The learner's params as float64 arrays, after checking keys, shapes and finiteness."""
    k = v + ln
    d = 2 * k
    assert isinstance(params, dict), (
        f"{what} returned {type(params).__name__}; expected a dict of arrays with the keys "
        "w_q, w_k, w_v, w_o (and optionally b_q, b_k, b_v, b_o)."
    )
    missing = [n for n in ("w_q", "w_k", "w_v", "w_o") if n not in params]
    assert not missing, f"{what} has no {', '.join(missing)}: the dict needs w_q, w_k, w_v, w_o."
    out = {}
    for name, value in params.items():
        if value is None and name.startswith("b_"):
            continue
        if name not in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
            continue
        want = (d, d) if name.startswith("w_") else (d,)
        assert isinstance(value, np.ndarray) and value.dtype.kind in "biuf", (
            f"{what}['{name}'] is not a numpy array of numbers."
        )
        assert value.shape == want, (
            f"{what}['{name}'] has shape {value.shape}; expected {want}: D = 2 * (V + L) = "
            f"2 * ({v} + {ln}) = {d}, with H = 2 heads of width K = V + L = {k}, so every "
            f"weight is (D, H*K) or (H*K, D) = ({d}, {d})."
        )
        assert np.isfinite(value).all(), f"{what}['{name}'] holds NaN or inf values."
        out[name] = value.astype(np.float64)
    return out


def half_candidates(tokens, v, ln):
    """What a half of the output may hold instead of its token: {key: (array, what it holds)}.

    Each array is (B, T-2, K): the graded positions t >= 2, the K features of one half.
    """
    n_b, n_t = tokens.shape
    k = v + ln
    ts = range(FIRST_GRADED, n_t)
    found = {}
    for back in (0, 1, 2):
        tok, pos, pos_slot = (np.zeros((n_b, len(ts), k)) for _ in range(3))
        for b in range(n_b):
            for i, t in enumerate(ts):
                tok[b, i, tokens[b, t - back]] = 1.0  # the token code, in the first V features
                pos[b, i, t - back] = 1.0  # a position code, in the first L features
                pos_slot[b, i, v + t - back] = 1.0  # a position code, where x keeps it
        found[("token", back)] = (tok, f"the token {back} back")
        found[("position", back)] = (pos, f"the position code of the token {back} back")
        found[("position slot", back)] = (pos_slot, f"the position code of the token {back} back")
        found[("whole", back)] = (tok + pos_slot, f"the token {back} back AND its position code")
    found[("blend", 0)] = (
        (found[("token", 1)][0] + found[("token", 2)][0]) / 2,
        "an even blend of the tokens 1 and 2 back",
    )
    found[("zeros", 0)] = (np.zeros((n_b, len(ts), k)), "nothing (all zeros)")
    return found


HALF_NAMES = ("the first half", "the second half")


def _scaled_score(peaks):
    """The score of the winning key, from the peak weight of the last graded query, whose other
    keys all score 0: peak = 1 / (1 + n exp(-s)) with n other keys, so s = log(n peak / (1 - peak))."""
    last = peaks[..., -1].min()  # the last query sees n = T - 1 other keys
    n_others = FIRST_GRADED + peaks.shape[-1] - 1
    if not 0 < last < 1:
        return None
    return math.log(n_others * last / (1 - last))


def future_heads(params, x, k):
    """Heads some of whose graded queries score a later key (one the causal mask hides) above
    every key they may see: their keys are shifted the wrong way. Scores without the mask."""
    found = []
    for h in (0, 1):
        cols = slice(h * k, (h + 1) * k)
        q = x @ params["w_q"][:, cols] + np.asarray(params.get("b_q", np.zeros(2 * k)))[cols]
        keys = x @ params["w_k"][:, cols] + np.asarray(params.get("b_k", np.zeros(2 * k)))[cols]
        scores = q @ np.swapaxes(keys, -1, -2) / math.sqrt(k)  # (B, T, T), queries by keys
        for t in range(FIRST_GRADED, x.shape[1] - 1):
            if (scores[:, t, t + 1 :].max(axis=-1) > scores[:, t, : t + 1].max(axis=-1) + 1).any():
                found.append(h)
                break
    return found


def explain(out, weights, tokens, v, ln, params=None):
    """(sentences that say what is wrong, the mistake or None), from what each half of
    the output holds, from where each head's best key lies and from how sharp its attention is."""
    k = v + ln
    graded = out[:, FIRST_GRADED:]
    candidates = half_candidates(tokens, v, ln)
    holds, shares = [], []
    for h in (0, 1):
        half = graded[..., h * k : (h + 1) * k]
        wanted = candidates[("token", h + 1)][0]
        # the share of the graded positions that tell a candidate from the wanted token (it
        # differs there) at which the half equals the candidate; at least two such positions,
        # or a repeated token (the token 0 back equal to the one 1 back) would name a mistake
        share = {}
        for key, (arr, _) in candidates.items():
            telling = np.abs(arr - wanted).max(axis=-1) > 0.05
            hits = np.abs(half - arr).max(axis=-1) < 0.05
            share[key] = float(hits[telling].mean()) if telling.sum() >= 2 else 0.0
        share[("token", h + 1)] = float((np.abs(half - wanted).max(axis=-1) < 0.05).mean())
        best = max(share, key=share.get)
        holds.append(best if share[best] >= 0.5 else None)
        shares.append(share[best])
    lines, mistakes = [], []
    for h, key in enumerate(holds):
        if key is None or key == ("token", h + 1):
            continue
        kind, back = key
        where = f"{HALF_NAMES[h].capitalize()} (features {h * k}:{(h + 1) * k})"
        often = "" if shares[h] == 1 else f" (at {shares[h]:.0%} of the graded positions)"
        if kind == "token" and back == 0:
            mistakes.append(CURRENT_TOKEN)
            lines.append(
                f"{where} holds the token 0 back instead of {h + 1} back{often}: the "
                "current token. A key must match the query of a LATER position: the key "
                "of position s is e_(s + offset), not e_s."
            )
        elif kind == "token":
            mistakes.append(WRONG_OFFSET.format(half=HALF_NAMES[h], back=back, wanted=h + 1))
            lines.append(f"{where} holds the token {back} back instead of {h + 1} back{often}.")
        elif kind.startswith("position"):
            mistakes.append(COPIES_POSITION)
            lines.append(
                f"{where} should hold the token {h + 1} back but holds "
                f"{candidates[key][1]}{often}: the values must copy the token part of x "
                "(rows 0:V of W_V), not its position part."
            )
        elif kind == "whole":
            mistakes.append(COPIES_WHOLE)
            lines.append(
                f"{where} holds {candidates[key][1]}{often}: the values copied the whole "
                "[token | position] code of x, but only the token belongs in the output "
                "(every feature but the token's V must be 0)."
            )
        else:
            lines.append(f"{where} should hold the token {h + 1} back but holds {candidates[key][1]}{often}.")
    if holds == [("token", 2), ("token", 1)]:
        mistakes.insert(0, HALVES_SWAPPED)
        lines.append(
            "The halves are swapped: the head that looks 1 back must write the first "
            "half (features 0:K) and the head that looks 2 back the second half."
        )
    elif holds[0] == holds[1] and holds[0] is not None and holds[0][0] == "token":
        mistakes.insert(0, SAME_OFFSET)
        lines.append(
            f"Both halves hold the token {holds[0][1]} back: both heads look at the same "
            "offset. Head 1's keys must be shifted by one position, head 2's by two."
        )
    peaks = weights[:, :, FIRST_GRADED:].max(axis=-1)  # (B, H, T-2): each query's largest weight
    soft = [h for h in range(peaks.shape[1]) if peaks[:, h].min() < 1 - 1e-12]
    scaled = _scaled_score(peaks) if soft else None
    late = future_heads(params, inputs(tokens, v, ln), k) if soft and params is not None else []
    if scaled is not None and abs(scaled - 50 / math.sqrt(k)) < 0.5:
        mistakes.insert(0, NO_SQRT_K)
        lines.append(
            f"The right key scores about {scaled:.1f} after the 1/sqrt(K) scaling, which "
            f"is SCORE / sqrt(K) = 50 / sqrt({k}) = {50 / math.sqrt(k):.1f}, not SCORE = 50: the queries "
            f"lack their sqrt(K) factor. Every other key then keeps exp(-{50 / math.sqrt(k):.1f}) = "
            f"{math.exp(-50 / math.sqrt(k)):.1g} of the weight, where SCORE = 50 leaves about 2e-22."
        )
    elif late:
        mistakes.insert(0, FUTURE_KEYS)
        heads = " and ".join(f"head {h + 1}" for h in late)
        lines.append(
            f"The keys of {heads} point into the future: a query scores highest with a LATER "
            "position's key, which the causal mask hides, so its weight spreads over the keys it "
            "may see (the attention looks too soft, but the scale is not the problem). Position s "
            "must answer the query of position s + offset (row V + s of W_K marks column s + "
            "offset of the head), so that query t finds the key t - offset, before it."
        )
    elif soft:
        b, h, i = np.unravel_index(int(np.argmin(peaks)), peaks.shape)
        share = float((peaks[:, soft] < 1 - 1e-4).mean())
        aimed = all(  # each soft head's largest weight still on its key: too flat, not lost
            (weights[:, head, t].argmax(axis=-1) == t - (head + 1)).all()
            for head in soft
            for t in range(FIRST_GRADED, weights.shape[2])
        )
        if share == 1 and aimed:  # soft everywhere, aimed right: the scale of the scores
            mistakes.append(TOO_SOFT)
        heads = " and ".join(f"head {s + 1}" for s in soft)
        lines.append(
            f"The attention is too soft in {heads}, at {share:.0%} of the graded positions: "
            f"head {h + 1}'s largest weight at position {i + FIRST_GRADED} of sequence {b} is only "
            f"{peaks[b, h, i]:.3f}, where it should be 1 up to about 1e-6. The key a head should "
            "attend to must score far above every other key: after the 1/sqrt(K) scaling, SCORE "
            f"= 50 for it (query weight SCORE * sqrt(K) = {50 * math.sqrt(k):.4g}) and 0 for the "
            "others. Does every position's query have a key that matches it?"
        )
    return lines, (mistakes[0] if mistakes else None)


def check_two_heads(lesson, tokens, v, ln, expected=None):
    """Run the learner's params through the oracle on `tokens` and compare with the target."""
    what = f"two_head_weights({v}, {ln})"
    params = checked_params(lesson.two_head_weights(v, ln), v, ln, what)
    k = v + ln
    out, weights = multi_head_loop(inputs(tokens, v, ln), params, 2)
    y = targets(tokens, v, ln) if expected is None else expected
    assert np.isfinite(out).all(), (
        f"multi-head attention with {what} gives NaN or inf: are the scores so large that "
        "exp overflows? Scores of SCORE = 50 are plenty."
    )
    error = np.abs(out - y)[:, FIRST_GRADED:]
    right = [
        np.argmax(out[:, FIRST_GRADED:, h * k : h * k + v], axis=-1)
        == np.argmax(y[:, FIRST_GRADED:, h * k : h * k + v], axis=-1)
        for h in (0, 1)
    ]
    if error.max() < TOL and all(r.all() for r in right):
        return
    lines = [
        f"Multi-head attention (H = 2, causal mask) with the params of {what} misses the "
        f"target on {len(tokens)} sequences of length {tokens.shape[1]}: largest error "
        f"{error.max():.3g} (allowed {TOL:g}); the argmax of the first half's V token "
        f"features is right at {right[0].mean():.0%} of the graded positions t >= 2, of "
        f"the second half's at {right[1].mean():.0%}."
    ]
    explained, mistake = explain(out, weights, tokens, v, ln, params)
    lines += explained
    b, i, f = np.unravel_index(int(np.argmax(error)), error.shape)
    t, half = i + FIRST_GRADED, int(f >= k)
    cols = slice(half * k, (half + 1) * k)
    show = dict(precision=3, suppress_small=True, max_line_width=200)
    lines.append(
        f"  worst at sequence {b}, position {t} (tokens {tokens[b].tolist()}), "
        f"{HALF_NAMES[half]} (features {cols.start}:{cols.stop}):"
    )
    lines.append(f"  expected {np.array2string(y[b, t, cols], **show)}")
    lines.append(f"  got      {np.array2string(out[b, t, cols], **show)}")
    if mistake:
        raise KnownMistake("\n".join(lines), mistake)
    raise AssertionError("\n".join(lines))


def sizes(name, v, ln):
    """(vocab_size, max_len) of a two_head_weights check: (v, ln) without a secret. Under an
    instructor's secret L from 9 to 12, past every public one, and another V from 3 to 8."""
    var = variation(f"{name}: sizes")
    return var.integers(3, 9, v), var.integers(9, 13, ln)


@exercise("two_head_weights")
class TestTwoHeadWeights:
    def test_two_head_weights_are_four_d_by_d_matrices(self, lesson):
        """two_head_weights gives w_q, w_k, w_v, w_o, each (D, D), D = 2*(V + L)"""
        # Under an instructor's secret: other sizes, L from 9 to 12 (see sizes).
        v, ln = sizes("two_head_weights shapes", V, L)
        what = f"two_head_weights({v}, {ln})"
        params = checked_params(lesson.two_head_weights(v, ln), v, ln, what)
        assert set(params) >= {"w_q", "w_k", "w_v", "w_o"}

    @hand_checked
    def test_two_heads_copy_the_tokens_one_and_two_back_by_hand(self, lesson):
        """the two heads copy the tokens 1 and 2 back, checked by hand"""
        # Under an instructor's secret: other V and L (L >= 9), the token ids relabelled.
        v, ln = sizes("two_head_weights by hand", 3, 4)
        token = variation("two_head_weights by hand").permutation(v)  # token id i -> token[i]
        k = v + ln  # V=3, L=4: K = 7, D = 14
        tokens = token[np.array([[2, 0, 1, 2], [1, 1, 0, 2]])]
        expected = np.zeros((2, 4, 2 * k))
        # sequence 0, t=2: token 1 back = 0, 2 back = 2; t=3: 1 back = 1, 2 back = 0
        expected[0, 2, token[0]], expected[0, 2, k + token[2]] = 1, 1
        expected[0, 3, token[1]], expected[0, 3, k + token[0]] = 1, 1
        # sequence 1, t=2: 1 back = 1, 2 back = 1; t=3: 1 back = 0, 2 back = 1
        expected[1, 2, token[1]], expected[1, 2, k + token[1]] = 1, 1
        expected[1, 3, token[0]], expected[1, 3, k + token[1]] = 1, 1
        check_two_heads(lesson, tokens, v, ln, expected)

    def test_two_heads_copy_the_tokens_one_and_two_back_on_random_sequences(self, lesson):
        """the two heads copy the tokens 1 and 2 back on random sequences"""
        # Under an instructor's secret: other sizes, L from 9 to 12 (see sizes), other tokens.
        v, ln = sizes("two_head_weights random sequences", V, L)
        tokens = rng(1).integers(0, v, size=(40, ln))
        check_two_heads(lesson, tokens, v, ln)

    def test_two_heads_work_on_sequences_shorter_than_max_len(self, lesson):
        """the two heads work on sequences shorter than max_len"""
        # Under an instructor's secret: other sizes, L from 9 to 12 (see sizes), other tokens.
        v, ln = sizes("two_head_weights short sequences", V, L)
        tokens = rng(2).integers(0, v, size=(12, 4))  # T = 4 < L = 7
        check_two_heads(lesson, tokens, v, ln)

    def test_two_heads_work_with_more_tokens_than_positions(self, lesson):
        """the two heads work with more tokens than positions (V=9 > L=5)"""
        # Under an instructor's secret: V from 10 to 13, past every public one, and another L < V.
        var = variation("two_head_weights more tokens")
        v = var.integers(10, 14, 9)
        ln = var.integers(3, v, 5)
        tokens = rng(3).integers(0, v, size=(20, ln))  # V = 9 > L = 5
        check_two_heads(lesson, tokens, v, ln)

    @given(
        v=st.integers(2, 6),
        ln=st.integers(3, 8),
        t_short=st.integers(0, 5),
        n_b=st.integers(1, 3),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_two_heads_solve_the_task_for_any_sizes(self, lesson, v, ln, t_short, n_b, seed):
        """the two heads solve the task for any vocab_size and max_len"""
        # Under an instructor's secret: L from 9 to 14, past every public one.
        ln += variation("two_head_weights for any sizes").pick([0, 6])
        n_t = max(FIRST_GRADED + 1, ln - t_short)
        tokens = rng(seed).integers(0, v, size=(n_b, n_t))
        check_two_heads(lesson, tokens, v, ln)
