"""Canonical rows -> model inputs, and model outputs -> predictions, for every task format.

- classification: one (text_a, text_b) pair; the head reads the first token.
- multiple choice: one (context, choice) pair per choice.
- span: sliding windows over the context (max length, doc stride, max query length) as in
  the reference SQuAD scripts; answers decoded from n-best start/end logits.
- tagging: the label sits on the first sub-word of each word (-100 elsewhere); a sentence
  too long for the model is split into word pieces that fit and merged back, never truncated.
  Words are tokenised as in running text, with their leading space where the tokenizer
  needs one (byte-level BPE without ``add_prefix_space``: ``words_need_spaces``).
- mlm: dynamic masking (15%, of which 80% mask / 10% random / 10% kept), redrawn every batch.
- ranking: queries and candidates encoded apart, for a dual encoder (ranking_inputs.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from workflow_scripts.data import ranking_inputs
from workflow_scripts.progress import progress
from workflow_scripts.spec.formats import get_format, head_kind
from workflow_scripts.spec.formats import names as format_names
from workflow_scripts.spec.task_options import FormatOptions
from workflow_scripts.spec.tasks import (
    CLASSIFICATION,
    MLM,
    MULTIPLE_CHOICE,
    RANKING,
    SPAN,
    TAGGING,
    VISUAL_ANSWER,
    VISUAL_CLASSIFICATION,
    VISUAL_RETRIEVAL,
    Task,
)

Feature = dict[str, Any]
IGNORE = -100
# Head kinds whose batches a padding-free forward can read (heads.encoded): the text formats
# through the encoder's own embeddings. Image prefixes and dual encoders stay padded.
PACKABLE = frozenset({CLASSIFICATION, MLM, MULTIPLE_CHOICE, SPAN, TAGGING})


class FeatureStore(Sequence):
    """Encoded features held column-wise in Arrow (int32 token ids), not as Python objects.

    A few bytes a token instead of ~36 for a Python int in a list, so the 2M-sentence MLM
    corpus or ANLI+ fit comfortably; rows become dicts only for the batch being built.
    """

    def __init__(self, table) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        self.table = table
        ids = table.column("input_ids")
        if pa.types.is_list(ids.type.value_type):
            # multiple choice: the longest choice decides a row's padded width
            widths = pc.list_value_length(pc.list_flatten(ids)).to_numpy(zero_copy_only=False)
            per_row = pc.list_value_length(ids).to_numpy(zero_copy_only=False)
            starts = np.concatenate([[0], np.cumsum(per_row)[:-1]])
            self.lengths = np.maximum.reduceat(widths, starts)
        else:
            self.lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False)

    @classmethod
    def from_chunks(cls, chunks) -> FeatureStore:
        import pyarrow as pa

        tables = [_compact(pa.Table.from_pylist(chunk)) for chunk in chunks if chunk]
        if not tables:
            raise ValueError("no features: the data yielded no model inputs")
        return cls(pa.concat_tables(tables, promote_options="permissive").combine_chunks())

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, k):  # type: ignore[override]
        if isinstance(k, slice):
            return self.take(range(*k.indices(len(self))))
        if not -len(self) <= k < len(self):
            raise IndexError(f"feature {k} out of range ({len(self)})")
        return self.take([k % len(self)])[0]

    def __iter__(self) -> Iterator[Feature]:
        for batch in self.table.to_batches(max_chunksize=4096):
            yield from batch.to_pylist()

    def take(self, indices) -> list[Feature]:
        import pyarrow as pa

        return self.table.take(pa.array(list(indices), type=pa.int64())).to_pylist()


def _compact(table):
    """Token ids and labels as int32 (lists, or lists of lists for multiple choice)."""
    import pyarrow as pa

    def shrink(t):
        if pa.types.is_list(t):
            return pa.list_(shrink(t.value_type))
        return pa.int32() if pa.types.is_integer(t) else t

    cols = {
        name: table.column(name).cast(shrink(table.column(name).type))
        for name in table.column_names
        if name in ("input_ids", "labels", "candidate_ids")
    }
    for name, col in cols.items():
        table = table.set_column(table.column_names.index(name), name, col)
    return table


@dataclass
class Encoded:
    """Features of one data split plus what decoding predictions needs: the rows, as Python
    dicts for evaluation, or as the Arrow table they came from for training (never decoded)."""

    features: FeatureStore
    rows: Any  # list[dict[str, Any]] | pyarrow.Table
    extra: dict[str, Any] = field(default_factory=dict)


ENCODE_CHUNK = 2000  # rows tokenised at a time: bounds the Python objects alive at once


def encode(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> Encoded:
    """Tokenise ``rows`` (a list of dicts, or an Arrow table read ENCODE_CHUNK rows at a
    time, so a 1M-example task never exists as Python objects) in batches with the fast
    tokenizer, which spreads each batch over its own threads. A ranking file trains whole:
    a query's gold candidate may be anywhere in it (its scoring rows encode one by one)."""
    n_rows = len(rows) if isinstance(rows, list) else rows.num_rows
    with progress(total=n_rows, desc=f"tokenising {task.name}", unit="example") as bar:
        if task.format == RANKING and train:
            features = FeatureStore.from_chunks([ranking_inputs.encode(tokenizer, rows, opts, train)])
            bar.update(n_rows)
            return Encoded(features, rows)

        def row_chunks():
            if isinstance(rows, list):
                yield from (rows[start : start + ENCODE_CHUNK] for start in range(0, len(rows), ENCODE_CHUNK))
            else:
                yield from (batch.to_pylist() for batch in rows.to_batches(max_chunksize=ENCODE_CHUNK))

        def chunks():
            start = 0
            for chunk in row_chunks():
                feats = _encode_chunk(task, tokenizer, chunk, opts, train)
                for f in feats:
                    if "example" in f:
                        f["example"] += start
                start += len(chunk)
                bar.update(len(chunk))
                yield feats

        return Encoded(FeatureStore.from_chunks(chunks()), rows)


