"""Images into a text backbone: a trained projector maps a frozen vision encoder's features
(cached per image, features.py) into the backbone's token-embedding space, and the projected
vectors join the text's token embeddings as extra positions (docs/protocol.md §9: VisualBERT's
early fusion for encoders, LLaVA's two-layer GELU projector for both).

Where the visual tokens go depends on how the family reads a sequence as one vector:
- first-token pooling (encoders): right after each sequence's own tokens, before its padding.
  The text keeps the positions it has in the text-only target phase, the first token stays
  the pooled one, and an example's positions never depend on the batch it is in;
- last-token or mean pooling (decoders, T5 encoders): before the text, as LLaVA's prefix, so
  that under causal attention every text position sees the image and the pooled last token
  is still the text's.

The projector and the classifier are one head (``VisualClassificationHead``): heads are
discarded after the intermediate phase (and saved whole by adapters, peft's
``modules_to_save``), so the visual branch goes with them and the target phase starts from a
text-only backbone. The feature bank rides on the head as a non-persistent buffer: it moves
to the training device with the model and is never written into a checkpoint.
"""

from __future__ import annotations

import torch
from torch import nn

from workflow_scripts.spec.basics import InputError

AFTER_TEXT = "after_text"
PREFIX = "prefix"


def placement_for(pooling: str) -> str:
    """Where a family with this pooling takes the visual tokens (see the module's docstring)."""
    return AFTER_TEXT if pooling == "first" else PREFIX


