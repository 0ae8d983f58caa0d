"""Ranking targets (Mewsli-X, LAReQA; PROTOCOL.md §8) trained and scored as XTREME-R does:
a dual encoder whose two towers share every weight.

- Inputs: a query is encoded alone, up to ``max_query_length`` tokens; a candidate as its
  text followed by its context, up to ``max_length`` (XTREME-R's LAReQA code concatenates
  the answer sentence and its paragraph directly, newlines removed; Mewsli-X candidates
  have no context). ``lowercase`` lower-cases both, as the reference runs XLM-R
  (``--do_lower_case``).
- Vector: the backbone pooled as its family reads one vector per sequence (an encoder's
  first token, as the reference; ``pooling`` may name another: a first token that
  pre-training never trained, as in the demo's tiny encoders, collapses under the
  contrastive loss, where the mean over tokens learns), through a fresh dense + tanh layer
  (the reference reads BERT's pooler, which is that layer), L2-normalised: the score of a
  pair is their cosine.
- Training: in-batch softmax cross-entropy from each query to its gold candidate against
  the other candidates of the (micro-)batch, the cosines scaled by a trained logit scale
  that starts at 100, as the reference's ``BertForRetrieval``.
- Scoring: every candidate of a file is embedded once (and reused by the next split when
  it holds the same pool, as Mewsli-X's dev and test do); each language's queries are
  embedded and searched exactly (``neighbours.knn``) for their top ``k`` over the whole
  multilingual pool; mAP@k against the gold ids (``ranking.py``, the official semantics).
- Model selection (English dev): the first ``dev_examples`` English queries, ranked in a
  pool of their gold candidates plus the file's first ``dev_examples`` candidates: small
  enough to score at every evaluation, with distractors of every language the file has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from workflow_scripts.common import InputError

QUERY, CANDIDATE = "query", "candidate"
TOP_K = 20
# The reference's initial logit scale (a trained parameter).
INITIAL_LOGIT_SCALE = 100.0
Feature = dict[str, Any]


def query_text(row: dict[str, Any], opts: dict[str, Any]) -> str:
    text = row["text"]
    return text.lower() if opts.get("lowercase") else text


def candidate_text(row: dict[str, Any], opts: dict[str, Any]) -> str:
    text = (row["text"] + (row.get("context") or "")).replace("\n", "")
    return text.lower() if opts.get("lowercase") else text


# ----- inputs ---------------------------------------------------------------------------------


def encode(tokenizer, rows, opts: dict[str, Any], train: bool) -> list[Feature]:
    """Features of a ranking file. Training: one per query, its gold candidate alongside
    (``candidate_ids``); a query must name exactly one gold candidate present in the file.
    Scoring: one per row, queries and candidates alike (``example`` = the row's index)."""
    rows = rows if isinstance(rows, list) else rows.to_pylist()
    max_query, max_length = int(opts.get("max_query_length", opts["max_length"])), int(opts["max_length"])

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
            raise InputError(f"ranking training query {r['id']!r}: needs one gold candidate present in the file, "
                             f"has {list(r['gold'])}")
    query_ids = ids([query_text(r, opts) for r in queries], max_query)
    gold_ids = ids([candidate_text(by_id[r["gold"][0]], opts) for r in queries], max_length)
    return [{"input_ids": q, "candidate_ids": c, "example": i} for i, (q, c) in enumerate(zip(query_ids, gold_ids))]


def collate(features: Sequence[Feature], pad_id: int) -> dict[str, Any]:
    """Queries (or the rows being embedded) as ``input_ids``; in training their gold
    candidates as ``candidate_input_ids``, each side padded to its own longest sequence."""

    def padded(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(s) for s in seqs)
        return (torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs]),
                torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs]))

    batch: dict[str, Any] = {}
    batch["input_ids"], batch["attention_mask"] = padded([f["input_ids"] for f in features])
    if "candidate_ids" in features[0]:
        batch["candidate_input_ids"], batch["candidate_attention_mask"] = padded([f["candidate_ids"] for f in features])
    return batch


# ----- model ----------------------------------------------------------------------------------


class RankingHead(nn.Module):
    """dense + tanh over the pooled sequence, L2-normalised; the trained logit scale.
    ``pooling``: how the sequence is read (None: the backbone family's way)."""

    def __init__(self, hidden: int, init_std: float, pooling: str | None = None) -> None:
        super().__init__()
        self.pooling = pooling
        self.dense = nn.Linear(hidden, hidden)
        nn.init.normal_(self.dense.weight, std=init_std)
        nn.init.zeros_(self.dense.bias)
        # shape (1,), not a scalar: FSDP2 shards every parameter along its first dimension
        self.logit_scale = nn.Parameter(torch.full((1,), INITIAL_LOGIT_SCALE))

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(torch.tanh(self.dense(pooled.float())), p=2, dim=-1)


def configure_head(head: RankingHead, opts: dict[str, Any]) -> RankingHead:
    """The task's ``pooling`` option on its head (``family``: the backbone family's)."""
    pooling = opts.get("pooling", "family")
    head.pooling = None if pooling == "family" else pooling
    return head


