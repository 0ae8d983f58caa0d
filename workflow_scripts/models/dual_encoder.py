"""The dual encoder of the ranking targets (Mewsli-X, LAReQA; docs/protocol.md §8), as XTREME-R's
``BertForRetrieval``: two towers that share every weight.

- Vector: the backbone pooled as its family reads one vector per sequence (an encoder's
  first token, as the reference; ``pooling`` may name another: a first token that
  pre-training never trained, as in the demo's tiny encoders, collapses under the
  contrastive loss, where the mean over tokens learns), through a fresh dense + tanh layer
  (the reference reads BERT's pooler, which is that layer), L2-normalised: the score of a
  pair is their cosine.
- Training: in-batch softmax cross-entropy from each query to its gold candidate against
  the other candidates of the (micro-)batch, the cosines scaled by a trained logit scale
  that starts at 100, as the reference's ``BertForRetrieval``.

Its inputs are built by ``data/ranking_inputs.py``; pools are ranked and scored by
``evaluation/pool_ranking.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from workflow_scripts.models.backbones.family import pool
from workflow_scripts.spec.task_options import FormatOptions

# The reference's initial logit scale (a trained parameter).
INITIAL_LOGIT_SCALE = 100.0


class RankingHead(nn.Module):
    """dense + tanh over the pooled sequence, L2-normalised; the trained logit scale.
    ``pooling``: how the sequence is read (None: the backbone family's way)."""

    def __init__(self, hidden: int, init_std: float, pooling: str | None = None) -> None:
        super().__init__()
        self.pooling = pooling
        self.dense = nn.Linear(hidden, hidden)
        nn.init.normal_(self.dense.weight, std=init_std)
        nn.init.zeros_(self.dense.bias)
        # shape (1,), not a scalar: FSDP2 shards every parameter along its first dimension
        self.logit_scale = nn.Parameter(torch.full((1,), INITIAL_LOGIT_SCALE))

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(torch.tanh(self.dense(pooled.float())), p=2, dim=-1)


def configure_head(head: RankingHead, opts: FormatOptions) -> RankingHead:
    """The task's ``pooling`` option on its head (``family``, or none set: the backbone family's)."""
    pooling = opts.pooling or "family"
    head.pooling = None if pooling == "family" else pooling
    return head


def logits(model, head: RankingHead, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Training batch (with candidates): the scaled query x candidate cosines and the
    in-batch softmax loss. Otherwise: the embeddings of ``input_ids`` (no loss)."""
    pooling = head.pooling or model.pooling

    def embed(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return head(pool(pooling, hidden, mask))

    queries = embed(batch["input_ids"], batch["attention_mask"])
    if "candidate_input_ids" not in batch:
        return queries, None
    candidates = embed(batch["candidate_input_ids"], batch["candidate_attention_mask"])
    scores = head.logit_scale * queries @ candidates.T
    loss = nn.functional.cross_entropy(scores, torch.arange(len(scores), device=scores.device))
    return scores, loss
