"""GPU memory planner: bytes per device of a training phase, and the smallest GPU count.

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

A phase's peak is its most demanding task (each training step samples one task, MLM
included), planned at that task's ``max_length`` and min(max_micro_batch, batch_size)
examples, each multiple-choice example counted as one sequence per choice; the heads are
those of the phase's largest job (a multitask config trains all its heads at once).

CLI: ``python -m workflow_scripts.workflow.memory_plan CONFIG.yaml [--gpu-memory-gb 80]`` prints a
Markdown table per backbone and phase and exits 1 if a backbone does not fit the GPUs it
asks for; ``--reference`` prints the README's plan of the reference backbones.
Standard library only at import time (the Snakefile imports this module).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from workflow_scripts.spec.families import facts as family_facts
from workflow_scripts.spec.formats import head_kind
from workflow_scripts.spec.schema import (
    DEFAULT_ACTIVATION_CHECKPOINTING,
    DEFAULT_METHOD,
    DEFAULT_PRECISION,
    FAMILIES,
    LORA_DEFAULTS,
    LORA_KEYS,
    METHODS,
    PRECISIONS,
    default,
    lora_settings,
)
from workflow_scripts.spec.tasks import (
    CLASSIFICATION,
    MLM,
    MULTIPLE_CHOICE,
    RANKING,
    SPAN,
    TAGGING,
    TASKS,
    VISUAL_ANSWER,
    VISUAL_CLASSIFICATION,
    VISUAL_FORMATS,
    VISUAL_RETRIEVAL,
)

GB = 1e9
# training.<phase>.max_micro_batch: auto (fitting_micro_batch)
AUTO_MICRO_BATCH = "auto"
PHASES = ("intermediate", "target")
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
# CCG's supertag set comes from the user's files; an upper guess for its tagging head.
UNKNOWN_TAGSET = 1024
# A classification task outside the catalogue: its label count is not known here.
UNKNOWN_CLASSES = 8
# VQA v2's answer vocabulary as it is usually built (answers given 9 or more times).
VQA_ANSWERS = 3129
# The resolution of a vision tower whose Hub id names none.
DEFAULT_IMAGE_SIZE = 224
# A backbone without `gpus` (or without per_node, memory_gb, which the schema leaves unset)
# is planned on one 80 GB GPU.
DEFAULT_GPUS = {"per_node": 1, "nodes": default("gpus", "nodes", definition="backbone"), "memory_gb": 80}


class PlanError(ValueError):
    """A backbone that does not fit the GPUs it asks for, or an unusable backbone entry;
    the message names the config key."""


@dataclass(frozen=True)
class Architecture:
    """The shape numbers activations and adapters depend on."""

    hidden_size: int
    num_layers: int
    num_attention_heads: int
    vocab_size: int = 0
    intermediate_size: int = 0

    @property
    def ffn_size(self) -> int:
        # A missing intermediate size: the 4h of BERT-type and GPT-type blocks.
        return self.intermediate_size or 4 * self.hidden_size


@dataclass(frozen=True)
class Backbone:
    """One ``backbones.<name>`` entry, validated."""

    name: str
    family: str
    method: str
    precision: str
    parameters: float
    architecture: Architecture
    lora_rank: int = LORA_DEFAULTS["rank"]
    target_modules: tuple[str, ...] = ()  # what LoRA adapts (the family's attention projections)
    activation_checkpointing: bool = DEFAULT_ACTIVATION_CHECKPOINTING
    gpus: int = 1
    memory_gb: float = 80.0

    @property
    def key(self) -> str:
        return f"backbones.{self.name}"


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


@dataclass(frozen=True)
class PhaseShape:
    """A phase's workloads, and each job's tasks (the heads of one job train together).
    ``auto``: the phase's ``max_micro_batch`` is ``auto``, each backbone's own
    (``fitting_micro_batch``); the workloads then hold whole batches until capped."""

    workloads: tuple[Workload, ...]
    jobs: tuple[tuple[str, ...], ...]
    auto: bool = False

    def capped(self, cap: int) -> PhaseShape:
        return replace(self, workloads=tuple(w.capped(cap) for w in self.workloads), auto=False)


@dataclass(frozen=True)
class PhasePlan:
    """One row of the plan: a backbone in a phase (``skipped`` says why there is no estimate)."""

    backbone: str
    phase: str
    method: str = ""
    precision: str = ""
    parameters: float | None = None
    task: str | None = None
    seq_len: int | None = None
    micro_batch: int | None = None
    with_mlm_logits: bool = False
    gpus_asked: int = 0
    memory_gb: float = 0.0
    estimate: MemoryEstimate | None = None
    min_gpus: int | None = None
    min_gpus_memory_gb: float = 0.0
    fits: bool = True
    skipped: str | None = None


# ----- reading a backbone entry ---------------------------------------------------------


def skip_reason(entry: Mapping[str, Any]) -> str | None:
    """Why a backbone cannot be planned (e.g. the demo's encoder, built locally): a backbone
    whose size is unknown is not an error, the check just cannot say anything about it."""
    if entry.get("parameters") is None:
        return "no `parameters` count"
    if not isinstance(entry.get("architecture"), Mapping):
        return "no `architecture`"
    return None


def _choice(entry: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: str | None, where: str) -> str:
    value = entry.get(key, default)
    if value not in allowed:
        raise PlanError(f"config key {where}.{key}: {value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _positive(value: Any, key: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError(f"config key {key}: {value!r} is not a number") from None
    if not number > 0 or math.isinf(number):
        raise PlanError(f"config key {key}: {value!r} must be a positive number")
    return number


def _architecture(arch: Mapping[str, Any], where: str) -> Architecture:
    def get(key: str, required: bool = True) -> int:
        if arch.get(key) is not None:
            return int(_positive(arch[key], f"{where}.{key}"))
        if required:
            raise PlanError(f"config key {where}.{key}: missing (needed for the activation estimate)")
        return 0

    return Architecture(
        hidden_size=get("hidden_size"),
        num_layers=get("num_layers"),
        num_attention_heads=get("num_attention_heads"),
        vocab_size=get("vocab_size", required=False),
        intermediate_size=get("intermediate_size", required=False),
    )


def _target_modules(family: str, lora: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The modules LoRA adapts: ``lora.target_modules``, or the family's own defaults (those
    of its usual architecture: a test checks that DeBERTa's and BLOOM's are no larger)."""
    configured = tuple(lora.get("target_modules") or ())
    for i, module in enumerate(configured):
        if module not in MODULE_SHAPES:
            raise PlanError(
                f"config key {where}.lora.target_modules[{i}]: the memory planner cannot size LoRA "
                f"on {module!r}; it knows {', '.join(MODULE_SHAPES)} (or leave out {where}.parameters "
                "to skip the memory check)"
            )
    return configured or family_facts(family).lora_targets  # no model config: the usual architecture's


def _gpus(entry: Mapping[str, Any], where: str) -> tuple[int, float]:
    """GPUs a backbone's training jobs ask for (count, memory per GPU); absent: one 80 GB GPU."""
    gpus = entry.get("gpus") or {}
    if not isinstance(gpus, Mapping):
        raise PlanError(f"config key {where}.gpus: expected a mapping with per_node, nodes, memory_gb")
    spec = {**DEFAULT_GPUS, **gpus}
    per_node = int(_positive(spec["per_node"], f"{where}.gpus.per_node"))
    count = per_node * int(_positive(spec["nodes"], f"{where}.gpus.nodes"))
    return count, _positive(spec["memory_gb"], f"{where}.gpus.memory_gb")


def parse_backbone(name: str, entry: Mapping[str, Any]) -> Backbone:
    """Validate one ``backbones.<name>`` entry (call ``skip_reason`` first), naming the
    offending key so a bad entry stops the workflow with something to fix."""
    where = f"backbones.{name}"
    family = _choice(entry, "family", FAMILIES, None, where)  # required: no default
    method = _choice(entry, "method", METHODS, DEFAULT_METHOD, where)
    if not isinstance(entry.get("lora") or {}, Mapping):
        raise PlanError(f"config key {where}.lora: expected a mapping of {', '.join(LORA_KEYS)}")
    lora = lora_settings(entry)
    count, memory = _gpus(entry, where)
    return Backbone(
        name=name,
        family=family,
        method=method,
        precision=_choice(entry, "precision", PRECISIONS, DEFAULT_PRECISION, where),
        parameters=_positive(entry["parameters"], f"{where}.parameters"),
        architecture=_architecture(entry["architecture"], f"{where}.architecture"),
        lora_rank=int(_positive(lora["rank"], f"{where}.lora.rank")),
        # full fine-tuning adapts nothing: its lora block is never read by training either
        target_modules=() if method == "full" else _target_modules(family, lora, where),
        activation_checkpointing=bool(entry.get("activation_checkpointing", DEFAULT_ACTIVATION_CHECKPOINTING)),
        gpus=count,
        memory_gb=memory,
    )


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
    return float(arch.vocab_size * arch.hidden_size)


def block_parameters(bb: Backbone) -> float:
    """One transformer block's parameters: what FSDP gathers at a time. Taken from the total
    rather than from a per-family formula, so gated MLPs and fused projections count right."""
    return max(bb.parameters - embedding_parameters(bb.architecture), 0.0) / bb.architecture.num_layers


def lora_adapter_parameters(bb: Backbone) -> float:
    """Trainable LoRA parameters: A (d_in x r) and B (r x d_out) per targeted module and block."""
    h, f, r = bb.architecture.hidden_size, bb.architecture.ffn_size, bb.lora_rank
    per_layer = sum(r * (a * h + b * f) for a, b in (MODULE_SHAPES[m] for m in bb.target_modules))
    return float(per_layer * bb.architecture.num_layers)


def task_head_parameters(task: str, arch: Architecture) -> float:
    """A task head's parameters, by the format models/heads.py builds for it: classification and
    multiple choice a dense h x h layer before the output, tagging and span one projection,
    MLM a dense layer and an output bias (its decoder is tied to the embedding)."""
    h = arch.hidden_size
    spec = TASKS.get(task)
    fmt = head_kind(spec.format) if spec else CLASSIFICATION  # a new format sized as the head it names
    labels = spec.num_labels if spec and spec.num_labels else 0
    if fmt == MULTIPLE_CHOICE:
        return float(h * h + h + h + 1)
    if fmt == SPAN:
        return float(2 * (h + 1))
    if fmt == RANKING:  # dense h x h and the logit scale (dual_encoder.RankingHead)
        return float(h * h + h + 1)
    if fmt == TAGGING:
        return float((h + 1) * (labels or UNKNOWN_TAGSET))
    if fmt == MLM:
        return float(h * h + 3 * h + arch.vocab_size)
    if fmt in VISUAL_FORMATS:  # projector (vision width taken as h), slots, and the pooled output's head
        projector = 2 * h * h + 2 * h + spec.images_per_example * h  # (a visual format has its spec)
        if fmt not in (VISUAL_CLASSIFICATION, VISUAL_ANSWER):  # retrieval: the caption's projection
            return float(projector + h * h + h)
        answers = labels or (VQA_ANSWERS if fmt == VISUAL_ANSWER else UNKNOWN_CLASSES)
        return float(projector + h * h + h + (h + 1) * answers)
    return float(h * h + h + (h + 1) * (labels or UNKNOWN_CLASSES))


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


# ----- phases of a config ---------------------------------------------------------------


def _is_trained(task: str) -> bool:
    """Retrieval and mining targets are scored with the encoder directly, never trained."""
    spec = TASKS.get(task)
    return not (spec and spec.is_retrieval)


def phase_jobs(config: Mapping[str, Any], phase: str) -> list[tuple[str, ...]]:
    """The task sets trained together in one job of the phase: an intermediate config's tasks
    (plus ``mlm`` when it has ``mlm: true``), or one target each. A config without
    ``intermediate``/``targets`` lists counts every task of ``tasks`` as a job of its own."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    tasks = config.get("tasks") or {}
    if phase == "intermediate" and isinstance(config.get("intermediate"), Mapping):
        jobs = []
        for entry in config["intermediate"].values():
            entry = entry or {}
            names = tuple(entry.get("tasks") or ()) + (("mlm",) if entry.get("mlm") else ())
            if names:
                jobs.append(names)
        return jobs
    if phase == "target" and config.get("targets") is not None:
        names = list(config["targets"])
        settings = (config.get("transfer") or {}).get("settings") or {}
        for setting in settings.values():
            names += [t for t in (setting or {}).get("targets") or () if t not in names]
        return [(t,) for t in names if _is_trained(t)]
    return [(t,) for t in tasks if _is_trained(t) and not (TASKS.get(t) and TASKS[t].format == MLM)]


def visual_tokens(config: Mapping[str, Any]) -> int:
    """Tokens one image adds to a text's sequence in the backbone (multimodal/prefix.py)."""
    vision = config.get("vision") or {}
    if vision.get("visual_tokens"):
        return int(vision["visual_tokens"])
    if vision.get("features", "patches") == "pooled":
        return 1
    if (config.get("models") or {}).get("source") == "demo":
        demo = vision.get("demo") or {}
        image_size = int(demo.get("image_size", default("vision", "demo", "image_size")))
        return (image_size // int(demo.get("patch_size", default("vision", "demo", "patch_size")))) ** 2 + 1
    hub_id = vision.get("hub_id", default("vision", "hub_id"))
    found = re.search(r"patch(\d+)(?:-(\d+))?", hub_id)
    if not found:
        raise PlanError(
            f"config key vision.visual_tokens: the number of tokens {hub_id} gives one image cannot be "
            "read from its Hub id (no patch size in it); set it"
        )
    patch, size = int(found.group(1)), int(found.group(2) or DEFAULT_IMAGE_SIZE)
    return (size // patch) ** 2 + (0 if "siglip" in hub_id.lower() else 1)


def phase_shape(config: Mapping[str, Any], phase: str, seq_len: int | None = None) -> PhaseShape | None:
    """Each trained task's ``max_length`` (or ``seq_len`` for all; an image task's visual
    tokens added) and micro-batch per device, min(max_micro_batch, task batch_size) x
    choices; None if nothing trains in the phase."""
    jobs = phase_jobs(config, phase)
    if not jobs:
        return None
    tasks = config.get("tasks") or {}
    cap = phase_cap(config, phase)
    batch_size = default("batch_size", definition="task")
    workloads = []
    for name in sorted({t for job in jobs for t in job}):
        length, choices = task_sequence(config, name, seq_len)
        spec = TASKS.get(name)
        batch = int((tasks.get(name) or {}).get("batch_size", batch_size))
        workloads.append(
            Workload(
                task=name,
                seq_len=length,
                micro_batch=batch * choices,
                with_mlm_logits=spec is not None and head_kind(spec.format) == MLM,
                batch_size=batch,
                choices=choices,
            )
        )
    shape = PhaseShape(workloads=tuple(workloads), jobs=tuple(jobs), auto=cap == AUTO_MICRO_BATCH)
    return shape if shape.auto else shape.capped(int(cap))


def phase_cap(config: Mapping[str, Any], phase: str) -> int | str:
    """A phase's ``max_micro_batch`` as the config gives it (a number or ``auto``)."""
    phase_cfg = (config.get("training") or {}).get(phase) or {}
    return phase_cfg.get("max_micro_batch", default("max_micro_batch", definition="phase"))


def fitting_micro_batch(bb: Backbone, shape: PhaseShape) -> int:
    """``max_micro_batch: auto`` on this backbone: the largest micro-batch (examples, at most
    the phase's largest batch) at which every task's step fits the backbone's GPUs, so that a
    step is one forward and backward wherever the card holds the whole batch; 1 where even
    that does not fit (the plan then says so)."""
    heads = job_head_parameters(shape, bb.architecture)
    usable = usable_bytes(bb.memory_gb)

    def fits(cap: int) -> bool:
        return all(
            estimate(bb, w.seq_len, w.micro_batch, bb.gpus, w.with_mlm_logits, heads).total <= usable
            for w in shape.capped(cap).workloads
        )

    low, high = 1, max(w.batch_size for w in shape.workloads)
    while low < high:  # the largest cap that fits (memory grows with the cap)
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def resolved_micro_batch(config: Mapping[str, Any], backbone: str, phase: str) -> int:
    """A phase's ``max_micro_batch`` for one backbone: the config's number, or for ``auto``
    what ``fitting_micro_batch`` finds; a backbone the planner cannot size (no parameter
    count: the demo's) takes the schema's default cap."""
    cap = phase_cap(config, phase)
    if cap != AUTO_MICRO_BATCH:
        return int(cap)
    entry = config["backbones"][backbone]
    shape = phase_shape(backbone_part(config, entry), phase)
    if shape is None or skip_reason(entry) is not None:
        return int(default("max_micro_batch", definition="phase"))
    return fitting_micro_batch(parse_backbone(backbone, entry), shape)


def task_sequence(config: Mapping[str, Any], name: str, seq_len: int | None = None) -> tuple[int, int]:
    """(tokens per sequence, sequences per example) of a task as training batches it: its
    ``max_length`` (or ``seq_len``) with an image task's visual tokens added, and its choices
    (a ranking example: a query and its gold candidate). The cost model counts the same."""
    entry = (config.get("tasks") or {}).get(name) or {}
    spec = TASKS.get(name)
    choices = spec.num_choices if spec and spec.num_choices else 1
    kind = head_kind(spec.format) if spec is not None else None  # spec/formats/: TaskFormat.head
    if kind == RANKING:
        choices = 2
    visual = 0
    if kind in (VISUAL_CLASSIFICATION, VISUAL_ANSWER):  # the images' tokens join the text
        visual = spec.images_per_example * visual_tokens(config)
    return (seq_len or int(entry.get("max_length", default("max_length", definition="task")))) + visual, choices


def peak_workload(bb: Backbone, shape: PhaseShape) -> Workload:
    """The task whose activations are largest on this backbone (s x b, MLM's vocabulary logits)."""
    return max(shape.workloads, key=lambda w: activation_bytes(bb, w.seq_len, w.micro_batch, w.with_mlm_logits))


def job_head_parameters(shape: PhaseShape, arch: Architecture) -> float:
    """The heads of the phase's largest job: a multitask job trains all its heads at once."""
    return max(sum(task_head_parameters(t, arch) for t in job) for job in shape.jobs)


def plan_phase(bb: Backbone, phase: str, shape: PhaseShape, gpu_memory_gb: float | None = None) -> PhasePlan:
    """The phase's peak on the GPUs asked, and the smallest count on ``gpu_memory_gb`` GPUs
    (default: the backbone's own). The heads are those of the phase's largest job, even when
    the peak task belongs to another: an upper bound, by at most a few heads."""
    if shape.auto:
        shape = shape.capped(fitting_micro_batch(bb, shape))
    heads = job_head_parameters(shape, bb.architecture)
    peak = peak_workload(bb, shape)
    est = estimate(bb, peak.seq_len, peak.micro_batch, bb.gpus, peak.with_mlm_logits, heads)
    memory = gpu_memory_gb or bb.memory_gb
    return PhasePlan(
        backbone=bb.name,
        phase=phase,
        method=bb.method,
        precision=bb.precision,
        parameters=bb.parameters,
        task=peak.task,
        seq_len=peak.seq_len,
        micro_batch=peak.micro_batch,
        with_mlm_logits=peak.with_mlm_logits,
        gpus_asked=bb.gpus,
        memory_gb=bb.memory_gb,
        estimate=est,
        min_gpus=min_gpus(bb, peak.seq_len, peak.micro_batch, memory, peak.with_mlm_logits, heads),
        min_gpus_memory_gb=memory,
        fits=est.total <= usable_bytes(bb.memory_gb),
    )


def backbone_part(config: Mapping[str, Any], entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """The config as one backbone runs it: its ``grid`` may narrow the intermediate configs
    and targets (a decoder runs no MLM config), and only those are planned for it."""
    narrowed = entry.get("grid") or {}
    part = dict(config)
    if narrowed.get("intermediate") is not None and isinstance(config.get("intermediate"), Mapping):
        part["intermediate"] = {
            n: config["intermediate"][n] for n in narrowed["intermediate"] if n in config["intermediate"]
        }
    if narrowed.get("targets") is not None and config.get("targets") is not None:
        part["targets"] = [t for t in config["targets"] if t in narrowed["targets"]]
    return part


def plan_config(
    config: Mapping[str, Any], gpu_memory_gb: float | None = None, seq_len: int | None = None
) -> list[PhasePlan]:
    """One plan per backbone and phase. ``gpu_memory_gb`` sets the GPUs the smallest count is
    sought on (default: each backbone's own ``gpus.memory_gb``); ``fits`` is always judged
    on the GPUs the backbone asks for."""
    backbones = config.get("backbones") or {}
    if not isinstance(backbones, Mapping):
        raise PlanError("config key backbones: expected a mapping of backbone name -> settings")
    plans = []
    for name, entry in backbones.items():
        if not isinstance(entry, Mapping):
            raise PlanError(f"config key backbones.{name}: expected a mapping")
        reason = skip_reason(entry)
        if reason:
            plans += [PhasePlan(backbone=name, phase=p, skipped=reason) for p in PHASES]
            continue
        bb = parse_backbone(name, entry)
        part = backbone_part(config, entry)
        shapes = {phase: phase_shape(part, phase, seq_len) for phase in PHASES}
        for phase, shape in shapes.items():
            if shape is None:
                plans.append(
                    PhasePlan(
                        backbone=name,
                        phase=phase,
                        method=bb.method,
                        precision=bb.precision,
                        parameters=bb.parameters,
                        skipped="no task trains in this phase",
                    )
                )
            else:
                plans.append(plan_phase(bb, phase, shape, gpu_memory_gb))
    return plans


def misfit_message(plan: PhasePlan) -> str:
    """The line that stops the workflow: the key, what is needed, what is asked, the fix."""
    est = plan.estimate
    assert est is not None
    key = f"backbones.{plan.backbone}.gpus"
    needed = (
        f"{METHOD_NAMES[plan.method]} of {format_count(plan.parameters or 0)} parameters needs "
        f"{est.total / GB:.1f} GB per GPU on {plan.gpus_asked} x {plan.memory_gb:g} GB "
        f"({usable_bytes(plan.memory_gb) / GB:.1f} GB usable each) in the {plan.phase} phase "
        f"(peak task {plan.task}: seq len {plan.seq_len}, {plan.micro_batch} sequences per micro-batch"
        f"{', MLM logits' if plan.with_mlm_logits else ''})"
    )
    if plan.min_gpus is not None:
        fix = f"smallest count that fits on {plan.min_gpus_memory_gb:g} GB GPUs: {plan.min_gpus}"
    else:
        fix = (
            f"no count up to {MAX_GPUS} fits: more GPUs shrink only the sharded state, and the "
            f"activations alone need {est.activations / GB:.1f} GB per GPU; set "
            f"backbones.{plan.backbone}.activation_checkpointing: true or lower "
            f"training.{plan.phase}.max_micro_batch"
        )
    return f"config key {key}: {needed}; {fix}"


def check_auto_micro_batch(config: Mapping[str, Any]) -> None:
    """``max_micro_batch: auto`` is refused for a phase that trains a contrastive task (a
    dual encoder's ranking, image-caption retrieval): its negatives are the other examples of
    its micro-batch, so the loss itself would change with the GPU's memory."""
    for phase in PHASES:
        if phase_cap(config, phase) != AUTO_MICRO_BATCH:
            continue
        contrastive = sorted(
            {t for job in phase_jobs(config, phase) for t in job if t in TASKS and _in_batch_negatives(TASKS[t].format)}
        )
        if contrastive:
            raise PlanError(
                f"config key training.{phase}.max_micro_batch: auto would size the micro-batch by the GPU's "
                f"memory, and {', '.join(contrastive)} contrast each example with the others of its micro-batch "
                "(its negatives); set a number (8: the XTREME-R reference's per-GPU batch)"
            )


def _in_batch_negatives(fmt: str) -> bool:
    return head_kind(fmt) in (RANKING, VISUAL_RETRIEVAL)


def check_fits(config: Mapping[str, Any]) -> None:
    """Raise PlanError, naming ``backbones.<name>.gpus``, if any backbone cannot fit the GPUs
    it asks for in some phase. Backbones without a size (demo models) are skipped."""
    check_auto_micro_batch(config)
    problems = [misfit_message(p) for p in plan_config(config) if p.skipped is None and not p.fits]
    if problems:
        raise PlanError("\n".join(problems))


# ----- tables ---------------------------------------------------------------------------


def format_count(n: float) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def plan_markdown(plans: list[PhasePlan], gpu_memory_gb: float | None = None) -> str:
    """The CLI's table: one row per backbone and phase, at the phase's peak task."""
    memory = f"on {gpu_memory_gb:g} GB GPUs" if gpu_memory_gb else "on the GPUs asked"
    head = [
        "backbone",
        "phase",
        "params",
        "method",
        "precision",
        "peak task",
        "seq len",
        "micro-batch",
        "GPUs asked",
        "GB/GPU at asked",
        f"smallest count {memory}",
        "fits",
    ]
    lines = [_row(head), _row(["---"] * 6 + ["---:"] * 5 + ["---"])]
    for p in plans:
        if p.skipped is not None or p.estimate is None:
            lines.append(
                _row(
                    [
                        p.backbone,
                        p.phase,
                        format_count(p.parameters) if p.parameters else "–",
                        p.method or "–",
                        p.precision or "–",
                    ]
                    + ["–"] * 6
                    + [f"skipped: {p.skipped}"]
                )
            )
            continue
        micro = f"{p.micro_batch}{' + MLM logits' if p.with_mlm_logits else ''}"
        lines.append(
            _row(
                [
                    p.backbone,
                    p.phase,
                    format_count(p.parameters or 0),
                    p.method,
                    p.precision,
                    p.task,
                    p.seq_len,
                    micro,
                    f"{p.gpus_asked} x {p.memory_gb:g} GB",
                    f"{p.estimate.total / GB:.1f}",
                    p.min_gpus if p.min_gpus is not None else "none",
                    "yes" if p.fits else "**no**",
                ]
            )
        )
    return "\n".join(lines)


# ----- reference backbones (README) -----------------------------------------------------


def t5_encoder_parameters(
    d_model: int, d_ff: int, num_layers: int, num_heads: int, d_kv: int, vocab_size: int, relative_buckets: int = 32
) -> int:
    """A T5 v1.1 / mT5 encoder: shared embedding, per layer self-attention (q, k, v, o: no
    biases) and a gated-GELU MLP (wi_0, wi_1, wo), two RMS norms, plus the final norm and
    the first layer's relative position bias. The encoder is what our heads sit on."""
    inner = num_heads * d_kv
    per_layer = 4 * d_model * inner + 3 * d_model * d_ff + 2 * d_model
    return vocab_size * d_model + num_layers * per_layer + d_model + relative_buckets * num_heads


MT5_XXL_ENCODER_PARAMETERS = t5_encoder_parameters(
    d_model=4096, d_ff=10240, num_layers=24, num_heads=64, d_kv=64, vocab_size=250112
)

REFERENCE_BACKBONES: dict[str, dict[str, Any]] = {
    "xlmr_large": {
        "hub_id": "FacebookAI/xlm-roberta-large",
        "family": "encoder",
        "parameters": 5.6e8,
        "architecture": {
            "hidden_size": 1024,
            "num_layers": 24,
            "num_attention_heads": 16,
            "vocab_size": 250002,
            "intermediate_size": 4096,
        },
    },
    "xlmr_xl": {
        "hub_id": "facebook/xlm-roberta-xl",
        "family": "encoder",
        "parameters": 3.5e9,
        "architecture": {
            "hidden_size": 2560,
            "num_layers": 36,
            "num_attention_heads": 32,
            "vocab_size": 250880,
            "intermediate_size": 10240,
        },
    },
    "xlmr_xxl": {
        "hub_id": "facebook/xlm-roberta-xxl",
        "family": "encoder",
        "parameters": 10.7e9,
        "architecture": {
            "hidden_size": 4096,
            "num_layers": 48,
            "num_attention_heads": 32,
            "vocab_size": 250880,
            "intermediate_size": 16384,
        },
    },
    "mt5_xxl_encoder": {
        "hub_id": "google/mt5-xxl",
        "family": "seq2seq_encoder",
        "parameters": float(MT5_XXL_ENCODER_PARAMETERS),
        "architecture": {
            "hidden_size": 4096,
            "num_layers": 24,
            "num_attention_heads": 64,
            "vocab_size": 250112,
            "intermediate_size": 10240,
        },
    },
    "bloomz_176b": {
        "hub_id": "bigscience/bloomz",
        "family": "decoder",
        "parameters": 176.2e9,
        "architecture": {
            "hidden_size": 14336,
            "num_layers": 70,
            "num_attention_heads": 112,
            "vocab_size": 250880,
            "intermediate_size": 57344,
        },
    },
}


def reference_plan_markdown(seq_len: int = 256, micro_batch: int = 8, gpu_memory_gb: float = 80) -> str:
    """The README's table: each reference backbone with full fine-tuning, LoRA and QLoRA in
    bf16 on ``gpu_memory_gb`` GPUs, without and with activation checkpointing. The defaults
    are the paper preset's intermediate phase: max_length 256 and micro-batch 8 (config/paper.yaml)."""
    capacity = usable_bytes(gpu_memory_gb) / GB
    lines = [
        f"Per GPU, bf16, seq len {seq_len}, micro-batch {micro_batch} per GPU, one classification head, "
        f"LoRA/QLoRA rank {LORA_DEFAULTS['rank']} on q, k, v, o; {gpu_memory_gb:g} GB GPUs "
        f"({capacity:.1f} GB usable); FSDP full shard when more than one GPU.",
        "",
        _row(
            [
                "backbone",
                "params",
                "method",
                "trainable",
                "state, all GPUs (GB)",
                "activations/GPU (GB)",
                "GPUs",
                "GB/GPU",
                "activations/GPU, checkpointing (GB)",
                "GPUs, checkpointing",
                "GB/GPU, checkpointing",
            ]
        ),
        _row(["---", "---:", "---"] + ["---:"] * 8),
    ]
    for name, entry in REFERENCE_BACKBONES.items():
        for method in METHODS:
            bb = parse_backbone(name, {**entry, "method": method, "precision": "bf16"})  # the schema's LoRA
            cells: list[Any] = [name, format_count(bb.parameters), method]
            for checkpointing in (False, True):
                variant = replace(bb, activation_checkpointing=checkpointing)
                count = min_gpus(variant, seq_len, micro_batch, gpu_memory_gb)
                one = estimate(variant, seq_len, micro_batch, 1)
                if not checkpointing:
                    cells += [format_count(one.trainable_parameters), f"{one.state / GB:.1f}"]
                at_count = estimate(variant, seq_len, micro_batch, count).total / GB if count else None
                cells += [
                    f"{one.activations / GB:.1f}",
                    count if count else "none",
                    f"{at_count:.1f}" if at_count is not None else "–",
                ]
            lines.append(_row(cells))
    return "\n".join(lines)


# ----- CLI ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", nargs="?", help="a workflow config (YAML) with a `backbones` section")
    parser.add_argument(
        "--gpu-memory-gb",
        type=float,
        default=None,
        help="GPU memory the smallest count is sought on (default: each backbone's gpus.memory_gb)",
    )
    parser.add_argument("--reference", action="store_true", help="print the reference backbones' plan (README) instead")
    args = parser.parse_args(argv)
    if args.reference:
        print(reference_plan_markdown(gpu_memory_gb=args.gpu_memory_gb or 80))
        return 0
    if not args.config:
        parser.error("give a CONFIG file or --reference")
    # only the CLI reads a config file; the Snakefile passes its resolved config
    from workflow_scripts.spec import tasks
    from workflow_scripts.spec.basics import repo_path
    from workflow_scripts.workflow import config_layers

    try:
        config = config_layers.load([args.config])
    except config_layers.ConfigLayerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    tasks.use_catalogues([repo_path(d) for d in config.get("task_catalogues", [])])  # the user's own tasks
    try:
        plans = plan_config(config, gpu_memory_gb=args.gpu_memory_gb)
    except PlanError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not plans:
        print(f"{args.config}: no `backbones` to plan")
        return 0
    print(plan_markdown(plans, args.gpu_memory_gb))
    try:
        check_fits(config)  # its smallest counts are on the GPUs asked, whatever --gpu-memory-gb says
    except PlanError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
