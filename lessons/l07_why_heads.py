"""Lesson 7: why several heads?

Two questions every attention paper answers in passing: how many heads, and why not one wide
head? This lesson answers both with numbers you compute.

What heads cost
---------------
An attention layer of model width D with H query heads of width K = D // H and G key/value heads
(G = H in multi-head attention; lesson 8 lets several query heads share one key/value head) holds

    W_Q (D, H*K) = (D, D)      b_q (D,)
    W_K (D, G*K)               b_k (G*K,)
    W_V (D, G*K)               b_v (G*K,)
    W_O (H*K, D) = (D, D)      b_o (D,)

With G = H, G*K = H*K = D and the total is 4*D*D + 4*D, the same number for H = 1, 2, 4, ... or
D heads. The heads SPLIT the D features into H slices of width K; they do not multiply them.
PyTorch agrees: sum(p.numel() for p in torch.nn.MultiheadAttention(D, H).parameters()) is
4*D*D + 4*D for every H that divides D. The computation does not grow either: the projections cost
2*T*D*D + 2*S*D*D multiply-adds per sequence whatever H is (W_Q and W_O act on the T query
positions, W_K and W_V on the S key/value positions: 4*T*D*D for self-attention, where S = T), and
the scores cost H * T*S*K = T*S*D.
This lesson grades multi-head attention, G = H (n_kv_heads None or equal to n_heads); lesson 8
teaches G < H and grades those counts.

How many heads in practice
--------------------------
The Transformer of Vaswani et al. 2017 ("Attention Is All You Need", section 3.2.2 and table 3):
the base model has H = 8 heads in d_model = 512, so d_k = d_v = 512 / 8 = 64; the big model has
H = 16 heads in d_model = 1024, so d_k = d_v = 1024 / 16 = 64 again. Typical models since have
8, 12 or 16 heads, each 64 or 128 wide (BERT-base: 12 heads of 64 in d_model = 768). The largest
have more heads and wider ones: GPT-3 175B (Brown et al. 2020) has 96 heads of width 128 in
d_model = 12,288. The paper's projections are matrices with no biases (section 3.2.2), so an
attention layer of the base model holds 4 * 512 * 512 = 1,048,576 weights and one of the big model
4 * 1024 * 1024 = 4,194,304: count_parameters(512, 8, bias=False) and count_parameters(1024, 16,
bias=False). With the four biases (PyTorch's nn.MultiheadAttention has them unless bias=False),
count_parameters(512, 8) gives 1,050,624 (4 * 512 * 512 + 4 * 512) and count_parameters(1024, 16)
4,198,400; count_parameters(12288, 96) gives a GPT-3 layer's 604,028,928, biases included.

What heads buy
--------------
What does change with H is the number of attention PATTERNS. A head computes for every query ONE
softmax, one probability distribution over the keys, and returns one weighted average of the
values. H heads compute H distributions per query, each from its own K-dimensional queries and
keys. More heads: more patterns, each scored in a narrower space (head h's score matrix
Q_h K_h^T has rank at most K; Bhojanapalli et al. 2020 call this the low-rank bottleneck of
narrow heads). In trained translation models Voita et al. 2019 found that many of the heads that
matter are "positional": they attend to the previous or the next token, which is what the task
below asks of two heads.

A task that needs two patterns
------------------------------
Tokens are integers 0 .. V-1 (V = vocab_size) in sequences of length T <= L (L = max_len). The
layer sees position t of sequence b as (`make_inputs` builds it)

    x[b, t] = [ one_hot(token[b, t], V) | one_hot(t, L) | zeros(V + L) ]      D = 2 * (V + L)

attends with a causal mask (position t sees positions 0 .. t), and must output, at every position
t >= 2 (`target_outputs` builds it):

    out[b, t, 0:V]       = one_hot(token[b, t - 1], V)    in the first half  (features 0 .. K-1)
    out[b, t, K:K+V]     = one_hot(token[b, t - 2], V)    in the second half (features K .. 2K-1)
    every other feature  = 0                              K = D // 2 = V + L

D = 2 * (V + L) gives each of the two heads a K = V + L wide space: room for a whole
[token | position] code. The last V + L features of x are simply empty.

Positions 0 and 1 are not graded: there is no token two back of them. A softmax must put its
weight somewhere, so a head with nothing to look at still looks at something (trained models park
such attention on the first token, an "attention sink", Xiao et al. 2023). Whatever your layer
outputs there is accepted.

One head cannot
---------------
A single head, however wide, gives position t one distribution over the keys. To read both
tokens it must put some weight a on key t-1 and 1-a on key t-2 (weight put anywhere else mixes in
tokens that have nothing to do with the target), and its output is then linear in the blend

    a * one_hot(token[t-1]) + (1 - a) * one_hot(token[t-2])     (plus a constant)

because the values and W_O are linear maps. A linear read-out of a blend cannot tell which token
came from where. `single_head_error` measures it: for a given a it fits the best linear read-out
(with a constant) by least squares over every pair of tokens and returns the root-mean-square
distance between the read-out and the target. `best_single_head_error` searches a over [0, 1].
For every a the mean squared error comes out at 1 - 1/V, the variance of one whole one-hot token:
whatever the split, one token's worth of information is lost. The function returns its square
root, sqrt(1 - 1/V): 0.89 for V = 5 (a mean squared error of 0.8), against below 1e-9 for the
two heads. That covers every head whose attention depends on positions only; a head whose
scores also read the tokens can move a with the tokens, but its output is still ONE blend of
value vectors.

Two heads can
-------------
Head 1 looks one position back, head 2 two back, each with an effectively one-hot softmax. In the
head's own K-dimensional space, with e_i the i-th unit vector:

    query of position t:  SCORE * sqrt(K) * e_t
    key of position s:    e_(s + offset)                  offset 1 for head 1, 2 for head 2
    scaled score:         q . k / sqrt(K) = SCORE if s + offset == t, else 0

With SCORE = 50 the winning key gets weight 1 / (1 + t * exp(-50)), which is 1 up to 2e-22 * t.
The values copy the token code, and W_O sends head 1 into the first half of the output, head 2
into the second. To see your layer at work, with your lessons 4 and 6:

    from l04_masks import causal_mask
    from l06_multi_head import multi_head_attention
    tokens = np.random.default_rng(0).integers(0, 5, size=(3, 8))
    x = make_inputs(tokens, 5, 8)
    out, weights = multi_head_attention(x, x, two_head_weights(5, 8), 2, causal_mask(8))
    print(np.abs(out - target_outputs(tokens, 5, 8))[:, 2:].max())   # about 1e-21
    print(weights[0].round(2))                                       # two shifted diagonals

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width    H query heads
    G key/value heads    K head width (D // H)

- Weights are stored (d_in, d_out) and applied as x @ w + b. params is a dict: w_q (D, H*K),
  w_k and w_v (D, G*K), w_o (H*K, D), optional b_q, b_k, b_v, b_o. Head h owns columns
  h*K:(h+1)*K.
- Masks are boolean, True = may attend. The scale is 1/sqrt(K).

Edit this file, then run `course check 7`.
"""

