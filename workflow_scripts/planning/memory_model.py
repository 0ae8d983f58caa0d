"""The GPU memory model: bytes per device of one training workload, and the smallest GPU count.

Why: a 10.7B or 176B backbone that cannot fit the GPUs its jobs ask for fails only after
the queue wait and the model download, one job at a time. The Snakefile calls
``check_fits(config)`` so such a config stops before any job, naming the key to change.

The model follows docs/protocol.md §10 ("Training state per parameter"); every constant below
is a documented estimate, not a measurement. Per device, in bytes:

- Training state of a trainable parameter: fp32 master weights 4 + fp32 gradients 4 + two
  fp32 AdamW moments 8 = 16 bytes whatever the precision (fp32, bf16, fp16): 16-bit precision
  changes activations (autocast), not state. Full fine-tuning in bf16/fp16 on one device also
  holds autocast's 16-bit copy of every weight but the embedding from the forward to its
  layer's backward (``autocast_copies``).
- Full fine-tuning: every parameter trains. LoRA: the frozen base at the compute precision's
  bytes (bf16/fp16 2, fp32 4) plus the adapter and the task heads at 16. QLoRA: the base's
  linear layers in 4-bit NF4 (0.5 bytes) plus double-quantisation constants (one 8-bit
  absmax per 64 weights and one fp32 constant per 256 of those: 0.127 bits per parameter),
  so 0.516 bytes; the token embedding in fp32 (bitsandbytes quantises linear layers only and
  peft's prepare_model_for_kbit_training upcasts every 16-bit parameter), then the adapter
  and heads at 16.
- LoRA adapter: per layer and targeted module r x (d_in + d_out), the modules being
  ``lora.target_modules`` or, without it, the family's attention projections; each name is
  sized by ``MODULE_SHAPES`` (an attention projection hidden x hidden, an MLP layer hidden x
  intermediate). Heads: one per task of the job, sized by format.
- FSDP full shard over N GPUs divides weights, gradients and optimizer state by N,
  including QLoRA's frozen 4-bit base (as FSDP+QLoRA stores it in a shardable dtype). With
  N > 1 each device also holds gathered buffers in the compute dtype (MixedPrecisionPolicy's
  param_dtype): the embedding (root module, gathered for the whole step), two transformer
  blocks (current + prefetched), and for full fine-tuning one block of gradients in the
  compute dtype and in fp32 for the reduce-scatter. QLoRA dequantises one projection at a
  time into a compute-precision copy.
- Activations are per device (micro-batch is per device; FSDP does not shard them): per
  layer and token ACTIVATION_HIDDEN x h + ACTIVATION_FFN x intermediate bytes at 16-bit
  compute, doubled for fp32, measured with torch's MemTracker under bf16 autocast and SDPA
  attention (benchmarks/memory_plan_vs_tracker.py); with activation checkpointing 2*s*b*h
  per layer (the layer inputs) plus one layer's full activations. LoRA keeps the same
  activations (the backward pass still runs through every frozen layer). Classification,
  tagging and span heads have small outputs (s*b*labels), ignored; MLM's vocabulary logits
  are not: s*b*V*(compute bytes + 4 + 8), the logits, the fp32 log-probabilities
  cross-entropy keeps and the two fp32 logit-sized gradients at the start of the backward.
- The peak: the backward pass frees activations layer by layer while it writes gradients,
  so weights + optimizer state + buffers + the larger of (activations + autocast copies)
  and gradients (``MemoryEstimate.tensors``).
- An image task's feature bank rides on the GPU with its head (multimodal/prefix.py);
  ``estimate(bank_bytes=...)`` counts it, twice under LoRA/QLoRA (peft's modules_to_save
  keeps the original head beside its trained copy). A config's plan does not know the
  bank's size (the embed step writes it), so ``plan_config`` counts none.
- Image tasks (docs/protocol.md §9) lengthen the backbone's sequence by their visual tokens:
  per image, ``vision.visual_tokens``, else 1 with pooled features, else the tower's patch
  grid at the resolution its Hub id names (224 px when it names none), plus CLIP's class
  token (SigLIP has none): 50 for ViT-B/32, 257 for ViT-L/14, 729 for SigLIP SO400M/14 at
  384 px. NLVR2 has two images per example. Image-caption retrieval reads the caption
  alone, so it adds none. Their heads add a projector of about 2 x h x h (the vision
  width taken as h) and one slot vector per image; VQA's answer vocabulary is taken as
  3,129 answers, the usual VQA v2 vocabulary.
- A fixed 2 GB per device for the CUDA context, cuBLAS workspaces and NCCL buffers, and only
  95% of the device's memory counted as usable (allocator fragmentation). Sizes are decimal
  GB; an "80 GB" card has 80 GiB (85.9 GB), so the plan errs on the safe side.

Standard library only at import time (the Snakefile imports this module through the planner).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from workflow_scripts.spec.backbone_entry import ArchitectureEntry, BackboneEntry
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.families import facts as family_facts

GB = 1e9
METHOD_NAMES = {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA"}


@dataclass(frozen=True)
class TrainableBytes:
    """Bytes of training state per trainable parameter, split the way the estimate reports it."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


