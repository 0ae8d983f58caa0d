"""The multilingual MLM corpus: Wikipedia sentences with XLM's smoothed language quotas."""

from __future__ import annotations

import re
from collections.abc import Iterable

from workflow_scripts.common import LOG
from workflow_scripts.data.loaders.registry import Report, Row, converter
from workflow_scripts.data.loaders.source import Source
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions

# The corpus when the config's options leave a choice open (config/base/intermediate_tasks.yaml sets them all).
SNAPSHOT, SENTENCES, ALPHA, SEED = "20231101", 2_000_000, 0.3, 0
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？।])")


def split_sentences(text: str) -> list[str]:
    """Sentences of a Wikipedia article: paragraphs split after sentence-final punctuation
    (Latin, CJK and Devanagari full stops)."""
    out = []
    for paragraph in text.split("\n"):
        out += [s.strip() for s in _SENTENCE_END.split(paragraph) if len(s.strip()) > 1]
    return out


@converter("mlm")
def _mlm(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """Multilingual Wikipedia sentences for MLM, as in XLM: language i gets a share
    q_i = p_i^alpha / sum_j p_j^alpha of the `sentences` total, p_i being its share of
    articles. Articles are read in a seeded shuffled order until the quota is filled."""
    snapshot = SNAPSHOT if opts.snapshot is None else opts.snapshot
    total = SENTENCES if opts.sentences is None else opts.sentences
    alpha = ALPHA if opts.alpha is None else opts.alpha
    seed = SEED if opts.seed is None else opts.seed
    sizes = {lang: src.num_rows(f"{snapshot}.{lang}", "train") for lang in langs}
    empty = [lang for lang, n in sizes.items() if n == 0]
    if empty:
        raise InputError(f"mlm: no Wikipedia articles for languages {empty}")
    weights = {lang: (n / sum(sizes.values())) ** alpha for lang, n in sizes.items()}
    for lang in langs:
        quota = max(1, round(total * weights[lang] / sum(weights.values())))
        n = 0
        for article in src.rows(f"{snapshot}.{lang}", "train", shuffle_seed=seed):
            for sentence in split_sentences(article["text"]):
                yield {"id": f"mlm-{lang}-{n}", "lang": lang, "text": sentence}
                n += 1
                if n == quota:
                    break
            if n == quota:
                break
        if n < quota:
            LOG.warning("mlm: %s has %d sentences, fewer than its quota %d", lang, n, quota)
