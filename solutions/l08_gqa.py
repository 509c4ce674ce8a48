"""Lesson 8: grouped-query attention.

The idea
--------
A language model generates one token at a time, and every new token attends to all the tokens
before it. Recomputing their keys and values at every step would be wasteful, so they are kept in
a KV cache (lesson 9): for every layer, every position and every head, one key and one value
vector of K numbers. With multi-head attention (MHA) that is 2 * H * K numbers per position and
layer, and at long contexts reading this cache, not the arithmetic, is what limits decoding speed.

The queries need no cache: only the current token's query is ever used. So keep H query heads and
let them share fewer key/value heads. Grouped-query attention (GQA, Ainslie et al. 2023) has G
key/value heads, G dividing H, and lets each one serve a group of H // G consecutive query heads:

    head_i = Attention(Q W_Qi, K W_K,g(i), V W_V,g(i)),    g(i) = i // (H // G)

    H = 6 query heads, G = 3 key/value heads (groups of H // G = 2):
        query head   0  1  2  3  4  5
        kv head      0  0  1  1  2  2

Its two ends are the attentions you know: G = H is plain multi-head attention (each query head
has its own key/value head, g(i) = i), and G = 1 is multi-query attention (MQA, Shazeer 2019: one
key/value head shared by every query head). In between, the cache shrinks by a factor H / G while
the model keeps most of MHA's quality, which MQA tends to lose. Llama 2 70B, for instance, has
H = 64 query heads and G = 8 key/value heads of width K = 128: its KV cache is 8 times smaller
than with MHA. The key and value projections shrink too: w_k and w_v are (D, G*K), not (D, D).

Ainslie et al. also show how to get a GQA model without training one from scratch: take an MHA
checkpoint, mean-pool the key and value projection matrices of the heads in each group into one
head, and continue training for a small fraction (about 5%) of the original steps ("uptraining").

What sharing saves
------------------
Lesson 7 counted an attention layer: W_Q (D, H*K), W_K and W_V (D, G*K), W_O (H*K, D), and with
biases b_q (H*K,), b_k and b_v (G*K,), b_o (D,). Multi-head attention (G = H) has 4*D*D + 4*D.
With G < H only W_K and W_V and their biases shrink, from H*K to G*K columns each; W_Q and W_O
stay D x D. Your count_parameters of lesson 7 already takes n_kv_heads, and this lesson grades
those counts: kv_parameter_saving counts what a layer saves with G key/value heads instead of H,

    count_parameters(D, H) - count_parameters(D, H, n_kv_heads=G) = 2*D*(H - G)*K  (+ 2*(H - G)*K)

Llama 2 70B (D = 8,192, H = 64, G = 8, K = 128, no biases) saves 2 * 8,192 * 56 * 128 =
117,440,512 of the 268,435,456 parameters an MHA layer would have (44%), 9.4 billion over its 80
layers. The bigger gain is the cache, though (lesson 9): 8 times smaller.

Repeat-interleave, never tile
-----------------------------
The simplest way to compute GQA is to copy every key/value head H // G times, so that k and v
have H heads like q, and then to run ordinary multi-head attention. The copies must come in the
order of the groups, each head repeated in place:

    np.repeat(k, 2, axis=1)         heads 0, 0, 1, 1, 2, 2     right: query head i gets i // 2
    np.tile(k, (1, 2, 1, 1))        heads 0, 1, 2, 0, 1, 2     wrong: query head i gets i % 3

Both give arrays of the same shape and numbers of the same size, so the wrong one runs without
complaint: it pairs query heads with key/value heads the model was never trained with. The order
is a convention the weights were trained under (Llama's repeat_kv, PyTorch's
repeat_interleave), not a choice you can make afterwards. Real kernels do not copy at all, they
read the shared head in place, but the numbers are the same.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width    H query heads
    G key/value heads (G divides H)    K head width (D // H)

- Arrays are batch first: x_q is (B, T, D), x_kv is (B, S, D). Heads are axis 1: (B, H, T, K).
- Weights are stored (d_in, d_out) and applied as x @ w + b. params is a dict: w_q (D, H*K),
  w_k and w_v (D, G*K), w_o (H*K, D), optional b_q (H*K,), b_k and b_v (G*K,), b_o (D,); a bias
  that is absent or None is not added. Query head i owns columns i*K:(i+1)*K of w_q, key/value
  head g owns columns g*K:(g+1)*K of w_k and w_v.
- Masks are boolean, True = may attend, broadcastable to (B, T, S) or (T, S). A query that may
  attend no key gets all-zero weights and an all-zero attention output, never NaN.
- The scale is 1/sqrt(K), K the head width: sharing key/value heads changes nothing there.
- Functions never modify their inputs, and return the dtype of their inputs (float32 stays
  float32).

This lesson uses your linear (lesson 1), scaled_dot_product_attention (lesson 3), split_heads and
merge_heads (lesson 5) and count_parameters (lesson 7): finish those first. PyTorch computes the
same attention with
`torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)`,
q (B, H, T, K), k and v (B, G, S, K), the mask with its head axis (B, 1, T, S): it
repeat-interleaves k and v itself.
"""

