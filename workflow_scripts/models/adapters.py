"""Training methods: full fine-tuning, LoRA and QLoRA (docs/protocol.md §10), with peft.

- ``full``: every weight trains; a phase writes the whole backbone (today's layout).
- ``lora``: the backbone is frozen; low-rank adapters on its attention projections (the
  family's, or the method's ``target_modules``) and the task heads train. The heads are
  peft ``modules_to_save`` (never LoRA targets), so they are saved with the adapter and
  loaded back from it: a head re-initialised on reload, the known failure of LoRA
  pipelines, cannot happen silently (tests/test_backbones.py reloads every family). In
  training, each adapter's output is added into its base layer's output in place
  (``fuse_adapter_sums``), not through peft's three activation-sized temporaries.
- ``qlora``: ``lora`` on a 4-bit NF4 base computing in the precision's dtype (bitsandbytes;
  its NF4 kernels run on CUDA GPUs and on CPUs).

A phase trained with adapters writes no copy of the base model: its directory holds the
adapter, the tokenizer, the base's config.json and ``xstilts_backbone.json``, which names
the base and the adapters merged into it before this one. The next phase (intermediate ->
target) loads the base, merges each adapter of that chain in memory (QLoRA: stacks it, frozen
and unmerged, on the 4-bit base; LINEAGE_ADAPTERS says why) and trains a fresh adapter and head
on top; evaluation rebuilds the same model the same way.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from safetensors.torch import load_file
from torch import nn

from workflow_scripts.models.backbones import ADAPTER_DIR, MANIFEST, family_of, get_family
from workflow_scripts.precision import Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.method import (
    DEFAULT_ACTIVATION_CHECKPOINTING,
    DEFAULT_METHOD,
    DEFAULT_PRECISION,
    LORA_DEFAULTS,
    MethodName,
    MethodSettings,
    PrecisionName,
)
from workflow_scripts.spec.tasks import VISUAL_FORMATS


@dataclasses.dataclass(frozen=True)
class Method:
    """A training method and its LoRA hyper-parameters (unused by ``full``). The fields are
    the settings of backbone_grid.method_settings, each defaulting to the config schema's."""

    name: MethodName = DEFAULT_METHOD
    rank: int = LORA_DEFAULTS["rank"]
    alpha: int = LORA_DEFAULTS["alpha"]
    dropout: float = LORA_DEFAULTS["dropout"]
    target_modules: tuple[str, ...] = ()  # empty: the family's attention projections
    precision: PrecisionName = DEFAULT_PRECISION  # the precision policy's name (precision.py)
    # Recompute each block's activations in the backward pass instead of keeping them.
    activation_checkpointing: bool = DEFAULT_ACTIVATION_CHECKPOINTING

    @property
    def adapters(self) -> bool:
        return self.name != "full"

    @classmethod
    def from_settings(cls, settings: MethodSettings | Mapping[str, Any] | None) -> Method:
        """A phase's ``method`` setting (absent: full fine-tuning, the 2020 protocol), or a
        manifest's, with the schema's defaults of what it leaves out. A key that is no
        setting, or a method or precision the schema does not know, stops the job
        (MethodSettings.parse says which): ignoring it would train with the default in its
        place."""
        if not isinstance(settings, MethodSettings):
            settings = MethodSettings.parse(settings or {}, "method")
        given = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
        return cls(**{name: value for name, value in given.items() if value is not None})


def check_available(method: Method, dev) -> None:
    """What a method and precision need of this device, said before any model is loaded,
    not with a stack trace from inside the quantiser: bitsandbytes for QLoRA (0.50 runs its
    NF4 kernels on CPUs and CUDA GPUs), native bf16 for bf16 (precision.check_device)."""
    Precision(method.precision).check_device(dev, f"method {method.name}")
    if method.name != "qlora":
        return
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise InputError(
            "method qlora needs the bitsandbytes package; install it in the training "
            "environment (pip install -r requirements.txt)"
        ) from None


