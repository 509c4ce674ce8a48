"""The worker's fast signature check (``signatures.binds``) says a call binds only when
``inspect.Signature.bind`` would, so a mismatch is never sent on as a TypeError from the call."""

import functools
import inspect
import itertools

import pytest

from course.engine.sandbox.worker import main as worker


def signatures() -> list[str]:
    """Parameter lists of every kind: positional-only, positional-or-keyword, defaults over
    both, *args, keyword-only with and without defaults, **kwargs."""
    found = []
    kwonly_forms = ([], ["k0"], ["k0=0"], ["k0", "k1=0"], ["k0=0", "k1"])
    for posonly, plain, star, kwonly, varkw in itertools.product(
        range(3), range(3), (False, True), kwonly_forms, (False, True)
    ):
        names = [f"p{i}" for i in range(posonly)] + [f"n{i}" for i in range(plain)]
        for defaults in range(len(names) + 1):
            params = [name if i < len(names) - defaults else f"{name}=0" for i, name in enumerate(names)]
            if posonly:
                params.insert(posonly, "/")
            if star:
                params.append("*args")
            elif kwonly:
                params.append("*")
            params += kwonly
            if varkw:
                params.append("**kw")
            found.append(", ".join(params))
    return found


def binds(function, args, kwargs) -> bool:
    try:
        inspect.signature(function).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def test_the_fast_check_agrees_with_inspect_over_every_kind_of_signature_and_call():
    keys = ["p0", "p1", "n0", "n1", "k0", "k1", "args", "kw", "zz"]
    calls = [
        (tuple(range(given)), dict.fromkeys(chosen, 0))
        for given in range(6)
        for size in range(3)
        for chosen in itertools.combinations(keys, size)
    ]
    outcomes = set()
    for params in signatures():
        namespace: dict = {}
        exec(f"def f({params}):\n    pass\n", namespace)
        function = namespace["f"]
        for args, kwargs in calls:
            expected, fast = binds(function, args, kwargs), worker.binds(function, args, kwargs)
            assert not fast or expected, (params, args, kwargs)  # never a wrong "binds"
            if expected and not fast:  # unsure only of a positional-only name passed by keyword
                assert {"p0", "p1"} & set(kwargs), (params, args, kwargs)
            outcomes.add((expected, fast))
    assert outcomes == {(True, True), (False, False), (True, False)}


def decorated(x):
    return x


@functools.wraps(decorated)
def wrapper(*args, **kwargs):
    return decorated(*args, **kwargs)


def with_signature(x):
    return x


with_signature.__signature__ = inspect.Signature()  # type: ignore[attr-defined]


class Defaults(tuple):
    def __len__(self):
        return 0


def odd_defaults(x, y):
    return x


odd_defaults.__defaults__ = Defaults((1, 2))


class Thing:
    def method(self, x):
        return x


@pytest.mark.parametrize(
    "function",
    [wrapper, with_signature, odd_defaults, functools.partial(decorated), Thing().method, len, Thing, print],
    ids=["wrapped", "__signature__", "odd defaults", "partial", "method", "builtin", "class", "print"],
)
def test_anything_but_a_plain_function_is_left_to_inspect(function):
    assert not worker.binds(function, (1,), {})


def test_parameters_an_inner_function_captures_are_read_like_any_other():
    def f(a, b=1, *c, d, **e):
        x = 1
        return lambda: (a, d, e, x)

    for args, kwargs in [((1,), {"d": 2}), ((1, 2, 3), {"d": 2, "z": 0}), ((), {"a": 1, "d": 2}), ((1,), {})]:
        assert worker.binds(f, args, kwargs) == binds(f, args, kwargs)
