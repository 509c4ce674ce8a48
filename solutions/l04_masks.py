"""Lesson 4: masks, causal and padding.

The idea
--------
Lesson 3's scaled_dot_product_attention takes a mask: booleans broadcastable to (..., T, S),
where mask[t, s] = True means query t may attend key s. Blocked keys get exactly zero weight.
This lesson builds the two masks every transformer needs, and the one operation that joins them.

The causal mask
---------------
A language model predicts each token from the tokens before it, so the query at position p may
look at keys at positions 0..p (itself included) and never at a later one. When the T queries
and the S keys are the same positions (T == S), query i sits at position i and the mask is the
lower triangle, diagonal included: mask[i, j] = j <= i.

Decoding with a KV cache breaks T == S. To generate token by token, a model keeps the keys and
values of the tokens it has already processed (the cache) and computes queries only for the T new
tokens. The keys then cover all S positions, cached ones first, and the T new queries are the
LAST T of those S positions: query i sits at position i + (S - T). Causality in positions,
"key j is not later than query i", becomes

    mask[i, j] = j <= i + (S - T)          (T, S) booleans, "aligned bottom-right"

Example: 3 cached tokens and T = 2 new ones, S = 5.

                        keys  0  1  2  3  4
    query 0 (position 3)      1  1  1  1  0
    query 1 (position 4)      1  1  1  1  1

The last query always sees every key, and the T rows are the last T rows of the full (S, S)
mask: causal_mask(t, s) == causal_mask(s)[s - t:]. With one new token (T = 1) the mask is a single
row of True. A mask aligned top-left instead, mask[i, j] = j <= i, would let query 0 (the token at
position 3) see only key 0: the new tokens would ignore most of their own context.

PyTorch. torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) aligns its
mask top-left: it uses torch.ones(T, S, dtype=torch.bool).tril(), query i sees keys j <= i. For
T == S that is the same mask as ours; for T != S the two differ, and is_causal=True is wrong for
decoding with a cache. PyTorch's bottom-right mask is torch.nn.attention.bias.causal_lower_right
(T, S), i.e. torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T): the one this lesson builds.
(The formula also covers S < T: the first T - S queries then see no key at all, and lesson 3
gives them all-zero weights.)

The padding mask
----------------
A batch holds sequences of different lengths, padded with filler to a common length S. Key j of
sequence b is real when j < lengths[b] (positions start at 0: a sequence of length 3 owns keys
0, 1, 2); every query must ignore the filler keys. The mask is (B, 1, S): the axis of size 1
broadcasts over the T queries, since every query of sequence b ignores the same keys. A (B, S)
mask would be wrong: broadcasting lines shapes up from the right, so against (B, T, S) scores
its B axis would meet the T axis (an error when B != T, silently wrong numbers when B == T).
Padding only hides keys; the outputs at padded query positions are computed and then ignored.

Careful with PyTorch's other API: torch.nn.MultiheadAttention's key_padding_mask has the opposite
polarity, True = ignore this key (its boolean attn_mask too). Our padding mask is the logical not
of that key_padding_mask. F.scaled_dot_product_attention, like this course, uses True = attend.

Combining masks
---------------
A key may be attended only if every mask allows it: the logical and. A (T, S) causal mask and a
(B, 1, S) padding mask broadcast to (B, T, S). None stands for "no mask" and is skipped; when no
mask is left, the result is None again, which lesson 3 reads as "attend everywhere".

Putting them to work with lesson 3:

    from l03_attention import scaled_dot_product_attention
    from l04_masks import causal_mask, padding_mask, combine_masks

    # a padded batch, self-attention: q, k, v are (B, S, K), lengths is (B,)
    mask = combine_masks(causal_mask(S), padding_mask(lengths, S))  # (S, S) and (B, 1, S) -> (B, S, S)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)

    # decoding with a cache: q_new (B, T, K) for the T new tokens, k_all and v_all (B, S, K)
    out, weights = scaled_dot_product_attention(q_new, k_all, v_all, mask=causal_mask(T, S))

    # with heads, q is (B, H, T, K): give a (B, T, S) mask a head axis, mask[:, None]
    # ((B, 1, T, S)); a (T, S) mask broadcasts as it is. Lesson 6 does this for you.

Masks are arrays of dtype bool. A 0/1 mask of integers or floats is not the same thing: `~` on
integers flips bits (~1 == -2, which is still "true"), and PyTorch reads a float attn_mask as
numbers to ADD to the scores, so a float 0/1 mask blocks nothing. Build masks from comparisons
(j <= i gives booleans) or from np.ones(..., dtype=bool).

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width    H heads

- Masks are boolean, True = may attend, broadcastable to (..., T, S): (T, S) for every batch
  element alike, (B, 1, S) for padding, (B, T, S) for one mask per batch element.
- Functions never modify their inputs.
"""

import numpy as np