import numpy as np

SCORE = 50.0  # the scaled score of the key a head should attend to; every other key scores 0


def count_parameters(d_model, n_heads, n_kv_heads=None, bias=True):
    """Number of parameters of an attention layer with H query heads and G key/value heads.

    d_model:    D
    n_heads:    H, must divide D (K = D // H)
    n_kv_heads: G, must divide H; None means G = H (multi-head attention)
    bias:       whether the layer has b_q, b_k, b_v and b_o
    returns an int: D*D + 2*D*G*K + D*D weights, plus D + 2*G*K + D biases when bias is True
    raises ValueError naming the numbers when D % H != 0 or H % G != 0

    Lesson 7 grades multi-head attention: n_kv_heads None or equal to n_heads. Lesson 8 comes
    back to this function for G < H (grouped-query attention), imports it and grades it there.

    TODO:
      1. Name the sizes: D, H = d_model, n_heads, and G = H when n_kv_heads is None, else
         n_kv_heads.
      2. If D % H != 0 or H % G != 0, raise ValueError with a message that names the numbers,
         e.g. f"d_model={D} is not divisible by n_heads={H}".
      3. K = D // H. Use //: with / every count after it becomes a float.
      4. Add up the weight shapes: W_Q (D, H*K), W_K (D, G*K), W_V (D, G*K), W_O (H*K, D).
         Count whole matrices, not heads: H*K = D, so W_Q and W_O are D x D for every H.
      5. If bias: add b_q (H*K,), b_k (G*K,), b_v (G*K,) and b_o (D,).
      6. Return the total, an int. Check: count_parameters(12, 3) == 4*12*12 + 4*12 == 624, and
         it stays 624 for n_heads = 1, 2, 4, 6, 12.
    """
    raise NotImplementedError


def make_inputs(tokens, vocab_size, max_len):
    """The layer's input for integer token sequences: [one_hot(token) | one_hot(t) | zeros].

    tokens:     (B, T) integers in 0 .. V-1, with T <= L
    vocab_size: V
    max_len:    L
    returns x   (B, T, D) float64, D = 2 * (V + L)

    (Given, not an exercise: this is the exact input the grader feeds your layer.)
    """
    tokens = np.asarray(tokens)
    B, T = tokens.shape
    V, L = vocab_size, max_len
    if T > L:
        raise ValueError(f"sequences of length {T} are longer than max_len={L}")
    x = np.zeros((B, T, 2 * (V + L)))
    x[:, :, :V] = np.eye(V)[tokens]  # (B, T) -> (B, T, V): the token code
    x[:, :, V : V + L] = np.eye(L)[:T]  # (T, L), the same position code in every sequence
    return x