def load_kwargs(method: Method) -> dict[str, Any]:
    """from_pretrained arguments of the base, by the precision policy (precision.py): fp32
    master weights for full fine-tuning, the compute dtype for a frozen LoRA base, and for
    QLoRA NF4 weights with double-quantised constants and the compute dtype for its products
    (Dettmers et al. 2023's recipe). The dtype is always explicit: transformers 5 would
    otherwise load a checkpoint in the dtype it is stored in."""
    precision = Precision(method.precision)
    if method.name != "qlora":
        return {"dtype": precision.base_dtype(method.name)}
    from transformers import BitsAndBytesConfig

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=precision.compute_dtype,
        )
    }


# ----- lineage: which base and adapters a directory stands for ---------------------------


@dataclasses.dataclass(frozen=True)
class Lineage:
    """What a model directory stands for: ``base`` with ``merged`` adapters merged in order,
    then its own adapter (``own``), if it has one."""

    base: str
    directory: str
    merged: tuple[str, ...] = ()
    own: bool = False
    heads: dict[str, tuple[str, int]] = dataclasses.field(default_factory=dict)

    def with_own(self) -> tuple[str, ...]:
        """Every adapter to merge for the backbone as this directory leaves it."""
        return self.merged + ((self.directory,) if self.own else ())


def lineage(model_dir: str | Path) -> Lineage:
    """A directory written with adapters names its base; any other is its own base."""
    manifest = Path(model_dir) / MANIFEST
    info = json.loads(manifest.read_text()) if manifest.is_file() else {}
    if "base" not in info:
        return Lineage(base=str(model_dir), directory=str(model_dir))
    return Lineage(
        base=info["base"],
        merged=tuple(info.get("merged", ())),
        own=bool(info.get("own")),
        heads={k: (v[0], int(v[1])) for k, v in info.get("heads", {}).items()},
        directory=str(model_dir),
    )


# How a directory's lineage adapters reach the next phase. LoRA merges them into the 16-bit
# base: the rounding of W + BA to bf16 is below the base's own, and the next phase runs at the
# cost of one adapter. QLoRA stacks them, frozen and unmerged, on the NF4 base: merging would
# re-quantise W + BA to 4 bits, whose step (~1/16 of a block's range) is far larger than the
# adapter's update, so the next phase would start from another function than the one the
# previous phase trained and evaluated. Stacked, the base stays 4-bit and the function is exact.
LINEAGE_ADAPTERS = {"full": "merged", "lora": "merged", "qlora": "stacked"}


def load_backbone(model_dir: str | Path, method: Method, with_own: bool = True):
    """The backbone a directory stands for, every adapter of its lineage merged in memory
    (QLoRA: stacked, see LINEAGE_ADAPTERS); ``with_own=False``: all but the directory's own
    adapter, which the caller attaches."""
    from workflow_scripts.models.heads import load_encoder

    found = lineage(model_dir)
    _require_complete(found)
    encoder = load_encoder(found.base, **load_kwargs(method))
    if method.name == "qlora":
        keep_cpu_4bit_layout(encoder)
    chain = found.with_own() if with_own else found.merged
    if LINEAGE_ADAPTERS[method.name] == "stacked":
        for index, adapter_dir in enumerate(chain):
            stack_adapter(encoder, adapter_dir, index)
        return encoder
    for adapter_dir in chain:
        encoder = merge_adapter(encoder, adapter_dir)
    return encoder


class FrozenLowRank(nn.Module):
    """A saved LoRA adapter's update of one layer, ``B(A(x)) * scaling``, frozen (buffers, not
    parameters: never trained, never in a state dict; the adapter stays in its own directory)."""

    def __init__(self, lora_a, lora_b, scaling: float) -> None:
        super().__init__()
        self.register_buffer("lora_a", lora_a.float(), persistent=False)
        self.register_buffer("lora_b", lora_b.float(), persistent=False)
        self.scaling = scaling

    def forward(self, x):
        import torch.nn.functional as F

        return F.linear(F.linear(x.to(self.lora_a.dtype), self.lora_a), self.lora_b) * self.scaling


def _add_update(update: FrozenLowRank):
    def hook(module, args, output):
        return output + update(args[0]).to(output.dtype)

    return hook


