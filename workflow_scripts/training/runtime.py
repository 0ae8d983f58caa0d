"""Where a training phase runs: the single process, or one rank of a sharded job.

``recipe.TrainingRecipe`` is the recipe: data, task sampling, schedule, the loop, evaluation and
early stopping, the same whatever runs it. What differs between one process and a rank of a
torchrun/srun job (FSDP2) lives here, behind one interface, the way torchtune keeps its
recipes apart from their components:

- the backbone: one process loads it with its lineage's adapters merged; a rank builds it on
  the meta device and later reads only its own rows (``sharded_loading``);
- the model: one process wraps it with its heads and attaches LoRA; a rank does the same on
  the meta model, shards it with FSDP2 and fills its shards;
- checkpoints and best weights: files of the trained state (``Checkpointer``,
  ``BestWeights``), or DCP shards that also restore each rank's RNG (``Sharded*``);
- micro-batches: chunks of the step's batch (weight None: the caller weighs each chunk by its
  share), or this rank's part of the global batch with its loss weight;
- the output: the model as it is, or gathered on rank 0, which alone writes it: the whole
  model after full fine-tuning, only the trainable tensors (adapter and heads) after LoRA.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, device
from workflow_scripts.models.adapters import (
    Method,
    attach,
    check_available,
    inner,
    load_backbone,
    trained_state,
)
from workflow_scripts.models.heads import MultiHeadModel, load_mlm_head
from workflow_scripts.precision import Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.training.checkpoints import (
    BestWeights,
    Checkpointer,
    ShardedBestWeights,
    ShardedCheckpointer,
    rng_state,
    set_rng_state,
)
from workflow_scripts.training.distributed import (
    Context,
    barrier,
    full_state_dict,
    init_from_env,
    micro_batches,
    shutdown,
    trainable_state_dict,
)
from workflow_scripts.training.sharded_loading import empty_backbone, empty_mlm_head, load_sharded_model

MicroBatches = list[tuple[list[dict[str, Any]], "float | None"]]


class SingleProcess:
    """A phase trained by one process, on its one device (a GPU when there is one)."""

    distributed = False

    def __init__(self, ctx: Context, method: Method) -> None:
        self.ctx, self.method, self.device = ctx, method, device()

    # --- the model -------------------------------------------------------------------------

    def load_backbone(self, encoder_dir: Path):
        """The backbone the previous phase left: its base with every adapter of its lineage merged."""
        return load_backbone(encoder_dir, self.method)

    @property
    def mlm_head(self) -> Callable:
        """How the masked-LM head is built from the base directory and the backbone."""
        return load_mlm_head

    def build(self, encoder_dir: Path, encoder, heads: dict, family: str, head_formats: dict[str, tuple[str, int]]):
        """(the MultiHeadModel the loop trains, its peft wrapper or None)."""
        if self.method.activation_checkpointing:
            encoder.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model = MultiHeadModel(encoder, heads, family).to(self.device)
        peft_model = attach(model, self.method, head_formats) if self.method.adapters else None
        return (inner(peft_model) if peft_model is not None else model), peft_model

    # --- checkpoints -----------------------------------------------------------------------

    def checkpointer(self, directory: Path | None, fingerprint: dict[str, Any], every: int) -> Checkpointer:
        return Checkpointer(directory, fingerprint, every)

    def best_weights(self, directory: Path) -> BestWeights:
        return BestWeights(directory, lambda m: trained_state(m, self.method))

    def resume(self, checkpointer: Checkpointer, model, optimizer) -> dict[str, Any] | None:
        """The checkpoint's loop state, with the model, optimiser and RNG already restored."""
        resumed = checkpointer.load()
        if resumed is not None:
            _load_trained_state(model, resumed["model"], self.method)
            optimizer.load_state_dict(resumed["optimizer"])
            set_rng_state(resumed["rng"])
        return resumed

    def save(self, checkpointer: Checkpointer, model, optimizer, state: dict[str, Any]) -> None:
        checkpointer.save(
            {
                **state,
                "model": trained_state(model, self.method),
                "optimizer": optimizer.state_dict(),
                "rng": rng_state(self.device),
            }
        )

    # --- steps and output ------------------------------------------------------------------

    def micro_batches(self, feats: list[dict[str, Any]], micro: int) -> MicroBatches:
        return [(feats[k : k + micro], None) for k in range(0, len(feats), micro)]

    def gathered_state(self, model) -> dict[str, Any] | None:
        """The whole model's weights for the output when they are not the model's own (None)."""
        return None

    def finish(self) -> None:
        """After the output is written."""


