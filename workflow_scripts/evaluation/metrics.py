"""Metrics with the semantics of the official scorers (docs/protocol.md §3).

- accuracy (XNLI, PAWS-X, multiple choice, Tatoeba): share correct x 100.
- SQuAD v1.1 (XQuAD, TyDiQA-GoldP, SQuAD dev): the official evaluate-v1.1 normalisation,
  EM and bag-of-tokens F1, max over gold answers, mean over questions, x 100.
- SQuAD v2.0: as v1.1, but, as the official evaluate-v2.0 script does, gold answers that
  normalise to the empty string are dropped, and only a question left with none (an
  unanswerable one) is scored against the empty string; an empty prediction and an empty
  gold then match (F1 1), an empty one against a non-empty one scores 0.
- MLQA: the official MLQA normalisation (Unicode punctuation, per-language articles,
  Chinese split into characters).
- IGLUE (XVNLI, MaRVL): accuracy over every row of the release; XVNLI's rows without a gold
  label, which the loader drops, count as wrong answers, as IGLUE's scorer counts them
  (``iglue_accuracy``). IGLUE's averages leave English out (``average_without_english``).
- seqeval F1 (POS, NER): entity-level micro F1, default (non-strict) mode. seqeval is pinned
  to 0.0.12, the version XTREME's reference numbers were produced with: 0.0.x takes the whole
  POS tag as the chunk type, 1.x strips its first character, which changes POS scores. The
  installed version is recorded in every metric file.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cache

from workflow_scripts.spec.basics import InputError

# ----- SQuAD v1.1 / v2.0 ----------------------------------------------------------------

_SQUAD_PUNCT = set(string.punctuation)
_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")


def squad_normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _SQUAD_PUNCT)
    text = _SQUAD_ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _f1(pred_tokens: list[str], gold_tokens: list[str], empty_matches: bool) -> float:
    if empty_matches and (not pred_tokens or not gold_tokens):
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _qa_scores(
    predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]], tokens, v2: bool
) -> dict[str, float]:
    missing = [qid for qid in golds if qid not in predictions]
    if missing:
        raise InputError(f"predictions lack {len(missing)} question ids, e.g. {missing[:3]}")
    if not golds:
        raise InputError("no questions to score")
    em = f1 = 0.0
    for qid, answers in golds.items():
        if v2:  # evaluate-v2.0: drop golds that normalise to nothing; [""] only when none is left
            answers = [a for a in answers if tokens(a)] or [""]
        answers = list(answers)
        if not answers:
            raise InputError(f"question {qid} has no gold answer")
        pred = predictions[qid]
        em += max(float(tokens(pred) == tokens(a)) for a in answers)
        f1 += max(_f1(tokens(pred), tokens(a), empty_matches=v2) for a in answers)
    n = len(golds)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}


def squad_v1(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> dict[str, float]:
    return _qa_scores(predictions, golds, lambda t: squad_normalize(t).split(), v2=False)


def squad_v2(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> dict[str, float]:
    return _qa_scores(predictions, golds, lambda t: squad_normalize(t).split(), v2=True)


# ----- MLQA -----------------------------------------------------------------------------


@cache
def _mlqa_punct() -> frozenset[str]:
    unicode_p = (chr(i) for i in range(sys.maxunicode + 1) if unicodedata.category(chr(i)).startswith("P"))
    return frozenset(unicode_p) | _SQUAD_PUNCT


_MLQA_ARTICLES = {
    "en": r"\b(a|an|the)\b",
    "es": r"\b(un|una|unos|unas|el|la|los|las)\b",
    "de": r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b",
    "vi": r"\b(của|là|cái|chiếc|những)\b",
    "ar": "\u0627\u0644",  # every occurrence of the article "al" becomes a space
    "hi": None,
    "zh": None,
}
_CJK = re.compile(r"[\u4e00-\u9fa5]")


def mlqa_tokens(text: str, lang: str) -> list[str]:
    if lang not in _MLQA_ARTICLES:
        raise InputError(f"MLQA normalisation has no rule for language {lang!r}")
    text = text.lower()
    punct = _mlqa_punct()
    text = "".join(ch for ch in text if ch not in punct)
    article = _MLQA_ARTICLES[lang]
    if article:
        text = re.sub(article, " ", text)
    text = " ".join(text.split())
    if lang == "zh":
        out: list[str] = []
        for segment in text.split():
            buf = ""
            for ch in segment:
                if _CJK.match(ch) or ch in punct:
                    if buf:
                        out.append(buf)
                        buf = ""
                    out.append(ch)
                else:
                    buf += ch
            if buf:
                out.append(buf)
        return out
    return text.split()


def mlqa(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]], lang: str) -> dict[str, float]:
    return _qa_scores(predictions, golds, lambda t: mlqa_tokens(t, lang), v2=False)


# ----- classification, tagging -----------------------------------------------------------


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> dict[str, float]:
    if len(predictions) != len(labels):
        raise InputError(f"{len(predictions)} predictions for {len(labels)} labels")
    if not labels:
        raise InputError("no examples to score")
    return {"accuracy": 100.0 * sum(int(p == y) for p, y in zip(predictions, labels)) / len(labels)}


def iglue_accuracy(predictions: Sequence[int], labels: Sequence[int], unlabelled: int = 0) -> dict[str, float]:
    """IGLUE's accuracy: the share of correct answers among every row of the release, the
    ``unlabelled`` rows without a gold label (XVNLI's ``-``, dropped by the loader and
    counted in its report) included as wrong answers: IGLUE gives such a row no target."""
    if len(predictions) != len(labels):
        raise InputError(f"{len(predictions)} predictions for {len(labels)} labels")
    if unlabelled < 0:
        raise InputError(f"unlabelled rows: {unlabelled} < 0")
    total = len(labels) + unlabelled
    if not total:
        raise InputError("no examples to score")
    return {"accuracy": 100.0 * sum(int(p == y) for p, y in zip(predictions, labels)) / total}


def average_without_english(scores: Mapping[str, float]) -> float:
    """IGLUE's cross-language average: the mean over the languages other than English
    (English is scored and reported beside it)."""
    others = [v for lang, v in scores.items() if lang != "en"]
    if not others:
        raise InputError(f"no language other than English to average (have {sorted(scores)})")
    return mean(others)


def seqeval_version() -> str:
    from importlib.metadata import version

    return version("seqeval")


def seqeval_f1(predictions: Sequence[Sequence[str]], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    from seqeval.metrics import f1_score

    if len(predictions) != len(golds):
        raise InputError(f"{len(predictions)} predicted sentences for {len(golds)} gold sentences")
    for k, (p, g) in enumerate(zip(predictions, golds)):
        if len(p) != len(g):
            raise InputError(f"sentence {k}: {len(p)} predicted tags for {len(g)} words")
    if not golds:
        raise InputError("no sentences to score")
    with warnings.catch_warnings():  # POS tags are not IOB tags; seqeval warns about each
        warnings.simplefilter("ignore", UserWarning)
        f1 = f1_score([list(g) for g in golds], [list(p) for p in predictions])
    return {"f1": 100.0 * float(f1)}


def mean(values: Iterable[float]) -> float:
    values = list(values)
    if not values:
        raise InputError("mean of no values")
    return sum(values) / len(values)