def _pair_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    return _encode_pairs(tokenizer, rows, opts.max_length)


def _caption_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    """A caption and its image."""
    enc = tokenizer([r["text_a"] for r in rows], truncation=True, max_length=opts.max_length)
    return [
        {"input_ids": ids, "image_index": r["image_index"], "example": i}
        for i, (ids, r) in enumerate(zip(enc["input_ids"], rows))
    ]


def _image_text_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    """The text and its label; the image is a row of the task's feature bank."""
    enc = tokenizer([r["text_a"] for r in rows], truncation=True, max_length=opts.max_length)
    return [
        {"input_ids": ids, "labels": r["label"], "image_index": r["image_index"], "example": i}
        for i, (ids, r) in enumerate(zip(enc["input_ids"], rows))
    ]


def _answer_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    """Soft targets over the task's answer vocabulary (data/vqa_answers.py)."""
    from workflow_scripts.data.vqa_answers import soft_targets

    index = {a: i for i, a in enumerate(task.labels)}
    enc = tokenizer([r["text_a"] for r in rows], truncation=True, max_length=opts.max_length)
    feats = []
    for i, (ids, r) in enumerate(zip(enc["input_ids"], rows)):
        answer_ids, scores = soft_targets(list(r["answers"]), index)
        feats.append(
            {
                "input_ids": ids,
                "image_index": r["image_index"],
                "answer_ids": answer_ids,
                "answer_scores": scores,
                "example": i,
            }
        )
    return feats


def _choice_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    return _encode_choices(tokenizer, rows, opts.max_length)


def _span_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    return _encode_spans(tokenizer, rows, opts, train)


def _tag_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    return _encode_tags(tokenizer, rows, task.labels, opts.max_length)


def _ranking_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    """Scoring: one feature per query or candidate (Mewsli-X: 1M candidates); training
    encodes the whole file at once (``encode``)."""
    return ranking_inputs.encode(tokenizer, rows, opts, train=False)