def stack_adapter(encoder, adapter_dir: str | Path, index: int) -> int:
    """Add the LoRA adapter of ``adapter_dir`` to ``encoder``'s layers, frozen and unmerged:
    each adapted layer's output gains the adapter's update (a forward hook, so a LoRA layer
    peft puts on the same layer later adds its own on top). Returns the layers changed."""
    folder = Path(adapter_dir) / ADAPTER_DIR
    config = json.loads((folder / "adapter_config.json").read_text())
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    scaling = alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in load_file(str(folder / "adapter_model.safetensors")).items():
        found = re.fullmatch(r"base_model\.model\.encoder\.(.+)\.lora_([AB])\.weight", key)
        if found:
            pairs.setdefault(found.group(1), {})[found.group(2)] = tensor
    modules = dict(encoder.named_modules())
    if not pairs or any(name not in modules or set(ab) != {"A", "B"} for name, ab in pairs.items()):
        missing = sorted(name for name in pairs if name not in modules)[:3]
        raise InputError(
            f"adapter {folder}: its LoRA tensors do not fit the base's layers "
            f"({'none found' if not pairs else f'unknown layers {missing}' if missing else 'an A or B matrix missing'})"
        )
    device = next(encoder.parameters()).device
    for name, ab in pairs.items():
        update = FrozenLowRank(ab["A"], ab["B"], scaling).to(device)
        modules[name].add_module(f"xstilts_stacked_{index}", update)
        modules[name].register_forward_hook(_add_update(update))
    return len(pairs)


def keep_cpu_4bit_layout(encoder) -> int:
    """Keep bitsandbytes' 4-bit layers on their one NF4 path on CPUs. In evaluation,
    bitsandbytes 0.50 repacks a layer's weights for CPUs with AVX512-BF16 and then computes in
    bf16 whatever the compute dtype (and fails for layers narrower than its 64-weight block):
    the same config would give other numbers on another CPU, and fp32 would not be fp32.
    Returns the layers set."""
    changed = 0
    for module in encoder.modules():
        if getattr(module, "support_avx512bf16_for_cpu", False):
            module.support_avx512bf16_for_cpu = False
            changed += 1
    return changed


def _require_complete(found: Lineage) -> None:
    for path in (found.base, *found.merged, *((found.directory,) if found.own else ())):
        if path != found.base and not (Path(path) / ADAPTER_DIR / "adapter_config.json").is_file():
            raise InputError(
                f"adapter directory {path} has no {ADAPTER_DIR}/adapter_config.json (missing or incomplete)"
            )
    if not (Path(found.base) / "config.json").is_file():
        raise InputError(f"base model directory {found.base} has no config.json (missing or incomplete)")


def stand_in_heads(formats: dict[str, tuple[str, int]], hidden: int, adapter_dir: str | Path) -> dict[str, Any]:
    """Fresh heads of the shapes a phase saved with its adapter (an image task's head, with
    its projector, takes its shapes from the saved tensors: multimodal/prefix.py)."""
    from workflow_scripts.models.heads import make_head, visual_classifier

    heads, saved = {}, None
    for name, (fmt, n) in formats.items():
        if fmt in VISUAL_FORMATS:
            from safetensors import safe_open

            from workflow_scripts.multimodal.prefix import stand_in_head

            if saved is None:
                with safe_open(str(Path(adapter_dir) / ADAPTER_DIR / "adapter_model.safetensors"), "pt") as f:
                    saved = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
            heads[name] = stand_in_head(name, hidden, visual_classifier(fmt, hidden, n, 0.0, 0.02), saved)
        else:
            heads[name] = make_head(fmt, hidden, n, 0.0, 0.02)
    return heads


