"""The memory plan as Markdown: a config's plan (``memory_plan.py``'s CLI, the preflight)
and the reference backbones' plan the docs print.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from workflow_scripts.planning.memory_model import GB, estimate, min_gpus, parse_backbone, usable_bytes
from workflow_scripts.spec.method import LORA_DEFAULTS, METHODS

if TYPE_CHECKING:
    from workflow_scripts.planning.memory_plan import PhasePlan

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
                variant = bb.with_checkpointing(checkpointing)
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
