"""Multiple choice: a context and its choices, one pooled score per choice (XCOPA, SIQA, HellaSwag).

Features: data/features.py ``_encode_choices``; scored as classification (the best choice's accuracy)."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="multiple_choice",
    columns={"context": "string", "choices": "list<string>", "label": "int64"},
    head="multiple_choice",
    scorer="classification",
    translated_columns=("context", "choices"),
)
