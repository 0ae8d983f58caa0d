"""One ``backbones.<name>`` entry of the config, as a record: the one declaration of a backbone
entry's keys, their types, defaults and descriptions (the config schema's ``$defs.backbone``
is generated from it, spec/schema_block.py), parsed once per entry (``entry_of``), and the
one place that says how a backbone trains (``method_settings``).

Standard library only: the Snakefile imports this to check and plan a config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workflow_scripts.spec.evaluation_settings import RETRIEVAL_POOLINGS
from workflow_scripts.spec.families import FAMILIES
from workflow_scripts.spec.method import (
    DEFAULT_ACTIVATION_CHECKPOINTING,
    DEFAULT_METHOD,
    DEFAULT_PRECISION,
    LoraEntry,
    MethodName,
    MethodSettings,
    PrecisionName,
)
from workflow_scripts.spec.record import Record, parsed_once
from workflow_scripts.spec.schema_block import key

Launcher = Literal["torchrun", "srun"]
GRID_PARTS = ("intermediate", "targets", "seeds", "settings")  # arm_recipes: arm_recipes.py narrows them


@dataclass(frozen=True, kw_only=True)
class ArchitectureEntry(Record):
    key_noun = "config key"

    hidden_size: int = key(minimum=1)
    num_layers: int = key(minimum=1)
    num_attention_heads: int = key(minimum=1)
    vocab_size: int | None = key(None, minimum=1)
    intermediate_size: int | None = key(None, minimum=1)

    @property
    def ffn_size(self) -> int:
        # A missing intermediate size: the 4h of BERT-type and GPT-type blocks.
        return self.intermediate_size or 4 * self.hidden_size


@dataclass(frozen=True, kw_only=True)
class GpusEntry(Record):
    key_noun = "config key"

    per_node: int | None = key(None, minimum=1)
    nodes: int = key(1, minimum=1)
    memory_gb: float | None = key(None, exclusiveMinimum=0)
    launcher: Launcher = key(
        "torchrun",
        description="""How the ranks start. torchrun (default): one torchrun per node, which starts a
        process per GPU (on one machine `torchrun --standalone`; on Slurm, for several nodes, one
        torchrun per node through srun). srun: inside a Slurm job, srun starts every rank as a
        Slurm task (ranks from SLURM_PROCID, no torchrun), as clusters that schedule one task per
        GPU prefer; outside Slurm it falls back to torchrun.""",
    )

    @property
    def count(self) -> int:
        """GPUs of one training job (0: the rule's own resources decide, one process)."""
        return (self.per_node or 0) * self.nodes


@dataclass(frozen=True, kw_only=True)
class RetrievalEntry(Record):
    key_noun = "config key"

    layer: int | None = key(None, minimum=0)
    pooling: str | None = key(None, enum=RETRIEVAL_POOLINGS)


@dataclass(frozen=True, kw_only=True)
class BackboneTraining(Record):
    key_noun = "config key"

    intermediate: dict[str, Any] | None = key(None, **{"$ref": "#/$defs/backbone_phase"})
    target: dict[str, Any] | None = key(None, **{"$ref": "#/$defs/backbone_phase"})

    def phase(self, name: str) -> dict[str, Any]:
        return dict(getattr(self, name) or {})


@dataclass(frozen=True, kw_only=True)
class GridEntry(Record):
    key_noun = "config key"

    intermediate: tuple[str, ...] | None = key(None, minItems=1)
    arm_recipes: tuple[str, ...] | None = key(
        None,
        minItems=1,
        uniqueItems=True,
        description="The arm recipes its image arms run under (default all of arm_recipes).",
    )
    targets: tuple[str, ...] | None = key(None, minItems=1)
    seeds: tuple[int, ...] | None = key(None, minItems=1)
    settings: tuple[str, ...] | None = key(None, minItems=1)

    def narrowed(self) -> dict[str, tuple[Any, ...]]:
        """The grid parts this entry narrows (arm_recipes aside), by name."""
        return {part: getattr(self, part) for part in GRID_PARTS if getattr(self, part) is not None}


@dataclass(frozen=True, kw_only=True)
class BackboneEntry(Record):
    """A backbone: where it comes from, its family, how it trains, what the planners need, and
    the part of the grid it runs."""

    key_noun = "config key"

    hub_id: str | None = key(None, minLength=1, description="Hugging Face Hub id (models.source hub)")
    revision: str | None = key(None, minLength=1, description="Pinned Hub revision (a commit sha or tag)")
    family: str = key(
        enum=list(FAMILIES),
        description="""encoder (XLM-R, mBERT, mDeBERTa, RemBERT; first-token pooling, has MLM),
        seq2seq_encoder (the encoder of mT5 / mT0 / Aya-101; mean pooling), decoder (BLOOM(Z),
        Llama, Qwen, Gemma, Aya-23; last-token pooling): the families registered in
        workflow_scripts/spec/families.py.""",
    )
    method: MethodName = key(
        DEFAULT_METHOD,
        description="""full fine-tuning, lora (peft adapters on lora.target_modules, heads trained
        whole) or qlora (lora on a 4-bit NF4 base; CUDA and bitsandbytes only).
        workflow_scripts/models/adapters.py.""",
    )
    precision: PrecisionName = key(
        DEFAULT_PRECISION,
        description="""Compute dtype of every step that runs the backbone (training, evaluation,
        retrieval embeddings), on CPUs and GPUs alike: bf16 or fp16 (autocast; fp16 with loss
        scaling) or fp32. Full fine-tuning keeps fp32 master weights and optimizer state whatever
        the checkpoint's dtype; a lora base is held in the compute dtype, a qlora base in NF4. bf16
        needs a GPU with native bf16 (compute capability 8.0+). workflow_scripts/precision.py.""",
    )
    parameters: float | None = key(
        None, exclusiveMinimum=0, description="Parameter count of the backbone as loaded (memory planner, figures)"
    )
    architecture: ArchitectureEntry | None = key(
        None,
        description="""The backbone's shape, for the memory planner
        (workflow_scripts/planning/memory_model.py): vocab_size sizes the embedding (QLoRA keeps
        it unquantised; MLM's logits), intermediate_size LoRA on MLP layers (default 4 x
        hidden_size).""",
    )
    lora: LoraEntry = key(factory=LoraEntry)
    gpus: GpusEntry | None = key(
        None,
        description="""What a training job of this backbone asks for: GPUs per node, nodes, and the
        memory of one GPU (the planner stops a config whose backbone cannot fit them).""",
    )
    activation_checkpointing: bool = key(DEFAULT_ACTIVATION_CHECKPOINTING)
    contaminated_targets: tuple[str, ...] = key(
        (),
        description="""Targets whose data was in the backbone's training mixture (mT0, BLOOMZ,
        Aya-101: xP3 holds XNLI and XCOPA); the tables footnote them as not zero-shot.""",
    )
    contamination_source: str | None = key(None, description="What held the targets (e.g. xP3), for the footnote")
    retrieval: RetrievalEntry | None = key(
        None, description="This backbone's retrieval layer and pooling (default the top-level retrieval's)."
    )
    training: BackboneTraining | None = key(
        None,
        description="""This backbone's own training settings per phase, which win over
        training.<phase>, an intermediate config's and a task's learning rate (a LoRA adapter
        starts at zero and trains every task at its own, larger rate). Only the keys given change;
        the batch geometry (max_micro_batch) stays the phase's, as the memory planner plans it.""",
    )
    grid: GridEntry | None = key(None, description="The part of the grid this backbone runs (default all of it).")
    demo: dict[str, Any] | None = key(
        None,
        description="""How demo mode builds this backbone (models.source demo): the encoder's or the
        decoder's settings below, by family.""",
    )

    def method_settings(self, adapters: bool = False) -> MethodSettings:
        """How the backbone trains, as train.py reads it (adapters.Method): every setting that
        applies spelt out, so a training job's params change exactly when its method does.
        ``adapters``: a phase that trains adapters whatever the backbone's method (an arm
        recipe's ``trains: adapters``): LoRA with the backbone's lora settings where the method
        is full."""
        name = "lora" if adapters and self.method == "full" else self.method
        lora = self.lora.to_dict() if name != "full" else {}
        # Named only when on, so that off gives the params of a config without the key.
        checkpointing = {"activation_checkpointing": True} if self.activation_checkpointing else {}
        return MethodSettings.parse({"name": name, "precision": self.precision, **lora, **checkpointing})

    @property
    def gpu_request(self) -> GpusEntry:
        """The GPUs a training job asks for (no ``gpus``: none named, one process)."""
        return self.gpus or GpusEntry()

    def narrowed_grid(self) -> dict[str, tuple[Any, ...]]:
        """The grid parts the entry narrows (arm_recipes aside), by name; empty: it runs the
        config's whole grid."""
        return self.grid.narrowed() if self.grid else {}

    def phase_training(self, phase: str) -> dict[str, Any]:
        """The backbone's own settings of a training phase (empty: none)."""
        return self.training.phase(phase) if self.training else {}


def entry_of(config: dict[str, Any], name: str) -> BackboneEntry:
    """The record of ``backbones.<name>``, parsed once per entry (InputError naming the key)."""
    return parsed_once(BackboneEntry, config["backbones"][name], f"backbones.{name}")


def entries(config: dict[str, Any]) -> dict[str, BackboneEntry]:
    """Every backbone entry's record, in the config's order."""
    return {name: entry_of(config, name) for name in config["backbones"]}
