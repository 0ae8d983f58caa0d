"""Mean average precision at k for the ranking targets, as XTREME-R's official code scores
them (docs/protocol.md §8; google-research/xtreme, ``third_party/utils_lareqa.py`` and
``third_party/utils_mewslix.py``, read at commit 838c13b69daafb9328785d16caae2711e4012123).

Two conventions, identical whenever a query has exactly one gold id:

- ``lareqa`` (``utils_lareqa.average_precision_at_k``; the default): keep the first k
  predictions; walking down them, a prediction that is gold and has not appeared higher up
  is a hit, and adds (hits so far) / (its rank); the sum is divided by min(number of gold
  ids, k). So a query whose 11 gold answers all sit in the top 11 scores 1, with more golds
  than k a perfect top k scores 1, and a gold id repeated in the ranking counts once. LAReQA
  (XQuAD-R) has 11 gold answers per question (one per language). The official
  ``mean_avg_prec_at_k`` averages over every question of every language at once; the
  evaluation gets the same from this module's per-language means by weighting each language
  by its question count (``evaluate.language_weights``), which equals the plain mean over
  languages only while every language has XQuAD-R's 1,190 questions.
- ``mewslix`` (``utils_mewslix.evaluate`` -> ``evaluate.py``'s ``mewslix_map20``): only the
  *first* gold id of the query counts (the data has one; the file stores a one-element
  list, whitespace stripped); the score is the reciprocal rank of its first occurrence in
  the top k, 0 when it is not there: MRR@k, which the leaderboard calls mAP@20. Mewsli-X
  has one gold entity per mention, so both conventions agree on its data.

Shared by both: fewer than k predictions are scored as they are (no penalty beyond the golds
they miss); the mean over queries is returned x100 as ``{"map_at_<k>": value}`` (the
leaderboard's ``map@20``). Where the official code is lenient, this module refuses, naming
the query, because in this pipeline each case is a bug: a query without a gold id (the
official LAReQA code divides by zero, Mewsli-X's indexes an empty list), a gold query
missing from the predictions (Mewsli-X's scorer counts it 0 and reports how many were
missing) and a predicted query without gold (Mewsli-X's scorer ignores it). ``strict=False``
restores the official treatment of the last two. Ties between candidate scores are the
ranker's business: the metric takes the ranking as given. ``pool_ranking.rank`` ranks as
Mewsli-X's official code does, with faiss ``IndexFlatIP`` (equal scores highest index
first; neighbours.py), and LAReQA the same way: its official code ranks with numpy's
``argsort()[::-1]``, whose default sort is not stable, so it leaves ties in no set order;
reversing a stable sort would also put the highest index first.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.tasks import MAP_CONVENTIONS, RANKING, TASKS

LAREQA, MEWSLIX = MAP_CONVENTIONS
CONVENTIONS = MAP_CONVENTIONS
TOP_K = 20


def metric_key(k: int) -> str:
    """The metric name a metric file reports (``map_at_20`` for k = 20)."""
    return f"map_at_{k}"


def convention_of(target: str) -> str:
    """The convention of a ranking target's official scorer (its entry's map_convention)."""
    task = TASKS.get(target)
    if task is None or task.format != RANKING:
        ranking = [name for name, t in TASKS.items() if t.format == RANKING]
        raise KeyError(f"{target!r} is not a ranking target ({', '.join(ranking)})")
    return task.map_convention or LAREQA


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    return k


def _gold_ids(gold: Collection[str], convention: str) -> list[str]:
    if isinstance(gold, (str, bytes)):
        raise InputError(f"gold ids must be a collection of ids, got the string {gold!r}")
    if convention == MEWSLIX:
        if not gold:
            return []
        if isinstance(gold, Sequence):
            return [str(gold[0]).strip()]  # the official scorer keeps labels[0].strip() only
        if len(gold) > 1:
            raise InputError(
                f"the Mewsli-X convention scores the first gold id only; {len(gold)} unordered gold "
                f"ids ({sorted(map(str, gold))[:3]}...) have no first one: pass a sequence"
            )
        return [str(next(iter(gold))).strip()]
    if convention == LAREQA:
        return list(dict.fromkeys(gold))  # the official code scores a set of gold candidates
    raise InputError(f"unknown mAP convention {convention!r}; known: {', '.join(CONVENTIONS)}")


def average_precision_at_k(
    ranked: Sequence[str], gold: Collection[str], k: int = TOP_K, convention: str = LAREQA
) -> float:
    """AP@k of one query in [0, 1] (see the module docstring for the two conventions)."""
    k = _check_k(k)
    if isinstance(ranked, (str, bytes)):
        raise InputError(f"the ranking must be a sequence of candidate ids, got the string {ranked!r}")
    golds = _gold_ids(gold, convention)
    if not golds:
        raise InputError("a query without gold ids has no average precision")
    top = list(ranked)[:k]
    if convention == MEWSLIX:
        target = golds[0]
        return next((1.0 / rank for rank, pred in enumerate(top, start=1) if pred == target), 0.0)
    wanted, seen = set(golds), set()
    hits, total = 0, 0.0
    for rank, pred in enumerate(top, start=1):
        if pred in wanted and pred not in seen:
            hits += 1
            total += hits / rank
        seen.add(pred)
    return total / min(len(wanted), k)


def map_at_k(
    ranked_by_query: Mapping[str, Sequence[str]],
    gold_by_query: Mapping[str, Collection[str]],
    k: int = TOP_K,
    convention: str = LAREQA,
    strict: bool = True,
) -> dict[str, float]:
    """``{"map_at_<k>": 100 x mean AP@k}`` over the queries of ``gold_by_query``.

    ``ranked_by_query``: query id -> candidate ids, best first (at least the top k).
    ``strict=False``: a gold query without predictions scores 0 and predictions for unknown
    queries are ignored, as the official Mewsli-X scorer does; otherwise both are errors."""
    k = _check_k(k)
    if convention not in CONVENTIONS:
        raise InputError(f"unknown mAP convention {convention!r}; known: {', '.join(CONVENTIONS)}")
    if not gold_by_query:
        raise InputError("no queries to score")
    if strict:
        missing = [q for q in gold_by_query if q not in ranked_by_query]
        if missing:
            raise InputError(f"no ranking for {len(missing)} of {len(gold_by_query)} queries, e.g. {missing[:3]}")
        extra = [q for q in ranked_by_query if q not in gold_by_query]
        if extra:
            raise InputError(f"rankings for {len(extra)} queries without gold ids, e.g. {extra[:3]}")
    total = 0.0
    for query, gold in gold_by_query.items():
        try:
            total += average_precision_at_k(ranked_by_query.get(query, ()), gold, k, convention)
        except InputError as err:
            raise InputError(f"query {query!r}: {err}") from None
    return {metric_key(k): 100.0 * total / len(gold_by_query)}