# Full fine-tuning keeps fp32 master weights whatever the checkpoint's dtype: fp32 weights,
# fp32 gradients and two fp32 AdamW moments, 16 bytes; bf16/fp16 change the activations
# (autocast), not the state.
MASTER = TrainableBytes(4, 4, 4 + 4)
TRAINABLE_BYTES = {"fp32": MASTER, "bf16": MASTER, "fp16": MASTER}
COMPUTE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# What peft's prepare_model_for_kbit_training leaves the unquantised weights of a QLoRA base
# in (it upcasts every 16-bit parameter: embeddings, norms, biases).
UPCAST_BYTES = 4
NF4_BITS = 4.0
# Double quantisation (Dettmers et al. 2023): an 8-bit absmax per block of 64 weights, and
# one fp32 constant per 256 such blocks.
NF4_CONSTANT_BITS = 8 / 64 + 32 / (64 * 256)
NF4_BYTES = (NF4_BITS + NF4_CONSTANT_BITS) / 8
# Cross-entropy over MLM logits (heads.task_logits: ``logits.float()``) keeps fp32
# log-probabilities for its backward pass, whose start holds two more fp32 logit-sized
# tensors (the gradient of the log-softmax and of its input).
LOSS_BYTES = 4
LOSS_BACKWARD_BYTES = 8
# Activations a transformer block keeps for its backward pass, per token, in bytes at 16-bit
# compute: ACTIVATION_HIDDEN x hidden + ACTIVATION_FFN x intermediate. The encoder's is what an
# H200 kept (gpu-check, XLM-R large trained in full under bf16 autocast at 128 x 32 and 384 x 16
# tokens: 45.3 and 44.6 KB per token and block, docs/benchmarks.md): CUDA's SDPA kernels keep
# no attention scores and regenerate attention dropout in the backward pass. torch's MemTracker
# on fake CPU tensors (benchmarks/memory_plan_vs_tracker.py) agrees once attention dropout is
# off; with it, the CPU's SDPA keeps an s x s dropout mask per head that CUDA does not.
# Llama-2-7B's blocks keep 56.4 bytes per token and hidden unit (pre-RMSNorm, gated MLP, no
# dropout; the tracker, and within 10% of the H200's LoRA and full runs); the FFN share is
# the MLP's saved bf16 tensors (4 per intermediate unit with GELU, 8 gated). seq2seq_encoder
# (T5: RMSNorm, gated MLP) takes the decoder's constants, unmeasured.
ACTIVATION_HIDDEN = {"encoder": 27.9, "decoder": 34.9, "seq2seq_encoder": 34.9}
ACTIVATION_FFN = {"encoder": 4.0, "decoder": 8.0, "seq2seq_encoder": 8.0}
RESERVE_BYTES = 2.0 * GB
USABLE_FRACTION = 0.95
MAX_GPUS = 1024

