"""Lesson 13: attention in O(T) memory, the online softmax.

The idea
--------
Lesson 3 builds the whole (T, S) matrix of scores, turns it into weights and multiplies by v. At
T = S = 32,768 positions one head's scores alone are 32,768^2 * 4 bytes = 4 GiB in float32: the
memory grows like T * S, while q, k, v and the output grow only like T + S. Yet an output row is
a weighted sum of value rows, and a sum can be added up a block of keys at a time. This lesson
computes exactly lesson 3's output while visiting the keys and values in blocks of `block_size`
positions, keeping per query only three running quantities. No (T, S) array is ever made: at a
fixed T, the extra memory does not grow with S.

The obstacle is the softmax. Lesson 2 made it stable by subtracting the row's maximum m, and the
maximum of a row is known only once every key has been seen. Milakov and Gimelshein ("Online
normalizer calculation for softmax", 2018) showed that it need not be known in advance: keep the
maximum of the scores seen SO FAR, and when a later block brings a larger one, correct what was
summed against the old maximum. One multiplication does it, since

    exp(x - m_new) = exp(x - m_old) * exp(m_old - m_new)

The running softmax
-------------------
For one row of scores x_1 .. x_S, visited block by block, keep

    m   the largest score seen so far                      (starts at -inf)
    l   sum over the keys seen of exp(x_j - m)             (starts at 0)

and for each new block b:

    m_new = max(m, max_j in b x_j)
    l     = l * exp(m - m_new) + sum_j in b exp(x_j - m_new)
    m     = m_new

At the end l is exactly lesson 2's denominator sum_j exp(x_j - m), with m the row's true
maximum, so softmax(x)_j = exp(x_j - m) / l. The factor exp(m - m_new) is 1 when the maximum did
not grow and shrinks the old sum when it did: forget it and l mixes terms measured against
different maxima. One pass over the row gives m and l together; lesson 2 needed one pass for m,
one for l, one for the output. Milakov and Gimelshein's headline: with fewer memory accesses the
softmax runs up to 1.3 times faster on a GPU, and softmax fused with the top-k that follows it
up to 5 times.

Attention never needs the weights themselves, only their weighted sum of values. So keep, per
query, a third running quantity, the output not yet divided by l:

    o = sum over the keys seen of exp(x_j - m) v_j         (Kv numbers per query, starts at 0)
    o = o * exp(m - m_new) + sum_j in b exp(x_j - m_new) v_j

and at the end out = o / l. The same factor rescales o: o and l are measured against the same
maximum, always. A block of keys touches a (T, block_size) piece of scores and nothing more.

A fully masked row (lesson 3: every key blocked) has m = -inf after every block, and
-inf - (-inf) is NaN. As in lesson 2, subtract 0 instead of a non-finite maximum: exp(-inf - 0)
is 0, the row's l stays 0, and its output is 0 (lesson 3's answer), never NaN.

FlashAttention
--------------
Dao et al. (2022, "FlashAttention: fast and memory-efficient exact attention with IO-awareness")
run this recurrence on a GPU. They tile the queries too, and compute in the chip's fast on-chip
memory (SRAM: 192 KB per streaming multiprocessor on an A100, against 40-80 GB of slower main
memory, HBM), where the (T_block, S_block) scores live and die: the (T, S) matrix is never written
to HBM. FlashAttention loads each block of k and v into SRAM once (the outer loop) and, for each
of them, visits every block of queries (the inner loop): a block of q, its running output o, l
and m are read from HBM again for every block of keys, and o, l and m written back (Dao et al.
2022, Algorithm 1). FlashAttention-2 swaps the two loops: each block of q is loaded once, o, l and
m stay on the chip until it is done, and the blocks of k and v stream past it (Dao 2023,
"FlashAttention-2: faster attention with better parallelism and work partitioning", Algorithm 1).
Either way the attention is exact, not approximated. FlashAttention's headline numbers: BERT-large
(sequence length 512) trains 15% faster than the MLPerf 1.1 record, GPT-2 (length 1K) 3 times
faster, the long-range arena (lengths 1K to 4K) 2.4 times; the memory grows linearly with the
sequence length (their README: 10 times less than PyTorch's standard attention at length 2K, 20
times at 4K), and with it came the first Transformers better than chance on Path-X (length 16K,
61.4% accuracy, with FlashAttention) and Path-256 (length 64K, 63.1%, with block-sparse
FlashAttention, their approximate variant that computes only the blocks a fixed sparsity mask
keeps) (Dao et al. 2022, section 4.2).

numpy cannot show the speed: it has no SRAM to manage, and a Python loop over blocks is slower
than one big matrix product. What it can show is the memory. The grader measures the peak memory
of your function from outside the process running it, at T = 512 and S = 8,192 and 32,768 keys.
It allows your inputs a few times over and a few MiB besides: a (T, S) array of scores (128 MiB at
S = 32,768), or whole rows of S scores for a block of queries, exceeds that, and so does memory
that grows with S. The figure counts from before your module is imported: whatever its import
allocates counts in every measured call, so answers computed ahead at import are measured too.
`course show 13 --map` draws your peak beside that of lesson 3's attention.

What the grader checks, and what it cannot: it compares both functions' answers with lesson 2's
and lesson 3's, on cases built to break a recurrence that goes wrong (a row whose maximum sits in
an early block and leads by 1000, a last block shorter than the others, rows masked so far), and
it measures the memory of online_softmax_attention. It cannot see how many passes either makes:
a two-pass softmax (lesson 2's own, say) returns the same numbers and passes, and so does an
attention that visits the blocks twice, first for the maximum, then for the sum and the output,
in the same small memory. One pass is this lesson's point, and yours to keep: it is what lets
FlashAttention read each block of keys and values once (Dao et al. 2022, Algorithm 1).
(The course's tiny model has 24 positions: a head's 24 x 24 float64 scores are 4.5 KiB, too small
for any of this to matter. This lesson measures synthetic long inputs instead.)

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    H heads    K head width
    Kv value width

- q is (..., T, K), k is (..., S, K), v is (..., S, Kv), any leading axes as in lesson 3.
- Masks are boolean, True = may attend, broadcastable to (..., T, S) as in lesson 3. Slice the
  mask block by block: np.broadcast_to gives a view, which costs no memory, where np.ones((T, S))
  or a full np.where(mask, scores, -inf) would cost a (T, S) array.
- The default scale is 1/sqrt(K), K = q.shape[-1]; a scale passed in is used exactly as given.
- Functions never modify their inputs, and return the dtype of their inputs (float32 stays
  float32).
- block_size is a positive int (True and 2.0 are not), else ValueError. The last block may be
  shorter: S = 10 in blocks of 4 is 4 + 4 + 2 keys.

Your answers must equal lesson 2's softmax and lesson 3's scaled_dot_product_attention. Lesson 3's
is imported below, so that you can compare the two yourself; the memory picture measures it too.
Finish lessons 2 and 3 first.

In the code the running sum l is called `denom` (the softmax's denominator): a lone `l` reads
too much like a 1.

Edit this file, then run `course check 13`.
"""

