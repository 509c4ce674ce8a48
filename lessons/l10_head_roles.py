"""Lesson 10: what do the heads do?

The idea
--------
Lessons 1 to 9 built the machine. This lesson opens a trained one and asks what each of its
heads learned to do, with two numbers per head that you compute from its attention weights.

Voita et al. 2019 ("Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting,
the Rest Can Be Pruned") did this for the 48 encoder heads (6 layers of 8) of a Transformer
trained to translate English to Russian. A few heads turned out to have clear jobs:

- positional heads attend to a neighbour: "at least 90% of the time" their largest weight sits on
  one relative position, in practice the previous (-1) or the next (+1) token;
- syntactic heads point from a word to the word it is related to (a verb to its subject or
  object, an adjective to its noun): a head counts as syntactic for a relation when its largest
  weight finds the related word at least 10 percentage points more often than a positional
  baseline, which always picks the relation's most frequent relative position (Voita et al.
  2019, section 5.2);
- a rare-token head attends to the least frequent tokens of the sentence.

The positional and syntactic heads are also "confident" ones: their largest weight is large on
average. The rare-token head is not among them: it is identified by what it does, pointing at
the rarest tokens, not by its confidence (Voita et al. 2019, sections 4 and 5.3). And the
specialised heads are the ones that matter: pruning heads with learned gates, 38 of the 48
encoder heads can be removed for a loss of only 0.15 BLEU, and the specialised heads are the
last to go. Lesson 11 prunes heads itself; this lesson finds the roles.

Confidence
----------
A head's confidence is the average, over every query position of a set of sequences, of the
largest weight in that query's row. That is Voita et al.'s definition but for one detail:
their average leaves out the end-of-sentence token EOS, "excluding the end of sentence symbol"
(Voita et al. 2019, section 4). The course's sequences have no EOS token, so there is nothing
to leave out here:

    confidence_h = mean over rows r of  max_j w_h[r, j]

1 means the head always puts all its weight on one key; a head spread evenly over S keys has 1/S.
Two details. (1) A row whose weights are all exactly 0 is a query that saw no key at all (lesson
3 gives a fully masked row, a padded query say, all-zero weights): it has no largest weight, so
it is left out of the mean, not counted as a 0. A head that has no row left gets NaN (not a
number: nothing was measured). (2) The mean is pooled: weights (B, H, T, S) give one mean per
head over all B * T rows together, not a mean per sequence averaged afterwards.

Careful when reading the number under a causal mask: query 0 sees only key 0, so its largest
weight is always 1, and early queries see few keys. A head that spreads evenly over the keys it
may see has confidence (1 + 1/2 + ... + 1/T) / T: 0.16 for T = 24, but 0.75 for T = 2.

Relative position
-----------------
For an offset o (-1: the previous token, 0: itself, -2: two back), the share of rows whose FIRST
largest weight (np.argmax, which picks the first of equal maxima) sits at key

    j = i + (S - T) + o

Query i sits at position i + (S - T), as in lesson 4's bottom-right causal mask: with T == S that
is just j = i + o, but the last T rows of a longer sequence (what a decoding step with a KV cache
computes, lesson 9) are the queries at positions S - T .. S - 1. Only rows that are not all zero
AND whose j lies in 0 .. S-1 count (query 0 has no previous token); a head with no such row gets
NaN.

Roles
-----
This lesson's classifier gives every head one role, checked in this order:

    "positional o"  its share at some offset o is >= 0.9 (Voita et al.'s "at least 90%")
    "content"       else, its confidence is >= 0.5
    "diffuse"       else

A positional head is usually confident too; it is called positional because that says more. It
need not be: a head can put its largest weight on the previous token in 98% of its rows while
that weight is small, the rest blended over other keys. When several
offsets reach 0.9 (possible only because different offsets count different rows), the one with
the largest share wins, and of equal shares the first in the list of offsets. A NaN share is not
>= 0.9 and a NaN confidence is not >= 0.5: a head with no row to measure is "diffuse".

Why 0.5 for "content"? A head whose largest weight is above one half puts more weight on one key
than on all the other keys together: it has picked something. Which key it picks moves with what
the tokens are, not with where they are (else the head would be positional): it looks for content.
A head below 0.5 blends several keys. The cut is a choice of this course, not Voita et al.'s
(they compare confidence between heads): it sits far above a head spread evenly over T = 24 keys
(0.16) and far below a head that copies (close to 1).

The tiny model
--------------
`course.tiny_model` ships a small transformer the course trained: 2 layers of 4 causal
self-attention heads, d_model 64, a vocabulary of 32 tokens, sequences of 24 tokens (token and
position embeddings, each layer adds its output to its input, no MLP, no layer norm):

    x = tok_emb[tokens] + pos_emb[:T]                 (B, T) ints -> (B, T, D)
    for each layer:  out, w = multi_head_attention(x, x, layer, H, causal_mask(T))
                     x = x + out                      the residual stream
    logits = x @ unembed + b_unembed

Its task: a random sequence in which a segment of 4 to 8 tokens appears a second time later on;
inside the copy it predicts the next token. Solving it takes two heads in two layers (an
"induction circuit", Olsson et al. 2022): in layer 0 a head that looks at the previous token (a
positional head), and in layer 1 a head that finds where the current token appeared before and
copies the token that followed it there (a content head: confident, but the key it picks depends
on the tokens, not on a fixed offset). Measure it yourself:

    from course import tiny_model
    model = tiny_model.load()                          # the weights, float64
    tokens, targets, distance = tiny_model.make_task(200, seed=0)
    tokens = tokens[:, :16]                            # the first 16 positions (see below)
    weights = tiny_model_weights(model, tokens, tiny_model.config()["n_heads"])
    print(head_confidence(weights[0]))                 # layer 0's heads
    print(model_head_roles(model, tokens, 4))          # a role for every head of every layer
    print(model_head_roles(model, tokens, 4, last=6))  # from the last 6 rows: T = 6, S = 16

and `course show 10 --map` draws every head of both layers on one sequence, labelled with the
role and confidence your functions measure. The last 6 rows alone are the queries at positions
10 .. 15 against all 16 keys, what a decoding step with a KV cache sees: aligned bottom-right,
a previous-token head is still found looking one back; aligned top-left, it would be looked for
at keys 0 .. 5 and found nowhere.

A role is a measurement on data, not a label written on a head. The model is scored only inside
the copy, so its last positions were seldom trained to predict anything, and there some heads do
other things: over all 24 positions a head that looks one back in the first 16 can come out "diffuse".
Try both. The model card (`tiny_model.card()`) lists roles the course measured with a rule that
knows the task: it calls a head "copy" when, in at least half of the scored rows, its largest
weight sits on the token AFTER the earlier occurrence of the current token, the token to copy
(course/tiny_model/measure.py). Your classifier knows nothing about the task and calls those heads
"content". It must measure the weights it is given, never look roles up.

What the tiny model cannot show: syntax and rare tokens. Its tokens are random, so there is no
grammar to track and no token is rarer than another; and a causal model has no next-token (+1)
heads, since key i + 1 is masked for query i. Voita et al.'s encoder sees the whole sentence in
both directions.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width
    H heads    K head width (D // H)

- Attention weights are (..., H, T, S): any leading axes (a batch B, or layers and a batch),
  then heads, queries, keys. Every row sums to 1, or is all 0 when its query saw no key.
- Parameters are lesson 6's dict: w_q, w_k, w_v (D, H*K), w_o (H*K, D), and their biases.
- Masks are boolean, True = may attend; causal_mask(t, s) is aligned bottom-right.
- Functions never modify their inputs.

This lesson uses your causal_mask (lesson 4) and multi_head_attention (lesson 6). Finish those
first.

Edit this file, then run `course check 10`.
"""

