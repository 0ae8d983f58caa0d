"""Parallel sentence pairs, scored by nearest-neighbour search on encoder embeddings (Tatoeba).

No head and no training: evaluation/evaluate.py's retrieval path embeds both sides
(evaluation/retrieval.py)."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="retrieval", columns={"source": "string", "target": "string"}, head=None, scorer=None, retrieval=True
)
