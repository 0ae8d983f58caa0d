"""What a backbone family answers, and the poolings the families choose from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.spec.families import POOLINGS, FamilyFacts

# The file in a model directory the workflow writes: family, training method and, for an
# adapter, the base model and the adapters merged into it before its own (adapters.py).
MANIFEST = "xstilts_backbone.json"
# The folder of a model directory that holds its adapter (peft's save_pretrained layout).
ADAPTER_DIR = "adapter"


@dataclass(frozen=True)
class Family:
    # Name, poolings, MLM head and default LoRA modules: declared in spec/families.py, which
    # the workflow reads without this package's torch code.
    facts: FamilyFacts
    # The bare network (no LM head, no pooler) from a local directory; keyword arguments go
    # to from_pretrained (a 4-bit quantisation config for QLoRA).
    load: Callable[[Path], Any]
    # The repeated transformer blocks: what FSDP shards one by one and activation
    # checkpointing recomputes.
    blocks: Callable[[Any], list[Any]]
    # Family conventions set on a freshly loaded tokenizer (pad token, padding side).
    prepare_tokenizer: Callable[[Any], Any] = lambda tokenizer: tokenizer

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def pooling(self) -> str:
        """How classification and multiple choice read one vector per sequence."""
        return self.facts.pooling

    @property
    def retrieval_pooling(self) -> str:
        return self.facts.retrieval_pooling

    @property
    def has_mlm(self) -> bool:
        return self.facts.has_mlm

    def lora_targets(self, config: Any) -> list[str]:
        """The linear layers LoRA adapts when the config names none, given the model's config
        (its model_type picks an architecture's own names; None: the family's usual ones)."""
        return list(self.facts.lora_targets_of(getattr(config, "model_type", None)))


def pool(pooling: str, hidden, attention_mask):
    """One vector per sequence from ``hidden`` (batch, positions, width)."""
    if pooling == "first":
        return hidden[:, 0]
    if pooling == "mean":
        return mean_pooled(hidden, attention_mask)
    if pooling == "last":
        return last_token(hidden, attention_mask)
    raise ValueError(f"unknown pooling {pooling!r}; known: {', '.join(POOLINGS)}")


def mean_pooled(hidden, attention_mask):
    """Mean of ``hidden`` over the positions the mask keeps."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


def last_token(hidden, attention_mask):
    """The hidden state at each sequence's last kept position, whichever side was padded:
    the highest position index the mask keeps."""
    import torch

    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.long() * positions).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
