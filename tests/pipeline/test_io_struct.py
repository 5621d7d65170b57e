"""Splitting batch outputs by index, for every output type and field shape."""

from __future__ import annotations

import dataclasses

import pytest

from mtok.wire.finish import FinishLength, FinishStop
from mtok.wire.io_struct import (
    BatchEmbeddingOutput,
    BatchStrOutput,
    BatchTokenIDOutput,
    group_by_worker,
    split_by_index,
)

pytestmark = [pytest.mark.fast, pytest.mark.unit]


def token_batch():
    return BatchTokenIDOutput(
        rids=["a", "b", "c"],
        worker_addresses=["w1", "w2", "w1"],
        finished_reasons=[None, FinishLength(3), None],
        decode_ids=[[1], [2, 3], []],
        prompt_tokens=[5, 6, 7],
        completion_tokens=[1, 2, 0],
        skip_special_tokens=[True, False, True],
        spaces_between_special_tokens=[True, True, False],
        no_stop_trim=[False, False, True],
        stop=[None, ["x"], None],
        stop_str_offsets=[None, 4, None],
        models=None,  # an optional field left unset
    )


def test_every_per_request_list_is_split():
    piece = split_by_index(token_batch(), [1])
    assert piece.rids == ["b"]
    assert piece.decode_ids == [[2, 3]]
    assert piece.finished_reasons == [FinishLength(3)]
    assert piece.stop == [["x"]] and piece.stop_str_offsets == [4]
    assert piece.models is None


def test_indices_keep_their_order_and_alignment():
    piece = split_by_index(token_batch(), [2, 0])
    assert piece.rids == ["c", "a"]
    assert piece.prompt_tokens == [7, 5]
    assert piece.worker_addresses == ["w1", "w1"]


def test_fields_shorter_than_the_batch():
    out = BatchStrOutput(rids=["a", "b", "c"], output_strs=["x", "y", "z"], output_ids=[[1]], prompt_tokens=[1, 2])
    assert split_by_index(out, [0]).output_ids == [[1]]
    assert split_by_index(out, [2]).output_ids is None  # none of the requested entries exist
    assert split_by_index(out, [1, 2]).prompt_tokens == [2, None]  # padded, stays aligned with rids
    assert split_by_index(out, [1, 2]).output_strs == ["y", "z"]


def test_dict_of_lists_fields_are_split_per_key():
    @dataclasses.dataclass
    class WithDict(BatchStrOutput):
        extra: dict = dataclasses.field(default_factory=dict)

    out = WithDict(rids=["a", "b", "c"], extra={"k": [10, 20, 30], "short": [1], "none": None})
    piece = split_by_index(out, [1])
    assert piece.extra == {"k": [20], "short": None, "none": None}
    piece = split_by_index(out, [0, 2])
    assert piece.extra == {"k": [10, 30], "short": [1, None], "none": None}


def test_embedding_output_with_stacked_rows():
    out = BatchEmbeddingOutput(rids=["a", "b"], worker_addresses=["w1", "w2"],
                               embeddings=[[0.1, 0.2], [0.3, 0.4]], prompt_tokens=[3, 4],
                               finished_reasons=[FinishStop(), FinishStop()])
    piece = split_by_index(out, [1])
    assert isinstance(piece, BatchEmbeddingOutput)
    assert piece.embeddings == [[0.3, 0.4]] and piece.prompt_tokens == [4]


def test_scalar_fields_are_shared():
    @dataclasses.dataclass
    class WithScalar(BatchStrOutput):
        step: int = 0

    piece = split_by_index(WithScalar(rids=["a", "b"], step=7), [1])
    assert piece.step == 7 and piece.rids == ["b"]


def test_group_by_worker_sends_one_message_per_worker():
    groups = group_by_worker(token_batch())
    assert set(groups) == {"w1", "w2"}
    assert groups["w1"].rids == ["a", "c"] and groups["w1"].decode_ids == [[1], []]
    assert groups["w2"].rids == ["b"] and groups["w2"].completion_tokens == [2]


def test_every_field_of_every_output_type_round_trips():
    for cls in (BatchTokenIDOutput, BatchStrOutput, BatchEmbeddingOutput):
        values = {}
        for f in dataclasses.fields(cls):
            values[f.name] = [f"{f.name}-{i}" for i in range(4)]
        out = cls(**values)
        piece = split_by_index(out, [3, 1])
        for f in dataclasses.fields(cls):
            assert getattr(piece, f.name) == [f"{f.name}-3", f"{f.name}-1"], (cls.__name__, f.name)
