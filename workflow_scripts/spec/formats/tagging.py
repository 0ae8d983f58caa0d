"""Token tagging: one tag per word (UD-POS, PAN-X, CCG supertags).

Features: data/features.py ``_encode_tags`` (a word's first sub-token carries its tag); scoring
merges sub-tokens back to words (``merge_tags``) for seqeval F1 or per-word accuracy."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="tagging",
    columns={"tokens": "list<string>", "tags": "list<string>"},
    head="tagging",
    scorer="tagging",
    per_token=True,
)
