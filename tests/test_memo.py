"""Remembered oracles (course/engine/testing/memo.py): computed once per exact input, handed out safely."""

import numpy as np
import pytest

from course.engine.testing.memo import remembered


def counting_oracle():
    calls = []

    @remembered
    def oracle(x, scale=1.0, combine=None):
        calls.append(1)
        return x * scale, [x.sum()]

    return oracle, calls


def test_the_same_inputs_compute_the_oracle_once_and_give_the_same_answer():
    oracle, calls = counting_oracle()
    x = np.arange(6.0).reshape(2, 3)
    first = oracle(x, scale=2.0)
    second = oracle(x.copy(), scale=2.0)
    assert len(calls) == 1
    np.testing.assert_array_equal(first[0], x * 2.0)
    np.testing.assert_array_equal(second[0], first[0])


@pytest.mark.parametrize(
    "other",
    [
        np.arange(6.0).reshape(3, 2),  # same bytes, other shape
        np.arange(6, dtype=np.float32).reshape(2, 3),  # same values, other dtype
        np.arange(6.0).reshape(2, 3) + 1e-12,  # one ulp-sized change
    ],
)
def test_any_difference_in_shape_dtype_or_bytes_computes_it_again(other):
    oracle, calls = counting_oracle()
    oracle(np.arange(6.0).reshape(2, 3))
    out, _ = oracle(other)
    assert len(calls) == 2
    np.testing.assert_array_equal(out, other)


def test_a_different_keyword_computes_it_again():
    oracle, calls = counting_oracle()
    x = np.ones(3)
    oracle(x, scale=2.0)
    out, _ = oracle(x, scale=3.0)
    assert len(calls) == 2
    np.testing.assert_array_equal(out, [3.0, 3.0, 3.0])


def test_a_remembered_answer_cannot_be_changed_by_the_test_that_got_it():
    oracle, _ = counting_oracle()
    x = np.ones(3)
    out, sums = oracle(x)
    with pytest.raises(ValueError, match="read-only"):
        out[0] = 5.0
    sums.append("changed")
    again, sums_again = oracle(x)
    assert sums_again == [3.0]
    np.testing.assert_array_equal(again, [1.0, 1.0, 1.0])


def test_a_lambda_or_an_unknown_object_is_never_remembered():
    oracle, calls = counting_oracle()
    x = np.ones(2)
    oracle(x, combine=lambda a: a)
    oracle(x, combine=lambda a: a)
    oracle(x, combine=object())
    oracle(x, combine=object())
    assert len(calls) == 4


def test_a_named_function_argument_is_remembered_by_identity():
    oracle, calls = counting_oracle()
    x = np.ones(2)
    oracle(x, combine=np.mean)
    oracle(x, combine=np.mean)
    oracle(x, combine=np.median)
    assert len(calls) == 2


def test_an_oracle_that_raises_is_not_remembered():
    calls = []

    @remembered
    def failing(x):
        calls.append(1)
        raise ZeroDivisionError

    for _ in range(2):
        with pytest.raises(ZeroDivisionError):
            failing(np.zeros(1))
    assert len(calls) == 2


def test_while_warming_up_a_passing_check_computes_its_mistake_variants_and_otherwise_not():
    from course.engine.testing import Mistake, check_array, memo

    oracle, calls = counting_oracle()
    x = np.arange(6.0).reshape(2, 3)
    mistakes = {
        Mistake("doubled", "doubled", exercises=("f",)): lambda: oracle(x, scale=2.0)[0],
        Mistake("broken", "broken", exercises=("f",)): lambda: (
            1 / 0
        ),  # a variant that cannot be formed is skipped
    }
    check_array(x.copy(), x, what="f(x)", dims="B D", mistakes=mistakes)
    assert calls == [] and not memo.warming()
    with memo.warming_up():
        assert memo.warming()
        check_array(x.copy(), x, what="f(x)", dims="B D", mistakes=mistakes)
    assert len(calls) == 1 and not memo.warming()
    with pytest.raises(AssertionError) as caught:  # the wrong answer finds it remembered
        check_array(x * 2.0, x, what="f(x)", dims="B D", mistakes=mistakes)
    assert caught.value.mistake.id == "doubled"
    assert len(calls) == 1