# The module names `lora.target_modules` may give (peft matches each as a suffix of a layer's
# name, once per transformer block), by what an adapter on them adds per block: on a d_in x
# d_out layer rank x (d_in + d_out) parameters, written as rank x (a x hidden + b x
# intermediate) -> (a, b). The one place the planner learns a module's shape: the families'
# defaults (spec/families.py lora_targets) and the MLP layers of the backbones they load.
ATTENTION = (2, 0)  # a hidden -> hidden projection
FUSED_QKV = (4, 0)  # hidden -> 3 x hidden (BLOOM's query_key_value)
MLP = (1, 1)  # hidden -> intermediate, or back
MODULE_SHAPES: dict[str, tuple[int, int]] = {
    # encoder: XLM-R, mBERT, RemBERT; DeBERTa-v2/v3 names its q, k, v projections *_proj
    "query": ATTENTION,
    "key": ATTENTION,
    "value": ATTENTION,
    "attention.output.dense": ATTENTION,
    "query_proj": ATTENTION,
    "key_proj": ATTENTION,
    "value_proj": ATTENTION,
    "intermediate.dense": MLP,
    "output.dense": (3, 1),  # also a suffix of attention.output.dense: both layers of a block
    # seq2seq_encoder: mT5, mT0, Aya-101 (gated MLP wi_0, wi_1; T5 v1.0 wi)
    "q": ATTENTION,
    "k": ATTENTION,
    "v": ATTENTION,
    "o": ATTENTION,
    "wi": MLP,
    "wi_0": MLP,
    "wi_1": MLP,
    "wo": MLP,
    # decoder: Llama, Qwen, Gemma, Cohere (gated MLP; grouped-query k and v counted at full
    # width, on the safe side); BLOOM
    "q_proj": ATTENTION,
    "k_proj": ATTENTION,
    "v_proj": ATTENTION,
    "o_proj": ATTENTION,
    "gate_proj": MLP,
    "up_proj": MLP,
    "down_proj": MLP,
    "query_key_value": FUSED_QKV,
    "self_attention.dense": ATTENTION,
    "dense_h_to_4h": MLP,
    "dense_4h_to_h": MLP,
}
# A backbone without `gpus` (or without per_node, memory_gb, which the schema leaves unset)
# is planned on one 80 GB GPU.
DEFAULT_GPUS_PER_NODE = 1
DEFAULT_MEMORY_GB = 80.0


class PlanError(ValueError):
    """A backbone that does not fit the GPUs it asks for, or an unusable backbone entry;
    the message names the config key."""


# The shape numbers activations and adapters depend on: the entry's ``architecture``.
Architecture = ArchitectureEntry


