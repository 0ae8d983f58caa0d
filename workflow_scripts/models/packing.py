"""Padding-free batches: an encoder reads a batch's sequences end to end, without pads.

A padded batch computes every position of a (sequences x longest) block; on a long-tailed
task most of them are padding (the train log's ``padding_share``). Packed, the
batch's real tokens form one stream, positions restart at each sequence, and attention
stays within each sequence (the cumulative lengths ``cu_seq_lens`` mark the boundaries).
The heads still see the padded layout: the stream's hidden states are scattered back into
(sequences x width), zeros at pads, so every task format, loss and pooling is unchanged.

``resources.<rule>.padding_free`` chooses (operational, like ``compile``: switching it
reruns nothing; the train log and metric file record what ran):

- ``auto`` (default): packed where FlashAttention's varlen kernel runs the attention
  (torch's ``varlen_attn``): an encoder on a GPU in bf16 or fp16, in forwards without
  attention dropout (every evaluation; training when the backbone's attention dropout is 0).
  Otherwise padded: on a CPU (identical tables), in fp32, and when training with attention
  dropout, which the kernel does not implement;
- ``always``: packed for every encoder on any device; where the kernel cannot run, the
  attention runs sequence by sequence (exact, attention dropout included, and slow);
- ``never``: padded everywhere.

Decoders, encoders whose attention does not go through transformers' attention interface
(``PACKABLE_MODEL_TYPES``: mDeBERTa and RemBERT stay padded), and the image and retrieval
formats stay padded; so does a GPU without FlashAttention (before Ampere).

Compiled forwards see the stream padded to a stream bucket (``stream_width``: a last segment
of pad tokens, attending to itself, its outputs dropped), so that the number of shapes a job
compiles stays bounded.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Literal

PaddingFreeMode = Literal["auto", "always", "never"]
PADDING_FREE_MODES: tuple[str, ...] = ("auto", "always", "never")
DEFAULT_PADDING_FREE: PaddingFreeMode = "auto"

# The attention implementation registered with transformers for packed encoders: packed
# calls (with ``cu_seq_lens_q``) go to the varlen kernel, padded calls to sdpa.
ATTENTION = "xstilts_packed"

# A compiled forward's stream is padded up to a stream bucket (stream_width): 256 tokens and
# up, four widths per doubling beyond 2,048, so that a job compiles a few stream widths.
STREAM_MULTIPLE = 256

# Architectures whose attention goes through transformers' attention interface with absolute
# positions (counted from the pad id + 1, or from 0): packing them is exact. Others (DeBERTa's
# relative positions, RemBERT's own attention) would accept the packed call's arguments and
# attend across sequences, so they stay padded.
PACKABLE_MODEL_TYPES = frozenset({"xlm-roberta", "xlm-roberta-xl", "roberta", "bert"})
# FlashAttention's varlen kernel: Ampere (compute capability 8.0) and later, heads up to 256 wide.
FLASH_MIN_CAPABILITY = (8, 0)
FLASH_MAX_HEAD_SIZE = 256

# Whether this process's GPU runs the varlen kernel for its encoder (configure sets it): a
# packed call elsewhere attends sequence by sequence.
_FLASH_CAPABLE = True

# The batch fields of a packed batch (collate adds them; the forward reads them).
PACKED_KEYS: tuple[str, ...] = ("packed_index", "packed_positions", "cu_seq_lens")


@dataclasses.dataclass(frozen=True)
class Packing:
    """Whether this process's encoder forwards run packed, and why."""

    enabled: bool = False
    reason: str = "padded (not configured)"


def decide(
    mode: PaddingFreeMode,
    device_type: str,
    family: str,
    precision: str,
    attention_dropout: float,
    training: bool,
    architecture: str = "xlm-roberta",
    flash_capable: bool = True,
) -> Packing:
    """The packing ``resources.<rule>.padding_free`` asks for, for this model (its family,
    its transformers ``model_type``) and device (``flash_capable``: a GPU that runs the
    varlen kernel)."""
    if mode not in PADDING_FREE_MODES:
        raise ValueError(f"padding_free: expected one of {', '.join(PADDING_FREE_MODES)}, got {mode!r}")
    if mode == "never":
        return Packing(False, "padded (padding_free: never)")
    if family != "encoder":
        return Packing(False, f"padded ({family} backbones are not packed)")
    if architecture not in PACKABLE_MODEL_TYPES:
        return Packing(False, f"padded ({architecture} encoders are not packed: their attention would cross sequences)")
    kernel = flash_capable and varlen_kernel_runs(device_type, precision, attention_dropout if training else 0.0)
    if mode == "always":
        how = "varlen flash attention" if kernel else "attention sequence by sequence"
        return Packing(True, f"packed (padding_free: always, {how} on {device_type})")
    if device_type != "cuda":
        return Packing(False, f"padded (padding_free: auto on {device_type})")
    if not flash_capable:
        return Packing(False, "padded (padding_free: auto; this GPU does not run the varlen FlashAttention kernel)")
    if not kernel and precision == "fp32":
        return Packing(False, "padded (padding_free: auto; the varlen kernel takes bf16 or fp16, this run is fp32)")
    if not kernel:
        return Packing(
            False,
            f"padded (padding_free: auto; the varlen kernel has no attention dropout, "
            f"this backbone trains with p={attention_dropout:g})",
        )
    return Packing(True, "packed (padding_free: auto, varlen flash attention)")