import numpy as np
from l01_projections import linear  # your linear from lesson 1
from l03_attention import scaled_dot_product_attention  # your attention from lesson 3
from l05_heads import merge_heads, split_heads  # your head reshapes from lesson 5
from l07_why_heads import count_parameters  # your parameter count from lesson 7


def kv_head_for_query_head(n_heads, n_kv_heads):
    """Which key/value head each query head uses: query head i -> i // (H // G).

    n_heads:    H, the number of query heads
    n_kv_heads: G, the number of key/value heads; must divide H
    returns     an integer array (H,): entry i is the key/value head of query head i
    raises      ValueError naming both numbers when G does not divide H

    TODO:
      1. If G does not divide H, raise a ValueError whose message names both numbers, e.g.
         "n_heads=6 is not divisible by n_kv_heads=4": the heads cannot be grouped evenly.
      2. The group size r = H // G: how many consecutive query heads share one key/value head.
      3. Return, for every query head i = 0 .. H-1, its group i // r: an integer array (H,).
         Keep it integer (floor division, not `/`): the result indexes arrays. (Not i % G: that
         deals the heads out in turn, 0, 1, 2, 0, 1, 2, instead of grouping consecutive ones.)
    """
    ### BEGIN SOLUTION
    # The query heads are cut into G groups of H // G consecutive heads, group g using key/value
    # head g. Integer division by the group size numbers the groups: i // (H // G) is 0 for the
    # first H // G heads, 1 for the next ones, and so on. (i % G would deal the heads out in turn,
    # 0, 1, 2, 0, 1, 2: the order np.tile gives, and the wrong one.) `//` keeps integers, so the
    # answer can index an array. When G does not divide H the heads cannot be grouped evenly and
    # H // G would silently drop some, so the function refuses.
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}: "
            "every key/value head must serve the same number of query heads"
        )
    group = n_heads // n_kv_heads  # H // G query heads per key/value head
    return np.arange(n_heads) // group  # (H,): 0, ..., 0, 1, ..., 1, ..., G-1
    ### END SOLUTION


def repeat_kv(x, n_rep):
    """Repeat every key/value head n_rep times in place: heads 0, 0, 1, 1, ... (not 0, 1, 0, 1).

    x:     (B, G, S, K)   keys or values with G heads
    n_rep: how many query heads share each key/value head, H // G
    returns (B, G*n_rep, S, K) where out[:, h] == x[:, h // n_rep]

    TODO:
      1. Read the sizes: x is (B, G, S, K), and the result has G*n_rep heads.
      2. Return a new array (B, G*n_rep, S, K) in which each head of x appears n_rep times in a
         row along the head axis, axis 1: heads 0, 0, 1, 1, 2, 2 for n_rep = 2, so that
         out[:, h] is x[:, h // n_rep], the map of kv_head_for_query_head.
         Pitfalls: np.repeat without an axis flattens the whole array, and axis 1 is the heads;
         np.tile repeats the whole block of heads, 0, 1, 2, 0, 1, 2: the same shape and the wrong
         pairing, which runs without complaint.
    """
    ### BEGIN SOLUTION
    # np.repeat copies each entry along the given axis n_rep times before moving on to the next,
    # which is exactly the grouping of the query heads: repeated head h is x[:, h // n_rep], the
    # same map as kv_head_for_query_head. The axis must be 1, the heads; without axis= np.repeat
    # would flatten the array. np.tile would repeat the whole block of heads instead (0, 1, 0, 1).
    # The result is a new array, so x is never written to.
    B, G, S, K = x.shape
    return np.repeat(x, n_rep, axis=1)  # (B, G, S, K) -> (B, G*n_rep, S, K)
    ### END SOLUTION


