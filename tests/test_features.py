"""Span windows, tagging split-and-merge, and batching."""

import itertools
import random

import numpy as np
import pytest

from conftest import gold_span_logits
from workflow_scripts.data.features import (
    IGNORE,
    collate,
    decode_spans,
    encode,
    length_grouped_batches,
    merge_tags,
)
from workflow_scripts.data.prepare import read_table
from workflow_scripts.spec.task_options import FormatOptions
from workflow_scripts.spec.tasks import get_task

pytestmark = pytest.mark.unit

SPAN_OPTS = FormatOptions(max_length=48, doc_stride=16, max_query_length=12, n_best=20, max_answer_length=10)


def test_span_windows_locate_every_answer(demo_data, tokenizer):
    rows = read_table(demo_data["squad.train"]).to_pylist()[:40]
    enc = encode(get_task("squad"), tokenizer, rows, SPAN_OPTS, train=True)
    windows = {}
    for f in enc.features:
        windows.setdefault(f["example"], []).append(f)
        assert len(f["input_ids"]) <= SPAN_OPTS.max_length
    assert any(len(ws) > 1 for ws in windows.values()), "contexts should need several windows"
    for i, row in enumerate(rows):
        found = [f for f in windows[i] if f["start_positions"] > 0]
        assert found, f"answer of {row['id']} is in no window"
        for f in found:
            s, e = f["start_positions"], f["end_positions"]
            assert row["context"][f["offsets"][s][0] : f["offsets"][e][1]] == row["answer_texts"][0]


def test_doc_stride_is_the_step_between_windows(demo_data, tokenizer):
    row = read_table(demo_data["squad.train"]).to_pylist()[0]
    row = {**row, "context": " ".join([row["context"]] * 4)}
    enc = encode(get_task("squad"), tokenizer, [row], SPAN_OPTS, train=False)
    assert len(enc.features) >= 3
    full = [
        tuple(o)
        for o in tokenizer(row["context"], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    ]

    def first_token(feature):
        window = [tuple(o) for o in feature["offsets"] if o is not None]
        return next(i for i in range(len(full)) if full[i : i + len(window)] == window)

    firsts = [first_token(f) for f in enc.features]
    assert firsts[0] == 0
    # Window k starts doc_stride context tokens after window k-1 (the last may start earlier
    # or later only because it reaches the end of the context).
    assert all(b - a == SPAN_OPTS.doc_stride for a, b in itertools.pairwise(firsts[:-1]))
    last = [tuple(o) for o in enc.features[-1]["offsets"] if o is not None]
    assert last[-1] == full[-1]


def test_span_decoding_recovers_peaked_answer(demo_data, tokenizer):
    rows = read_table(demo_data["squad.train"]).to_pylist()[:10]
    enc = encode(get_task("squad"), tokenizer, rows, SPAN_OPTS, train=True)
    preds = decode_spans(enc, *gold_span_logits(enc, peak=5.0), SPAN_OPTS, allow_null=False)
    assert preds == {r["id"]: r["answer_texts"][0] for r in rows}


def test_long_sentences_are_split_and_merged_back_never_truncated(demo_data, tokenizer):
    task = get_task("udpos")
    rows = read_table(demo_data["udpos.test"]).to_pylist()
    longest = max(len(r["tokens"]) for r in rows)
    enc = encode(task, tokenizer, rows, FormatOptions(max_length=16), train=False)
    assert max(len(f["input_ids"]) for f in enc.features) <= 16
    assert len(enc.features) > len(rows)
    # One-hot logits at each gold tag: merging must give back every word's gold tag.
    logits = []
    for f in enc.features:
        arr = np.zeros((len(f["input_ids"]), len(task.labels)))
        for k, lab in enumerate(f["labels"]):
            if lab != IGNORE:
                arr[k, lab] = 1
        logits.append(arr)
    merged = merge_tags(enc, logits, task.labels)
    assert merged == [list(r["tags"]) for r in rows]
    assert longest > 16


def test_length_grouping_reduces_padding_and_is_seeded(demo_data, tokenizer):
    rows = read_table(demo_data["mnli.train"]).to_pylist()
    enc = encode(get_task("mnli"), tokenizer, rows, FormatOptions(max_length=64), train=True)
    grouped = length_grouped_batches(enc.features, 16, random.Random(1))
    assert grouped == length_grouped_batches(enc.features, 16, random.Random(1))
    assert sorted(k for b in grouped for k in b) == list(range(len(enc.features)))

    def pad_share(batches):
        real = total = 0
        for b in batches:
            mask = collate([enc.features[k] for k in b], "classification", tokenizer.pad_token_id)["attention_mask"]
            real, total = real + int(mask.sum()), total + mask.numel()
        return 1 - real / total

    order = list(range(len(enc.features)))
    random.Random(1).shuffle(order)
    plain = [order[i : i + 16] for i in range(0, len(order), 16)]
    assert pad_share(grouped) < pad_share(plain)
    padded = [
        collate([enc.features[k] for k in b], "classification", tokenizer.pad_token_id)["input_ids"].numel()
        for b in grouped
    ]
    assert padded[0] == max(padded) and padded[0] > min(padded), "the largest batch comes first"
    assert grouped != length_grouped_batches(enc.features, 16, random.Random(2))


def test_features_live_in_arrow_at_four_bytes_a_token(demo_data, tokenizer):
    import pyarrow as pa

    rows = read_table(demo_data["mnli.train"]).to_pylist()
    enc = encode(get_task("mnli"), tokenizer, rows, FormatOptions(max_length=64), train=True)
    ids = enc.features.table.column("input_ids")
    assert ids.type == pa.list_(pa.int32())
    tokens = int(enc.features.lengths.sum())
    assert ids.nbytes <= 4 * tokens + 4 * (len(rows) + 1) + 64  # values + offsets, nothing per token else
    assert enc.features[3] == enc.features.take([3])[0] and enc.features[-1] == enc.features.take([len(rows) - 1])[0]


def test_multiple_choice_length_is_the_longest_choice(tokenizer):
    rows = [
        {
            "id": "a",
            "lang": "en",
            "context": "one two",
            "choices": ["x", "a much longer choice here", "y", "z"],
            "label": 1,
        },
        {"id": "b", "lang": "en", "context": "three", "choices": ["p", "q", "r", "s"], "label": 0},
    ]
    enc = encode(get_task("hellaswag"), tokenizer, rows, FormatOptions(max_length=32), train=True)
    for k, f in enumerate(enc.features):
        assert enc.features.lengths[k] == max(len(c) for c in f["input_ids"])
    batch = collate(enc.features.take([0, 1]), "multiple_choice", tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, 4, int(enc.features.lengths.max()))
