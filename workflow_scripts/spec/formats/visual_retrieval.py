"""Captions and their images, trained contrastively: the pooled caption against the projected
image (multimodal/prefix.py), the batch's other images as negatives; scored by recall@1."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="visual_retrieval",
    columns={"text_a": "string", "images": "list<string>"},
    head="visual_retrieval",
    scorer="visual_retrieval",
    visual=True,
    # the caption; the image it describes carries over
    translated_columns=("text_a",),
)
