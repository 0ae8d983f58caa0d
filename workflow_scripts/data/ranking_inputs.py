"""Inputs of the ranking targets (Mewsli-X, LAReQA; docs/protocol.md §8), as XTREME-R builds them.

A ranking file holds queries and candidates (``side``). A query is encoded alone, up to
``max_query_length`` tokens; a candidate as its text followed by its context, up to
``max_length`` (XTREME-R's LAReQA code concatenates the answer sentence and its paragraph
directly, newlines removed; Mewsli-X candidates have no context). ``lowercase``
lower-cases both, as the reference runs XLM-R (``--do_lower_case``). The dual encoder that
reads them is ``models/dual_encoder.py``; their scoring, ``evaluation/pool_ranking.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.task_options import FormatOptions

QUERY, CANDIDATE = "query", "candidate"
Feature = dict[str, Any]


def query_text(row: dict[str, Any], opts: FormatOptions) -> str:
    text = row["text"]
    return text.lower() if opts.lowercase else text


def candidate_text(row: dict[str, Any], opts: FormatOptions) -> str:
    text = (row["text"] + (row.get("context") or "")).replace("\n", "")
    return text.lower() if opts.lowercase else text


def encode(tokenizer, rows, opts: FormatOptions, train: bool) -> list[Feature]:
    """Features of a ranking file. Training: one per query, its gold candidate alongside
    (``candidate_ids``); a query must name exactly one gold candidate present in the file.
    Scoring: one per row, queries and candidates alike (``example`` = the row's index)."""
    rows = rows if isinstance(rows, list) else rows.to_pylist()
    max_length = opts.max_length
    max_query = max_length if opts.max_query_length is None else opts.max_query_length

    def ids(texts: list[str], limit: int) -> list[list[int]]:
        return tokenizer(texts, truncation=True, max_length=limit)["input_ids"] if texts else []

    if not train:
        queries = [i for i, r in enumerate(rows) if r["side"] == QUERY]
        candidates = [i for i, r in enumerate(rows) if r["side"] == CANDIDATE]
        feats: list[Feature | None] = [None] * len(rows)
        for found, limit, text in ((queries, max_query, query_text), (candidates, max_length, candidate_text)):
            for i, encoded in zip(found, ids([text(rows[i], opts) for i in found], limit)):
                feats[i] = {"input_ids": encoded, "example": i}
        return [f for f in feats if f is not None]
    by_id = {r["id"]: r for r in rows if r["side"] == CANDIDATE}
    queries = [r for r in rows if r["side"] == QUERY]
    for r in queries:
        if len(r["gold"]) != 1 or r["gold"][0] not in by_id:
            raise InputError(
                f"ranking training query {r['id']!r}: needs one gold candidate present in the file, "
                f"has {list(r['gold'])}"
            )
    query_ids = ids([query_text(r, opts) for r in queries], max_query)
    gold_ids = ids([candidate_text(by_id[r["gold"][0]], opts) for r in queries], max_length)
    return [{"input_ids": q, "candidate_ids": c, "example": i} for i, (q, c) in enumerate(zip(query_ids, gold_ids))]


def collate(features: Sequence[Feature], pad_id: int) -> dict[str, Any]:
    """Queries (or the rows being embedded) as ``input_ids``; in training their gold
    candidates as ``candidate_input_ids``, each side padded to its own longest sequence."""

    def padded(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(s) for s in seqs)
        return (
            torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs]),
            torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs]),
        )

    batch: dict[str, Any] = {}
    batch["input_ids"], batch["attention_mask"] = padded([f["input_ids"] for f in features])
    if "candidate_ids" in features[0]:
        batch["candidate_input_ids"], batch["candidate_attention_mask"] = padded([f["candidate_ids"] for f in features])
    return batch
