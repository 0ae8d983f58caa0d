"""Sentence-pair (or single-sentence) classification: XNLI, PAWS-X, MNLI, QQP.

Features: data/features.py ``_encode_pairs``; head: a pooled vector's classifier (models/heads.py);
leaderboard predictions: evaluation/predictions.py."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="classification",
    columns={"text_a": "string", "text_b": "string", "label": "int64"},
    head="classification",
    scorer="classification",
    translated_columns=("text_a", "text_b"),
    translate_test=True,
)
