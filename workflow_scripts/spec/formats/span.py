"""Extractive QA: an answer span in a context (SQuAD, XQuAD, MLQA, TyDiQA-GoldP).

Features: data/features.py ``_encode_spans`` (windows over long contexts); scoring decodes spans
(``decode_spans``) and reads SQuAD / MLQA metrics; translate-test re-aligns spans
(translation/translate.py)."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(
    name="span",
    columns={"context": "string", "question": "string", "answer_texts": "list<string>", "answer_starts": "list<int64>"},
    head="span",
    scorer="span",
    # answer_texts are translated and re-aligned, answer_starts recomputed (translation/translate.py)
    translated_columns=("context", "question", "answer_texts"),
    translate_test=True,
    per_token=True,
    options=("doc_stride", "max_query_length", "n_best", "max_answer_length"),
)
