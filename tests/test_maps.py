"""Attention maps: the learner's weights beside the reference, and the broken rows flagged."""

import numpy as np
import pytest

from course.content.catalog import load_catalog
from course.engine.pictures import load
from course.engine.pictures.maps import MapPipeline, attention_maps, flag_rows
from course.render.pictures import maps_screen
from tests.helpers import SOLUTIONS, solutions_with_mistake

CATALOG = load_catalog()
LESSONS_WITH_MAPS = [
    lesson.module for lesson in CATALOG.available() if load.part(lesson, "MAPS", MapPipeline)
]


def test_every_lesson_with_attention_weights_asks_for_maps():
    assert [CATALOG.by_module(m).number for m in LESSONS_WITH_MAPS] == [3, 4, 5, 6, 7, 8, 9, 12]


@pytest.mark.parametrize("module", LESSONS_WITH_MAPS)
def test_the_solutions_maps_equal_the_reference_with_no_flag(module):
    maps = attention_maps(CATALOG.by_module(module), SOLUTIONS)
    assert maps.problem == "" and maps.flags == []
    np.testing.assert_allclose(maps.learner, maps.reference, atol=1e-9)
    assert maps.learner.shape[1:] == (6, 6)


def test_gqa_maps_show_which_key_value_head_each_query_head_reads():
    maps = attention_maps(CATALOG.by_module("l08_gqa"), SOLUTIONS)
    assert maps.kv_heads == [0, 0, 1, 1]


@pytest.mark.parametrize(
    "module, mistake, flag",
    [
        ("l03_attention", "mask_after_softmax", "sums to"),
        ("l03_attention", "mask_flipped", "forbids"),
        ("l04_masks", "causal_diagonal_excluded", "sums to 0.000, not 1"),
    ],
)
def test_a_classic_mistake_shows_as_flagged_rows(tmp_path, module, mistake, flag):
    maps = attention_maps(CATALOG.by_module(module), solutions_with_mistake(tmp_path, module, mistake))
    assert any(flag in what for _, _, what in maps.flags), maps.flags


def test_tiled_kv_heads_differ_from_the_reference_map(tmp_path):
    folder = solutions_with_mistake(tmp_path, "l08_gqa", "tile_instead_of_repeat")
    maps = attention_maps(CATALOG.by_module("l08_gqa"), folder)
    assert np.abs(maps.learner - maps.reference).max() > 1e-3


def test_nan_rows_are_flagged():
    weights = np.full((1, 3, 3), 1 / 3)
    weights[0, 1] = np.nan
    assert flag_rows(weights, np.ones((3, 3), dtype=bool)) == [(0, 1, "NaN in the row")]


def test_a_fully_masked_row_must_sum_to_zero():
    allowed = np.array([[False, False], [True, True]])
    uniform = np.full((1, 2, 2), 0.5)  # what -1e9 instead of -inf gives
    flags = flag_rows(uniform, allowed)
    assert (0, 0, "weight on a key the mask forbids") in flags
    assert (0, 0, "sums to 1.000, not 0") in flags


def test_a_stub_and_a_lesson_without_weights_say_so_in_words(tmp_path):
    lessons = SOLUTIONS.parent / "lessons"
    stub = attention_maps(CATALOG.by_module("l03_attention"), lessons)
    assert "NotImplementedError" in stub.problem and stub.learner is None
    none = attention_maps(CATALOG.by_module("l02_softmax"), SOLUTIONS)
    assert "no attention weights" in none.problem


def test_the_map_screen_renders_yours_reference_and_difference():
    from rich.console import Console

    console = Console(record=True, width=120, color_system=None)
    console.print(maps_screen(attention_maps(CATALOG.by_module("l06_multi_head"), SOLUTIONS)))
    text = console.export_text()
    assert "yours" in text and "reference" in text and "|difference|" in text
    assert text.count("head ") >= 4 and "stays within the mask" in text


def test_a_head_split_without_transpose_shows_in_the_map(tmp_path):
    folder = solutions_with_mistake(tmp_path, "l05_heads", "split_reshape_without_transpose")
    maps = attention_maps(CATALOG.by_module("l05_heads"), folder)
    assert maps.learner is not None and np.abs(maps.learner - maps.reference).max() > 1e-3


def test_a_two_head_layer_looking_at_the_same_offset_differs_from_the_reference(tmp_path):
    folder = solutions_with_mistake(tmp_path, "l07_why_heads", "heads_same_offset")
    maps = attention_maps(CATALOG.by_module("l07_why_heads"), folder)
    assert np.abs(maps.learner[1] - maps.reference[1]).max() > 0.5


def test_a_cache_of_repeated_heads_is_explained_in_words(tmp_path):
    folder = solutions_with_mistake(tmp_path, "l09_kv_cache", "repeated_cache")
    maps = attention_maps(CATALOG.by_module("l09_kv_cache"), folder)
    assert maps.learner is None and "expected (B, G, S, K)" in maps.problem
