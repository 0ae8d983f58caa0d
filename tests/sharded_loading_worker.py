"""Build sharded training models both ways, for tests/test_sharded_loading.py.

Run under torchrun (or as one plain process). For each scenario of ``--scenarios`` (a JSON
list) every rank builds the model twice from the same seed: the existing path (every rank
loads the whole base with ``adapters.load_backbone``, heads, ``adapters.attach``,
``distributed.shard_model``) and ``sharded_loading.load_sharded_model``; then gathers both
full state dicts and runs one forward pass through each. Rank 0 saves, per scenario, both
state dicts, both logits, whether every rank's gradient shards agree after one backward
pass, and every rank's load statistics to ``--out`` (torch.save), or the
error each rank raised when the scenario expects one. One process group for all scenarios:
torch, transformers and peft are imported once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from workflow_scripts.common import seed_everything
from workflow_scripts.models.adapters import Method, attach, inner, lineage, load_backbone
from workflow_scripts.models.backbones import family_of
from workflow_scripts.models.heads import MultiHeadModel, load_mlm_head, make_head
from workflow_scripts.precision import Precision
from workflow_scripts.training import distributed as D
from workflow_scripts.training import sharded_loading as S

# The phase's heads: what phase_data.load_phase_data builds (init std: the config's initializer_range).
HEADS = {"xnli": ("classification", 3), "udpos": ("tagging", 5)}


def make_heads(encoder, model_dir: str, mlm: str | None) -> dict:
    """The phase's heads, drawn from the global RNG; with ``mlm`` also the masked-LM head
    (``reference``: models.load_mlm_head, ``sharded``: its meta-device counterpart)."""
    std = float(getattr(encoder.config, "initializer_range", 0.02))
    heads = {name: make_head(fmt, encoder.config.hidden_size, n, 0.0, std) for name, (fmt, n) in HEADS.items()}
    if mlm == "reference":
        heads["mlm"] = load_mlm_head(lineage(model_dir).base, encoder)
    elif mlm == "sharded":
        heads["mlm"] = S.empty_mlm_head(model_dir, encoder)
    return heads


def method_of(scenario: dict) -> Method:
    return Method(name=scenario["method"], rank=4, alpha=8, dropout=0.0, precision=scenario.get("precision", "fp32"))


def reference(scenario: dict, ctx: D.Context):
    """train.py's path today, on ``reference_dir`` when the scenario names one (the fp32 copy
    of a 16-bit checkpoint: the weights full fine-tuning of the checkpoint starts from)."""
    method = method_of(scenario)
    model_dir = scenario.get("reference_dir", scenario["dir"])
    seed_everything(scenario["seed"])
    encoder = load_backbone(model_dir, method)
    heads = make_heads(encoder, model_dir, "reference" if scenario.get("mlm") else None)
    family = family_of(model_dir)
    model = MultiHeadModel(encoder, heads, family.name).to(ctx.device)
    peft_model = attach(model, method, dict(HEADS)) if method.adapters else None
    model = inner(peft_model) if peft_model is not None else model
    D.shard_model(
        model,
        tuple({type(b) for b in family.blocks(model.encoder)}),
        ctx,
        precision=Precision(method.precision),
        activation_checkpointing=bool(scenario.get("activation_checkpointing")),
    )
    return model


def sharded(scenario: dict, ctx: D.Context):
    method = method_of(scenario)
    seed_everything(scenario["seed"])
    mlm = "sharded" if scenario.get("mlm") else None
    built = S.load_sharded_model(
        scenario["dir"],
        method,
        lambda encoder: make_heads(encoder, scenario["dir"], mlm),
        ctx,
        head_formats=dict(HEADS),
        activation_checkpointing=bool(scenario.get("activation_checkpointing")),
    )
    return built.model, built.stats


def batch(vocab: int, labels: bool = False) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(11)
    ids = torch.randint(3, vocab, (3, 7), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    mask[2, 3:] = 0
    found = {"input_ids": ids, "attention_mask": mask}
    if labels:
        found["labels"] = torch.tensor([0, 2, 1])
    return found


def logits(model, vocab: int) -> dict[str, torch.Tensor]:
    model.eval()
    out = {}
    with torch.no_grad():
        for name, (fmt, _) in HEADS.items():
            out[name] = model(fmt, name, batch(vocab))[0].clone()
        if "mlm" in model.heads:
            out["mlm"] = model("mlm", "mlm", batch(vocab))[0].clone()
    return out


def gradients(model, vocab: int) -> dict[str, torch.Tensor]:
    """This rank's shard of every gradient after one backward pass (the xnli head's loss: the
    other heads get none)."""
    model.train()
    _, loss = model("classification", "xnli", batch(vocab, labels=True))
    loss.backward()
    return {n: p.grad.to_local().clone() for n, p in model.named_parameters() if p.grad is not None}


def ties(model) -> list[bool]:
    """Whether each tie the model should have holds (the MLM head's output layer is the input embeddings)."""
    if "mlm" not in model.heads:
        return []
    return [model.heads["mlm"].decoder.weight is model.encoder.get_input_embeddings().weight]


def local_storage(model) -> int:
    """Bytes of the storages behind this rank's parameter shards (FSDP2 pads uneven ones)."""
    return sum(p.to_local().untyped_storage().nbytes() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ctx = D.init_from_env()
    results = {}
    for scenario in json.loads(args.scenarios.read_text()):
        name = scenario["name"]
        if scenario.get("expect_error"):
            try:
                sharded(scenario, ctx)
            except Exception as error:  # noqa: BLE001 - the test asserts on type and message
                found = {
                    "type": type(error).__name__,
                    "message": str(error),
                    "classes": [c.__name__ for c in type(error).__mro__],
                }
            else:
                found = {"type": None, "message": "no error", "classes": []}
            gathered = [None] * ctx.world_size if ctx.distributed else [found]
            if ctx.distributed:
                torch.distributed.all_gather_object(gathered, found)
            results[name] = {"errors": gathered}
            continue
        vocab = json.loads((Path(lineage(scenario["dir"]).base) / "config.json").read_text())["vocab_size"]
        ref = reference(scenario, ctx)
        model, stats = sharded(scenario, ctx)
        mine = {
            **dataclasses.asdict(stats),
            "rank": ctx.rank,
            "storage_bytes": local_storage(model),
            "trainable": sorted(n for n, p in model.named_parameters() if p.requires_grad),
            "reference_trainable": sorted(n for n, p in ref.named_parameters() if p.requires_grad),
            "ties": ties(model),
            "reference_ties": ties(ref),
            # this rank's shards: what the optimiser would update (fp32 master weights for full)
            "dtypes": sorted({str(p.to_local().dtype) for p in model.parameters()}),
            "trainable_dtypes": sorted({str(p.to_local().dtype) for p in model.parameters() if p.requires_grad}),
        }
        found = {
            "reference": D.full_state_dict(ref, ctx),
            "sharded": D.full_state_dict(model, ctx),
            "trainable": D.trainable_state_dict(model, ctx),  # what an adapter phase gathers
        }
        if scenario.get("forward", True):  # (a bf16 backbone under fp32 heads runs under GPU autocast only)
            found.update(reference_logits=logits(ref, vocab), sharded_logits=logits(model, vocab))
            ref_grads, grads = gradients(ref, vocab), gradients(model, vocab)
            mine["gradient_names_equal"] = sorted(ref_grads) == sorted(grads)
            mine["gradients"] = len(grads)
            mine["gradient_mismatches"] = [
                n for n in ref_grads if n in grads and not torch.equal(ref_grads[n], grads[n])
            ]
        per_rank = [None] * ctx.world_size if ctx.distributed else [mine]
        if ctx.distributed:
            torch.distributed.all_gather_object(per_rank, mine)
        results[name] = {**found, "stats": per_rank}
        del ref, model
    if ctx.is_main:
        torch.save(results, args.out)
    D.shutdown(ctx)


if __name__ == "__main__":
    main()
