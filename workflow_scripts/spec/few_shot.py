"""In-language few-shot transfer as IGLUE runs it (Bugliarello et al. 2022, §4; the release's
``experiments/few_shot.dev-mt/*/train.dtu.sh``): the zero-shot model of a target goes on
training, its head included, on N shots of one language's own data, at each of a few learning
rates, and the learning rate whose model scores best on the English dev split machine-translated
into that language is kept (``dev-mt``).

A target declares its protocol in its catalogue entry (``few_shot:``, read into
:class:`FewShotProtocol`); the shots are a task of their own (the *pool*: every shot file of
every language, each row tagged with the fewest shots it belongs to, IGLUE's files being
nested, and the translated dev split). The grid runs it as the transfer setting
``few_shot:<N>`` (workflow/transfer.py). Standard library only: the Snakefile imports this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SETTING_PREFIX = "few_shot:"
# A few-shot target model's recipe (transfer.py): fs<N>-<lang>.dev-<lang>; the other recipes'
# names have no digit, so the two kinds of training job never claim each other's paths.
RECIPE_PATTERN = r"fs[0-9]+-[a-z]{2,3}\.dev-[a-z]{2,3}"
_KEYS = ("task", "shots", "epochs", "batch_size", "learning_rates", "warmup_ratio")
# What selects the learning rate: the English dev split machine-translated into the language
# (IGLUE's dev-mt), or the English dev split itself (what IGLUE's MaRVL scripts run).
SELECTIONS = ("translated", "english")


class FewShotError(ValueError):
    """A few-shot protocol that cannot be read, named by its entry and key."""


@dataclass(frozen=True)
class FewShotProtocol:
    """How a target trains on N shots of a language (its catalogue entry's ``few_shot``)."""

    task: str  # the pool: its train split holds the shots, its dev split the translated dev
    shots: tuple[int, ...]  # the shot counts the release has files for
    epochs: int
    batch_size: int
    learning_rates: tuple[float, ...]  # each trains a candidate; the best on dev is kept
    warmup_ratio: float
    selection: str = "translated"  # SELECTIONS

    @classmethod
    def parse(cls, entry: Any, where: str) -> FewShotProtocol:
        if not isinstance(entry, dict):
            raise FewShotError(f"{where}: few_shot must be a mapping of {list(_KEYS)}, got {entry!r}")
        missing = [k for k in _KEYS if k not in entry]
        unknown = sorted(set(entry) - set(_KEYS) - {"selection"})
        if missing or unknown:
            raise FewShotError(f"{where}: few_shot lacks {missing} / has unknown keys {unknown}; keys: {list(_KEYS)}")
        shots = tuple(entry["shots"]) if isinstance(entry["shots"], list) else ()
        if not shots or any(not isinstance(n, int) or n < 1 for n in shots) or list(shots) != sorted(set(shots)):
            raise FewShotError(f"{where}: few_shot.shots must be increasing positive integers, got {entry['shots']!r}")
        rates = entry["learning_rates"]
        if not isinstance(rates, list) or not rates or any(not isinstance(r, (int, float)) or r <= 0 for r in rates):
            raise FewShotError(f"{where}: few_shot.learning_rates must be positive numbers, got {rates!r}")
        if entry.get("selection", SELECTIONS[0]) not in SELECTIONS:
            raise FewShotError(
                f"{where}: few_shot.selection must be one of {list(SELECTIONS)}, got {entry['selection']!r}"
            )
        for key in ("epochs", "batch_size"):
            if not isinstance(entry[key], int) or entry[key] < 1:
                raise FewShotError(f"{where}: few_shot.{key} must be a positive integer, got {entry[key]!r}")
        return cls(
            task=str(entry["task"]),
            shots=shots,
            epochs=entry["epochs"],
            batch_size=entry["batch_size"],
            learning_rates=tuple(float(r) for r in rates),
            warmup_ratio=float(entry["warmup_ratio"]),
            selection=entry.get("selection", SELECTIONS[0]),
        )


def shots_of(setting: str) -> int | None:
    """N of a ``few_shot:<N>`` setting, else None."""
    if not setting.startswith(SETTING_PREFIX):
        return None
    count = setting[len(SETTING_PREFIX) :]
    return int(count) if count.isdigit() and int(count) > 0 else None


def recipe_name(shots: int, lang: str, selected_on: str) -> str:
    """The target model trained on ``shots`` shots of ``lang``, selected on the dev split in
    ``selected_on`` (``lang``: translated into it; ``en``: English)."""
    return f"fs{shots}-{lang}.dev-{selected_on}"


def is_few_shot_recipe(recipe: str) -> bool:
    return re.fullmatch(RECIPE_PATTERN, recipe) is not None


def shots_of_recipe(recipe: str) -> int:
    """N of a few-shot recipe's name (``recipe_name``'s inverse: fs5-de.dev-de -> 5)."""
    if not is_few_shot_recipe(recipe):
        raise ValueError(f"{recipe!r} is not a few-shot recipe (fs<N>-<lang>.dev-<lang>)")
    return int(recipe.split("-", 1)[0].removeprefix("fs"))


def candidate_token(learning_rate: float) -> str:
    """A learning rate's candidate folder (the sweep's point token: ``lr5e-05``)."""
    return f"lr{learning_rate:g}"