def grouped_query_attention(x_q, x_kv, params, n_heads, n_kv_heads, mask=None):
    """Grouped-query attention: H query heads share G key/value heads. Returns (out, weights).

    x_q:        (B, T, D)   the sequence the queries come from
    x_kv:       (B, S, D)   the sequence the keys and values come from
    params:     dict with w_q (D, H*K), w_k and w_v (D, G*K), w_o (H*K, D), optional biases
                b_q (H*K,), b_k and b_v (G*K,), b_o (D,)
    n_heads:    H
    n_kv_heads: G, must divide H (G = H is multi-head attention, G = 1 is multi-query attention)
    mask:       booleans broadcastable to (B, T, S) or (T, S), True = may attend; None = everywhere
    returns (out, weights):
      out     (B, T, D)     Concat(head_1, ..., head_H) W_O + b_o
      weights (B, H, T, S)  one attention map per QUERY head
    raises ValueError naming the numbers when G does not divide H or H does not divide D

    TODO:
      1. Read the sizes: B, T, D from x_q and S from x_kv; call H = n_heads, G = n_kv_heads.
      2. Check the sizes before computing anything: if G does not divide H, raise a ValueError
         naming both ("n_heads=6 is not divisible by n_kv_heads=4"); if H does not divide D,
         one naming D and H the same way. Each key/value head serves n_rep = H // G query heads
         (not G // H).
      3. Project as in lesson 6 with your linear, adding each bias only when params has it (an
         absent or None bias is not added): q from x_q with w_q -> (B, T, H*K); k and v from
         x_kv with w_k and w_v -> (B, S, G*K), narrower than q.
      4. Split with your split_heads: q into H heads (B, H, T, K); k and v into G heads
         (B, G, S, K).
      5. Repeat BOTH k and v with your repeat_kv, n_rep copies of each head:
         (B, G, S, K) -> (B, H, S, K).
      6. If a mask is given, broadcast it to (B, T, S), then give it a head axis of size 1 after
         the batch axis: (B, 1, T, S), the same mask for every head. Passed as (B, T, S), its
         batch axis would line up with the heads.
      7. Attend with your scaled_dot_product_attention on q, the repeated k and v, and the mask:
         its default scale 1/sqrt(K), K = q.shape[-1] the head width, is right here (not D,
         not G*K). It gives heads (B, H, T, K) and weights (B, H, T, S): keep one map per
         query head.
      8. Merge the heads with your merge_heads, (B, H, T, K) -> (B, T, H*K), then project with
         w_o and b_o: (B, T, H*K) -> (B, T, D).
      9. Return (out, weights).
    """
    ### BEGIN SOLUTION
    # The sizes are checked before anything is computed, so a bad configuration gets a clear
    # message rather than a broadcasting error deep inside numpy. The queries are projected into
    # H heads as in lesson 6; the keys and values into only G heads of the same width K
    # (split_heads(k, G) reads the G*K features as G heads of K). repeat_kv then copies each
    # key/value head H // G times, in place, so that repeated head i is key/value head
    # i // (H // G), and from there it is lesson 6's multi-head attention: lesson 3's attention
    # treats (B, H) as batch axes and scales by 1/sqrt(K), K = q.shape[-1], the head width (not
    # D, not G*K). The weights come out per query head, (B, H, T, S): query heads that share keys
    # still ask different questions. The mask is broadcast to (B, T, S) and given a head axis so
    # that its batch axis stays the batch axis.
    #
    # (Indexing with the map instead, k[:, kv_head_for_query_head(H, G)], gives the same array.)
    B, T, D = x_q.shape
    _, S, _ = x_kv.shape
    H, G = n_heads, n_kv_heads
    if H % G:
        raise ValueError(
            f"n_heads={H} is not divisible by n_kv_heads={G}: every key/value head "
            "must serve the same number of query heads"
        )
    if D % H:
        raise ValueError(f"the model width D={D} is not divisible by n_heads={H}")
    n_rep = H // G  # query heads per key/value head
    q = linear(x_q, params["w_q"], params.get("b_q"))  # (B, T, D) -> (B, T, H*K)
    k = linear(x_kv, params["w_k"], params.get("b_k"))  # (B, S, D) -> (B, S, G*K)
    v = linear(x_kv, params["w_v"], params.get("b_v"))  # (B, S, D) -> (B, S, G*K)
    q = split_heads(q, H)  # (B, T, H*K) -> (B, H, T, K)
    k = split_heads(k, G)  # (B, S, G*K) -> (B, G, S, K)
    v = split_heads(v, G)  # (B, S, G*K) -> (B, G, S, K)
    k = repeat_kv(k, n_rep)  # (B, G, S, K) -> (B, H, S, K), heads 0, 0, 1, 1, ...
    v = repeat_kv(v, n_rep)  # (B, G, S, K) -> (B, H, S, K)
    if mask is not None:
        mask = np.broadcast_to(mask, (B, T, S))  # (T, S), (B, 1, S), ... -> (B, T, S)
        mask = mask[:, None]  # (B, T, S) -> (B, 1, T, S): the same mask for every head
    heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, K), (B, H, T, S)
    concat = merge_heads(heads)  # (B, H, T, K) -> (B, T, H*K)
    out = linear(concat, params["w_o"], params.get("b_o"))  # (B, T, H*K) -> (B, T, D)
    return out, weights
    ### END SOLUTION


