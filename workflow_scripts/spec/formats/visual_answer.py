"""A question about an image, answered from an answer vocabulary with soft targets (VQA v2;
data/vqa_answers.py). The vocabulary comes from the training split, as CCG's tag set does."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="visual_answer",
    columns={"text_a": "string", "images": "list<string>", "answers": "list<string>"},
    head="visual_answer",
    scorer="visual_answer",
    visual=True,
    # the question only: the answers are the label vocabulary (built from the train split and
    # scored by the official English normalisation), so they stay English
    translated_columns=("text_a",),
    # tasks.<name>.min_answer_count: the answers given this often form the vocabulary
    options=("min_answer_count",),
)