def merge_adapter(encoder, adapter_dir: str | Path):
    """``encoder`` with the LoRA adapter of ``adapter_dir`` merged into its weights. The
    adapter was saved with its phase's heads (modules_to_save): stand-in heads of the same
    shapes receive them and are dropped; only the merged backbone is returned."""
    from peft import PeftModel

    from workflow_scripts.models.heads import MultiHeadModel

    found = lineage(adapter_dir)
    # stand-in heads: their weights are replaced by the saved ones, then dropped with the wrapper
    heads = stand_in_heads(found.heads, encoder.config.hidden_size, adapter_dir)
    wrapped = PeftModel.from_pretrained(MultiHeadModel(encoder, heads), str(Path(adapter_dir) / ADAPTER_DIR))
    encoder = wrapped.merge_and_unload().encoder
    # peft froze the base and merge_and_unload leaves it frozen: without this, full fine-tuning
    # of a backbone with adapters in its lineage would silently train only the heads
    # (attach() freezes it again for LoRA). Only floating-point tensors can take gradients.
    for parameter in encoder.parameters():
        if parameter.is_floating_point():
            parameter.requires_grad_(True)
    return encoder


# ----- attaching, saving and reloading a phase's adapter ---------------------------------


def target_modules(method: Method, family: str, model_config) -> list[str]:
    """The modules LoRA adapts: the method's, or the family's for this architecture (its
    transformers config)."""
    return list(method.target_modules) or get_family(family).lora_targets(model_config)


def attach(model, method: Method, head_formats: dict[str, tuple[str, int]]):
    """Wrap a MultiHeadModel for LoRA training: adapters on the backbone's target modules,
    the listed heads trained and saved whole (modules_to_save). Returns the peft model; the
    MultiHeadModel it wraps (``inner``) is what the training loop calls."""
    from peft import LoraConfig, get_peft_model

    targets = target_modules(method, model.family, model.encoder.config)
    config = LoraConfig(
        r=method.rank,
        lora_alpha=method.alpha,
        lora_dropout=method.dropout,
        target_modules=targets,
        modules_to_save=[f"heads.{name}" for name in head_formats],
    )
    if method.name == "qlora":
        from peft import prepare_model_for_kbit_training

        model.encoder = prepare_model_for_kbit_training(model.encoder, use_gradient_checkpointing=False)
    peft_model = get_peft_model(model, config)
    fuse_adapter_sums(peft_model)
    return peft_model


def fuse_adapter_sums(model) -> int:
    """Give each LoRA layer on a plain ``nn.Linear`` the fused forward below (the others, e.g.
    QLoRA's 4-bit layers, keep peft's). Returns how many layers changed.

    peft computes ``result + lora_B(lora_A(dropout(x))) * scaling`` out of place: three
    activation-sized tensors (the adapter's output, its scaled copy, the sum) per adapted
    layer and forward, four layers a block. None is kept for the backward pass, but on CPU
    (glibc malloc) these transients, interleaved with the activations that are kept, fragment
    the heap: on the 12 x 768 benchmark model at batch 8 x 256 tokens the process's peak
    resident set was 4.15 GB with peft's sum and 3.44 GB with this one, for the same live
    tensors (benchmarks/lora_vs_full.py, LoRA without dropout)."""
    import types

    from peft.tuners.lora.layer import Linear as LoraLinear
    from torch import nn

    changed = 0
    for module in model.modules():
        if type(module) is LoraLinear and type(module.get_base_layer()) is nn.Linear:
            module.forward = types.MethodType(_fused_lora_forward, module)
            changed += 1
    return changed


def _fused_lora_forward(layer, x, *args, **kwargs):
    """peft's ``lora.Linear.forward`` for vanilla LoRA on an ``nn.Linear``, with the adapter's
    low-rank product accumulated into the base layer's output in place (``addmm_``): the
    same sum, the same tensors saved for backward (the adapter's input and its rank-r
    projection), and no activation-sized temporaries. Anything else (merged or disabled
    adapters, mixed-adapter batches, DoRA and other variants, an adapter bias, mixed dtypes
    or autocast, as with bf16 on GPUs, hooks on the base layer) goes through peft's own forward."""
    import torch
    import torch.nn.functional as F

    active = [name for name in layer.active_adapters if name in layer.lora_A.keys()]
    base = layer.get_base_layer()
    if (
        args
        or kwargs
        or layer.disable_adapters
        or layer.merged
        or torch.is_autocast_enabled(x.device.type)
        or any(
            name in layer.lora_variant
            or layer.lora_B[name].bias is not None
            or layer.lora_A[name].weight.dtype != x.dtype
            or layer.lora_B[name].weight.dtype != x.dtype
            for name in active
        )
        or base.weight.dtype != x.dtype
        or base._forward_hooks
        or base._forward_pre_hooks
    ):
        return type(layer).forward(layer, x, *args, **kwargs)
    flat = x.reshape(-1, x.shape[-1])
    result = F.linear(flat, base.weight, base.bias)  # a fresh (rows, out) tensor, as nn.Linear computes it
    for name in active:
        lora_A, lora_B = layer.lora_A[name], layer.lora_B[name]
        down = lora_A(layer.lora_dropout[name](flat))  # (rows, r)
        result.addmm_(down, lora_B.weight.t(), alpha=layer.scaling[name])
    return result.view(*x.shape[:-1], result.shape[-1])


