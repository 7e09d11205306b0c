"""A search spec is a value: equal specs hash alike, its option values never change, and it pickles whole."""

from __future__ import annotations

import pickle

import pytest

from tour_pyserini.pipeline import SearchSpec


def test_a_spec_with_option_values_pickles_whole_for_a_ray_worker():
    spec = SearchSpec(
        index="indexes/x",
        rewriter="tour-hard",
        rewriter_options={"depth": 5},
        teacher="bm25",
        teacher_options={"concurrency": 2},
    )
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and hash(again) == hash(spec)
    assert dict(again.teacher_options) == {"concurrency": 2} and again.teacher_spec == spec.teacher_spec
    with pytest.raises(TypeError, match="not changed"):
        again.teacher_options["concurrency"] = 3