def kv_parameter_saving(d_model, n_heads, n_kv_heads, bias=True):
    """How many parameters a layer saves with G key/value heads instead of H (GQA against MHA).

    d_model:    D
    n_heads:    H, must divide D (K = D // H)
    n_kv_heads: G, must divide H
    bias:       whether both layers have b_q, b_k, b_v and b_o
    returns an int: the multi-head layer's count minus the grouped-query layer's, with the same
            D, H and bias; 0 when G = H
    raises ValueError naming the numbers when D % H != 0 or H % G != 0

    TODO:
      1. Count the multi-head layer (G = H) with your count_parameters from lesson 7 (imported
         at the top of this file), with the same bias.
      2. Count the grouped-query layer: the same D, H and bias, with G key/value heads. If your
         count_parameters still ignores n_kv_heads, finish it in lesson 7's file: W_K and W_V
         are (D, G*K), b_k and b_v (G*K,). It raises the ValueError when H % G != 0.
      3. Return the first count minus the second, an int. Check: kv_parameter_saving(16, 8, 2)
         is 1088 - 680 = 408, and kv_parameter_saving(30, 6, 6) is 0.
    """
    ### BEGIN SOLUTION
    # Only W_K and W_V (and b_k, b_v) depend on G: they shrink from H*K to G*K columns, so the
    # saving is 2*D*(H - G)*K weights, plus 2*(H - G)*K biases. Counting both layers with lesson
    # 7's count_parameters gives exactly that, with its checks: a G that does not divide H makes
    # the second count raise ValueError naming H and G.
    mha = count_parameters(d_model, n_heads, bias=bias)  # G = H: 4*D*D (+ 4*D)
    gqa = count_parameters(d_model, n_heads, n_kv_heads=n_kv_heads, bias=bias)  # W_K, W_V (D, G*K)
    return mha - gqa
    ### END SOLUTION
