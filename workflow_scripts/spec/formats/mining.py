"""Monolingual corpora plus gold alignments, scored by mining parallel pairs (BUCC).

No head and no training: evaluation/evaluate.py's retrieval path (evaluation/retrieval.py)."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="mining",
    columns={"side": "string", "text": "string", "gold": "list<string>"},
    head=None,
    scorer=None,
    retrieval=True,
)
