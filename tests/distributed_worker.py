"""A tiny training run through workflow_scripts.training.distributed, for tests/test_distributed.py.

Run as one process (``python tests/distributed_worker.py ...``) or under torchrun. Every rank
builds the same seeded global batches (uneven size, several micro-steps), trains its share,
and rank 0 writes the loss curve and the final full weights to ``--out``. Options make it
stop itself: ``--signal-parent-at`` (rank 0 sends SIGTERM to its parent, torchrun, after that
step: a real preemption, forwarded by torchrun to every worker), ``--die-at`` (rank 1 exits
with code 3 at that step, without a word to anyone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

from workflow_scripts.precision import Precision
from workflow_scripts.training import distributed as D

VOCAB, LENGTH, EXAMPLES = 40, 6, 45


class Block(nn.Module):
    """A transformer block: the unit FSDP shards (XLMRobertaLayer's role)."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=dropout, batch_first=True)

    def forward(self, hidden):
        return self.layer(hidden)


class Tiny(nn.Module):
    """Embeddings, two blocks, a classification head and an LM head tied to the embeddings
    (as MultiHeadModel with MLM): tied weights must survive sharding and checkpoints."""

    def __init__(self, width: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, width)
        self.blocks = nn.ModuleList([Block(width, dropout) for _ in range(2)])
        self.classifier = nn.Linear(width, 3)
        self.lm = nn.Linear(width, VOCAB)
        self.lm.weight = self.embeddings.weight

    def forward(self, ids, labels, tokens):
        hidden = self.embeddings(ids)
        for block in self.blocks:
            hidden = block(hidden)
        loss = nn.functional.cross_entropy(self.classifier(hidden[:, 0]).float(), labels)
        return loss + nn.functional.cross_entropy(self.lm(hidden).flatten(0, 1).float(), tokens.flatten())


def dataset(seed: int = 7) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [([rng.randrange(VOCAB) for _ in range(LENGTH)], rng.randrange(3)) for _ in range(EXAMPLES)]


class Batches:
    """Endless seeded global batches, reshuffled at every pass (training/sampling.py's TaskStream)."""

    def __init__(self, examples: list, size: int, seed: int) -> None:
        self.examples, self.size, self.rng, self.order = examples, size, random.Random(seed), []

    def next(self) -> list:
        if len(self.order) < self.size:
            self.order = list(range(len(self.examples)))
            self.rng.shuffle(self.order)
        taken, self.order = self.order[: self.size], self.order[self.size :]
        return [self.examples[i] for i in taken]

    def state(self):
        return {"rng": self.rng.getstate(), "order": self.order}

    def restore(self, state) -> None:
        self.rng.setstate(state["rng"])
        self.order = state["order"]


def tensors(chunk: list, dev):
    ids = torch.tensor([ids for ids, _ in chunk], device=dev)
    labels = torch.tensor([label for _, label in chunk], device=dev)
    return ids, labels, ids.roll(1, dims=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=7)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds per step (a signal lands mid-run)")
    ap.add_argument("--signal-parent-at", type=int, default=0)
    ap.add_argument("--die-at", type=int, default=0)
    args = ap.parse_args()

    ctx = D.init_from_env()
    torch.manual_seed(0)  # the same initial weights on every rank (and in a single process)
    # On this process's device before sharding: a single process (the GPU test's reference)
    # is not sharded, and shard_model moves only what it shards.
    model = D.shard_model(
        Tiny(dropout=args.dropout).to(ctx.device),
        (Block,),
        ctx,
        precision=Precision("bf16" if args.bf16 else "fp32"),
        activation_checkpointing=args.activation_checkpointing,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    batches = Batches(dataset(), args.batch, seed=1)
    torch.manual_seed(100 + ctx.rank)  # dropout: each rank its own stream, restored per rank on resume
    losses, start, resumed_at = [], 0, None
    if args.checkpoint:
        extra = D.load_checkpoint(args.checkpoint, model, optimizer, ctx)
        if extra is not None:
            start = resumed_at = extra["step"]
            losses = extra["losses"]
            scheduler.load_state_dict(extra["scheduler"])
            batches.restore(extra["batches"])

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))

    def checkpoint(step: int) -> None:
        D.save_checkpoint(
            args.checkpoint,
            model,
            optimizer,
            {"step": step, "losses": losses, "scheduler": scheduler.state_dict(), "batches": batches.state()},
            ctx,
        )

    for step in range(start, args.steps):
        if args.die_at and step == args.die_at and ctx.rank == 1:
            os._exit(3)
        step_loss = torch.zeros((), device=ctx.device)
        for chunk, weight in D.micro_batches(batches.next(), ctx, args.micro):
            loss = model(*tensors(chunk, ctx.device)) * weight
            loss.backward()
            step_loss += loss.detach() / ctx.world_size  # weight / W = this chunk's share of the batch
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(D.sum_over_ranks(step_loss, ctx)))
        time.sleep(args.sleep)
        if args.signal_parent_at and step + 1 == args.signal_parent_at and ctx.is_main:
            os.kill(os.getppid(), signal.SIGTERM)
        if D.any_rank(bool(stop), ctx):
            checkpoint(step + 1)
            D.shutdown(ctx)
            sys.exit(128 + signal.SIGTERM)
        if args.checkpoint and args.checkpoint_every and (step + 1) % args.checkpoint_every == 0:
            checkpoint(step + 1)

    # Evaluation: every rank runs the same forwards (FSDP gathers each block's weights from
    # all ranks), and rank 0's score is the one every rank acts on.
    model.eval()
    with torch.no_grad():
        eval_loss = float(model(*tensors(dataset(), ctx.device)))
    eval_loss = D.from_rank0(eval_loss, ctx)
    weights = D.full_state_dict(model, ctx)
    if ctx.is_main:
        torch.save(weights, args.out.with_suffix(".pt"))
        args.out.write_text(
            json.dumps(
                {
                    "losses": losses,
                    "eval_loss": eval_loss,
                    "resumed_at": resumed_at,
                    "world_size": ctx.world_size,
                    "tied": model.lm.weight is model.embeddings.weight,
                }
            )
        )
    D.barrier(ctx)  # as the training runtime's finish: no rank tears gloo down while another still writes
    D.shutdown(ctx)


if __name__ == "__main__":
    main()