def target_outputs(tokens, vocab_size, max_len):
    """What the two-head layer must output: token t-1 in the first half, token t-2 in the second.

    tokens:     (B, T) integers in 0 .. V-1, with T <= L
    returns y   (B, T, D) float64, D = 2 * (V + L), K = D // 2:
                y[b, t, 0:V] = one_hot(tokens[b, t-1]) and y[b, t, K:K+V] = one_hot(tokens[b, t-2])
                for t >= 2, every other feature 0. Rows t = 0 and 1 are zero and NOT graded.

    (Given, not an exercise: this is the exact target the grader compares with.)
    """
    tokens = np.asarray(tokens)
    B, T = tokens.shape
    V, L = vocab_size, max_len
    K = V + L
    y = np.zeros((B, T, 2 * K))
    y[:, 2:, :V] = np.eye(V)[tokens[:, 1 : T - 1]]  # positions 2 .. T-1 get tokens 1 .. T-2
    y[:, 2:, K : K + V] = np.eye(V)[tokens[:, 0 : T - 2]]  # positions 2 .. T-1 get tokens 0 .. T-3
    return y


def two_head_weights(vocab_size, max_len):
    """Hand-built params of a 2-head attention layer that copies the tokens 1 and 2 back.

    vocab_size: V
    max_len:    L
    returns params: dict with w_q, w_k, w_v, w_o, each (D, D) float64, D = 2 * (V + L),
            H = 2 heads of width K = V + L (biases may be left out).
    Fed x = make_inputs(tokens, V, L) with a causal mask, multi-head attention with these params
    must give target_outputs(tokens, V, L) at every position t >= 2, to within 1e-3.

    TODO:
      1. V, L = vocab_size, max_len; K = V + L (the head width) and D = 2 * K. Start from
         four (D, D) matrices of zeros: w_q, w_k, w_v, w_o.
      2. For each head h in (0, 1), with offset = h + 1 (h = 0 is head 1 of the text, looking
         one back; h = 1 is head 2, looking two back): head h owns columns h*K .. h*K + K - 1 of
         w_q, w_k and w_v. Row i of a weight is what feature i of x contributes; x's feature
         V + t is 1 exactly at position t.
      3. Queries read the position: for every t in 0 .. L-1, row V + t of w_q puts
         SCORE * sqrt(K) in column h*K + t (position t asks with SCORE * sqrt(K) * e_t).
      4. Keys read the position, shifted: for every s in 0 .. L-1-offset, row V + s of w_k puts 1
         in column h*K + s + offset (position s answers to the query of position s + offset).
         Then the scaled score q . k / sqrt(K) is SCORE for the key t - offset and 0 for every
         other key: the softmax puts weight 1 on it, up to exp(-50).
      5. Values read the token: for every j in 0 .. V-1, row j of w_v puts 1 in column h*K + j
         (the token code, not the position code, lands in the head's first V features).
      6. W_O: merge_heads puts head h's K features in columns h*K .. h*K + K - 1 of the (H*K)
         concatenation, and that is exactly the half of the output head h must fill. Which
         (H*K, D) matrix leaves them where they are?
      7. Return {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o} (no biases needed).
         Try it with your lesson 6 (see the top of this file) before `course check 7`.
    """
    raise NotImplementedError


def single_head_error(vocab_size, a):
    """The best a single head can do when it puts weight a on token t-1 and 1 - a on token t-2.

    vocab_size: V
    a:          the attention weight on key t-1, in [0, 1]
    returns     the root-mean-square distance between the best linear read-out and the target,
                over all V * V pairs (token[t-1], token[t-2]), equally likely

    (Given, not an exercise.) The head's output is an affine function of the blend
    a * one_hot(token[t-1]) + (1 - a) * one_hot(token[t-2]): positions and biases only add a
    constant. np.linalg.lstsq finds the affine read-out with the least squared error, so no head
    of any width, with this attention, does better.
    """
    V = vocab_size
    prev, prev2 = np.divmod(np.arange(V * V), V)  # every pair (token[t-1], token[t-2])
    eye = np.eye(V)
    blend = a * eye[prev] + (1 - a) * eye[prev2]  # (V*V, V): all the head's output depends on
    features = np.concatenate([blend, np.ones((V * V, 1))], axis=1)  # (V*V, V+1): and a constant
    target = np.concatenate([eye[prev], eye[prev2]], axis=1)  # (V*V, 2V): the two halves
    readout, *_ = np.linalg.lstsq(features, target, rcond=None)  # (V+1, 2V)
    residual = features @ readout - target  # (V*V, 2V)
    return float(np.sqrt(np.mean(np.sum(residual**2, axis=1))))


def best_single_head_error(vocab_size, n_mixtures=21):
    """The smallest single_head_error over a grid of n_mixtures weights a from 0 to 1.

    vocab_size: V
    returns     a float; it is sqrt(1 - 1/V) for every a (try it), far above the two heads' error

    (Given, not an exercise.)
    """
    return min(single_head_error(vocab_size, a) for a in np.linspace(0.0, 1.0, n_mixtures))