def _mlm_features(task: Task, tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    enc = tokenizer([r["text"] for r in rows], truncation=True, max_length=opts.max_length)
    return [{"input_ids": ids} for ids in enc["input_ids"]]


# The features of each built-in format a model is trained or scored on; a format of its own
# declares its encode_chunk in spec/formats/<name>.py instead.
FEATURES = {
    CLASSIFICATION: _pair_features,
    VISUAL_RETRIEVAL: _caption_features,
    VISUAL_CLASSIFICATION: _image_text_features,
    VISUAL_ANSWER: _answer_features,
    MULTIPLE_CHOICE: _choice_features,
    SPAN: _span_features,
    TAGGING: _tag_features,
    RANKING: _ranking_features,
    MLM: _mlm_features,
}


def _encode_chunk(task: Task, tokenizer, rows: list[dict[str, Any]], opts: FormatOptions, train: bool) -> list[Feature]:
    if task.format in FEATURES:
        return FEATURES[task.format](task, tokenizer, rows, opts, train)
    declared = get_format(task.format).encode_chunk if task.format in format_names() else None
    if declared is not None:  # a format with its own features (spec/formats/<name>.py)
        return declared(task, tokenizer, rows, opts, train)
    raise ValueError(f"cannot encode format {task.format!r}")


def _encode_pairs(tokenizer, rows, max_length) -> list[Feature]:
    a = [r["text_a"] for r in rows]
    b = [r["text_b"] for r in rows]
    enc = tokenizer(a, b if any(b) else None, truncation=True, max_length=max_length)
    return [
        {"input_ids": ids, "labels": r["label"], "example": i} for i, (ids, r) in enumerate(zip(enc["input_ids"], rows))
    ]


def _encode_choices(tokenizer, rows, max_length) -> list[Feature]:
    feats = []
    for i, r in enumerate(rows):
        enc = tokenizer([r["context"]] * len(r["choices"]), list(r["choices"]), truncation=True, max_length=max_length)
        feats.append({"input_ids": enc["input_ids"], "labels": r["label"], "example": i})
    return feats


def _truncate_question(tokenizer, question: str, max_query_length: int) -> str:
    enc = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
    if len(enc["input_ids"]) <= max_query_length:
        return question
    return question[: enc["offset_mapping"][max_query_length - 1][1]]


def _encode_spans(tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    """Sliding windows over each context.

    ``doc_stride`` is the step between window starts, as in the original SQuAD/XTREME
    scripts; the tokenizer takes the overlap instead, which depends on the question's
    length, so each example is encoded with its own overlap.
    """
    max_length, step, max_query = opts.max_length, opts.doc_stride, opts.max_query_length
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    feats = []
    for i, row in enumerate(rows):
        question = _truncate_question(tokenizer, row["question"].lstrip(), max_query)
        q_len = len(tokenizer(question, add_special_tokens=False)["input_ids"])
        room = max_length - q_len - specials
        if room < 1:
            raise ValueError(f"example {row['id']}: max_length {max_length} leaves no room for the context")
        overlap = min(max(room - step, 0), room - 1)
        enc = tokenizer(
            question,
            row["context"],
            truncation="only_second",
            max_length=max_length,
            stride=overlap,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        for j, ids in enumerate(enc["input_ids"]):
            seq_ids = enc.sequence_ids(j)
            offsets = [tuple(o) if s == 1 else None for o, s in zip(enc["offset_mapping"][j], seq_ids)]
            feat: Feature = {"input_ids": ids, "example": i, "offsets": offsets}
            if train:
                feat["start_positions"], feat["end_positions"] = _answer_positions(row, offsets)
            feats.append(feat)
    return feats


def _answer_positions(row, offsets) -> tuple[int, int]:
    """Token indices of the first gold answer in this window, (0, 0) (the <s> token) if absent."""
    if not row["answer_starts"]:
        return 0, 0
    start_char = row["answer_starts"][0]
    end_char = start_char + len(row["answer_texts"][0])
    ctx = [k for k, o in enumerate(offsets) if o is not None]
    if not ctx or offsets[ctx[0]][0] > start_char or offsets[ctx[-1]][1] < end_char:
        return 0, 0
    start = next(k for k in ctx if offsets[k][1] > start_char)
    end = next(k for k in reversed(ctx) if offsets[k][0] < end_char)
    return start, end


def decode_spans(encoded: Encoded, start_logits, end_logits, opts: FormatOptions, allow_null: bool) -> dict[str, str]:
    """Best answer text per example id from per-feature start/end logits (n-best search)."""
    import numpy as np

    n_best, max_answer = opts.n_best, opts.max_answer_length
    by_example: dict[int, list[int]] = {}
    for j, feat in enumerate(encoded.features):
        by_example.setdefault(feat["example"], []).append(j)
    preds = {}
    for i, row in enumerate(encoded.rows):
        best_text, best_score, null_score = "", -np.inf, np.inf
        for j in by_example.get(i, []):
            offsets = encoded.features[j]["offsets"]
            s_log, e_log = np.asarray(start_logits[j]), np.asarray(end_logits[j])
            null_score = min(null_score, float(s_log[0] + e_log[0]))
            starts = np.argsort(s_log)[::-1][:n_best]
            ends = np.argsort(e_log)[::-1][:n_best]
            for s in starts:
                for e in ends:
                    if s >= len(offsets) or e >= len(offsets) or offsets[s] is None or offsets[e] is None:
                        continue
                    if e < s or e - s + 1 > max_answer:
                        continue
                    score = float(s_log[s] + e_log[e])
                    if score > best_score:
                        best_score, best_text = score, row["context"][offsets[s][0] : offsets[e][1]]
        if allow_null and null_score > best_score:
            best_text = ""
        preds[row["id"]] = best_text
    return preds


def _encode_tags(tokenizer, rows, labels: Sequence[str], max_length: int) -> list[Feature]:
    """Split each sentence into pieces of whole words that fit, label the first sub-words."""
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    label_ids = {t: k for k, t in enumerate(labels)}
    spaced = words_need_spaces(tokenizer)
    feats = []
    for i, row in enumerate(rows):
        words = [w if tokenizer.tokenize(w) else tokenizer.unk_token for w in row["tokens"]]
        if spaced:
            words = [" " + w for w in words]
        lengths = [len(tokenizer.tokenize(w)) for w in words] if words else []
        start = 0
        while start < len(words):
            end, used = start, 0
            while end < len(words) and (used + lengths[end] <= budget or end == start):
                used += lengths[end]
                end += 1
            enc = tokenizer(words[start:end], is_split_into_words=True, truncation=True, max_length=max_length)
            word_ids = enc.word_ids()
            tags, seen = [], set()
            for w in word_ids:
                if w is None or w in seen:
                    tags.append(IGNORE)
                else:
                    seen.add(w)
                    tag = row["tags"][start + w] if row.get("tags") else labels[0]
                    if tag not in label_ids:
                        raise ValueError(f"example {row['id']}: tag {tag!r} not in the label set")
                    tags.append(label_ids[tag])
            feats.append(
                {
                    "input_ids": enc["input_ids"],
                    "labels": tags,
                    "example": i,
                    "word_start": start,
                    "n_words": end - start,
                }
            )
            start = end
    return feats


_SPACING_PROBE = ("the", "cat", "sat", "quietly")


def words_need_spaces(tokenizer) -> bool:
    """Whether each word must carry its leading space for pre-split words to be tokenised as
    they are in running text.

    A byte-level BPE tokenizer without ``add_prefix_space`` (GPT-2, BLOOM and Llama-3 style
    pre-tokenizers) tokenises a pre-split word without the space it has in a sentence
    ("Ġcat" in text, "cat" split): labels still land on the right words, but on pieces the
    model never saw in pre-training. Sentencepiece tokenizers (XLM-R, mT5) and byte-level
    ones with ``add_prefix_space`` need nothing. Decided by tokenising a probe sentence both
    ways, so no tokenizer class has to be named."""
    cached = getattr(tokenizer, "_xstilts_words_need_spaces", None)
    if cached is not None:
        return cached
    text = tokenizer(" ".join(_SPACING_PROBE), add_special_tokens=False)["input_ids"]
    plain = tokenizer(list(_SPACING_PROBE), is_split_into_words=True, add_special_tokens=False)["input_ids"]
    spaced = tokenizer([" " + w for w in _SPACING_PROBE], is_split_into_words=True, add_special_tokens=False)[
        "input_ids"
    ]
    # Texts that start without a space tokenise their first word bare: compare from the second.
    first = len(tokenizer(_SPACING_PROBE[0], add_special_tokens=False)["input_ids"])
    need = plain[first:] != text[first:] and spaced[-len(text[first:]) :] == text[first:]
    try:
        tokenizer._xstilts_words_need_spaces = need
    except AttributeError:  # a tokenizer that takes no new attributes is probed again next time
        pass
    return need


def merge_tags(encoded: Encoded, logits_per_feature: list[Any], labels: Sequence[str]) -> list[list[str]]:
    """Per-sentence predicted tags: argmax at each first sub-word, pieces joined back in order."""
    import numpy as np

    out = [[labels[0]] * len(row["tokens"]) for row in encoded.rows]
    for feat, logits in zip(encoded.features, logits_per_feature):
        arr = np.asarray(logits)
        word = feat["word_start"]
        for k, lab in enumerate(feat["labels"]):
            if lab != IGNORE:
                out[feat["example"]][word] = labels[int(arr[k].argmax())]
                word += 1
    return out


# ---------------------------------------------------------------------------------------
# Batching


def feature_lengths(features: Sequence[Feature]) -> Sequence[int]:
    if isinstance(features, FeatureStore):
        return features.lengths
    return [
        max(len(x) for x in f["input_ids"])
        if f["input_ids"] and isinstance(f["input_ids"][0], list)
        else len(f["input_ids"])
        for f in features
    ]


def length_grouped_batches(
    features: Sequence[Feature], batch_size: int, rng: random.Random, group: int = 50
) -> list[list[int]]:
    """Shuffled batches of similar length: less padding, still random order (seeded).

    The batch with the most padded tokens comes first: a run that does not fit in memory
    fails at its first step, not hours in, and the allocator reserves its peak once instead
    of fragmenting under smaller batches first (on CPU: ~0.1 GB less peak for a base model).
    """
    lengths = feature_lengths(features)
    order = list(range(len(features)))
    rng.shuffle(order)
    batches = []
    for g in range(0, len(order), batch_size * group):
        chunk = sorted(order[g : g + batch_size * group], key=lambda k: int(lengths[k]))
        batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    if batches:
        largest = max(range(len(batches)), key=lambda b: len(batches[b]) * max(int(lengths[k]) for k in batches[b]))
        batches.insert(0, batches.pop(largest))
    return batches


def sorted_batches(features: Sequence[Feature], batch_size: int) -> list[list[int]]:
    lengths = feature_lengths(features)
    order = sorted(range(len(features)), key=lambda k: int(lengths[k]))
    return [order[b : b + batch_size] for b in range(0, len(order), batch_size)]


def collate(
    features: Sequence[Feature],
    fmt: str,
    pad_id: int,
    mlm: dict[str, Any] | None = None,
    pad_width: Callable[[int], int | None] | None = None,
    pack: Callable[[Any], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """Pad a batch to its own longest sequence (dynamic padding), or to the width
    ``pad_width`` gives for that length (a compiled forward's length bucket,
    models/compiled.py); padded positions are masked either way. ``pack`` adds the fields
    of a padding-free forward to a text batch (models/packing.py; None: it stays padded)."""
    import torch

    # The attention mask comes from each sequence's length, not from comparing ids with the
    # pad id: a decoder without a pad token pads with its end-of-sequence token, which may
    # also occur in the text (backbones/decoder.py).
    fmt = head_kind(fmt)  # batches take the shape of the format's head (spec/formats/: TaskFormat.head)
    if fmt == RANKING:
        return ranking_inputs.collate(features, pad_id)
    if fmt == MULTIPLE_CHOICE:
        width = _padded(max(len(ids) for f in features for ids in f["input_ids"]), pad_width)
        ids = [[seq + [pad_id] * (width - len(seq)) for seq in f["input_ids"]] for f in features]
        mask = [[[1] * len(seq) + [0] * (width - len(seq)) for seq in f["input_ids"]] for f in features]
    else:
        width = _padded(max(len(f["input_ids"]) for f in features), pad_width)
        ids = [f["input_ids"] + [pad_id] * (width - len(f["input_ids"])) for f in features]
        mask = [[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"])) for f in features]
    input_ids = torch.tensor(ids)
    batch: dict[str, Any] = {"input_ids": input_ids, "attention_mask": torch.tensor(mask)}
    first = features[0]
    if "labels" in first:
        if isinstance(first["labels"], list):
            batch["labels"] = torch.tensor([f["labels"] + [IGNORE] * (width - len(f["labels"])) for f in features])
        else:
            batch["labels"] = torch.tensor([f["labels"] for f in features])
    if "image_index" in first:
        batch["image_index"] = torch.tensor([f["image_index"] for f in features])
    if "answer_ids" in first:  # sparse soft targets, padded (-1 / 0); the loss makes them dense
        most = max(1, max(len(f["answer_ids"]) for f in features))
        batch["answer_ids"] = torch.tensor([f["answer_ids"] + [-1] * (most - len(f["answer_ids"])) for f in features])
        batch["answer_scores"] = torch.tensor(
            [f["answer_scores"] + [0.0] * (most - len(f["answer_scores"])) for f in features], dtype=torch.float32
        )
    if "start_positions" in first:
        batch["start_positions"] = torch.tensor([f["start_positions"] for f in features])
        batch["end_positions"] = torch.tensor([f["end_positions"] for f in features])
    if fmt == MLM and mlm is not None:
        batch["input_ids"], batch["labels"] = mask_tokens(batch["input_ids"], batch["attention_mask"], **mlm)
    if pack is not None and fmt in PACKABLE:
        batch.update(pack(batch["attention_mask"]) or {})
    return batch


def _padded(longest: int, pad_width: Callable[[int], int | None] | None) -> int:
    wanted = pad_width(longest) if pad_width is not None else None
    return longest if wanted is None else max(longest, wanted)


def mask_tokens(
    input_ids,
    attention_mask,
    mask_id: int,
    vocab_size: int,
    special_ids: list[int],
    generator,
    probability: float = 0.15,
):
    """BERT-style dynamic masking with a seeded torch generator."""
    import torch

    labels = input_ids.clone()
    special = torch.isin(input_ids, torch.tensor(special_ids)) | (attention_mask == 0)
    chosen = (torch.rand(input_ids.shape, generator=generator) < probability) & ~special
    labels[~chosen] = IGNORE
    roll = torch.rand(input_ids.shape, generator=generator)
    masked = input_ids.clone()
    masked[chosen & (roll < 0.8)] = mask_id
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    masked[swap] = random_ids[swap]
    return masked, labels