def causal_mask(t, s=None):
    """Causal mask aligned bottom-right: query i may attend key j when j <= i + (s - t).

    t: the number of queries T
    s: the number of keys S (None: s = t, plain self-attention)
    returns (T, S) bool, True = may attend

    causal_mask(2, 5) == [[True, True, True, True, False],
                          [True, True, True, True, True ]]

    The same formula holds for s < t: the first t - s queries then see no key (rows of False).

    TODO:
      1. If s is None, set s = t.
      2. Build the query numbers 0 .. t-1 as a column i, shape (T, 1), and the key positions
         0 .. s-1 as a row j, shape (1, S).
      3. Query i sits at position i + (s - t) (the T new queries are the last T of S positions).
         Compare j <= i + (s - t): the comparison broadcasts (1, S) against (T, 1) to (T, S)
         and gives booleans. `<=`, not `<`: a query may attend its own position. (The lower
         triangle of a (T, S) all-True matrix, shifted s - t diagonals up, is the same mask.)
    """
    ### BEGIN SOLUTION
    # The T queries are the last T of the S positions, so query i sits at position i + (S - T)
    # and may see every key at that position or before it, its own included (`<=`). A column of
    # query positions (T, 1) compared with a row of key positions (1, S) broadcasts to the whole
    # (T, S) table at once, and a comparison gives booleans. With S == T the offset is 0 and the
    # mask is the lower triangle; np.tril(np.ones((t, s), dtype=bool), k=s - t) is the same mask.
    if s is None:
        s = t
    query_position = np.arange(t)[:, None] + (s - t)  # (T, 1): where each query sits among S
    key_position = np.arange(s)[None, :]  # (1, S)
    return key_position <= query_position  # (1, S) <= (T, 1) -> (T, S) bool
    ### END SOLUTION


def padding_mask(lengths, s):
    """Padding mask: key j of sequence b may be attended when j < lengths[b].

    lengths: (B,) integers, 0 <= lengths[b] <= s, the real length of each sequence
    s:       the padded length S
    returns  (B, 1, S) bool, True = a real key; the 1 broadcasts over the T queries

    padding_mask(np.array([2, 3]), 4) == [[[True, True, False, False]],
                                          [[True, True, True,  False]]]

    TODO:
      1. Make sure lengths is a numpy array of shape (B,): a plain list may come in.
      2. Compare the key positions 0 .. s-1 as a row (1, S) with the lengths as a column
         (B, 1): key j is real when j < lengths[b]. `<`, not `<=`, since a sequence of length
         3 owns keys 0, 1 and 2. (1, S) < (B, 1) broadcasts to (B, S) booleans.
      3. Insert the query axis in the middle: (B, S) -> (B, 1, S). Without it, the mask would
         line up its B axis with the T axis of the (B, T, S) scores.
    """
    ### BEGIN SOLUTION
    # Positions start at 0, so a sequence of length L owns keys 0..L-1: the test is the strict
    # j < L. A row of key positions (1, S) compared with a column of lengths (B, 1) gives (B, S);
    # the query axis goes in the middle, (B, 1, S), so that against (B, T, S) scores the mask's
    # B meets B and its 1 stretches over every query.
    lengths = np.asarray(lengths)
    (B,) = lengths.shape
    real = np.arange(s)[None, :] < lengths[:, None]  # (1, S) < (B, 1) -> (B, S)
    return real[:, None, :]  # (B, S) -> (B, 1, S)
    ### END SOLUTION


def combine_masks(*masks):
    """The logical and of any number of masks, broadcast together; None entries are skipped.

    masks:   boolean arrays broadcastable together (e.g. (T, S) and (B, 1, S)), or None
    returns  bool array of the broadcast shape (e.g. (B, T, S)): True where every mask is True;
             None when no mask is given at all (every entry None, or no entries)

    combine_masks(causal_mask(3), None, padding_mask(np.array([2, 3]), 3)).shape == (2, 3, 3)

    TODO:
      1. Keep only the masks that are not None.
      2. If none is left, return None (no mask: attend everywhere).
      3. Start from the first mask and fold in the others one by one with a logical and, each
         step a new array of the broadcast shape: (T, S) and (B, 1, S) -> (B, T, S). A key
         survives only if EVERY mask allows it: and, not or. Do not write `out &= m` on the
         first mask: that changes the caller's array (and cannot grow it to the broadcast
         shape).
      4. Return a numpy array of dtype bool, also when a single mask was given: convert that
         one, rather than hand back whatever came in.
    """
    ### BEGIN SOLUTION
    # A key survives only if every mask allows it, so the masks are joined with a logical and.
    # None means "no restriction" and simply drops out; with nothing left there is no mask at
    # all, and None says exactly that to scaled_dot_product_attention. np.logical_and broadcasts
    # (T, S) against (B, 1, S) to (B, T, S) and returns a new array each time, so the caller's
    # masks are never written to (`out &= m` on the first mask would be).
    present = [m for m in masks if m is not None]
    if not present:
        return None
    out = np.asarray(present[0], dtype=bool)
    for m in present[1:]:
        out = np.logical_and(out, m)  # broadcasts, e.g. (T, S) and (B, 1, S) -> (B, T, S)
    return out
    ### END SOLUTION