def varlen_kernel_runs(device_type: str, precision: str, dropout: float) -> bool:
    """Whether torch's varlen FlashAttention kernel can run a packed attention."""
    return device_type == "cuda" and precision in ("bf16", "fp16") and dropout == 0.0


def attention_dropout(encoder) -> float:
    """The encoder's attention dropout probability (0 when its config names none)."""
    return float(getattr(encoder.config, "attention_probs_dropout_prob", 0.0) or 0.0)


def architecture_of(encoder) -> str:
    """The encoder's transformers ``model_type`` (under its adapters, if any), when its
    attention goes through the attention interface; "" otherwise."""
    base = encoder.get_base_model() if hasattr(encoder, "get_base_model") else encoder
    if not getattr(base, "_supports_attention_backend", False):
        return ""
    return str(getattr(base.config, "model_type", ""))


def flash_capable(encoder, device_type: str) -> bool:
    """Whether this device runs the varlen FlashAttention kernel for the encoder's heads."""
    if device_type != "cuda":
        return True  # (the kernel is not used off a GPU; the attention runs sequence by sequence)
    import torch

    config = encoder.config
    head_size = config.hidden_size // config.num_attention_heads
    return torch.cuda.get_device_capability() >= FLASH_MIN_CAPABILITY and head_size <= FLASH_MAX_HEAD_SIZE


def configure(model, mode: PaddingFreeMode, device_type: str, precision: str, training: bool) -> Packing:
    """Decide the packing of ``model`` (a MultiHeadModel) and, if packed, switch its encoder
    to the packed attention (padded calls keep sdpa's)."""
    global _FLASH_CAPABLE
    _FLASH_CAPABLE = model.family != "encoder" or flash_capable(model.encoder, device_type)
    packing = decide(
        mode,
        device_type,
        model.family,
        precision,
        attention_dropout(model.encoder),
        training=training,
        architecture=architecture_of(model.encoder) or "this architecture",
        flash_capable=_FLASH_CAPABLE,
    )
    if packing.enabled:
        register_attention()
        model.encoder.config._attn_implementation = ATTENTION
    return packing


def pack_fields(attention_mask, stream_multiple: int | None = None) -> dict[str, Any]:
    """The packed batch fields of a padded batch's attention mask (sequences x width, or
    examples x choices x width), computed on the host:

    - ``packed_index``: each stream token's flat position in the padded batch (a dummy
      token's: one of the ``STREAM_MULTIPLE`` rows after it);
    - ``packed_positions``: its position within its sequence, from 0 (a dummy's: 0);
    - ``cu_seq_lens``: the cumulative sequence lengths (int32), a dummy segment last when
      the stream is padded to a multiple of ``stream_multiple``.
    """
    import torch

    width = attention_mask.shape[-1]
    mask = attention_mask.reshape(-1, width).bool()
    rows = mask.numel()
    lengths = mask.sum(1)
    index = mask.reshape(-1).nonzero().squeeze(1)
    positions = (mask.cumsum(1) - 1)[mask]
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = lengths.cumsum(0)
    if stream_multiple:
        tokens = int(cu[-1])
        dummies = stream_width(tokens + 1, stream_multiple) - tokens
        index = torch.cat([index, rows + torch.arange(dummies)])
        positions = torch.cat([positions, torch.zeros(dummies, dtype=positions.dtype)])  # any valid position
        cu = torch.cat([cu, torch.tensor([tokens + dummies], dtype=torch.int32)])
    return {"packed_index": index, "packed_positions": positions, "cu_seq_lens": cu}


