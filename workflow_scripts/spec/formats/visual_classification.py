"""Text plus an image, classified (SNLI-VE, NLVR2): the image enters the backbone as a projected
visual prefix (multimodal/prefix.py); intermediate tasks only."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="visual_classification",
    columns={"text_a": "string", "images": "list<string>", "label": "int64"},
    head="visual_classification",
    scorer="classification",
    visual=True,
    # the hypothesis (SNLI-VE) or statement (NLVR2); image names and label carry over
    translated_columns=("text_a",),
)
