"""Models: loading the encoder (and its MLM head) and tokenizer from a local directory; the
task heads and their forward pass, shared by training and evaluation.

Model directories come from ``workflow_scripts.models.prepare``: Hub snapshots in the paper
preset, the demo's own small models offline (``workflow_scripts.models.demo_models``); both load
the same way here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from workflow_scripts.models import compiled, dual_encoder, packing
from workflow_scripts.models.backbones import ADAPTER_DIR, family_of, get_family
from workflow_scripts.models.backbones.family import pool
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.formats import get_format, head_kind
from workflow_scripts.spec.tasks import (
    CLASSIFICATION,
    FORMATS,
    MLM,
    MULTIPLE_CHOICE,
    RANKING,
    SPAN,
    TAGGING,
    VISUAL_ANSWER,
    VISUAL_CLASSIFICATION,
    VISUAL_RETRIEVAL,
)

# The heads the formats train (spec/formats: TaskFormat.head). A compiled forward gets its
# head kind resolved (``forward``): looking a format up reads the formats' folder, which the
# compiler cannot trace.
HEAD_KINDS = frozenset(get_format(name).head or name for name in FORMATS)

# ---------------------------------------------------------------------------------------
# Encoder + heads used by training and evaluation.


def load_tokenizer(model_dir: str | Path):
    """The directory's tokenizer, with its family's conventions (a decoder's pad token)."""
    from transformers import AutoTokenizer

    _require_model_dir(model_dir)
    return family_of(model_dir).prepare_tokenizer(AutoTokenizer.from_pretrained(str(model_dir)))


def _require_model_dir(model_dir: str | Path) -> None:
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise InputError(f"model directory {path} has no config.json (missing or incomplete)")


def load_encoder(model_dir: str | Path, **kwargs):
    """The bare backbone (no pooler, no LM head) from a local directory, loaded as its family
    loads it (backbones/); keyword arguments go to ``from_pretrained``."""
    _require_model_dir(model_dir)
    return family_of(model_dir).load(Path(model_dir), **kwargs)


def load_mlm_head(model_dir: str | Path, encoder: nn.Module):
    """The pretrained LM head, so MLM continues the pretraining objective rather than restarting it.

    Its output layer is ``encoder``'s input embedding matrix, as in XLM-R's pretraining and in
    jiant, which the paper trained with: one matrix, trained from both sides. Loaded on its
    own, the head would carry a copy instead (for XLM-R large 256M more trainable parameters,
    4 GB more weights, gradients and AdamW state on the GPU), and the MLM predictions would
    never reach the embeddings the other tasks read. Only the encoder family has one: T5's
    objective is span corruption and a decoder's is next-token prediction."""
    from transformers import AutoModelForMaskedLM

    family = family_of(model_dir)
    if not family.has_mlm:
        raise InputError(
            f"{model_dir}: a {family.name} backbone has no masked-LM head; MLM (intermediate "
            "configs with 'mlm: true') needs an encoder-family backbone"
        )
    embeddings = encoder.get_input_embeddings()
    # the encoder's dtype (fp32 master weights, or a frozen base's 16 bits), not the checkpoint's
    mlm = AutoModelForMaskedLM.from_pretrained(str(model_dir), dtype=embeddings.weight.dtype)
    output = mlm.get_output_embeddings()
    if output is None or output.weight.shape != embeddings.weight.shape:
        raise InputError(
            f"{model_dir}: the masked-LM output layer does not match the encoder's input embeddings "
            f"({None if output is None else tuple(output.weight.shape)} vs {tuple(embeddings.weight.shape)})"
        )
    output.weight = embeddings.weight
    return mlm.lm_head if hasattr(mlm, "lm_head") else output


def _classification_head(hidden: int, num_labels: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, num_labels)
    )


def _choice_head(hidden: int, num_labels: int, dropout: float) -> nn.Module:
    """One score per choice: the classification head with one output."""
    return _classification_head(hidden, 1, dropout)


def _span_head(hidden: int, num_labels: int, dropout: float) -> nn.Module:
    return nn.Linear(hidden, 2)  # start and end logits per token


def _tagging_head(hidden: int, num_labels: int, dropout: float) -> nn.Module:
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, num_labels))


# The fresh head of each head kind that trains one (ranking builds its own: dual_encoder.py).
HEAD_BUILDERS = {
    CLASSIFICATION: _classification_head,
    MULTIPLE_CHOICE: _choice_head,
    SPAN: _span_head,
    TAGGING: _tagging_head,
}


def make_head(fmt: str, hidden: int, num_labels: int, dropout: float, init_std: float):
    """A freshly initialised output head (heads never carry over between phases), of the kind
    the format names (spec/formats/: TaskFormat.head)."""
    kind = head_kind(fmt)
    if kind == RANKING:
        return dual_encoder.RankingHead(hidden, init_std).to(torch.float32)
    if kind not in HEAD_BUILDERS:
        raise ValueError(f"no fresh head for format {fmt!r}")
    head = HEAD_BUILDERS[kind](hidden, num_labels, dropout)
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=init_std)
            nn.init.zeros_(module.bias)
    return head.to(torch.float32)


def visual_classifier(fmt: str, hidden: int, num_labels: int, dropout: float, init_std: float):
    """What an image task's head (multimodal/prefix.py) reads its pooled output with: the
    text classification head, the same as its text-only controls', or for retrieval the
    caption's projection into the space shared with the images."""
    if fmt != VISUAL_RETRIEVAL:
        return make_head(CLASSIFICATION, hidden, num_labels, dropout, init_std)
    projection = nn.Linear(hidden, hidden)
    nn.init.normal_(projection.weight, std=init_std)
    nn.init.zeros_(projection.bias)
    return projection.to(torch.float32)