def logits(model, head: RankingHead, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Training batch (with candidates): the scaled query x candidate cosines and the
    in-batch softmax loss. Otherwise: the embeddings of ``input_ids`` (no loss)."""
    from workflow_scripts.models.backbones.family import pool

    pooling = head.pooling or model.pooling

    def embed(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return head(pool(pooling, hidden, mask))

    queries = embed(batch["input_ids"], batch["attention_mask"])
    if "candidate_input_ids" not in batch:
        return queries, None
    candidates = embed(batch["candidate_input_ids"], batch["candidate_attention_mask"])
    scores = head.logit_scale * queries @ candidates.T
    loss = nn.functional.cross_entropy(scores, torch.arange(len(scores), device=scores.device))
    return scores, loss


# ----- scoring --------------------------------------------------------------------------------


def rank(query_vectors, candidate_vectors, candidate_ids: list[str], k: int, dev=None) -> list[list[str]]:
    """The ids of each query's top ``k`` candidates by cosine (exact search; ties to the
    lower candidate index, neighbours.py)."""
    import numpy as np

    from workflow_scripts.evaluation.neighbours import knn

    if not len(candidate_ids):
        raise InputError("ranking needs candidates; the file holds none")
    if not len(query_vectors):
        return []
    _, found = knn(np.asarray(query_vectors, dtype=np.float32), np.asarray(candidate_vectors, dtype=np.float32),
                   k, dev=dev)
    return [[candidate_ids[j] for j in row] for row in found]


def score(rows: list[dict[str, Any]], vectors: Sequence[Any], target: str, k: int = TOP_K, dev=None
          ) -> tuple[dict[str, float], dict[str, list[str]]]:
    """mAP@k of the queries among ``rows`` ranked in the pool of its candidates (the
    official convention of ``target``: ranking.py), with each query's ranked candidate ids.
    ``vectors``: one embedding per row."""
    queries = [i for i, r in enumerate(rows) if r["side"] == QUERY]
    candidates = [i for i, r in enumerate(rows) if r["side"] == CANDIDATE]
    return _scored([rows[i] for i in queries], [vectors[i] for i in queries], [rows[i] for i in candidates],
                   [vectors[i] for i in candidates], target, k, dev)


def _scored(queries: list[dict[str, Any]], query_vectors, candidates: list[dict[str, Any]], candidate_vectors,
            target: str, k: int, dev) -> tuple[dict[str, float], dict[str, list[str]]]:
    """mAP@k of ``queries`` ranked among ``candidates``, and each query's ranked ids."""
    from workflow_scripts.evaluation.ranking import convention_of, map_at_k

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


def embed_rows(model, task, tokenizer, rows: list[dict[str, Any]], opts: dict[str, Any], dev):
    """One L2-normalised vector per row (queries and candidates alike), as a float32 matrix."""
    import numpy as np

    # Not through evaluate.predict_logits: the demo models' builder imports this module (via
    # features), and an import of evaluate would make every scorer edit rebuild the models.
    from workflow_scripts.common import autocast
    from workflow_scripts.data.features import collate as collate_task, encode as encode_task, sorted_batches
    from workflow_scripts.models.heads import forward

    if not rows:
        return np.zeros((0, 0), dtype=np.float32)
    encoded = encode_task(task, tokenizer, rows, opts, train=False)
    out = np.zeros((len(encoded.features), model.encoder.config.hidden_size), dtype=np.float32)
    model.eval()
    with torch.inference_mode():
        for idx in sorted_batches(encoded.features, int(opts["eval_batch_size"])):
            batch = collate_task(encoded.features.take(idx), task.format, tokenizer.pad_token_id)
            with autocast(dev):
                vectors, _ = forward(model, task.format, task.name, {k: v.to(dev) for k, v in batch.items()})
            out[idx] = vectors.float().cpu().numpy()
    return out


class PoolScorer:
    """Scores one language at a time against a candidate pool embedded once per pool: the
    languages of a split share it, and so do splits holding the same pool."""

    def __init__(self, model, task, tokenizer, opts: dict[str, Any], dev, k: int = TOP_K) -> None:
        self.model, self.task, self.tokenizer, self.opts, self.dev, self.k = model, task, tokenizer, opts, dev, k
        self.pools: dict[str, Any] = {}

    def score(self, rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, list[str]]]:
        queries = [r for r in rows if r["side"] == QUERY]
        candidates = [r for r in rows if r["side"] == CANDIDATE]
        key = pool_fingerprint(candidates)
        if key not in self.pools:
            self.pools = {key: self._embed(candidates)}  # one pool held at a time (1M x 1024 floats: 4 GB)
        return _scored(queries, self._embed(queries), candidates, self.pools[key], self.task.name, self.k, self.dev)

    def _embed(self, rows: list[dict[str, Any]]):
        return embed_rows(self.model, self.task, self.tokenizer, rows, self.opts, self.dev)


def pool_fingerprint(candidates: list[dict[str, Any]]) -> str:
    """Identifies a candidate pool (ids, texts, contexts, order): two splits with the same
    fingerprint share one embedding of it."""
    digest = hashlib.sha256()
    for r in candidates:
        digest.update("\x1f".join((r["id"], r["text"], r.get("context") or "")).encode())
        digest.update(b"\x1e")
    return digest.hexdigest()
