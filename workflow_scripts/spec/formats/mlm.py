"""Masked language modelling on raw text, an intermediate task only (its loss is never scored).

Features: data/features.py (masking at collate time, ``mask_tokens``); head: the backbone's own
pretrained LM head (models/heads.py ``load_mlm_head``)."""

from workflow_scripts.spec.formats import TaskFormat

FORMAT = TaskFormat(name="mlm", columns={"text": "string"}, head="mlm", scorer=None)