def inner(model):
    """The MultiHeadModel a peft wrapper trains in place (itself when not wrapped)."""
    return model.base_model.model if hasattr(model, "peft_config") else model


def trained_state(model, method: Method) -> dict[str, Any]:
    """The tensors training changes: the whole state for full fine-tuning; for adapters only
    the trainable ones (LoRA matrices, heads), so checkpoints and best weights of a 100B
    backbone hold megabytes, not its frozen base."""
    state = model.state_dict()
    if not method.adapters:
        return state
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in state.items() if k in trainable}


def save_adapter_phase(
    peft_model,
    tokenizer,
    output: Path,
    encoder_dir: Path,
    head_formats: dict[str, tuple[str, int]],
    method: Method,
    family: str,
    full: dict[str, Any] | None = None,
) -> None:
    """Write a phase's adapter directory (into ``output``, a temporary path the caller
    renames): the adapter with its heads, the tokenizer, the base's config.json and the
    manifest naming the base and the adapters merged before this one. ``full``: a sharded
    model's weights gathered whole (keys of the MultiHeadModel peft wraps)."""
    found = lineage(encoder_dir)
    if full is None:
        peft_model.save_pretrained(str(output / ADAPTER_DIR))
    else:  # peft picks the adapter's and the heads' tensors out of the wrapper's full state
        peft_model.save_pretrained(
            str(output / ADAPTER_DIR), state_dict={f"base_model.model.{k}": v for k, v in full.items()}
        )
    tokenizer.save_pretrained(str(output))
    shutil.copyfile(Path(found.base) / "config.json", output / "config.json")
    manifest = {
        "family": family,
        "method": dataclasses.asdict(method),
        "base": found.base,
        "merged": list(found.with_own()),
        "lineage_adapters": LINEAGE_ADAPTERS[method.name],
        "own": True,
        "heads": {name: list(spec) for name, spec in head_formats.items()},
    }
    (output / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def load_adapter_model(model_dir: str | Path, dev):
    """A target directory written with adapters: its base with the earlier adapters merged,
    fresh heads of the saved shapes, then its own adapter with the heads' trained weights
    (modules_to_save) loaded over them. Returns the MultiHeadModel."""
    from peft import PeftModel

    from workflow_scripts.models.heads import MultiHeadModel

    found = lineage(model_dir)
    info = json.loads((Path(model_dir) / MANIFEST).read_text())
    method = Method.from_settings(info.get("method"))
    check_available(method, dev)
    encoder = load_backbone(model_dir, method, with_own=False)
    family = family_of(model_dir)
    heads = stand_in_heads(found.heads, encoder.config.hidden_size, model_dir)
    wrapped = PeftModel.from_pretrained(MultiHeadModel(encoder, heads, family.name), str(Path(model_dir) / ADAPTER_DIR))
    return inner(wrapped)


def has_adapter(model_dir: str | Path) -> bool:
    return lineage(model_dir).own


def method_of(model_dir: str | Path) -> Method:
    """The method a directory was trained with (full when it has no manifest)."""
    manifest = Path(model_dir) / MANIFEST
    return Method.from_settings(json.loads(manifest.read_text()).get("method") if manifest.is_file() else None)
