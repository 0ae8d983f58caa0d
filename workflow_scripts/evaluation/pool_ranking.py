"""Scoring the ranking targets (Mewsli-X, LAReQA; docs/protocol.md §8) as XTREME-R does.

- Every candidate of a file is embedded once (and reused by the next split when it holds
  the same pool, as Mewsli-X's dev and test do); each language's queries are embedded and
  searched exactly (``neighbours.knn``) for their top ``k`` over the whole multilingual
  pool; mAP@k against the gold ids (``ranking.py``, the official semantics).
- Model selection (English dev): the first ``dev_examples`` English queries, ranked in a
  pool of their gold candidates plus the file's first ``dev_examples`` candidates: small
  enough to score at every evaluation, with distractors of every language the file has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from workflow_scripts.data.features import collate as collate_task
from workflow_scripts.data.features import encode as encode_task
from workflow_scripts.data.features import sorted_batches
from workflow_scripts.data.ranking_inputs import CANDIDATE, QUERY
from workflow_scripts.evaluation.neighbours import knn
from workflow_scripts.evaluation.ranking import convention_of, map_at_k
from workflow_scripts.models.heads import forward
from workflow_scripts.precision import Precision
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.task_options import ScoringOptions

TOP_K = 20


def rank(query_vectors, candidate_vectors, candidate_ids: list[str], k: int, dev=None) -> list[list[str]]:
    """The ids of each query's top ``k`` candidates by cosine: exact search, in faiss
    ``IndexFlatIP``'s order, as XTREME-R searches Mewsli-X (neighbours.py): candidates with
    bit-identical vectors, such as two entities with one description, come highest index
    first."""
    if not len(candidate_ids):
        raise InputError("ranking needs candidates; the file holds none")
    if not len(query_vectors):
        return []
    _, found = knn(
        np.asarray(query_vectors, dtype=np.float32), np.asarray(candidate_vectors, dtype=np.float32), k, dev=dev
    )
    return [[candidate_ids[j] for j in row] for row in found]


def score(
    rows: list[dict[str, Any]], vectors: Sequence[Any], target: str, k: int = TOP_K, dev=None
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """mAP@k of the queries among ``rows`` ranked in the pool of its candidates (the
    official convention of ``target``: ranking.py), with each query's ranked candidate ids.
    ``vectors``: one embedding per row."""
    queries = [i for i, r in enumerate(rows) if r["side"] == QUERY]
    candidates = [i for i, r in enumerate(rows) if r["side"] == CANDIDATE]
    return _scored(
        [rows[i] for i in queries],
        [vectors[i] for i in queries],
        [rows[i] for i in candidates],
        [vectors[i] for i in candidates],
        target,
        k,
        dev,
    )


def _scored(
    queries: list[dict[str, Any]],
    query_vectors,
    candidates: list[dict[str, Any]],
    candidate_vectors,
    target: str,
    k: int,
    dev,
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """mAP@k of ``queries`` ranked among ``candidates``, and each query's ranked ids."""
    ranked = rank(query_vectors, candidate_vectors, [r["id"] for r in candidates], k, dev)
    predictions = {r["id"]: found for r, found in zip(queries, ranked)}
    golds = {r["id"]: list(r["gold"]) for r in queries}
    return map_at_k(predictions, golds, k, convention_of(target)), predictions


def selection_subset(rows: list[dict[str, Any]], n: int, language: str, path: str) -> list[dict[str, Any]]:
    """The model-selection rows: the first ``n`` queries in ``language``, their gold
    candidates and the file's first ``n`` candidates (file order)."""
    queries = [r for r in rows if r["side"] == QUERY and r["lang"] == language][:n]
    if not queries:
        raise InputError(f"{path}: no {language} queries for model selection")
    gold = {g for r in queries for g in r["gold"]}
    candidates = [r for r in rows if r["side"] == CANDIDATE]
    kept = {r["id"] for r in candidates[:n]} | gold
    return queries + [r for r in candidates if r["id"] in kept]


