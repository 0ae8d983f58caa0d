"""The cost model of one job: the FLOPs it computes, and the GPU time they take at a measured
(or, failing that, a stated default) model-FLOPs utilisation (MFU) of the GPU kind it runs on.

FLOPs per token (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1, with the
attention term of its Table 1), over the N non-embedding parameters of a backbone with L
layers of width d at sequence length s:

- training every weight: 6 N + 12 L s d (forward 2 N; backward 4 N: gradients of the
  activations and of the weights);
- training adapters on a frozen base (LoRA, QLoRA): 4 N + 12 L s d (forward, and the
  gradients of the activations through every layer; a frozen base computes no weight
  gradients);
- inference (evaluation, dev selection, probes): 2 N + 4 L s d;
- activation checkpointing reruns every layer's forward in the backward: + 2 N + 4 L s d
  per trained token;
- a head applied at every position counts like weights on the token's path: MLM's
  vocabulary projection (V x d, and its d x d transform) adds its parameters to N for MLM
  tokens, +83% for XLM-R large (V = 250,002), where a classification head adds nothing
  measurable.

Time = FLOPs / (GPUs x peak x MFU), and for training at least the micro-steps times the
host's shortest micro-step: the engine runs one forward and backward per micro-batch, so a
step accumulated over k micro-batches pays the host k times (a small model's steps are bound
by Python, data and kernel launches, not by FLOPs). The host figure is the GPU kind's
measured row nearest in depth (``host_rows``, written by ``make gpu-check``), else its
single measured figure (``host_step_seconds``). The peak is the card's dense 16-bit tensor rate (fp32 runs: its fp32 rate);
the MFU is read from ``measured_throughput/<gpu>.json``, written by ``make gpu-check`` on that
kind of GPU: the row of the same family, method, precision and mode nearest in width, then in
sequence length. Sharded jobs are counted at one GPU's MFU per GPU (communication not
modelled). Tokens are counted at each task's ``max_length`` (batches are padded to their
longest example, so this is an upper bound for short-sentence tasks).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# Multipliers of N per token, by what the job computes.
FULL_TRAINING = 6
ADAPTER_TRAINING = 4
INFERENCE = 2
MODES = ("train", "inference")

# Dense peak TFLOP/s per GPU kind (vendor datasheets, SXM parts, no sparsity): 16-bit tensor
# cores (bf16 and fp16 alike) and plain fp32 (the engine leaves TF32 off).
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H100": {"16-bit": 989.4, "fp32": 66.9},
    "H200": {"16-bit": 989.4, "fp32": 66.9},
    "A100": {"16-bit": 312.0, "fp32": 19.5},
    "L40S": {"16-bit": 362.1, "fp32": 91.6},
    "A6000": {"16-bit": 154.8, "fp32": 38.7},
}
MEASURED_DIR = Path(__file__).resolve().parent / "measured_throughput"
# Used only where no table of measured MFU exists at all (a stated assumption, not a
# measurement): the lower end of what `make gpu-check` measured on an H200 for decoders.
DEFAULT_MFU = 0.3
# Beam-search translation with a small encoder-decoder (OPUS-MT, ~75M parameters) issues
# one decoder step per generated token over a few hundred sentences at a time: bound by
# memory traffic and launches, far below training's utilisation. A stated assumption, not a
# measurement (gpu-check's CTranslate2 part measures the engine, not yet its MFU).
GENERATION_MFU = 0.05


class CostError(ValueError):
    """A cost setting that cannot be used; the message names the config key."""


def flops_per_token(
    non_embedding: float,
    layers: int,
    width: int,
    seq_len: int,
    method: str,
    mode: str,
    recompute: bool = False,
    head: float = 0.0,
) -> float:
    """FLOPs per token of one job: ``mode`` "train" or "inference", ``method`` "full", "lora"
    or "qlora" (a frozen base for the last two); ``recompute``: activation checkpointing;
    ``head``: parameters of a head applied at every position (MLM's vocabulary projection)."""
    attention = layers * seq_len * width
    on_path = non_embedding + head
    if mode == "inference":
        return INFERENCE * on_path + 4 * attention
    if mode != "train":
        raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    weights = FULL_TRAINING if method == "full" else ADAPTER_TRAINING
    rerun = INFERENCE * non_embedding + 4 * attention if recompute else 0.0  # the layers' forward again
    return weights * on_path + 12 * attention + rerun


def precision_class(precision: str) -> str:
    return "fp32" if precision == "fp32" else "16-bit"


def gpu_kind(name: str) -> str:
    """The kind in PEAK_TFLOPS that a GPU's name names ("NVIDIA H200" -> "H200")."""
    found = [kind for kind in PEAK_TFLOPS if kind.lower() in name.lower()]
    if not found:
        raise CostError(f"config key cost.gpu: {name!r} is none of the known kinds {', '.join(PEAK_TFLOPS)}")
    return found[0]


@cache
def measured_tables(directory: str = str(MEASURED_DIR)) -> dict[str, dict[str, Any]]:
    """Every committed table of measured MFU, by GPU kind."""
    tables = {}
    for path in sorted(Path(directory).glob("*.json")):
        table = json.loads(path.read_text())
        table["file"] = path.name
        tables[gpu_kind(table["gpu"])] = table
    return tables


@dataclass(frozen=True)
class Throughput:
    """What one GPU of a kind computes for one kind of work, and why that figure."""

    tflops: float  # achieved, per GPU
    mfu: float
    basis: str


def throughput(
    gpu: str,
    family: str,
    method: str,
    precision: str,
    mode: str,
    width: int,
    seq_len: int,
    mfu: float | None = None,
) -> Throughput:
    """Achieved TFLOP/s per GPU for this work: ``mfu`` when the config sets one, else the
    measured row of the same family, method, precision class and mode nearest in width, then
    in sequence length (on this GPU kind, else on another kind's table, applied to this
    kind's peak)."""
    kind = gpu_kind(gpu)
    peak = PEAK_TFLOPS[kind][precision_class(precision)]
    if mfu is not None:
        return Throughput(peak * mfu, mfu, f"MFU {mfu:g} from cost.mfu, on the {kind} peak")
    tables = measured_tables()
    ordered = ([kind] if kind in tables else []) + [k for k in sorted(tables) if k != kind]
    for source in ordered:
        row = _nearest_row(tables[source]["rows"], family, method, precision, mode, width, seq_len)
        if row is not None:
            where = f"measured on {source}" + ("" if source == kind else f", on the {kind} peak")
            basis = f"MFU {row['mfu']:.3f} {where} ({_row_label(row)})"
            return Throughput(peak * row["mfu"], row["mfu"], basis)
    basis = f"MFU {DEFAULT_MFU} by default, not measured ({family} {method} {mode})"
    return Throughput(peak * DEFAULT_MFU, DEFAULT_MFU, basis)


def _nearest_row(rows, family, method, precision, mode, width, seq_len) -> dict[str, Any] | None:
    # QLoRA's dequantisation makes it its own row; LoRA and full rows stand for themselves.
    same = [
        r
        for r in rows
        if (r["family"], r["method"], r["mode"]) == (family, method, mode)
        and precision_class(r["precision"]) == precision_class(precision)
    ]
    if not same and mode == "inference":  # evaluating a LoRA or full model: the same forward
        same = [r for r in rows if (r["family"], r["mode"]) == (family, mode) and r["method"] != "qlora"]
    if not same:
        return None
    return min(same, key=lambda r: (abs(math.log(r["hidden_size"] / width)), abs(math.log(r["seq_len"] / seq_len))))


def _row_label(row: dict[str, Any]) -> str:
    return f"{row['family']} {row['method']} {row['precision']} {row['mode']}, width {row['hidden_size']}, seq {row['seq_len']}"


def table_sources() -> list[str]:
    """One line per table of measured MFU: its GPU and how it was measured."""
    return [f"{kind}: {table['source']} ({table['file']})" for kind, table in measured_tables().items()]


@dataclass(frozen=True)
class Shape:
    """What the FLOPs of a backbone depend on."""

    family: str
    method: str
    precision: str
    non_embedding: float
    layers: int
    width: int
    gpus: int = 1
    recompute: bool = False  # activation checkpointing
    vocab: int = 0  # the vocabulary MLM's head projects onto

    @property
    def vocabulary_head(self) -> float:
        """MLM's head: the d x d transform and the V x d projection."""
        return float(self.width * self.width + self.vocab * self.width)


@dataclass(frozen=True)
class Tokens:
    """Tokens one job runs through the backbone at one sequence length, in one mode, in
    ``steps`` optimizer steps of ``micro_steps`` forwards and backwards (training; None: one
    per step); ``vocabulary_logits``: MLM tokens, whose head projects every position onto the
    vocabulary."""

    mode: str
    tokens: float
    seq_len: int
    steps: float = 0.0
    micro_steps: float | None = None
    vocabulary_logits: bool = False

    @property
    def host_steps(self) -> float:
        """The forward-and-backward passes the host launches one by one."""
        return self.steps if self.micro_steps is None else self.micro_steps


def host_step_seconds(gpu: str, layers: int = 0) -> tuple[float, str]:
    """The shortest time a micro-step of the engine (a forward and backward) takes on the
    host (Python, data, kernel launches), whatever the FLOPs: the measured row of this kind
    nearest to ``layers`` in depth (``host_rows``, written by gpu-check), else its single
    measured figure, else another kind's; (0, "") where none is measured."""
    kind, tables = gpu_kind(gpu), measured_tables()
    for source in ([kind] if kind in tables else []) + sorted(tables):
        rows = tables[source].get("host_rows") or []
        if rows:
            row = min(rows, key=lambda r: abs(math.log(r["layers"] / max(layers, 1))))
            return row["seconds"], f"measured on {source}, {row['layers']} layers, {row['engine']}"
        if tables[source].get("host_step_seconds"):
            return tables[source]["host_step_seconds"], f"measured on {source}"
    return 0.0, ""


@dataclass(frozen=True)
class Estimate:
    """One job's GPU time: ``gpu_hours`` over all its GPUs, ``minutes`` of wall time."""

    flops: float
    gpu_hours: float
    minutes: float
    gpus: int
    basis: str
    # GPU-hours the FLOPs alone take at the throughput: below gpu_hours where the host sets
    # the pace (then the GPU idles between kernels, and other jobs may share it: gpu_sharing.py)
    compute_hours: float | None = None

    @property
    def busy(self) -> float:
        """The share of its time the job keeps its GPUs computing (1: compute-bound)."""
        if self.compute_hours is None or self.gpu_hours <= 0:
            return 1.0
        return min(1.0, self.compute_hours / self.gpu_hours)


@dataclass(frozen=True)
class Translator:
    """What a translation model's FLOPs depend on (an encoder-decoder transformer)."""

    encoder_layers: int
    decoder_layers: int
    width: int
    ffn: int
    vocab: int

    def source_flops(self) -> float:
        """Per source token: the encoder's attention projections and FFN, forward."""
        return 2 * self.encoder_layers * (4 * self.width**2 + 2 * self.width * self.ffn)

    def generated_flops(self) -> float:
        """Per generated token and beam: self- and cross-attention projections, FFN and the
        output projection onto the vocabulary."""
        per_layer = 8 * self.width**2 + 2 * self.width * self.ffn
        return 2 * (self.decoder_layers * per_layer + self.width * self.vocab)


def translation_estimate(
    translator: Translator, source_tokens: float, beams: int, gpu: str, mfu: float | None, what: str
) -> Estimate:
    """A translation job: its source tokens through the encoder and as many generated tokens,
    each through every beam, at ``GENERATION_MFU`` (or the config's ``cost.mfu``)."""
    kind = gpu_kind(gpu)
    used = mfu if mfu is not None else GENERATION_MFU
    flops = source_tokens * (translator.source_flops() + beams * translator.generated_flops())
    seconds = flops / (PEAK_TFLOPS[kind]["16-bit"] * 1e12 * used)
    source = "cost.mfu" if mfu is not None else "assumed for beam search, not measured"
    basis = f"MFU {used:g} {source}, on the {kind} peak ({what}, {beams} beams)"
    return Estimate(flops=flops, gpu_hours=seconds / 3600, minutes=seconds / 60, gpus=1, basis=basis)


def estimate(shape: Shape, work: list[Tokens], gpu: str, mfu: float | None = None) -> Estimate:
    """The GPU time of ``work`` on ``shape``, on GPUs of kind ``gpu``: each part's FLOPs at
    the throughput, or its steps at the host's shortest step where that is longer (small
    models are host-bound)."""
    flops, seconds, computing, bases = 0.0, 0.0, 0.0, []
    floor, floor_basis = host_step_seconds(gpu, shape.layers)
    for part in work:
        if part.tokens <= 0:
            continue
        per_token = flops_per_token(
            shape.non_embedding,
            shape.layers,
            shape.width,
            part.seq_len,
            shape.method,
            part.mode,
            recompute=shape.recompute,
            head=shape.vocabulary_head if part.vocabulary_logits else 0.0,
        )
        rate = throughput(gpu, shape.family, shape.method, shape.precision, part.mode, shape.width, part.seq_len, mfu)
        flops += per_token * part.tokens
        compute = per_token * part.tokens / (rate.tflops * 1e12) / shape.gpus  # wall seconds
        computing += compute * shape.gpus
        basis = rate.basis
        if part.host_steps * floor > compute:
            compute, basis = part.host_steps * floor, f"host-bound: {floor:g} s per micro-step, {floor_basis}"
        seconds += compute * shape.gpus  # GPU-seconds
        if basis not in bases:
            bases.append(basis)
    return Estimate(
        flops=flops,
        gpu_hours=seconds / 3600,
        minutes=seconds / 60 / shape.gpus,
        gpus=shape.gpus,
        basis="; ".join(bases),
        compute_hours=computing / 3600,
    )