@dataclass(frozen=True)
class Backbone:
    """One ``backbones.<name>`` entry that the planner can size: its record, with the LoRA
    modules it adapts resolved (the configured ones, or the family's defaults)."""

    name: str
    entry: BackboneEntry
    target_modules: tuple[str, ...] = ()  # what LoRA adapts (the family's attention projections)

    @property
    def key(self) -> str:
        return f"backbones.{self.name}"

    @property
    def family(self) -> str:
        return self.entry.family

    @property
    def method(self) -> str:
        return self.entry.method

    @property
    def precision(self) -> str:
        return self.entry.precision

    @property
    def parameters(self) -> float:
        assert self.entry.parameters is not None  # skip_reason said so before parsing
        return self.entry.parameters

    @property
    def architecture(self) -> ArchitectureEntry:
        assert self.entry.architecture is not None
        return self.entry.architecture

    @property
    def lora_rank(self) -> int:
        return self.entry.lora.rank

    @property
    def activation_checkpointing(self) -> bool:
        return self.entry.activation_checkpointing

    @property
    def gpus(self) -> int:
        """GPUs a training job asks for (absent: one)."""
        request = self.entry.gpu_request
        return (request.per_node or DEFAULT_GPUS_PER_NODE) * request.nodes

    @property
    def memory_gb(self) -> float:
        return self.entry.gpu_request.memory_gb or DEFAULT_MEMORY_GB

    def with_checkpointing(self, on: bool) -> Backbone:
        return replace(self, entry=replace(self.entry, activation_checkpointing=on))


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device of one training step at a GPU count."""

    gpus: int
    trainable_parameters: float
    weights: float
    gradients: float
    optimizer: float
    buffers: float
    activations: float
    reserve: float
    autocast_copies: float = 0.0

    @property
    def state(self) -> float:
        return self.weights + self.gradients + self.optimizer

    @property
    def tensors(self) -> float:
        """The peak of tensor memory: the backward pass frees activations (and autocast's
        copies) layer by layer as it writes the gradients, so the two peak at opposite ends
        of it and only the larger counts."""
        return (
            self.weights + self.optimizer + self.buffers + max(self.activations + self.autocast_copies, self.gradients)
        )

    @property
    def unsharded(self) -> float:
        """What more GPUs do not shrink."""
        return self.buffers + self.activations + self.autocast_copies + self.reserve

    @property
    def total(self) -> float:
        return self.tensors + self.reserve


@dataclass(frozen=True)
class Workload:
    """One task's device step in a phase: each training step samples a single task
    (train.py's sampler, MLM included), so a phase's peak is its most demanding task."""

    task: str
    seq_len: int
    micro_batch: int  # sequences per device step: examples x choices
    with_mlm_logits: bool = False
    batch_size: int = 0  # the task's examples per optimizer step
    choices: int = 1  # sequences per example

    def capped(self, cap: int) -> Workload:
        """The same task in micro-batches of at most ``cap`` examples."""
        return replace(self, micro_batch=min(cap, self.batch_size) * self.choices)


# ----- reading a backbone entry ---------------------------------------------------------


def skip_reason(entry: BackboneEntry | Mapping[str, Any]) -> str | None:
    """Why a backbone cannot be planned (e.g. the demo's encoder, built locally): a backbone
    whose size is unknown is not an error, the check just cannot say anything about it."""
    if isinstance(entry, BackboneEntry):
        parameters, architecture = entry.parameters, entry.architecture
    else:  # a mapping nobody parsed yet (the planner's CLI, the reference table)
        parameters, architecture = entry.get("parameters"), entry.get("architecture")
    if parameters is None:
        return "no `parameters` count"
    if architecture is None:
        return "no `architecture`"
    return None


def _target_modules(entry: BackboneEntry, where: str) -> tuple[str, ...]:
    """The modules LoRA adapts: ``lora.target_modules``, or the family's own defaults (those
    of its usual architecture: a test checks that DeBERTa's and BLOOM's are no larger)."""
    configured = entry.lora.target_modules or ()
    for i, module in enumerate(configured):
        if module not in MODULE_SHAPES:
            raise PlanError(
                f"config key {where}.lora.target_modules[{i}]: the memory planner cannot size LoRA "
                f"on {module!r}; it knows {', '.join(MODULE_SHAPES)} (or leave out {where}.parameters "
                "to skip the memory check)"
            )
    return configured or family_facts(entry.family).lora_targets  # no model config: the usual architecture's


def parse_backbone(name: str, entry: BackboneEntry | Mapping[str, Any]) -> Backbone:
    """The plannable backbone of one ``backbones.<name>`` entry (call ``skip_reason`` first),
    naming the offending key so a bad entry stops the workflow with something to fix."""
    where = f"backbones.{name}"
    if not isinstance(entry, BackboneEntry):  # a mapping may carry its name (``_as_backbone``)
        try:
            entry = BackboneEntry.parse({k: v for k, v in entry.items() if k != "name"}, where)
        except InputError as err:
            raise PlanError(f"config key {err}") from None
    if entry.architecture is None or entry.parameters is None:
        raise PlanError(f"config key {where}: cannot estimate memory: {skip_reason(entry)}")
    # full fine-tuning adapts nothing: its lora block is never read by training either
    modules = () if entry.method == "full" else _target_modules(entry, where)
    return Backbone(name=name, entry=entry, target_modules=modules)


def _as_backbone(backbone: Backbone | Mapping[str, Any]) -> Backbone:
    if isinstance(backbone, Backbone):
        return backbone
    name = str(backbone.get("name", "backbone"))
    reason = skip_reason(backbone)
    if reason:
        raise PlanError(f"config key backbones.{name}: cannot estimate memory: {reason}")
    return parse_backbone(name, backbone)


# ----- parameter counts -----------------------------------------------------------------


def embedding_parameters(arch: Architecture) -> float:
    """The token embedding: kept unquantised by QLoRA and gathered whole by FSDP's root."""
    return float((arch.vocab_size or 0) * arch.hidden_size)


def block_parameters(bb: Backbone) -> float:
    """One transformer block's parameters: what FSDP gathers at a time. Taken from the total
    rather than from a per-family formula, so gated MLPs and fused projections count right."""
    return max(bb.parameters - embedding_parameters(bb.architecture), 0.0) / bb.architecture.num_layers


def lora_adapter_parameters(bb: Backbone) -> float:
    """Trainable LoRA parameters: A (d_in x r) and B (r x d_out) per targeted module and block."""
    h, f, r = bb.architecture.hidden_size, bb.architecture.ffn_size, bb.lora_rank
    per_layer = sum(r * (a * h + b * f) for a, b in (MODULE_SHAPES[m] for m in bb.target_modules))
    return float(per_layer * bb.architecture.num_layers)


def default_head_parameters(arch: Architecture) -> float:
    """One three-way classification head (NLI), the usual single-task job."""
    return float(arch.hidden_size**2 + arch.hidden_size + 3 * (arch.hidden_size + 1))


def trainable_parameters(bb: Backbone, heads: float) -> float:
    if bb.method == "full":
        return bb.parameters + heads
    return lora_adapter_parameters(bb) + heads


def frozen_base_bytes(bb: Backbone) -> float:
    """Bytes of the frozen base under LoRA/QLoRA (0 for full fine-tuning)."""
    compute = COMPUTE_BYTES[bb.precision]
    if bb.method == "lora":
        return bb.parameters * compute
    if bb.method == "qlora":
        embedding = embedding_parameters(bb.architecture)
        return max(bb.parameters - embedding, 0.0) * NF4_BYTES + embedding * UPCAST_BYTES
    return 0.0


# What a prompted (inference) job holds beyond its weights: the KV cache and activations of a
# batch of prompts, a stated allowance rather than a measurement (docs/prompted.md).
INFERENCE_OVERHEAD = 1.2


def inference_weight_bytes(bb: Backbone) -> float:
    """The weights an inference job of the backbone loads: the base as its method loads it
    (``adapters.load_kwargs``: fp32 master weights for full fine-tuning, the compute dtype
    under LoRA, NF4 under QLoRA), the phase's adapters merged or stacked on it."""
    if bb.method == "full":
        return bb.parameters * COMPUTE_BYTES["fp32"]
    return frozen_base_bytes(bb)


def inference_gpus(backbone: Backbone | Mapping[str, Any]) -> int:
    """The GPUs of the backbone's ``memory_gb`` that hold it for inference (one process, the
    model split layer-wise over them)."""
    bb = _as_backbone(backbone)
    return max(1, math.ceil(inference_weight_bytes(bb) * INFERENCE_OVERHEAD / usable_bytes(bb.memory_gb)))


# ----- the estimate ---------------------------------------------------------------------


def state_bytes(bb: Backbone, heads: float) -> TrainableBytes:
    """Weights, gradients and optimizer state of the whole model, before sharding."""
    per = TRAINABLE_BYTES[bb.precision]
    n = trainable_parameters(bb, heads)
    return TrainableBytes(
        weights=frozen_base_bytes(bb) + n * per.weights, gradients=n * per.gradients, optimizer=n * per.optimizer
    )


def buffer_bytes(bb: Backbone, gpus: int, bank_bytes: float = 0.0) -> float:
    """Unsharded copies a device holds besides its shard (see the module docstring)."""
    arch, compute = bb.architecture, COMPUTE_BYTES[bb.precision]
    # peft's modules_to_save keeps the head it wraps beside the trained copy: two banks
    total = bank_bytes * (1 if bb.method == "full" else 2)
    if bb.method == "qlora":
        total += arch.hidden_size * max(arch.ffn_size, arch.hidden_size) * compute
    if gpus > 1:  # FSDP2 gathers blocks in the compute dtype (MixedPrecisionPolicy param_dtype)
        stored = NF4_BYTES if bb.method == "qlora" else compute
        total += embedding_parameters(arch) * compute + 2 * block_parameters(bb) * stored
        if bb.method == "full":  # one block's gradients, and their fp32 copy for the reduce-scatter
            total += block_parameters(bb) * (compute + 4)
    return total


def autocast_copy_bytes(bb: Backbone, gpus: int) -> float:
    """16-bit copies of the fp32 weights that autocast makes for the matmuls of full
    fine-tuning on one device, kept from the forward to each layer's backward (the embedding
    is looked up uncast). Sharded, FSDP gathers the 16-bit weights itself."""
    if bb.method != "full" or gpus > 1 or COMPUTE_BYTES[bb.precision] == 4:
        return 0.0
    return (bb.parameters - embedding_parameters(bb.architecture)) * COMPUTE_BYTES[bb.precision]


def activation_constants(family: str) -> tuple[float, float]:
    """(bytes per hidden unit, bytes per intermediate unit) a block keeps per token. A family
    without its own measurement takes the largest measured ones: a plan that errs towards more
    memory (docs/guides/new_backbone_family.md says how to measure a family's own)."""
    if family in ACTIVATION_HIDDEN:
        return ACTIVATION_HIDDEN[family], ACTIVATION_FFN[family]
    return max(ACTIVATION_HIDDEN.values()), max(ACTIVATION_FFN.values())


def activation_bytes(bb: Backbone, seq_len: int, micro_batch: int, with_mlm_logits: bool = False) -> float:
    """Activations kept for the backward pass on one device (ACTIVATION_HIDDEN/FFN)."""
    arch = bb.architecture
    s, b, h, f = seq_len, micro_batch, arch.hidden_size, arch.ffn_size
    scale = COMPUTE_BYTES[bb.precision] / 2  # the constants count 16-bit activations
    per_hidden, per_ffn = activation_constants(bb.family)
    one_layer = s * b * (per_hidden * h + per_ffn * f) * scale
    if bb.activation_checkpointing:
        layers = arch.num_layers * 2 * s * b * h * scale + one_layer
    else:
        layers = arch.num_layers * one_layer
    logits = 0.0
    if with_mlm_logits:
        if not arch.vocab_size:
            raise PlanError(f"config key {bb.key}.architecture.vocab_size: needed for the MLM logits")
        logits = s * b * arch.vocab_size * (COMPUTE_BYTES[bb.precision] + LOSS_BYTES + LOSS_BACKWARD_BYTES)
    return layers + logits


def estimate(
    backbone: Backbone | Mapping[str, Any],
    seq_len: int,
    micro_batch: int,
    gpus: int,
    with_mlm_logits: bool = False,
    head_parameters: float | None = None,
    bank_bytes: float = 0.0,
) -> MemoryEstimate:
    """Bytes per device when the backbone trains on ``gpus`` devices (FSDP full shard when
    more than one). ``head_parameters`` defaults to one classification head; ``bank_bytes``:
    an image task's feature bank (multimodal/bank.py), which rides on the GPU with its head."""
    bb = _as_backbone(backbone)
    if gpus < 1 or seq_len < 1 or micro_batch < 1:
        raise ValueError(f"gpus, seq_len and micro_batch must be >= 1, got {gpus}, {seq_len}, {micro_batch}")
    heads = default_head_parameters(bb.architecture) if head_parameters is None else head_parameters
    state = state_bytes(bb, heads)
    return MemoryEstimate(
        gpus=gpus,
        trainable_parameters=trainable_parameters(bb, heads),
        weights=state.weights / gpus,
        gradients=state.gradients / gpus,
        optimizer=state.optimizer / gpus,
        buffers=buffer_bytes(bb, gpus, bank_bytes),
        activations=activation_bytes(bb, seq_len, micro_batch, with_mlm_logits),
        autocast_copies=autocast_copy_bytes(bb, gpus),
        reserve=RESERVE_BYTES,
    )


def usable_bytes(memory_gb: float) -> float:
    return memory_gb * GB * USABLE_FRACTION


def min_gpus(
    backbone: Backbone | Mapping[str, Any],
    seq_len: int,
    micro_batch: int,
    gpu_memory_gb: float,
    with_mlm_logits: bool = False,
    head_parameters: float | None = None,
    max_gpus: int = MAX_GPUS,
) -> int | None:
    """The smallest GPU count whose per-device estimate fits, or None when no count up to
    ``max_gpus`` does (what is not sharded, activations above all, exceeds a device). QLoRA
    runs on one GPU only: the engine shards bf16/fp32 rows (sharded_loading), not 4-bit blocks."""
    bb = _as_backbone(backbone)
    capacity = usable_bytes(gpu_memory_gb)
    if bb.method == "qlora":
        max_gpus = 1
    for gpus in range(1, max_gpus + 1):
        est = estimate(bb, seq_len, micro_batch, gpus, with_mlm_logits, head_parameters)
        if est.total <= capacity:
            return gpus
        if gpus > 1 and est.unsharded >= capacity:
            return None  # from 2 GPUs on only the shard shrinks; the rest already overflows
    return None