import math
import numbers

import numpy as np
from l03_attention import scaled_dot_product_attention  # noqa: F401 (your lesson 3: compare with it)


def check_block_size(block_size):
    """Raise ValueError unless block_size is a positive int (a bool is not one); return it."""
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    return int(block_size)


def online_softmax(x, block_size=64):
    """Softmax along the last axis, the maximum and the sum found in ONE pass over blocks.

    x:          (..., S), float32 or float64, e.g. scores (B, T, S)
    block_size: positions per block, a positive int (else ValueError)
    returns an array of x's shape and dtype, equal to lesson 2's softmax(x, axis=-1); a row of
    all -inf gives zeros

    TODO:
      1. Check block_size with check_block_size (given above): it raises the ValueError for you.
         S is the size of the last axis.
      2. Start the running maximum m at -inf and the running sum denom at 0, one each per row,
         (..., 1) with the last axis kept, in x's dtype (so float32 stays float32).
      3. Visit the blocks in order: positions start .. start + block_size - 1 of the last axis,
         for start = 0, block_size, 2 * block_size, ... while start < S, each block (..., b)
         with b <= block_size. The last block may be shorter; it must not be dropped.
      4. m_new = the larger of m and the block's row maximum, (..., 1).
      5. As in lesson 2, subtract 0 where m_new is not finite (a row that is -inf so far):
         call what you subtract m_safe, (..., 1).
      6. denom = denom * exp(m - m_safe) + the sum over the block of exp(block - m_safe): the
         old sum was measured against the old maximum and must be rescaled to the new one.
         Then m = m_new.
      7. After the loop: exp(x - m_safe) / denom where denom > 0, and 0 elsewhere (a row of all
         -inf, as in lesson 2), without dividing by 0: (..., S), x's shape and dtype.
    """
    raise NotImplementedError


def online_softmax_attention(q, k, v, mask=None, scale=None, block_size=64):
    """Lesson 3's attention output, the keys and values visited in blocks: no (T, S) array.

    q:          (..., T, K)
    k:          (..., S, K)
    v:          (..., S, Kv)
    mask:       booleans broadcastable to (..., T, S), True = may attend; None = everywhere
    scale:      None for 1 / sqrt(K), else used as given
    block_size: keys per block, a positive int (else ValueError)
    returns out (..., T, Kv) in q's dtype, equal to scaled_dot_product_attention(q, k, v, mask,
    scale)[0]; a query whose keys are all masked gets zeros. Extra memory: a few
    (..., T, block_size) and (..., T, Kv) arrays, whatever S is.

    TODO:
      1. Check block_size with check_block_size. K is q's last size, S the positions of k (its
         second to last axis), Kv v's last size. The scale as in lesson 3: 1/sqrt(K) when None,
         else the number given, as a float.
      2. The leading axes of the result: the leading axes of q, k and v broadcast together (and
         the mask's, which may have more). If a mask is given, make it a boolean, read-only
         broadcast VIEW of shape (..., T, S), not a new array: a view costs no memory, a
         (T, S) array would cost what this lesson saves.
      3. Start, per query: m at -inf and denom at 0, both (..., T, 1); o at 0, (..., T, Kv).
         All in q's dtype.
      4. For each block of keys, positions start .. start + block_size - 1 (the last block may
         be shorter): scores = q @ (the block of k with its last two axes swapped) * scale,
         (..., T, K) @ (..., K, b) -> (..., T, b). Only the last two axes: k.T would reverse
         every axis of a 4-D array. Where the mask's block is False, the score is -inf.
      5. m_new = the larger of m and the block's row maximum, (..., T, 1); m_safe = m_new, or 0
         where m_new is not finite (every key so far masked: no -inf - -inf = NaN).
      6. p = exp(scores - m_safe): (..., T, b). alpha = exp(m - m_safe): (..., T, 1), how much
         smaller the old terms become against the new maximum.
      7. denom = denom * alpha + the row sums of p; o = o * alpha + p @ (the block of v):
         (..., T, Kv). BOTH are rescaled, or they mix terms measured against different
         maxima. Then m = m_new.
      8. Return o / denom where denom > 0 and 0 elsewhere (a fully masked row), without
         dividing by 0, in q's dtype: (..., T, Kv).
    """
    raise NotImplementedError