import numpy as np
from l04_masks import causal_mask  # your lesson 4
from l06_multi_head import multi_head_attention  # your lesson 6

POSITIONAL = 0.9  # Voita et al. 2019: the largest weight sits at one offset in >= 90% of the rows
CONFIDENT = 0.5  # a content head puts, on average, more weight on one key than on all others together
OFFSETS = (-2, -1, 0, 1)  # the relative positions the classifier tries, in order


def head_confidence(weights):
    """Each head's confidence: the mean, over every query row, of the row's largest weight.

    weights: (..., H, T, S) attention weights with at least 3 axes, float32 or float64; a row of
             all zeros is a query that saw no key
    returns  (H,) float64: per head, the mean of max_j w[..., h, i, j] pooled over every row i of
             every leading index, fully zero rows left out; NaN for a head with no row left

    head_confidence(np.array([[[1.0, 0.0], [0.5, 0.5]]])) == [0.75]   (H = 1, T = S = 2)

    TODO:
      1. If weights has fewer than 3 axes, raise a ValueError that says it needs (..., H, T, S).
         H is the size of the third axis from the end.
      2. Each row's largest weight: the maximum over the keys, the last axis S -> (..., H, T).
      3. Which rows count: a row counts when at least one of its weights is not 0 -> (..., H, T)
         booleans. A fully masked row has no largest weight: leave it out, do not count it as 0.
      4. Pool the rows per head: move the head axis to the front of both arrays and flatten the
         rest, (..., H, T) -> (H, N) with N = (product of the leading sizes) * T. One mean over
         all N rows, not a mean per sequence averaged afterwards.
      5. Per head, the number of rows that count, and the sum of their largest weights (a row
         that does not count adds 0): two (H,) arrays.
      6. Return sum / count as (H,) float64, NaN where the count is 0, without dividing by 0
         (which would warn).
    """
    raise NotImplementedError


