"""Lesson 15's recorded training runs against the solution they were made from.

The grading tests of lesson 15 compare a learner's `train` with short runs that
tools/make_l15_fixtures.py recorded from solutions/l15_training.py into
tests/lessons/fixtures/l15_training.npz. These tests rebuild the runs, so that a change to the
solution (or to the tool) cannot drift from the committed file, and check what the grading
tests recompute on their own side: the models the runs start from (their copy of the lesson's
given init_model), their copy of schedule_at, the reference trainer that names a learner's
mistakes, and the identity an instructor's secret relies on (a run on a model whose features
and heads are reordered is the recorded run, reordered).
"""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest

from tests.helpers import REPO, import_lessons

FIXTURES = REPO / "tests" / "lessons" / "fixtures" / "l15_training.npz"
TOOL = REPO / "tools" / "make_l15_fixtures.py"
GRADING_TESTS = REPO / "tests" / "lessons" / "test_l15_training.py"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tool():
    return load(TOOL, "make_l15_fixtures")


@pytest.fixture(scope="module")
def grading():
    """The grading test module (its helpers, not its tests)."""
    return load(GRADING_TESTS, "_l15_grading_tests")


@pytest.fixture(scope="module")
def sol():
    return import_lessons("l15_training")[0]


@pytest.fixture(scope="module")
def built(tool):
    return tool.build()


def test_the_fixture_tool_reproduces_the_committed_file(tool, built):
    assert tool.OUT == FIXTURES
    problems = tool.differences(built, FIXTURES)
    assert not problems, "run python tools/make_l15_fixtures.py: " + "; ".join(problems[:10])


def test_the_fixture_tool_is_deterministic(tool, built):
    again = tool.build()
    assert again.keys() == built.keys()
    for key in built:
        np.testing.assert_array_equal(again[key], built[key], err_msg=key)


def test_the_fixture_file_is_small_and_covers_what_the_grading_tests_rely_on(grading):
    assert FIXTURES.stat().st_size < 100_000
    runs = grading.recorded()
    specs = [run["spec"] for run in runs.values()]
    for name, run in runs.items():
        n = len(run["spec"]["variants"])
        assert n >= 3, f"{name}: a public variant and others for a secret to pick"
        assert run["losses"].shape == (n, run["spec"]["steps"]) and run["losses"].dtype == np.float64
        assert run["model"].shape[0] == n and run["step"].shape == (n,)
        assert ("middle" in run) == bool(run["spec"]["chunks"]), name
    assert {spec["schedule"] for spec in specs} == {None, "cosine", "onecycle"}
    assert any(spec["n_kv_heads"] is not None and spec["n_kv_heads"] < spec["n_heads"] for spec in specs)
    assert any(spec["start_step"] > 0 for spec in specs)
    assert any(spec["total_steps"] is not None and spec["total_steps"] > spec["steps"] for spec in specs)
    assert any(spec["weight_decay"] != 0.01 for spec in specs), "an ignored weight_decay must show"
    chunked = [spec for spec in specs if spec["chunks"]]
    assert chunked and all(sum(spec["chunks"]) == spec["steps"] for spec in chunked)
    for spec in chunked:  # the state carried across the cut holds layers; b1 and the total matter
        assert spec["config"]["n_layers"] >= 2 and spec["schedule"] == "onecycle", spec
        assert spec["total_steps"] == spec["steps"] and spec["n_kv_heads"] < spec["n_heads"], spec


def test_the_grading_tests_start_from_the_models_the_solution_makes(tool, grading, sol):
    for name, run in grading.recorded().items():
        spec = run["spec"]
        for variant in spec["variants"]:
            ours = grading.start_model(spec, variant["init_seed"])
            theirs = tool.start_model(sol, spec, variant["init_seed"])
            for (path, a), (other, b) in zip(grading.leaves(ours), grading.leaves(theirs), strict=True):
                assert path == other
                np.testing.assert_array_equal(a, b, err_msg=f"{name} {path}")
    config = {"vocab_size": 5, "max_len": 7, "d_model": 6, "n_layers": 2, "n_heads": 3}
    for (path, a), (_, b) in zip(
        grading.leaves(grading.init_model(config, 3)), grading.leaves(sol.init_model(config, 3)), strict=True
    ):
        np.testing.assert_array_equal(a, b, err_msg=str(path))