def rows_by_language(rows: list[dict[str, Any]], languages: list[str], path: str) -> dict[str, list[dict[str, Any]]]:
    """Each language's queries followed by the whole candidate pool (shared, not copied);
    every language must have queries (a missing one would shrink the average)."""
    candidates = [r for r in rows if r["side"] == CANDIDATE]
    queries: dict[str, list[dict[str, Any]]] = {lang: [] for lang in languages}
    for r in rows:
        if r["side"] == QUERY and r["lang"] in queries:
            queries[r["lang"]].append(r)
    empty = [lang for lang, found in queries.items() if not found]
    if empty:
        raise InputError(f"{path}: no queries for languages {empty}; refusing to shrink the average")
    if not candidates:
        raise InputError(f"{path}: no candidates to rank")
    return {lang: found + candidates for lang, found in queries.items()}


def embed_rows(model, task, tokenizer, rows: list[dict[str, Any]], opts: ScoringOptions, dev, what: str = "rows"):
    """One L2-normalised vector per row (queries and candidates alike), as a float32 matrix;
    ``what`` names the rows in progress lines."""
    # Its own loop, not evaluate.predict_logits: evaluate imports this module.
    if not rows:
        return np.zeros((0, 0), dtype=np.float32)
    encoded = encode_task(task, tokenizer, rows, opts, train=False)
    out = np.zeros((len(encoded.features), model.encoder.config.hidden_size), dtype=np.float32)
    model.eval()
    # no_grad, not inference_mode: a sharded (FSDP2) model allocates its gathered parameters
    # at its first forward, which is the dev evaluation before the first training step; made
    # in inference mode they could not take part in the training forwards that follow.
    with torch.no_grad():
        with progress(total=len(encoded.features), desc=f"embedding {task.name} {what}", unit="row") as bar:
            for idx in sorted_batches(encoded.features, opts.eval_batch_size):
                batch = collate_task(encoded.features.take(idx), task.format, tokenizer.pad_token_id)
                with Precision(opts.precision).autocast(dev):
                    vectors, _ = forward(model, task.format, task.name, {k: v.to(dev) for k, v in batch.items()})
                out[idx] = vectors.float().cpu().numpy()
                bar.update(len(idx))
    return out


class PoolScorer:
    """Scores one language at a time against a candidate pool embedded once per pool: the
    languages of a split share it, and so do splits holding the same pool."""

    def __init__(self, model, task, tokenizer, opts: ScoringOptions, dev, k: int = TOP_K) -> None:
        self.model, self.task, self.tokenizer, self.opts, self.dev, self.k = model, task, tokenizer, opts, dev, k
        self.pools: dict[str, Any] = {}

    def score(self, rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, list[str]]]:
        queries = [r for r in rows if r["side"] == QUERY]
        candidates = [r for r in rows if r["side"] == CANDIDATE]
        key = pool_fingerprint(candidates)
        if key not in self.pools:
            # one pool held at a time (1M x 1024 floats: 4 GB)
            self.pools = {key: self._embed(candidates, "candidate pool")}
        query_vectors = self._embed(queries, " ".join([*sorted({r["lang"] for r in queries}), "queries"]))
        return _scored(queries, query_vectors, candidates, self.pools[key], self.task.name, self.k, self.dev)

    def _embed(self, rows: list[dict[str, Any]], what: str):
        return embed_rows(self.model, self.task, self.tokenizer, rows, self.opts, self.dev, what)


def pool_fingerprint(candidates: list[dict[str, Any]]) -> str:
    """Identifies a candidate pool (ids, texts, contexts, order): two splits with the same
    fingerprint share one embedding of it."""
    digest = hashlib.sha256()
    for r in candidates:
        digest.update("\x1f".join((r["id"], r["text"], r.get("context") or "")).encode())
        digest.update(b"\x1e")
    return digest.hexdigest()