def load_saved_heads(model_dir: str | Path) -> dict[str, dict[str, torch.Tensor]]:
    """The trained heads a target phase saved, per task: ``heads.pt`` (full fine-tuning)
    or the adapter's copies of them (peft's modules_to_save, ``...heads.<task>.<param>``)."""
    model_dir = Path(model_dir)
    found: dict[str, dict[str, torch.Tensor]] = {}
    if (model_dir / "heads.pt").is_file():
        for key, value in torch.load(model_dir / "heads.pt", map_location="cpu", weights_only=True).items():
            task, _, param = key.partition(".")
            found.setdefault(task, {})[param] = value
        return found
    adapter = model_dir / ADAPTER_DIR / "adapter_model.safetensors"
    if not adapter.is_file():
        raise InputError(
            f"{model_dir} holds no trained heads (no heads.pt, no {ADAPTER_DIR}/adapter_model.safetensors)"
        )
    from safetensors.torch import load_file

    for key, value in load_file(str(adapter)).items():
        if "heads." in key:
            task, _, param = key.split("heads.", 1)[1].partition(".")
            found.setdefault(task, {})[param.replace("modules_to_save.default.", "")] = value
    return found


class MultiHeadModel(nn.Module):
    """One shared backbone, one output head per task of the phase. The backbone's family
    decides how a sequence is read as one vector (first token, mean, last token)."""

    def __init__(self, encoder: nn.Module, heads: dict[str, nn.Module], family: str = "encoder") -> None:
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict(heads)
        self.family = family
        self.pooling = get_family(family).pooling

    def forward(self, fmt: str, task: str, batch: dict[str, Any]):
        return task_logits(self, fmt, task, batch)


def forward(model, fmt: str, task: str, batch: dict[str, Any]):
    """Logits for one batch of one task. Returns (logits, loss or None).

    Through the model's own ``__call__``: FSDP gathers the root module's sharded weights (the
    embeddings, the heads) in a hook on it, so a forward that reached into ``model.encoder``
    directly would run on shards (distributed.py). Compiled where the job's engine says so
    (compiled.py)."""
    return compiled.forward(model, head_kind(fmt), task, batch)


def encoded(model, batch: dict[str, Any]):
    """The backbone's last hidden states of a batch (sequences x width x hidden): read as one
    padding-free stream when collate packed the batch (packing.py), else padded."""
    if packing.is_packed(batch):
        return packing.hidden_states(model.encoder, batch["input_ids"], batch)
    return model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state


def _ranking_logits(model, head, batch: dict[str, Any]):
    return dual_encoder.logits(model, head, batch)


def _visual_logits(model, head, batch: dict[str, Any]):
    from workflow_scripts.multimodal.prefix import visual_logits

    return visual_logits(model, head, batch, pool)


def _contrastive_logits(model, head, batch: dict[str, Any]):
    from workflow_scripts.multimodal.prefix import contrastive_logits

    return contrastive_logits(model, head, batch, pool)


def _choice_logits(model, head, batch: dict[str, Any]):
    """Each choice encoded as a sequence of its own, scored, the scores compared."""
    import torch.nn.functional as F

    n_choices = batch["input_ids"].shape[1]
    flat = {k: batch[k].flatten(0, 1) for k in ("input_ids", "attention_mask")}
    hidden = encoded(model, {**batch, **flat})
    logits = head(pool(model.pooling, hidden, flat["attention_mask"])).view(-1, n_choices)
    loss = F.cross_entropy(logits, batch["labels"]) if "labels" in batch else None
    return logits, loss


def _classification_logits(model, head, batch: dict[str, Any]):
    import torch.nn.functional as F

    logits = head(pool(model.pooling, encoded(model, batch), batch["attention_mask"]))
    loss = F.cross_entropy(logits, batch["labels"]) if "labels" in batch else None
    return logits, loss


def _span_logits(model, head, batch: dict[str, Any]):
    """Start and end logits per token; padding never wins either."""
    import torch.nn.functional as F

    logits = head(encoded(model, batch))  # (batch, length, 2)
    loss = None
    if "start_positions" in batch:
        mask = batch["attention_mask"] == 0
        start = logits[..., 0].masked_fill(mask, -1e4)
        end = logits[..., 1].masked_fill(mask, -1e4)
        loss = (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2
    return logits, loss


def _token_logits(model, head, batch: dict[str, Any]):
    """One prediction per token (tags, masked tokens); -100 labels are not scored."""
    import torch.nn.functional as F

    logits = head(encoded(model, batch))
    loss = None
    if "labels" in batch:
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), ignore_index=-100)
    return logits, loss


# How each head kind reads a batch: (logits, loss or None), the loss where the batch has labels.
TASK_LOGITS = {
    RANKING: _ranking_logits,
    VISUAL_CLASSIFICATION: _visual_logits,
    VISUAL_ANSWER: _visual_logits,
    VISUAL_RETRIEVAL: _contrastive_logits,
    MULTIPLE_CHOICE: _choice_logits,
    CLASSIFICATION: _classification_logits,
    SPAN: _span_logits,
    TAGGING: _token_logits,
    MLM: _token_logits,
}


def task_logits(model, fmt: str, task: str, batch: dict[str, Any]):
    """MultiHeadModel.forward: the backbone, pooled by its family where a task reads one
    vector per sequence, then the task's head."""
    kind = fmt if fmt in HEAD_KINDS else head_kind(fmt)
    if kind not in TASK_LOGITS:
        raise ValueError(f"unknown format {fmt!r}")
    return TASK_LOGITS[kind](model, model.heads[task], batch)
