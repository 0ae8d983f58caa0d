"""Where a grid's data and models come from: the config's ``data``, ``models`` and ``vision``
blocks (the schema's ``$defs.data``, ``$defs.models`` and ``$defs.vision`` are generated from
these records, spec/schema_block.py).

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.record import Record, parsed_once
from workflow_scripts.spec.schema_block import LANGUAGE_CODE, key

Split = Literal["train", "dev", "test"]


@dataclass(frozen=True, kw_only=True)
class DataEntry(Record):
    """The config's ``data`` block."""

    key_noun = "config key"

    source: Literal["hub", "local"] = key(
        description="""hub downloads from the Hugging Face Hub; local reads a directory laid out like the Hub.
        A task with local files of its own (tasks.<name>.data) reads them whatever this says."""
    )
    local_root: str = key(
        "demo/hub", description="Root of the local mirror, <local_root>/<hub path>/<config>/<split>.jsonl."
    )

    @property
    def mirror(self) -> str | None:
        """The local mirror's root where the grid reads one (data.source local), else None."""
        return self.local_root if self.source == "local" else None


@dataclass(frozen=True, kw_only=True)
class HubModelEntry(Record):
    """An OPUS-MT model on the Hub and its revision."""

    key_noun = "config key"

    hub_id: str = key(minLength=1)
    revision: str = key("main", minLength=1)


@dataclass(frozen=True, kw_only=True)
class TranslatorEntry(HubModelEntry):
    """An OPUS-MT model out of English; a multi-target model names its output language's token."""

    target_token: str | None = key(
        None,
        description="""The sentence-initial token that picks the output language of a multi-target
        model (its model card names it, e.g. >>ara<< for opus-mt-en-ar). Translation
        refuses a multi-target model without one.""",
        pattern="^>>[A-Za-z_]+<<$",
    )


@dataclass(frozen=True, kw_only=True)
class DemoPretrainingEntry(Record):
    """What demo mode's tokenizers, backbones and translators are pre-trained on."""

    key_noun = "config key"

    text: dict[str, tuple[Split, ...]] = key(
        minProperties=1,
        additionalProperties={
            "type": "array",
            "items": {"enum": ["train", "dev", "test"]},
            "minItems": 1,
            "uniqueItems": True,
        },
    )
    languages: tuple[str, ...] = key(items={"pattern": LANGUAGE_CODE}, uniqueItems=True)


@dataclass(frozen=True, kw_only=True)
class ModelsEntry(Record):
    """The config's ``models`` block."""

    key_noun = "config key"

    source: Literal["hub", "demo"] = key(
        description="""hub snapshots the models (backbones and translators); demo builds small models and
        trains them on the demo text and corpora."""
    )
    translators: dict[str, TranslatorEntry] = key(
        factory=dict,
        description="OPUS-MT model per target language of the translated intermediate configs.",
        propertyNames={"pattern": LANGUAGE_CODE},
    )
    translators_to_en: dict[str, HubModelEntry] = key(
        factory=dict,
        description="OPUS-MT model per language into English, for the translate_test setting.",
        propertyNames={"pattern": LANGUAGE_CODE},
    )
    # as the config gives it; the translator's job settings parse it (TranslatorPrepare.demo)
    translator_demo: dict[str, Any] = key(factory=dict, **{"$ref": "#/$defs/demo_translator", "default": {}})
    demo_corpora: str = key(
        "demo/parallel",
        description="""Directory of the parallel corpora <en>-<lang>.jsonl (OPUS-100 rows) on which demo
        mode pre-trains the backbones (the languages of demo_pretraining) and trains each
        translator (its own pair). Relative paths are relative to the repository.""",
        minLength=1,
    )
    demo_pretraining: DemoPretrainingEntry | None = key(
        None,
        description="""What demo mode's tokenizers, backbones and translators are pre-trained on, declared
        so that a task added to the grid retrains none of them: text, the task data files
        (task -> splits) their vocabularies are learnt from; languages, the parallel
        corpora (English to each) the backbones are pre-trained on. Required with
        models.source demo; ignored with hub models.""",
    )

    @property
    def demo(self) -> bool:
        """Demo mode: small models built and trained here, not snapshots of the Hub's."""
        return self.source == "demo"

    @property
    def pretraining(self) -> DemoPretrainingEntry:
        """``demo_pretraining``, which demo mode requires (the config check says so first)."""
        if self.demo_pretraining is None:
            raise InputError("config key models.demo_pretraining: required with models.source demo")
        return self.demo_pretraining


@dataclass(frozen=True, kw_only=True)
class VisionEntry(Record):
    """The config's ``vision`` block: the frozen vision encoder of image tasks and how its
    features are kept."""

    key_noun = "config key"

    hub_id: str = key("openai/clip-vit-base-patch32", minLength=1)
    revision: str = key("main", description="Pinned Hub revision", minLength=1)
    features: Literal["patches", "pooled"] = key(
        "patches",
        description="""patches (every token of the last hidden state: ViT-B/32 at 224 px gives 50 visual
        tokens) or pooled (one token per image).""",
    )
    visual_tokens: int | None = key(
        None,
        description="""Tokens one image adds to the backbone's sequence, for the GPU memory plan
        (workflow_scripts/planning/memory_plan.py). Without it the plan reads the patch grid
        from the Hub id (patch size, resolution; 224 px when none is named) or takes 1 with
        pooled features.""",
        minimum=1,
    )
    cache: str = key(
        "results/cache/image_features",
        description="The content-addressed per-image feature cache, shared by every image task.",
    )
    batch_size: int = key(64, minimum=1)
    # as the config gives it; the tower's job settings parse it (VisionPrepare.demo)
    demo: dict[str, Any] = key(factory=dict, **{"$ref": "#/$defs/demo_vision", "default": {}})


def vision_of(config: Mapping[str, Any]) -> VisionEntry:
    """The ``vision`` block's record, parsed once (its defaults where the config has none)."""
    return parsed_once(VisionEntry, config.get("vision") or {}, "vision")


def data_of(config: dict[str, Any]) -> DataEntry:
    """The ``data`` block's record, parsed once."""
    return parsed_once(DataEntry, config["data"], "data")


def models_of(config: dict[str, Any]) -> ModelsEntry:
    """The ``models`` block's record, parsed once."""
    return parsed_once(ModelsEntry, config["models"], "models")