def relative_position_share(weights, offset):
    """Each head's share of rows whose first largest weight sits at `offset` from the query.

    weights: (..., H, T, S) attention weights with at least 3 axes
    offset:  int, the relative position: -1 the previous token, 0 the query's own position
    returns  (H,) float64: per head, among the rows that are not all zero and whose target key
             j = i + (S - T) + offset lies in 0 .. S-1, the share whose first argmax is j;
             NaN for a head with no such row

    Query i sits at position i + (S - T) (bottom-right, as lesson 4's causal_mask): with T = 2
    rows against S = 5 keys and offset -1, row 0 targets key 2 and row 1 key 3.

    TODO:
      1. Raise a ValueError if weights has fewer than 3 axes. H, T, S are the last three sizes.
      2. The target key of every row: j = i + (S - T) + offset for i = 0 .. T-1 -> (T,) ints
         (queries aligned bottom-right, as lesson 4's causal_mask), and which targets lie inside
         0 .. S-1 -> (T,) booleans.
      3. Each row's FIRST largest weight: the index, over the keys, of the row's maximum, the
         first one when several weights are equal -> (..., H, T) ints. (A row spread evenly
         counts for its first key only.)
      4. A row counts when it is not all zero AND its target lies inside; it is a hit when it
         counts and its first largest weight sits at its target. Both (..., H, T) booleans: the
         (T,) arrays broadcast against them.
      5. Pool per head as in head_confidence: move the head axis to the front, flatten the rest
         -> (H, N); count the hits and the rows that count, (H,) each.
      6. Return hits / counts as (H,) float64, NaN where no row counts (not 0: nothing was
         measured).
    """
    raise NotImplementedError


def classify_heads(weights, offsets=OFFSETS, positional=POSITIONAL, confident=CONFIDENT):
    """One role per head, measured on the weights: "positional o", "content" or "diffuse".

    weights:    (..., H, T, S) attention weights with at least 3 axes
    offsets:    the relative positions to try, in order of preference (default (-2, -1, 0, 1))
    positional: the share at which a head is positional (default 0.9, Voita et al.)
    confident:  the confidence at which a head that is not positional is "content" (default 0.5)
    returns     a list of H strings, head h's role at index h:
                f"positional {o}" (e.g. "positional -1") when relative_position_share(weights, o)
                >= positional for some o in offsets (the largest share wins; of equal shares the
                first in offsets); else "content" when head_confidence >= confident; else
                "diffuse". NaN is never >= a threshold.

    TODO:
      1. Measure once, before deciding: each offset's share with your relative_position_share,
         one (H,) array per offset in offsets, and the confidence with your head_confidence,
         (H,).
      2. For each head h: the offsets whose share at h is >= positional (>=, not >: Voita et al.
         say "at least 90%"). If there are any, the role is "positional o" for the one with the
         largest share; keep the first in offsets when two are equal (replace the best so far
         only when a share is strictly larger).
      3. Else the role is "content" when the confidence of h is >= confident, else "diffuse".
         A NaN share or confidence is never >= a threshold, so it falls through.
      4. Return the H roles as a list of Python str, head 0 first, the offset written as a plain
         int ("positional -1").
    """
    raise NotImplementedError


def tiny_model_weights(model, tokens, n_heads):
    """The attention weights of every layer of a tiny_model-style transformer on `tokens`.

    model:   dict as course.tiny_model.load() returns: tok_emb (V, D), pos_emb (L, D), and
             layers, a list of lesson-6 parameter dicts (w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o);
             unembed and b_unembed are not needed for the weights
    tokens:  (B, T) ints in 0 .. V-1, T <= L
    n_heads: H, heads per layer
    returns  (n_layers, B, H, T, T) float64: layer l's causal self-attention weights

    TODO:
      1. The input of layer 0: for every token its row of tok_emb, (B, T) -> (B, T, D), plus
         the first T rows of pos_emb, (T, D), one per position, which broadcast over B.
      2. For each layer's params, in order: run your multi_head_attention (lesson 6) as causal
         self-attention, queries, keys and values all from x, under your causal_mask of T
         positions (lesson 4). It returns the layer's output (B, T, D) and its weights
         (B, H, T, T): keep the weights.
      3. The next layer reads x plus the layer's output (the residual stream), not the output
         alone, and not the embeddings again.
      4. Stack the kept weights on a new first axis -> (n_layers, B, H, T, T).
    """
    raise NotImplementedError


def model_head_roles(model, tokens, n_heads, last=None):
    """classify_heads for every layer of a tiny_model-style transformer, on `tokens`.

    model, tokens, n_heads: as in tiny_model_weights
    last:    None to use every query row; an int n (1 <= n <= T) to use only the last n query rows
             of each layer, (B, H, n, T) against all T keys, what decoding with a KV cache computes
    returns  a list of n_layers lists of H role strings: roles[l][h] is head h of layer l

    With last=n the queries are positions T - n .. T - 1 while the keys are all T positions:
    T != S, and relative_position_share must align them bottom-right to find the same roles.

    TODO:
      1. Every layer's weights with your tiny_model_weights: (n_layers, B, H, T, T).
      2. If last is not None, keep only the last `last` query rows, on the T axis (the second to
         last) and all T keys -> (n_layers, B, H, last, T). Your relative_position_share then
         aligns them bottom-right.
      3. Classify each layer's weights (B, H, T or last, T) with your classify_heads and its
         default thresholds; return the n_layers lists of roles, in layer order, as a list.
    """
    raise NotImplementedError
