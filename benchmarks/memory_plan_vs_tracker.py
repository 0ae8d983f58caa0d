"""The memory model (workflow_scripts/planning/memory_model.py) against PyTorch's own accounting.

For each backbone x method (full, LoRA, QLoRA), with and without MLM (encoder only) and with
and without images, one training step of the project's own model runs under
``FakeTensorMode`` (tensors with shapes and dtypes, no storage) inside torch's
``MemTracker`` (one device) or ``FSDPMemTracker`` (one rank of a fake 16-rank process
group), and its peak is printed beside the planner's:

- the model: the family's transformers class at the real width, heads from
  ``models/heads.py`` (``make_head``, the MLM head tied to the embeddings as
  ``load_mlm_head`` ties it, ``multimodal/prefix.py``'s ``VisualClassificationHead`` with its
  feature bank), ``MultiHeadModel``, ``adapters.attach`` for LoRA/QLoRA, and for BLOOM
  ``training.distributed.shard_model`` (FSDP2, bf16 ``MixedPrecisionPolicy``, activation
  checkpointing);
- the step: the forward under bf16 autocast through ``heads.forward``, backward,
  ``clip_grad_norm_``, fused AdamW, ``zero_grad(set_to_none=True)``: train.py's loop. Two steps
  run; the peak is the second's (AdamW's moments exist from the first step on), read from
  the tracker's peak snapshot taken over the second step only;
- the device is the CPU, not CUDA: a CPU-only torch cannot create fake CUDA tensors (ops
  fail with "not linked with support for cuda devices"), so fake CPU tensors stand for them
  and CPU autocast (bf16) for CUDA's. Both autocasts run linear layers, matmuls and SDPA in
  bf16 and keep layer norm and the loss in fp32; the tracker rounds CUDA allocations up to
  512 bytes, which is below the table's precision;
- layers: each model is built at its full depth (fake tensors allocate nothing; a row takes
  15 s to 2.5 min on two cores);
- QLoRA: bitsandbytes' 4-bit weights cannot be faked, so each ``nn.Linear`` of the base is
  replaced by ``PackedNF4Linear``: a uint8 weight of the exact packed size (0.5 byte per
  parameter), the double-quantised constants (an 8-bit absmax per 64 weights as uint8 and an
  fp32 constant per 256 of those) as buffers, and a forward that dequantises a bf16 copy of
  the weight for its matmul and saves only its input, as bitsandbytes' ``MatMul4Bit`` does.
  peft's ``prepare_model_for_kbit_training`` then upcasts what is not quantised, as on a GPU;
- BLOOM 176B: one rank of 16 (fake process group, ``FakeStore``) under ``FSDPMemTracker``
  for full fine-tuning and LoRA; QLoRA on one GPU, as the engine trains it (a process group
  refuses qlora: training/sharded_loading.py).

The planner's column is ``MemoryEstimate.tensors``: its total without the fixed 2 GB reserve
for the CUDA context and workspaces, which no tensor tracker sees.

Run: ``python benchmarks/memory_plan_vs_tracker.py [--json rows.json] [--only xlmr_large]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow_scripts.models import adapters
from workflow_scripts.models.heads import MultiHeadModel, forward, make_head, visual_classifier
from workflow_scripts.planning import memory_model as mm
from workflow_scripts.planning import memory_plan as mp
from workflow_scripts.spec.method import METHODS

GIB = 2**30
SEQ_LEN = 256
MICRO_BATCH = 8
WORLD = 16
# snli_ve's images (Flickr30k, 31,783) through the default tower (CLIP ViT-B/32: 50 tokens of 768)
BANK_IMAGES, BANK_TOKENS, BANK_WIDTH = 31_783, 50, 768


@dataclass(frozen=True)
class Shape:
    """A backbone at its real width; ``make_config(layers)`` its transformers config."""

    name: str
    family: str
    layers: int
    heads: int
    hidden: int
    intermediate: int
    vocab: int
    make_config: Callable[[int], Any]
    block: str  # the transformer block's class name (FSDP units, activation checkpointing)
    world: int = 1  # > 1: one rank of an FSDP2 group of this size
    checkpointing: bool = False


@dataclass(frozen=True)
class Case:
    shape: Shape
    method: str
    task: str = "mnli"  # mnli (classification), mlm, snli_ve (images)
    world: int = 1

    @property
    def label(self) -> str:
        gpus = f", 1 of {self.world} GPUs" if self.world > 1 else ""
        return f"{self.shape.name} {self.method} {self.task}{gpus}"


@dataclass
class Row:
    case: str
    planner_gib: float
    tracker_gib: float
    ratio: float
    breakdown_gib: dict[str, float]
    planner_breakdown_gib: dict[str, float]
    note: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def xlmr_config(layers: int):
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(
        vocab_size=250002,
        hidden_size=1024,
        num_hidden_layers=layers,
        num_attention_heads=16,
        intermediate_size=4096,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=1,
        # CUDA's SDPA regenerates attention dropout in the backward pass; the CPU's keeps an
        # s x s mask per head, which a GPU run never holds (memory_model.ACTIVATION_HIDDEN)
        attention_probs_dropout_prob=0.0,
    )


def llama_config(layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=32,
        pad_token_id=0,
    )


def bloom_config(layers: int):
    from transformers import BloomConfig

    return BloomConfig(vocab_size=250880, hidden_size=14336, n_layer=layers, n_head=112, pad_token_id=3)


# transformers' BLOOM has no SDPA path: it computes eager attention, the scores kept.
ATTENTION = {"bloom_176b": "eager"}


XLMR = Shape("xlmr_large", "encoder", 24, 16, 1024, 4096, 250002, xlmr_config, "XLMRobertaLayer")
LLAMA = Shape("llama2_7b", "decoder", 32, 32, 4096, 11008, 32000, llama_config, "LlamaDecoderLayer")
BLOOM = Shape("bloom_176b", "decoder", 70, 112, 14336, 57344, 250880, bloom_config, "BloomBlock", checkpointing=True)


def cases() -> list[Case]:
    found = []
    for method in METHODS:
        found += [Case(XLMR, method, task) for task in ("mnli", "mlm", "snli_ve")]
        found += [Case(LLAMA, method, task) for task in ("mnli", "snli_ve")]
        found.append(Case(BLOOM, method, "mnli", world=1 if method == "qlora" else WORLD))
    return found


# ----- the QLoRA base ------------------------------------------------------------------------


class _Dequantised(torch.autograd.Function):
    """x @ W.T with W dequantised to bf16 in forward and again in backward; only x is saved."""

    @staticmethod
    def forward(ctx, x, packed, out_features: int, in_features: int):
        ctx.shape = (out_features, in_features)
        ctx.save_for_backward(packed)
        weight = torch.empty(out_features, in_features, dtype=torch.bfloat16, device=x.device)
        return x.to(torch.bfloat16) @ weight.t()

    @staticmethod
    def backward(ctx, grad):
        weight = torch.empty(*ctx.shape, dtype=torch.bfloat16, device=grad.device)
        return grad.to(torch.bfloat16) @ weight, None, None, None


class PackedNF4Linear(nn.Linear):
    """A 4-bit NF4 linear layer's memory: packed weight and double-quantised constants."""

    def __init__(self, linear: nn.Linear) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        n = self.in_features * self.out_features
        device = linear.weight.device
        self.weight = nn.Parameter(torch.empty((n + 1) // 2, dtype=torch.uint8, device=device), requires_grad=False)
        self.bias = linear.bias  # bitsandbytes keeps the bias unquantised
        self.register_buffer("absmax", torch.empty(-(-n // 64), dtype=torch.uint8, device=device))
        self.register_buffer("nested_absmax", torch.empty(-(-n // (64 * 256)), dtype=torch.float32, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = _Dequantised.apply(x, self.weight, self.out_features, self.in_features)
        return out + self.bias.to(out.dtype) if self.bias is not None else out


def quantise_linears(encoder: nn.Module) -> int:
    """Every nn.Linear of the backbone replaced by its packed stand-in (bitsandbytes quantises
    all linear layers of a bare backbone: it has no lm_head to skip)."""
    targets = [(parent, name, child) for parent in encoder.modules() for name, child in parent.named_children()]
    count = 0
    for parent, name, child in targets:
        if type(child) is nn.Linear:
            setattr(parent, name, PackedNF4Linear(child))
            count += 1
    return count


# ----- building the model on the meta device -------------------------------------------------


def build_encoder(shape: Shape, layers: int, method: str) -> nn.Module:
    """The bare backbone on meta, in the dtype the engine loads it in on a GPU."""
    from transformers import AutoModel

    config = shape.make_config(layers)
    config.use_cache = False  # train.py: training never decodes
    config._attn_implementation = ATTENTION.get(shape.name, "sdpa")
    model_class = AutoModel._model_mapping[type(config)]
    extra = {"add_pooling_layer": False} if shape.family == "encoder" else {}
    encoder = model_class(config, **extra)
    if method == "lora":  # adapters.quantisation_kwargs: the frozen base in bf16
        encoder.to(torch.bfloat16)
    if method == "qlora":  # non-quantised weights in the compute dtype, as bitsandbytes loads them
        encoder.to(torch.bfloat16)
        quantise_linears(encoder)
    return encoder


def mlm_head(shape: Shape, layers: int, encoder: nn.Module) -> nn.Module:
    """XLM-R's LM head with its decoder tied to the encoder's embeddings (heads.load_mlm_head)."""
    from transformers import XLMRobertaForMaskedLM

    head = XLMRobertaForMaskedLM(shape.make_config(1)).lm_head.to(torch.float32)
    head.decoder.weight = encoder.get_input_embeddings().weight
    return head


def task_heads(case: Case, encoder: nn.Module) -> dict[str, nn.Module]:
    from workflow_scripts.multimodal.prefix import VisualClassificationHead

    h = case.shape.hidden
    if case.task == "mlm":
        return {"mlm": mlm_head(case.shape, 1, encoder)}
    if case.task == "snli_ve":
        bank = torch.empty(BANK_IMAGES, BANK_TOKENS, BANK_WIDTH, dtype=torch.float16)
        classifier = visual_classifier("visual_classification", h, 3, 0.1, 0.02)
        return {"snli_ve": VisualClassificationHead(bank, h, classifier, 0.02, 1)}
    return {"mnli": make_head("classification", h, 3, 0.1, 0.02)}


def head_format(task: str) -> str:
    return {"mnli": "classification", "mlm": "mlm", "snli_ve": "visual_classification"}[task]


def build_model(case: Case, layers: int) -> nn.Module:
    """MultiHeadModel (+ peft, + FSDP2) on the meta device, as training builds it."""
    with torch.device("meta"):
        encoder = build_encoder(case.shape, layers, case.method)
        heads = task_heads(case, encoder)
        model = MultiHeadModel(encoder, heads, case.shape.family)
        if case.method != "full":
            formats = {n: (head_format(n), 3) for n in heads if n != "mlm"}
            model = adapters.inner(adapters.attach(model, adapters.Method(name=case.method), formats))
    if case.world > 1:
        shard(model, case.shape)
    elif case.shape.checkpointing:
        from workflow_scripts.training.distributed import shard_model

        shard_model(model, block_classes(model, case.shape), SimpleNamespace(distributed=False), True, True)
    return model


def block_classes(model: nn.Module, shape: Shape) -> tuple[type, ...]:
    return tuple({type(m) for m in model.modules() if type(m).__name__ == shape.block})


def shard(model: nn.Module, shape: Shape) -> None:
    """distributed.shard_model over a fake 16-rank group (rank 0 stands for every rank)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from workflow_scripts.training.distributed import shard_model

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    ctx = SimpleNamespace(distributed=True, device=torch.device("cpu"), world_size=WORLD)
    shard_model(model, block_classes(model, shape), ctx, True, shape.checkpointing, sync_module_states=False)


# ----- one tracked training step -------------------------------------------------------------


def batch(case: Case) -> dict[str, torch.Tensor]:
    """A micro-batch of the case's task (values are irrelevant: only shapes and dtypes count)."""
    b, s = MICRO_BATCH, SEQ_LEN
    found = {"input_ids": torch.randint(0, 100, (b, s)), "attention_mask": torch.ones(b, s, dtype=torch.long)}
    if case.task == "mlm":
        found["labels"] = torch.randint(0, 100, (b, s))
    else:
        found["labels"] = torch.randint(0, 3, (b,))
    if case.task == "snli_ve":
        found["image_index"] = torch.randint(0, BANK_IMAGES, (b, 1))
    return found


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, case: Case, inputs: dict) -> None:
    """train.py's step: autocast forward, backward, clipping, fused AdamW, zero_grad."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = forward(model, head_format(case.task), case.task, inputs)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


class _NoHook:
    def remove(self) -> None:
        pass


def frozen_aware(tracker_class: type) -> type:
    """``tracker_class`` that hooks gradients of trainable parameters only: torch's trackers
    register a gradient hook on every parameter a module owns, which raises for the frozen
    base of LoRA ("cannot register a hook on a tensor that doesn't require gradient")."""

    class Tracker(tracker_class):
        def _track_module_params_and_buffers(self, module: nn.Module, install_grad_hooks: bool = True):
            frozen = [p for p in module.parameters() if not p.requires_grad]
            for p in frozen:  # already seen: the parent installs no hook on it
                self._param_to_grad_hook_handles.setdefault(p, (_NoHook(), _NoHook()))
            return super()._track_module_params_and_buffers(module, install_grad_hooks)

    return Tracker


def category(key: Any) -> str:
    """The tracker's reference type as the table names it (FSDP's sharded/unsharded kept apart)."""
    name = str(getattr(key, "value", key))
    return {"Parameter": "params", "Gradient": "grads", "Optstate": "optimizer", "Activation": "activations"}.get(
        name, name.lower().replace(" ", "_")
    )


def base_parameters(encoder: nn.Module) -> float:
    """The backbone's parameter count, a packed NF4 weight counted as the weights it stands for."""
    packed = {id(m.weight): m.in_features * m.out_features for m in encoder.modules() if isinstance(m, PackedNF4Linear)}
    return float(sum(packed.get(id(p), p.numel()) for p in encoder.parameters()))


def tracked_peak(case: Case, layers: int) -> tuple[dict[str, float], float]:
    """The second step's peak snapshot (bytes per category) and the model's parameter count."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    model = build_model(case, layers)
    parameters = base_parameters(model.encoder)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        if case.task == "mlm":  # to_empty gives each module its own tensor: tie them again
            model.heads["mlm"].decoder.weight = model.encoder.get_input_embeddings().weight
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True)
        inputs = batch(case)
        train_step(model, optimizer, case, inputs)  # AdamW's moments exist from here on
        tracker = frozen_aware(FSDPMemTracker)(model, optimizer) if case.world > 1 else frozen_aware(MemTracker)()
        if case.world > 1:
            tracker.track_inputs((inputs,))
        else:
            tracker.track_external(model, optimizer, inputs)
        with tracker:
            train_step(model, optimizer, case, inputs)
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    found: dict[str, float] = {}
    for key, value in peak.items():
        if key != "Total":
            found[category(key)] = found.get(category(key), 0.0) + value
    return found, parameters


# ----- the planner's side and the table ----------------------------------------------------


def planned(case: Case, parameters: float) -> mm.MemoryEstimate:
    """The planner's estimate of the case, given the model's parameter count."""
    shape = case.shape
    entry = {
        "name": shape.name,
        "family": shape.family,
        "method": case.method,
        "precision": "bf16",
        "parameters": parameters,
        "activation_checkpointing": shape.checkpointing,
        "architecture": {
            "hidden_size": shape.hidden,
            "num_layers": shape.layers,
            "num_attention_heads": shape.heads,
            "vocab_size": shape.vocab,
            "intermediate_size": shape.intermediate,
        },
    }
    arch = mm.parse_backbone(shape.name, entry).architecture
    images = case.task == "snli_ve"
    seq_len = SEQ_LEN + (BANK_TOKENS if images else 0)
    bank = float(BANK_IMAGES * BANK_TOKENS * BANK_WIDTH * 2) if images else 0.0
    heads = mp.task_head_parameters(case.task, arch)
    return mm.estimate(entry, seq_len, MICRO_BATCH, case.world, case.task == "mlm", heads, bank)


NOTES = {
    "bloom_176b": "eager attention (transformers' BLOOM has no SDPA); activation checkpointing",
}


def compare(case: Case) -> Row:
    started = time.time()
    peak, parameters = tracked_peak(case, case.shape.layers)
    plan = planned(case, parameters)
    tracker = sum(peak.values())
    return Row(
        case=case.label,
        planner_gib=plan.tensors / GIB,
        tracker_gib=tracker / GIB,
        ratio=plan.tensors / tracker,
        breakdown_gib={k: round(v / GIB, 2) for k, v in sorted(peak.items()) if v},
        planner_breakdown_gib={
            k: round(getattr(plan, k) / GIB, 2)
            for k in ("weights", "gradients", "optimizer", "buffers", "activations", "autocast_copies")
        },
        note=NOTES.get(case.shape.name, ""),
        seconds=round(time.time() - started, 1),
    )


def markdown(rows: list[Row]) -> str:
    lines = [
        "| case | planner GiB | tracker GiB | ratio | tracker breakdown (GiB) | note |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        parts = ", ".join(f"{k} {v:g}" for k, v in r.breakdown_gib.items())
        flag = "" if abs(r.ratio - 1) <= TOLERANCE else " **outside 15%**"
        lines.append(
            f"| {r.case} | {r.planner_gib:.2f} | {r.tracker_gib:.2f} | {r.ratio:.2f}{flag} | {parts} | {r.note} |"
        )
    return "\n".join(lines)


TOLERANCE = 0.15


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--only", nargs="*", default=[], help="cases whose label contains one of these")
    args = parser.parse_args(argv)
    rows = []
    for case in cases():
        if args.only and not any(o in case.label for o in args.only):
            continue
        rows.append(compare(case))
        print(f"{case.label}: {rows[-1].ratio:.2f} ({rows[-1].seconds} s)", file=sys.stderr, flush=True)
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0 if all(abs(r.ratio - 1) <= TOLERANCE for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
