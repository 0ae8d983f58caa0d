"""The transfer settings' names (docs/protocol.md §7) and how a setting is written in a path:
what the workflow's plans (workflow/transfer.py) and the tables and figures both read."""

from __future__ import annotations

ZERO_SHOT = "zero_shot"
PER_LANGUAGE = ("translate_train", "translate_test", "in_language")
SETTINGS = (ZERO_SHOT, "translate_train", "translate_train_all", "translate_test", "in_language", "in_language_all")
SOURCE_PREFIX = "source:"
# Which dev data selects a model: the recipe's own languages, or English.
MODEL_SELECTION = ("own", "en")


def path_token(setting: str) -> str:
    """The setting as a path component: ``source:de`` -> ``source-de``."""
    return setting.replace(":", "-")


def source_language(setting: str) -> str | None:
    return setting[len(SOURCE_PREFIX) :] if setting.startswith(SOURCE_PREFIX) else None
