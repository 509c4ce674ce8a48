"""Lesson 2: a softmax that never overflows.

The idea
--------
Attention turns a row of scores (one per key) into weights that are positive and sum to one.
That is the softmax, taken along one axis:

    softmax(x)_i = exp(x_i) / sum_j exp(x_j)

Written like that it breaks on real numbers. exp overflows to inf above x = 709.8 in float64
and already above x = 88.7 in float32, and inf / inf is NaN; when a whole row lies far below
zero (under -745.1 in float64, -103.97 in float32) every exp underflows to 0, and 0 / 0 is NaN
too: np.exp(np.float32(-103.9)) is still 1.4e-45, the smallest float32 above 0 (numpy prints it
1e-45), but np.exp(np.float32(-104.0)) is 0.
The cure is one line of algebra: for any constant m,

    exp(x_i - m) / sum_j exp(x_j - m) = e^-m exp(x_i) / (e^-m sum_j exp(x_j)) = softmax(x)_i

so subtracting a constant changes nothing. Choose m = max_j x_j: every exponent is then <= 0
(no overflow) and the largest one is exactly 0, so the sum is at least 1 (no 0 / 0).

Masks (lessons 3 and 4) set a forbidden score to -inf, so that exp gives it weight 0. When every
key of a query is masked the whole row is -inf, its maximum is -inf, and -inf - (-inf) is NaN.
The course's rule: such a row gets all-zero weights, never NaN.

The same trick gives the log of the softmax's denominator, logsumexp:

    logsumexp(x) = log(sum_j exp(x_j)) = m + log(sum_j exp(x_j - m))

and with it softmax(x) = exp(x - logsumexp(x)). Like np.sum, logsumexp reduces its axis away:
an input (B, T, S) with axis=-1 gives (B, T). An all -inf row gives log(0) = -inf.

One numpy detail carries this lesson: keepdims. x.max(axis=-1) of a (T, S) array has shape (T,),
and x - m then lines m up with the LAST axis of x (broadcasting aligns shapes from the right): an
error when T != S and silently wrong numbers when T == S. x.max(axis=-1, keepdims=True) has shape
(T, 1) and broadcasts along the axis it came from, for every axis.

Conventions (the same in every lesson)
--------------------------------------
    B batch    T query positions    S key/value positions    D model width    H heads

- Arrays are batch first; attention scores are (B, T, S) or (B, H, T, S), one row per query.
- softmax and logsumexp work along any axis (default: the last one, the keys).
- A row of all -inf (every key masked) gets all-zero weights, never NaN.
- Functions never modify their inputs, and return the dtype of their inputs (float32 or float64).

Edit this file, then run `course check 2`.
"""

import numpy as np


def softmax(x, axis=-1):
    """Softmax along one axis: positive numbers that sum to one along `axis`.

    x:    any shape, e.g. scores (B, T, S); float32 or float64
    axis: the axis to normalise along (default -1, the keys S)
    returns an array of x's shape and dtype; a slice of all -inf along `axis` gives all zeros

    TODO:
      1. m = the maximum of x along `axis`, keeping that axis with size 1 (keepdims=True),
         e.g. (T, S) -> (T, 1) for axis=-1, so that m broadcasts against x along that same
         axis wherever it is (without keepdims a (T, S) input gives m of shape (T,), which
         lines up with the LAST axis of x).
      2. A slice of all -inf has m = -inf, and -inf - (-inf) is NaN. Replace every entry of m
         that is not finite by 0 and keep the finite ones: m keeps its shape.
      3. e = the exponential of x - m, elementwise: x's shape, every exponent <= 0, so nothing
         overflows. Compute x - m as a new array, never x -= m: the caller's x must stay
         untouched.
      4. s = the sum of e along `axis`, again keeping the axis with size 1. It is >= 1, except
         for an all -inf slice, where it is 0.
      5. Return e / s where s > 0, and 0 where s is 0: never divide there, 0 / 0 is NaN. The
         result has x's shape and dtype: no float64 casts.
    """
    raise NotImplementedError


def logsumexp(x, axis=-1):
    """log(sum(exp(x))) along one axis, without overflow; the axis is reduced away.

    x:    any shape, e.g. (B, T, S); float32 or float64
    axis: the axis to reduce (default -1)
    returns x's shape without `axis` (as np.sum(x, axis) would), x's dtype;
            a slice of all -inf gives -inf

    TODO:
      1. Take m as in softmax: the maximum along `axis`, the axis kept with size 1, and every
         non-finite entry replaced by 0.
      2. s = the sum of the exponential of x - m along `axis`, again keeping the axis with
         size 1.
      3. out = the natural log of s, plus m: the axis still kept. For an all -inf slice s is
         0 and log(0) = -inf, which is the right answer; numpy warns about a division by zero
         there, so silence that warning for this one line (the np.errstate context manager).
      4. Drop the kept axis at the very end: e.g. (T, 1) -> (T,), the shape a plain sum along
         `axis` gives. (Adding m, which keeps the axis, to a sum that does not, broadcasts
         (T,) + (T, 1) into a (T, T) table.)
    """
    raise NotImplementedError