class ShardedRank(SingleProcess):
    """One rank of a phase trained by W processes: FSDP2 shards, DCP checkpoints, the same
    seeded global batches split over the ranks (distributed.py)."""

    distributed = True

    def __init__(self, ctx: Context, method: Method) -> None:
        self.ctx, self.method, self.device = ctx, method, ctx.device

    def load_backbone(self, encoder_dir: Path):
        # On the meta device (config, names, shapes; no weights): each rank reads only its own
        # rows in build(), so no rank ever holds the whole base.
        return empty_backbone(encoder_dir, self.method)

    @property
    def mlm_head(self) -> Callable:
        return empty_mlm_head

    def build(self, encoder_dir: Path, encoder, heads: dict, family: str, head_formats: dict[str, tuple[str, int]]):
        # every transformer block one FSDP unit, the rest (embeddings, heads) the root's; fp32
        # master weights (full) or a frozen base in the compute dtype (lora), gathered for the
        # forward in the compute dtype (sharded_loading, "Dtypes")
        built = load_sharded_model(
            encoder_dir,
            self.method,
            heads,
            self.ctx,
            encoder=encoder,
            head_formats=head_formats,
            precision=Precision(self.method.precision),
            activation_checkpointing=self.method.activation_checkpointing,
        )
        return built.model, built.peft_model

    def checkpointer(self, directory: Path | None, fingerprint: dict[str, Any], every: int) -> ShardedCheckpointer:
        return ShardedCheckpointer(directory, fingerprint, every, self.ctx)

    def best_weights(self, directory: Path) -> ShardedBestWeights:
        return ShardedBestWeights(directory, self.ctx)

    def resume(self, checkpointer: ShardedCheckpointer, model, optimizer) -> dict[str, Any] | None:
        # DCP restores the model's and optimiser's shards and each rank's RNG itself
        return checkpointer.load(model, optimizer)

    def save(self, checkpointer: ShardedCheckpointer, model, optimizer, state: dict[str, Any]) -> None:
        checkpointer.save(model, optimizer, state)

    def micro_batches(self, feats: list[dict[str, Any]], micro: int) -> MicroBatches:
        return micro_batches(feats, self.ctx, micro)

    def gathered_state(self, model) -> dict[str, Any]:
        """What the output needs, on rank 0 (``{}`` on the others; collective): the whole model
        after full fine-tuning; after LoRA only the trainable tensors, which are all that
        ``adapters.save_adapter_phase`` writes, so the frozen base (352 GB for BLOOM 176B)
        never has to fit in rank 0's host memory."""
        if not self.method.adapters:
            return full_state_dict(model, self.ctx)
        state = trainable_state_dict(model, self.ctx)
        if self.ctx.is_main:
            size = sum(t.numel() * t.element_size() for t in state.values())
            LOG.info("gathered the %d trainable tensors on rank 0 (%.1f MB)", len(state), size / 2**20)
        return state

    def finish(self) -> None:
        barrier(self.ctx)  # the output exists before any rank reports success
        shutdown(self.ctx)


def build_on(dev, model_dir: Path, family: str, method: Method, heads: dict, head_formats: dict[str, tuple[str, int]]):
    """The model one process trains, built as the recipe builds it (the method's check of
    the device, load dtypes, lineage, adapters, ``heads``) on ``dev``: what the preflight's
    steps and gpu-check run."""
    check_available(method, dev)
    runtime = SingleProcess(Context(0, 1, 0, dev, None, True), method)
    runtime.device = dev
    encoder = runtime.load_backbone(model_dir)
    if hasattr(encoder.config, "use_cache"):  # as training: no KV cache
        encoder.config.use_cache = False
    model, _ = runtime.build(model_dir, encoder, heads, family, head_formats)
    return model


def start(method: Method) -> SingleProcess:
    """The runtime this process is: a rank when torchrun or srun started it as one
    (``distributed.init_from_env``), otherwise the single process."""
    ctx = init_from_env()
    return ShardedRank(ctx, method) if ctx.distributed else SingleProcess(ctx, method)


def _load_trained_state(model, state: dict[str, Any], method: Method) -> None:
    """A checkpoint's model state back into the model: all of it, or (adapters) exactly the
    trainable tensors, every one of them."""
    if not method.adapters:
        model.load_state_dict(state)
        return
    expected = set(trained_state(model, method))
    if set(state) != expected:
        raise InputError(
            f"checkpoint holds other trainable tensors than the model "
            f"(missing {sorted(expected - set(state))[:3]}, unexpected {sorted(set(state) - expected)[:3]})"
        )
    model.load_state_dict(state, strict=False)