def stream_width(tokens: int, multiple: int = STREAM_MULTIPLE) -> int:
    """A compiled stream's width for ``tokens``: rounded up in steps of an eighth of the next
    power of two, at least ``multiple``: 256, 512, ..., 2048, then 2560, 3072, ..., 4096,
    then 5120, ...: four widths per doubling beyond 2,048, 15 up to 7,168 tokens."""
    step = max(multiple, (1 << max(tokens - 1, 1).bit_length()) // 8)
    return -(-tokens // step) * step


def is_packed(batch: dict[str, Any]) -> bool:
    return "cu_seq_lens" in batch


def positions(batch: dict[str, Any]) -> tuple[int, int]:
    """(real tokens, positions the forward computes) of a collated batch: its packed stream's
    length, or its padded block's size."""
    mask = batch["attention_mask"]
    return int(mask.sum()), len(batch["packed_index"]) if "packed_index" in batch else mask.numel()


@dataclasses.dataclass
class PaddingMeter:
    """Real tokens against computed positions over a job's forwards: its padded-token share."""

    tokens: int = 0
    computed: int = 0

    def add(self, batch: dict[str, Any]) -> None:
        tokens, computed = positions(batch)
        self.tokens += tokens
        self.computed += computed

    def share(self) -> float:
        return 1 - self.tokens / max(1, self.computed)

    def reset(self) -> None:
        self.tokens = self.computed = 0


# The prediction forwards of this process (evaluation.predict_logits adds each batch): an
# evaluation job records its share in its metric file.
PREDICTIONS = PaddingMeter()


def hidden_states(encoder, input_ids, batch: dict[str, Any]):
    """The encoder's last hidden states of a packed batch, in the padded layout of
    ``input_ids`` (zeros at pads): the stream is encoded once and scattered back."""
    import torch

    width, shape = input_ids.shape[-1], input_ids.shape
    flat_ids = input_ids.reshape(-1)
    pad = encoder.config.pad_token_id if encoder.config.pad_token_id is not None else 0
    # dummy tokens read pad ids from the rows after the batch's
    ids = torch.cat([flat_ids, flat_ids.new_full((STREAM_MULTIPLE,), pad)]).index_select(0, batch["packed_index"])
    positions = batch["packed_positions"] + position_offset(encoder)
    cu = batch["cu_seq_lens"]
    stream = encoder(
        input_ids=ids.unsqueeze(0),
        position_ids=positions.unsqueeze(0),
        cu_seq_lens_q=cu,
        cu_seq_lens_k=cu,
        max_length_q=max(width, STREAM_MULTIPLE),
        max_length_k=max(width, STREAM_MULTIPLE),
    ).last_hidden_state[0]
    rows = flat_ids.numel()
    padded = stream.new_zeros(rows + STREAM_MULTIPLE, stream.shape[-1]).index_copy(0, batch["packed_index"], stream)
    return padded[:rows].view(*shape, stream.shape[-1])


def position_offset(encoder) -> int:
    """The position id of a sequence's first token: XLM-R and RoBERTa count from their pad
    id + 1 (their embeddings keep ``padding_idx``), BERT-style encoders from 0."""
    padding_idx = getattr(getattr(encoder, "embeddings", None), "padding_idx", None)
    return 0 if padding_idx is None else int(padding_idx) + 1


def packed_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention interface for ``ATTENTION``: a packed call (``cu_seq_lens_q``
    given; query, key and value of shape 1 x heads x stream x head size) attends within
    each sequence; any other call is sdpa's."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # stream x heads x head size
    if _FLASH_CAPABLE and varlen_kernel_runs(q.device.type, _precision_of(q), dropout):
        from torch.nn.attention.varlen import varlen_attn

        out = varlen_attn(q, k, v, cu, cu, kwargs["max_length_q"], kwargs["max_length_k"], scale=scaling)
    else:
        out = _attention_per_sequence(q, k, v, cu, dropout, scaling)
    return out.unsqueeze(0), None


def _precision_of(tensor) -> str:
    import torch

    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(tensor.dtype, "fp32")


def _attention_per_sequence(q, k, v, cu, dropout: float, scaling):
    """Exact attention within each sequence of the stream (any device, any dtype, with
    attention dropout): one sdpa call per sequence."""
    import torch
    import torch.nn.functional as F

    bounds = cu.tolist()
    outs = []
    for start, end in itertools.pairwise(bounds):
        if end == start:
            continue
        one = [x[start:end].transpose(0, 1).unsqueeze(0) for x in (q, k, v)]  # 1 x heads x length x size
        outs.append(F.scaled_dot_product_attention(*one, dropout_p=dropout, scale=scaling)[0].transpose(0, 1))
    return torch.cat(outs)


def register_attention() -> None:
    """Register ``ATTENTION`` with transformers: the attention above, sdpa's mask for padded
    calls (a packed call passes no mask)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION, packed_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