def test_the_grading_tests_schedule_is_the_lessons(grading, sol):
    for schedule, total, lr in itertools.product((None, "cosine", "onecycle"), (5, 10, 37), (0.1, 3e-3)):
        for step in range(total):
            assert grading.schedule_at(schedule, step, total, lr) == pytest.approx(
                sol.schedule_at(schedule, step, total, lr), rel=1e-12, abs=1e-15
            )


def test_the_reference_trainer_that_names_mistakes_reproduces_every_recorded_run(grading):
    # b_k's gradient is zero in theory (the softmax ignores a constant added to a row of scores):
    # its rounding noise, near 1e-18, moves b_k by about lr * 1e-10 a step through Adam's eps.
    # The grading tests' atol (1e-9) holds that, as here.
    for name, run in grading.recorded().items():
        spec = run["spec"]
        for index, variant in enumerate(spec["variants"]):
            start = grading.start_model(spec, variant["init_seed"])
            args, kwargs = grading.train_call(spec, variant["data_seed"])
            trained, losses, state = grading.train_reference(
                start, *args[:5], spec["n_kv_heads"], grading.reference_run(kwargs, None)
            )
            np.testing.assert_allclose(losses, run["losses"][index], rtol=1e-10, err_msg=name)
            want = grading.recorded_model(spec, run["model"][index])
            for path, value in grading.leaves(want):
                np.testing.assert_allclose(
                    grading.at(trained, path), value, rtol=1e-8, atol=1e-9, err_msg=f"{name} {path}"
                )
            assert state["step"] == run["step"][index]


@pytest.mark.parametrize("name", ["constant_mha", "cosine_gqa", "later_steps", "resumed"])
def test_a_run_on_a_reordered_model_is_the_recorded_run_reordered(grading, sol, name):
    """What an instructor's secret relies on: the solution trained on a model whose features and
    heads are reordered gives the recorded losses and the recorded model, reordered; a run cut
    in chunks gives the recorded model after the first chunk, reordered, and the second chunk,
    from the state the first returned, ends where the whole run does."""
    run = grading.recorded()[name]
    spec = run["spec"]
    n_heads, n_kv = spec["n_heads"], spec["n_kv_heads"] or spec["n_heads"]
    r = n_heads // n_kv
    rng = np.random.default_rng(0)
    groups = rng.permutation(n_kv)
    query_heads = [int(g) * r + int(j) for g in groups for j in rng.permutation(r)]
    features = rng.permutation(spec["config"]["d_model"])
    variant = spec["variants"][1]

    def reordered(model):
        return grading.reordered(model, features, query_heads, groups, n_heads)

    def check(trained, values):
        for path, value in grading.leaves(reordered(grading.recorded_model(spec, values))):
            np.testing.assert_allclose(
                grading.at(trained, path), value, rtol=1e-8, atol=1e-9, err_msg=f"{name} {path}"
            )

    start = reordered(grading.start_model(spec, variant["init_seed"]))
    args, kwargs = grading.train_call(spec, variant["data_seed"])
    trained, losses, _ = sol.train(start, *args, **kwargs)
    np.testing.assert_allclose(losses, run["losses"][1], rtol=1e-10)
    check(trained, run["model"][1])
    if spec["chunks"]:
        first, second = spec["chunks"]
        args, kwargs = grading.train_call(spec, variant["data_seed"], steps=first)
        middle, losses, state = sol.train(start, *args, **kwargs)
        np.testing.assert_allclose(losses, run["losses"][1][:first], rtol=1e-10)
        check(middle, run["middle"][1])
        args, kwargs = grading.train_call(spec, variant["data_seed"], second, first, state)
        trained, losses, state = sol.train(middle, *args, **kwargs)
        np.testing.assert_allclose(losses, run["losses"][1][first:], rtol=1e-10)
        check(trained, run["model"][1])
        assert state["step"] == run["step"][1]