class VisualClassificationHead(nn.Module):
    """The projector (LLaVA's Linear-GELU-Linear) and a classification head of the usual shape.

    Called with ``image_index`` (batch, images per row) it returns the projected visual tokens
    of each row's images, one image after the other (batch, images x tokens, hidden); called with pooled hidden states it returns the logits. One
    module, called through its own ``__call__`` both times, so a peft wrapper of the head
    (which trains a copy) runs the copy in both roles."""

    def __init__(
        self, bank: torch.Tensor, hidden: int, classifier: nn.Module, init_std: float, images_per_row: int = 1
    ) -> None:
        super().__init__()
        if bank.dim() == 2:  # pooled features: one visual token per image
            bank = bank[:, None, :]
        feature_dim = bank.shape[-1]
        self.projector = nn.Sequential(nn.Linear(feature_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        # At the token embeddings' scale (the backbone's init std): visual tokens an order of
        # magnitude larger than the words beside them left the demo's encoder stuck at the
        # hypothesis-only accuracy (3 of 3 seeds), at this scale it used the image (3 of 3).
        for module in self.projector:
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=init_std)
                nn.init.zeros_(module.bias)
        self.classifier = classifier
        # Which image a visual token belongs to (NLVR2's statements name the left or the
        # right one): a learned vector per image slot, added to its tokens.
        self.slots = nn.Parameter(torch.randn(images_per_row, hidden) * init_std)
        self.register_buffer("bank", bank, persistent=False)

    @property
    def visual_tokens(self) -> int:
        return int(self.bank.shape[1])

    def forward(self, pooled: torch.Tensor | None = None, image_index: torch.Tensor | None = None) -> torch.Tensor:
        if image_index is not None:  # (batch, images per row)
            features = self.bank[image_index.to(self.bank.device)]  # (batch, images, tokens, width)
            weight = self.projector[0].weight
            tokens = self.projector(features.to(weight.dtype)) + self.slots[None, :, None, :]
            return tokens.flatten(1, 2)  # the images' tokens one after the other
        return self.classifier(pooled)


def join(
    embeds: torch.Tensor, mask: torch.Tensor, visual: torch.Tensor, placement: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(embeddings, attention mask) of each text with its visual tokens placed as ``placement``
    says. ``embeds`` (batch, width, hidden) are right-padded texts, ``mask`` their mask,
    ``visual`` (batch, tokens, hidden)."""
    batch, width, hidden = embeds.shape
    tokens = visual.shape[1]
    visual = visual.to(embeds.dtype)
    ones = torch.ones(batch, tokens, dtype=mask.dtype, device=mask.device)
    if placement == PREFIX:
        return torch.cat([visual, embeds], 1), torch.cat([ones, mask], 1)
    if placement != AFTER_TEXT:
        raise ValueError(f"unknown visual placement {placement!r}")
    # Text position j stays at j; the visual tokens take L..L+K-1 (L: the text's length);
    # padding moves behind them.
    lengths = mask.sum(1, keepdim=True)  # (batch, 1)
    positions = torch.arange(width, device=mask.device).expand(batch, width)
    text_target = torch.where(positions < lengths, positions, positions + tokens)
    visual_target = lengths + torch.arange(tokens, device=mask.device)
    out = embeds.new_zeros(batch, width + tokens, hidden)
    out.scatter_(1, text_target[..., None].expand(-1, -1, hidden), embeds)
    out.scatter_(1, visual_target[..., None].expand(-1, -1, hidden), visual)
    joined_mask = (torch.arange(width + tokens, device=mask.device) < lengths + tokens).to(mask.dtype)
    return out, joined_mask


# Caption-image similarities are cosines times this (a temperature of 0.05, as SimCSE's).
CONTRASTIVE_SCALE = 20.0


def contrastive_logits(model, head, batch: dict, pool_fn) -> tuple[torch.Tensor, torch.Tensor]:
    """Image-caption retrieval: the backbone reads the caption alone (pooled, then the head's
    text projection), the image is its projected visual tokens' mean; symmetric InfoNCE over
    the batch, captions of the same image each other's positives. Returns the two unit
    embeddings side by side (batch, 2 x hidden), which evaluation ranks, and the loss."""
    import torch.nn.functional as F

    hidden = model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    text = F.normalize(head(pool_fn(model.pooling, hidden, batch["attention_mask"])).float(), dim=-1)
    image = F.normalize(head(image_index=batch["image_index"]).mean(1).float(), dim=-1)
    logits = CONTRASTIVE_SCALE * text @ image.T
    first = batch["image_index"][:, 0].to(logits.device)
    same = (first[:, None] == first[None, :]).float()
    targets = same / same.sum(1, keepdim=True)
    loss = (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2
    return torch.cat([text, image], dim=1), loss


def visual_logits(model, head, batch: dict, pool_fn) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits, loss or None) of a visual classification batch: input_ids, attention_mask,
    image_index (rows of the head's feature bank), labels when training."""
    import torch.nn.functional as F

    embeddings = model.encoder.get_input_embeddings()(batch["input_ids"])
    visual = head(image_index=batch["image_index"])
    inputs, mask = join(embeddings, batch["attention_mask"], visual, placement_for(model.pooling))
    hidden = model.encoder(inputs_embeds=inputs, attention_mask=mask).last_hidden_state
    logits = head(pool_fn(model.pooling, hidden, mask))
    loss = None
    if "labels" in batch:
        loss = F.cross_entropy(logits, batch["labels"])
    elif "answer_ids" in batch:  # VQA: binary cross-entropy against soft targets, summed over answers
        targets = torch.zeros_like(logits, dtype=torch.float32)
        known = batch["answer_ids"] >= 0
        rows = torch.arange(logits.shape[0], device=logits.device)[:, None].expand_as(batch["answer_ids"])
        targets[rows[known], batch["answer_ids"][known]] = batch["answer_scores"][known].to(targets.device)
        loss = F.binary_cross_entropy_with_logits(logits.float(), targets, reduction="sum") / logits.shape[0]
    return logits, loss


def stand_in_head(name: str, hidden: int, classifier: nn.Module, saved: dict[str, tuple[int, ...]]):
    """A head of the shapes an adapter saved for image task ``name`` (``saved``: tensor name ->
    shape) around ``classifier``, to receive its weights when the adapter is loaded and merged;
    the feature bank, never saved, is a placeholder of the right width."""

    def shape(suffix: str) -> tuple[int, ...]:
        found = [s for key, s in saved.items() if f"heads.{name}." in key and key.endswith(suffix)]
        if not found:
            raise InputError(f"the adapter holds no {suffix} of image task {name}'s head")
        return found[0]

    feature_dim = shape("projector.0.weight")[1]
    slots = shape("slots")[0]
    return VisualClassificationHead(torch.zeros(1, 1, feature_dim), hidden, classifier, 0.02, slots)
