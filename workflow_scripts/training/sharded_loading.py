"""Loading a sharded training model without any rank ever holding the whole backbone.

``recipe.py``'s unsharded path (``adapters.load_backbone`` + heads + ``adapters.attach`` +
``distributed.shard_model``) has every rank load the complete base before FSDP2 shards it: for
a 176B backbone every rank of a node would hold all of it. ``load_sharded_model`` builds the
same model, parameter for parameter, in four steps:

1. the backbone from its ``config.json`` with parameters on the meta device (no memory;
   buffers such as ``position_ids`` or rotary ``inv_freq`` are computed for real), with the
   class its family's ``load`` would give and the precision policy's dtype (``empty_backbone``);
2. the heads (real, small) and, for ``lora``, peft's adapters, initialised exactly as the
   unsharded path initialises them from the same seed (see *Random numbers* below);
3. FSDP2 ``fully_shard`` per transformer block and on the root, without broadcasting (there
   is nothing to broadcast yet), then ``to_empty``: each rank allocates its own shards only;
4. each rank reads *its rows* of each tensor from the safetensors files
   (``safe_open(...).get_slice(key)[start:end]``), merges the lineage's LoRA adapters into
   those rows as it goes (``W[rows] += scaling * B[rows] @ A``, what peft's
   ``merge_and_unload`` does to the whole matrix), and copies them into its shard.

Dtypes (``precision.py``). Full fine-tuning: every rank builds its shards in fp32 and casts
the stored rows (bf16, fp16 or fp32) into them: fp32 master weights, as one process loads
them, whatever the checkpoint's dtype. FSDP2 requires one dtype for the *trainable*
parameters of a unit (their gradients are reduce-scattered in one buffer), and the heads are
fp32. LoRA: the frozen base in the compute dtype, the adapters and heads fp32, in the same
units. FSDP2 accepts that mix: the frozen parameters are outside the uniform-dtype check and
receive no gradients, and a unit whose weights differ in dtype is all-gathered as bytes. Under
bf16 or fp16 the mixed-precision policy gathers the fp32 adapters and heads in the compute
dtype and reduces their gradients in fp32 (``distributed.mixed_precision_policy``), so a rank
holds its share of the base in 16 bits and never an fp32 copy of it.

A rank's memory therefore peaks at its shards plus one slice being read (plus the small heads,
adapters and buffers, which every rank holds whole, as in the unsharded path). safe_open maps
a file into memory: the pages a rank reads count as its resident memory (clean page cache,
which the kernel may drop) while that file is open, so files are read one at a time.

Random numbers. The unsharded path draws, after ``seed_everything``: the stand-in heads and
LoRA matrices of every adapter ``load_backbone`` merges (peft builds them before loading the
saved values over them), then the phase's heads, then the new LoRA matrices. ``from_pretrained``
draws nothing. ``empty_backbone`` replays the merges on the meta model (same draws, no data),
and ``attach`` runs on stand-in base weights that peft sees as real CPU tensors, so the LoRA
matrices are drawn on CPU exactly as in the unsharded path instead of being sent to the meta
device with the base (peft moves adapters to their base layer's device). Same seed, same
heads, same adapters, whatever the world size.

Checkpoint names: a backbone parameter ``encoder.layer.0...`` is read from the key with the
model's ``base_model_prefix`` (``roberta.encoder.layer.0...``) when the checkpoint was saved
with one (a model with a head), without it otherwise. Keys of other heads or stacks (an LM
head, a pooler the family drops, T5's decoder) are not read; a key inside the backbone's own
modules that matches no parameter, and a parameter without a key, are errors naming the key
and the file.

Refused: ``qlora`` (bitsandbytes quantises a whole 4-bit weight per process: an NF4 matrix
with its block constants is not a row-shardable tensor FSDP2 can split), and adapters other
than plain LoRA on linear layers (DoRA, LoRA biases, rank/alpha patterns, embedding LoRA).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import math
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_scripts.common import LOG
from workflow_scripts.models.adapters import (
    ADAPTER_DIR,
    Method,
    attach,
    inner,
    lineage,
    load_backbone,
    merge_adapter,
)
from workflow_scripts.models.backbones import family_of, seq2seq_encoder
from workflow_scripts.precision import Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.training.distributed import shard_model

if TYPE_CHECKING:
    import torch
    from torch import nn

    from workflow_scripts.training.distributed import Context

    Heads = dict[str, nn.Module] | Callable[[nn.Module], dict[str, nn.Module]]

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# peft's names: the wrapped layer of a LoRA module, and an adapter's keys as it saves them.
_BASE_LAYER = ".base_layer"
_ADAPTER_PREFIX = "base_model.model."
_ADAPTER_KEY = re.compile(r"^base_model\.model\.encoder\.(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")
# Set on a head built on the meta device (``empty_mlm_head``): the checkpoint prefix of its weights.
CHECKPOINT_PREFIX_ATTR = "_xstilts_checkpoint_prefix"


@dataclasses.dataclass
class LoadStats:
    """What one rank materialised and read (bytes)."""

    local_param_bytes: int = 0  # this rank's parameter shards (unpadded)
    total_param_bytes: int = 0  # the whole model's parameters
    read_bytes: int = 0  # read from the base checkpoint files by this rank
    largest_read: int = 0  # the largest single slice read from them
    adapter_read_bytes: int = 0  # read from the merged adapters' files


@dataclasses.dataclass
class ShardedModel:
    """``model``: the MultiHeadModel the training loop calls (FSDP2-sharded under a process
    group); ``peft_model``: its peft wrapper (saving the adapter) or None for full fine-tuning."""

    model: Any
    peft_model: Any | None
    stats: LoadStats


class CheckpointMismatch(InputError):
    """A checkpoint (or adapter) key without a parameter, or a parameter without a key."""


# --- the backbone on the meta device -----------------------------------------------------------


def _refuse(method: Method) -> None:
    if method.name == "qlora":
        raise InputError(
            "sharded loading supports methods full and lora, not qlora: bitsandbytes quantises "
            "each 4-bit weight whole in every process, so the base cannot be read shard by shard. "
            "Train qlora on one process (one GPU), or use lora on several"
        )


def _model_class(family_name: str, config) -> tuple[type, dict[str, Any]]:
    """The class (and constructor arguments) the family's ``load`` gives for ``config``:
    backbones/encoder.py, seq2seq_encoder.py and decoder.py, mirrored."""
    import transformers
    from transformers import AutoModel

    if family_name == "seq2seq_encoder":
        return getattr(transformers, seq2seq_encoder.MODEL_TYPES[config.model_type]), {}
    model_class = AutoModel._model_mapping[type(config)]
    if family_name == "encoder" and "add_pooling_layer" in inspect.signature(model_class.__init__).parameters:
        return model_class, {"add_pooling_layer": False}
    return model_class, {}


class _Checkpoint:
    """The safetensors files of a model directory, read key by key and slice by slice."""

    def __init__(self, model_dir: str | Path) -> None:
        self.dir = Path(model_dir)
        single, index = self.dir / SAFETENSORS, self.dir / SAFETENSORS_INDEX
        if index.is_file():
            info = json.loads(index.read_text())
            self.files = {key: self.dir / name for key, name in info["weight_map"].items()}
            self.where = str(index)
        elif single.is_file():
            from safetensors import safe_open

            with safe_open(str(single), "pt") as f:
                self.files = dict.fromkeys(f.keys(), single)
            self.where = str(single)
        else:
            raise InputError(
                f"{self.dir}: sharded loading reads safetensors weights ({SAFETENSORS} or "
                f"{SAFETENSORS_INDEX}); found neither"
            )
        # One file open at a time: safe_open maps the whole file, and the pages a rank touched
        # stay in its resident memory (as page cache) until the mapping goes.
        self._open: tuple[Path, Any] | None = None
        self._stack = contextlib.ExitStack()
        self.read_bytes = 0
        self.largest_read = 0

    def __enter__(self) -> _Checkpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()
        self._open = None

    def handle(self, key: str):
        from safetensors import safe_open

        path = self.files[key]
        if not path.is_file():
            raise CheckpointMismatch(f"{self.where} maps key {key!r} to {path}, which does not exist")
        if self._open is None or self._open[0] != path:
            self._stack.close()
            self._open = (path, self._stack.enter_context(safe_open(str(path), "pt", device="cpu")))
        return self._open[1]

    def slice(self, key: str):
        try:
            return self.handle(key).get_slice(key)
        except Exception as error:  # safetensors' own error type: the key is not where the index says
            raise CheckpointMismatch(f"missing key {key!r} in {self.files[key]} (named by {self.where})") from error

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.slice(key).get_shape())

    def read(self, key: str, index: tuple[slice, ...] | None = None) -> torch.Tensor:
        """The tensor ``key``, or only ``index`` of it (one slice per dimension)."""
        tensor = self.slice(key)[index] if index else self.handle(key).get_tensor(key)
        size = tensor.numel() * tensor.element_size()
        self.read_bytes += size
        self.largest_read = max(self.largest_read, size)
        return tensor


def _meta_base(base_dir: str | Path, family_name: str, dtype):
    """The base backbone from its config, parameters on the meta device, buffers real."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(base_dir))
    model_class, extra = _model_class(family_name, config)
    with init_empty_weights(include_buffers=False):
        encoder = model_class._from_config(config, dtype=dtype, attn_implementation="sdpa", **extra)
    # accelerate's context gives every registered parameter a new meta tensor, also when the
    # model ties one to another in __init__ (T5's shared / encoder.embed_tokens): tie again.
    encoder.tie_weights()
    return encoder.eval()  # as from_pretrained leaves it


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """peft and torch warn when saved adapter values are copied onto meta parameters (a no-op
    here by design: only the random draws of the merges are replayed)."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def empty_backbone(model_dir: str | Path, method: Method):
    """The backbone ``model_dir`` stands for (``adapters.load_backbone``) with every parameter on
    the meta device: same class, module names, config; no weights read. Its dtype is the
    precision policy's whatever the checkpoint stores (``Precision.base_dtype``): fp32 master
    weights for full fine-tuning, the compute dtype for a frozen LoRA base; ``_fill`` casts the
    stored rows to it. The lineage's adapters are merged on the meta model, which replays the
    random draws their loading makes in ``load_backbone`` (so heads drawn next get the
    unsharded path's values) and checks them."""
    from workflow_scripts.models.adapters import _require_complete

    _refuse(method)
    found = lineage(model_dir)
    _require_complete(found)
    family = family_of(model_dir)
    encoder = _meta_base(found.base, family.name, Precision(method.precision).base_dtype(method.name))
    with _quiet():
        for adapter_dir in found.with_own():
            encoder = merge_adapter(encoder, adapter_dir)
    return encoder


def empty_mlm_head(model_dir: str | Path, encoder):
    """``models.load_mlm_head`` on the meta device: the base's masked-LM head, its output layer
    tied to ``encoder``'s input embeddings; ``load_sharded_model`` reads its own weights from
    the base checkpoint (under the head's name there, e.g. ``lm_head.``). Its own weights are
    fp32 whatever the checkpoint stores, as the policy trains heads (and FSDP2 needs one dtype
    for the trainable parameters of the root unit it shares with the other heads); its output
    layer is the embedding matrix, in the backbone's dtype."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForMaskedLM

    base = lineage(model_dir).base
    family = family_of(model_dir)
    if not family.has_mlm:
        raise InputError(
            f"{model_dir}: a {family.name} backbone has no masked-LM head; MLM (intermediate "
            "configs with 'mlm: true') needs an encoder-family backbone"
        )
    config = AutoConfig.from_pretrained(base)
    with init_empty_weights(include_buffers=False):
        mlm = AutoModelForMaskedLM.from_config(config, dtype=torch.float32)
    mlm.tie_weights()  # the head's own ties (XLM-R: decoder.bias is bias), broken by the meta context
    output, embeddings = mlm.get_output_embeddings(), encoder.get_input_embeddings()
    if output is None or output.weight.shape != embeddings.weight.shape:
        raise InputError(
            f"{base}: the masked-LM output layer does not match the encoder's input embeddings "
            f"({None if output is None else tuple(output.weight.shape)} vs {tuple(embeddings.weight.shape)})"
        )
    output.weight = embeddings.weight
    head = mlm.lm_head if hasattr(mlm, "lm_head") else output
    name = next(n for n, m in mlm.named_modules() if m is head)
    setattr(head, CHECKPOINT_PREFIX_ATTR, f"{name}.")
    return head.eval()


# --- peft on a meta base ------------------------------------------------------------------------


@contextlib.contextmanager
def _stand_in_weights(model) -> Iterator[None]:
    """Inside: every meta parameter replaced by a real CPU tensor of its shape and dtype that
    takes no memory (one zero, expanded), so peft creates the LoRA matrices on CPU, drawn as
    in the unsharded path, instead of moving them to the meta device with their base layer.
    After: the meta parameters back in place (ties kept), with the requires_grad peft set."""
    import torch
    from torch import nn

    swapped: list[tuple[nn.Module, str, nn.Parameter, nn.Parameter]] = []
    stand_ins: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
                continue
            if id(param) not in stand_ins:
                stand_ins[id(param)] = nn.Parameter(
                    torch.zeros((), dtype=param.dtype).expand(param.shape), requires_grad=param.requires_grad
                )
            module._parameters[name] = stand_ins[id(param)]
            swapped.append((module, name, param, stand_ins[id(param)]))
    try:
        yield
    finally:
        for module, name, param, stand_in in swapped:
            if module._parameters.get(name) is not stand_in:
                raise RuntimeError(
                    f"peft replaced parameter {name} of {type(module).__name__}; sharded loading "
                    "cannot restore its meta parameter"
                )
            param.requires_grad_(stand_in.requires_grad)
            module._parameters[name] = param


# --- FSDP2 -------------------------------------------------------------------------------------


def local_part(param) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """This rank's tensor of ``param`` (a DTensor's local shard, or the tensor itself) and the
    index of the global tensor it holds (FSDP2: a run of rows; the last ranks' may be short
    or empty)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(param, DTensor):
        return param.data, tuple(slice(0, n) for n in param.shape)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = param.to_local()
    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    if tuple(local.shape) != tuple(shape):
        raise RuntimeError(
            f"local shard of shape {tuple(local.shape)}, expected {tuple(shape)} at offset {tuple(offset)}"
        )
    return local, tuple(slice(o, o + n) for o, n in zip(offset, shape))


# --- adapters merged on load -------------------------------------------------------------------


@dataclasses.dataclass
class _Lora:
    """One LoRA module of a saved adapter: W += scaling * B @ A (transposed for fan_in_fan_out)."""

    a_key: str
    b_key: str
    scaling: float
    fan_in_fan_out: bool


class _Adapter:
    """A saved peft LoRA adapter (``<dir>/adapter``): its config checked, its matrices by module."""

    def __init__(self, adapter_dir: str | Path) -> None:
        from safetensors import safe_open

        root = Path(adapter_dir) / ADAPTER_DIR
        self.config_path, self.path = root / "adapter_config.json", root / "adapter_model.safetensors"
        config = json.loads(self.config_path.read_text())
        if not self.path.is_file():
            raise InputError(f"adapter {adapter_dir}: no {self.path.name} (sharded loading reads safetensors adapters)")
        problems = [
            f"{name}={config.get(name)!r}"
            for name, ok in (
                ("peft_type", config.get("peft_type") == "LORA"),
                ("use_dora", not config.get("use_dora")),
                ("lora_bias", not config.get("lora_bias")),
                ("rank_pattern", not config.get("rank_pattern")),
                ("alpha_pattern", not config.get("alpha_pattern")),
                ("layer_replication", not config.get("layer_replication")),
                ("trainable_token_indices", not config.get("trainable_token_indices")),
                ("modules_to_save", all(m.startswith("heads.") for m in config.get("modules_to_save") or ())),
            )
            if not ok
        ]
        if problems:
            raise InputError(
                f"{self.config_path}: sharded loading merges plain LoRA adapters on linear layers "
                f"(heads as modules_to_save) only; this one has {', '.join(problems)}"
            )
        r, alpha = int(config["r"]), float(config["lora_alpha"])
        scaling = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
        self.r = r
        self.modules: dict[str, _Lora] = {}
        self._stack = contextlib.ExitStack()
        self._handle = None
        with safe_open(str(self.path), "pt") as f:
            keys = list(f.keys())
        found: dict[str, dict[str, str]] = {}
        for key in keys:
            if key.startswith(_ADAPTER_PREFIX + "heads."):
                continue  # the adapter's phase's heads: dropped by merge_adapter too
            match = _ADAPTER_KEY.match(key)
            if match is None:
                raise CheckpointMismatch(
                    f"{self.path}: key {key!r} is not a LoRA matrix of a backbone linear layer "
                    "(sharded loading merges lora_A / lora_B of linear layers only)"
                )
            found.setdefault(match["module"], {})[match["which"]] = key
        for module, pair in found.items():
            if set(pair) != {"A", "B"}:
                raise CheckpointMismatch(f"{self.path}: module {module!r} has lora_{''.join(pair)} without its partner")
            self.modules[module] = _Lora(pair["A"], pair["B"], scaling, bool(config.get("fan_in_fan_out")))

    def delta(self, module: str, index: tuple[slice, ...], dtype, stats: LoadStats) -> torch.Tensor:
        """``index`` of the module's weight update, in ``dtype`` (what peft's get_delta_weight
        computes for the whole matrix: ``transpose(B @ A, fan_in_fan_out) * scaling``)."""
        from safetensors import safe_open

        lora = self.modules[module]
        if self._handle is None:
            self._handle = self._stack.enter_context(safe_open(str(self.path), "pt", device="cpu"))
        rows = index[0] if index else slice(None)
        cols = index[1] if len(index) > 1 else slice(None)
        if lora.fan_in_fan_out:  # the weight is (in, out): delta = (B @ A).T
            a = self._handle.get_slice(lora.a_key)[:, rows]
            b = self._handle.get_slice(lora.b_key)[cols, :]
        else:
            b = self._handle.get_slice(lora.b_key)[rows, :]
            a = self._handle.get_slice(lora.a_key)[:, cols]
        stats.adapter_read_bytes += a.numel() * a.element_size() + b.numel() * b.element_size()
        a, b = a.to(dtype), b.to(dtype)
        product = b @ a
        return (product.T if lora.fan_in_fan_out else product) * lora.scaling

    def close(self) -> None:
        if self._handle is not None:
            self._stack.close()
            self._handle = None


def _adapter_dtype(base_dtype):
    """The dtype peft holds a loaded adapter in: the base's, except that it upcasts half
    precision adapters to fp32 (``autocast_adapter_dtype``)."""
    import torch

    return torch.float32 if base_dtype in (torch.float16, torch.bfloat16) else base_dtype


# --- names --------------------------------------------------------------------------------------


def _backbone_name(name: str) -> str | None:
    """The backbone's own name of a MultiHeadModel parameter (peft's ``base_layer`` removed),
    or None for a head's."""
    if not name.startswith("encoder."):
        return None
    return name[len("encoder.") :].replace(_BASE_LAYER + ".", ".")


class _KeyMap:
    """Backbone names <-> checkpoint keys, with the checks for missing and unexpected keys."""

    def __init__(self, encoder, checkpoint: _Checkpoint) -> None:
        self.checkpoint = checkpoint
        prefix = getattr(encoder, "base_model_prefix", "") or ""
        self.prefix = f"{prefix}." if prefix and any(k.startswith(f"{prefix}.") for k in checkpoint.files) else ""
        self.children = {n for n, _ in encoder.named_children()}
        self.children |= {n for n, _ in encoder.named_parameters(recurse=False)}
        self.children |= {n for n, _ in encoder.named_buffers(recurse=False)}
        self.ignore = [re.compile(p) for p in getattr(encoder, "_keys_to_ignore_on_load_unexpected", None) or ()]

    def key(self, backbone_name: str) -> str:
        return self.prefix + backbone_name

    def unexpected(self, known: set[str]) -> list[str]:
        """Checkpoint keys inside the backbone's own modules that name none of its tensors
        (``known``: backbone names of parameters and buffers)."""
        found = []
        for key in self.checkpoint.files:
            if self.prefix and not key.startswith(self.prefix):
                continue  # another head of the checkpoint's model (lm_head, cls, score)
            name = key[len(self.prefix) :]
            if name in known or name.split(".")[0] not in self.children or any(p.search(name) for p in self.ignore):
                continue
            found.append(key)
        return found


# --- the sharded model -------------------------------------------------------------------------


def _param_groups(model) -> list[tuple[Any, list[str], list[tuple[Any, str]]]]:
    """Each parameter once, with every name it has (tied weights have several) and the
    (module, attribute) places it sits in."""
    groups: dict[int, tuple[Any, list[str], list[tuple[Any, str]]]] = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        for attr, param in module._parameters.items():
            if param is None:
                continue
            entry = groups.setdefault(id(param), (param, [], []))
            name = f"{module_name}.{attr}" if module_name else attr
            if name not in entry[1]:
                entry[1].append(name)
            if not any(m is module and a == attr for m, a in entry[2]):
                entry[2].append((module, attr))
    return list(groups.values())


def _sources(groups, heads_checkpoint_prefix: dict[str, str], keys: _KeyMap) -> dict[int, tuple[str, str | None]]:
    """For each meta parameter: (checkpoint key, backbone name or None for a head's), the key
    present and of the parameter's shape."""
    found: dict[int, tuple[str, str | None]] = {}
    for param, names, _ in groups:
        if not param.is_meta:
            continue
        candidates: list[tuple[str, str | None]] = []
        for name in names:
            backbone = _backbone_name(name)
            if backbone is not None:
                candidates.append((keys.key(backbone), backbone))
            elif name.startswith("heads."):
                head, _, rest = name[len("heads.") :].partition(".")
                if head in heads_checkpoint_prefix:
                    candidates.append((heads_checkpoint_prefix[head] + rest, None))
        present = [c for c in candidates if c[0] in keys.checkpoint.files]
        if not present:
            wanted = candidates[0][0] if candidates else names[0]
            raise CheckpointMismatch(
                f"missing key {wanted!r} in {keys.checkpoint.where} (parameter "
                f"{' = '.join(names)} of the model; no weights to load it from)"
            )
        shape = keys.checkpoint.shape(present[0][0])
        if shape != tuple(param.shape):
            raise CheckpointMismatch(
                f"key {present[0][0]!r} in {keys.checkpoint.where} has shape {shape}, parameter "
                f"{names[0]} {tuple(param.shape)}"
            )
        found[id(param)] = present[0]
    return found


def load_sharded_model(
    model_dir: str | Path,
    method: Method,
    heads: Heads,
    ctx: Context,
    *,
    head_formats: dict[str, tuple[str, int]] | None = None,
    encoder=None,
    precision: Precision | None = None,
    activation_checkpointing: bool = False,
    sync_module_states: bool = True,
) -> ShardedModel:
    """The training model of a phase on ``model_dir`` (its backbone, ``heads``, LoRA for
    ``lora``), FSDP2-sharded over ``ctx``'s ranks, each rank reading only its own rows of the
    base (and of the merged adapters' updates): the model ``load_backbone`` + ``MultiHeadModel``
    + ``attach`` + ``shard_model`` gives, without any rank holding the whole base.

    ``heads``: the phase's heads (real modules, identical on every rank), or a function of the
    (meta) backbone returning them, called after the merges' random draws, where the
    unsharded path draws its heads. ``head_formats``: the heads LoRA trains and saves whole
    (peft ``modules_to_save``; default all). ``encoder``: a backbone from ``empty_backbone``
    (when the caller needed it to build the heads), else built here. ``precision``: the
    policy (default the method's) whose ``base_dtype`` the backbone has (``empty_backbone``)
    and whose compute dtype FSDP2 gathers weights in (``distributed.mixed_precision_policy``);
    ``activation_checkpointing`` as in ``distributed.shard_model``; ``sync_module_states``:
    the heads, new adapters and buffers (every rank builds them; the base is read, never
    broadcast) are rank 0's everywhere, one broadcast of their bytes, as ``shard_model`` does.

    Without a process group this is the unsharded path itself (``load_backbone`` ...,
    ``qlora`` included); under one, ``qlora`` is refused. Collective: every rank calls it."""
    from workflow_scripts.models.heads import MultiHeadModel

    family = family_of(model_dir)
    if not ctx.distributed:
        return _unsharded(model_dir, method, heads, ctx, family, head_formats, activation_checkpointing, encoder)
    _refuse(method)
    precision = _checked_precision(method, precision)
    found = lineage(model_dir)
    encoder = _meta_encoder(model_dir, method, encoder)
    built_heads = _build_heads(heads, encoder)
    model = MultiHeadModel(encoder, built_heads, family.name)
    head_prefixes = {
        name: getattr(head, CHECKPOINT_PREFIX_ATTR)
        for name, head in built_heads.items()
        if hasattr(head, CHECKPOINT_PREFIX_ATTR)
    }
    stats = LoadStats()
    with _Checkpoint(found.base) as checkpoint:
        keys = _KeyMap(encoder, checkpoint)
        merges = [_Adapter(path) for path in found.with_own()]
        try:
            # Every name is checked before anything is sharded or read: a wrong checkpoint fails in seconds.
            _check_names(encoder, keys, checkpoint, merges)
            sources = _sources(_param_groups(model), head_prefixes, keys)
            trained = head_formats if head_formats is not None else dict.fromkeys(built_heads, ("", 0))
            model, peft_model = _with_adapters(model, method, trained)
            blocks = tuple({type(b) for b in family.blocks(model.encoder)})
            plan = _ShardPlan(model, sources, blocks, precision, activation_checkpointing)
            plan.materialise(ctx, merges, checkpoint, keys, stats, sync_module_states)
        finally:
            for adapter in merges:
                adapter.close()
        stats.read_bytes, stats.largest_read = checkpoint.read_bytes, checkpoint.largest_read
    LOG.info(
        "rank %d: sharded loading of %s: %.1f MB of %.1f MB of parameters materialised here, %.1f MB read "
        "(largest slice %.1f MB)",
        ctx.rank,
        model_dir,
        stats.local_param_bytes / 2**20,
        stats.total_param_bytes / 2**20,
        stats.read_bytes / 2**20,
        stats.largest_read / 2**20,
    )
    return ShardedModel(model, peft_model, stats)


def _checked_precision(method: Method, precision: Precision | None) -> Precision:
    """The policy the model is gathered and computed in: the method's (empty_backbone gives
    its dtype; another policy here would gather and compute in a dtype the weights were not
    chosen for)."""
    precision = precision or Precision(method.precision)
    if precision.name != method.precision:
        raise ValueError(f"load_sharded_model: precision {precision.name}, but the method's is {method.precision}")
    return precision


def _meta_encoder(model_dir: str | Path, method: Method, encoder):
    """The backbone on the meta device: the caller's (from ``empty_backbone``) or built here."""
    if encoder is None:
        return empty_backbone(model_dir, method)
    if any(not p.is_meta for p in encoder.parameters()):
        raise ValueError("load_sharded_model: encoder must come from empty_backbone (parameters on the meta device)")
    return encoder


def _check_names(encoder, keys: _KeyMap, checkpoint: _Checkpoint, merges: list[_Adapter]) -> None:
    """Every checkpoint key inside the backbone's modules names one of its parameters or
    buffers, and every merged adapter's module is one of the backbone's."""
    known = {n for n, _ in encoder.named_parameters(remove_duplicate=False)}
    known |= {n for n, _ in encoder.named_buffers(remove_duplicate=False)}
    unexpected = keys.unexpected(known)
    if unexpected:
        raise CheckpointMismatch(
            f"unexpected key {unexpected[0]!r} in {checkpoint.where}: inside the backbone's "
            f"modules but no parameter of {type(encoder).__name__} has that name"
            + (f" ({len(unexpected) - 1} more)" if len(unexpected) > 1 else "")
        )
    for adapter in merges:
        for module in adapter.modules:
            if f"{module}.weight" not in known:
                raise CheckpointMismatch(
                    f"{adapter.path}: LoRA key {adapter.modules[module].a_key!r} names "
                    f"module {module!r}, which the backbone does not have"
                )


def _with_adapters(model, method: Method, trained: dict[str, tuple[str, int]]):
    """(the model the loop trains, its peft wrapper or None): LoRA attached for an adapter
    method, on stand-in weights (the base's parameters are on the meta device)."""
    if not method.adapters:
        return model, None
    with _stand_in_weights(model):
        peft_model = attach(model, method, trained)
    return inner(peft_model), peft_model


class _ShardPlan:
    """What sharding a (meta) model needs: its parameter groups, the real tensors built on
    every rank (heads, new adapters, buffers), kept whole until copied into their shards,
    and where each meta parameter's rows are read from."""

    def __init__(self, model, sources, blocks: tuple, precision: Precision, activation_checkpointing: bool) -> None:
        self.model, self.blocks = model, blocks
        self.precision, self.activation_checkpointing = precision, activation_checkpointing
        groups = _param_groups(model)
        self.keep = {id(p): p.detach().clone() for p, _, _ in groups if not p.is_meta}
        # (peft keeps the base layers, and _stand_in_weights put their meta parameters back)
        strays = [names[0] for p, names, _ in groups if p.is_meta and id(p) not in sources]
        if strays:
            raise RuntimeError(
                f"parameters {strays[:3]} are on the meta device but neither built for real nor "
                "in the checkpoint (did peft create adapter weights on the meta device?)"
            )
        self.meta_sources = {id(p): sources[id(p)] for p, _, _ in groups if p.is_meta}
        self.buffers = [
            (module, attr, buffer.detach().clone())
            for module in model.modules()
            for attr, buffer in module._buffers.items()
            if buffer is not None
        ]
        self.order = [(id(p), names, places) for p, names, places in groups]

    def materialise(
        self, ctx: Context, merges: list[_Adapter], checkpoint: _Checkpoint, keys: _KeyMap, stats: LoadStats, sync: bool
    ) -> None:
        """Shard the model (FSDP2), then fill each rank's shards: the real tensors (rank 0's
        everywhere when ``sync``), the checkpoint's rows with the merged adapters' updates,
        the buffers."""
        model = self.model
        if sync:
            _broadcast([*self.keep.values(), *(b for _, _, b in self.buffers)])
        shard_model(model, self.blocks, ctx, self.precision, self.activation_checkpointing, sync_module_states=False)
        model.to_empty(device=ctx.device)
        _retie(model, self.order)
        _fill(model, self.order, self.keep, self.meta_sources, merges, checkpoint, stats)
        for module, attr, buffer in self.buffers:
            module._buffers[attr].copy_(buffer)
        _load_persistent_buffers(model, keys)


def _broadcast(tensors: list) -> None:
    """Rank 0's values of ``tensors`` (CPU, small) on every rank, in one broadcast of their bytes."""
    import torch
    import torch.distributed as dist

    # widest elements first: every tensor then starts at a multiple of its element size
    tensors = sorted((t for t in tensors if t.numel()), key=lambda t: -t.element_size())
    if not tensors:
        return
    flat = torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in tensors])
    dist.broadcast(flat, src=0)
    offset = 0
    for t in tensors:
        size = t.numel() * t.element_size()
        t.copy_(flat[offset : offset + size].view(t.dtype).view(t.shape))
        offset += size


def _build_heads(heads, encoder) -> dict:
    from torch import nn

    if callable(heads) and not isinstance(heads, nn.Module):
        return dict(heads(encoder))
    return dict(heads.items())


def _retie(model, order) -> None:
    """``to_empty`` gives each place of a tied parameter its own new tensor: make them one again
    (the first place's, the one FSDP2 tracks)."""
    for _, _, places in order:
        if len(places) > 1:
            module, attr = places[0]
            shared = module._parameters[attr]
            for other, other_attr in places[1:]:
                other._parameters[other_attr] = shared


def _fill(model, order, keep, meta_sources, merges: list[_Adapter], checkpoint: _Checkpoint, stats: LoadStats) -> None:
    """Copy each parameter's local rows in: kept tensors' rows, or the checkpoint's with the
    adapters' updates of those rows merged in, lineage order."""
    import torch

    # file by file (then key by key), so that each file is opened once
    order = sorted(
        order,
        key=lambda item: (
            ("", "") if item[0] in keep else (str(checkpoint.files[meta_sources[item[0]][0]]), meta_sources[item[0]][0])
        ),
    )
    with torch.no_grad():
        for old_id, _names, places in order:
            module, attr = places[0]
            param = module._parameters[attr]
            local, index = local_part(param)
            stats.local_param_bytes += local.numel() * local.element_size()
            stats.total_param_bytes += param.numel() * param.element_size()
            if old_id in keep:
                local.copy_(keep[old_id][index])
                continue
            key, backbone = meta_sources[old_id]
            if local.numel() == 0:
                continue
            rows = checkpoint.read(key, index).to(local.dtype)
            module_name = backbone.rpartition(".")[0] if backbone and backbone.endswith(".weight") else None
            for adapter in merges:
                if module_name in adapter.modules:
                    rows += adapter.delta(module_name, index, _adapter_dtype(local.dtype), stats)
            local.copy_(rows)
            del rows


def _load_persistent_buffers(model, keys: _KeyMap) -> None:
    """Persistent buffers the checkpoint holds (whole: FSDP2 does not shard buffers)."""
    import torch

    with torch.no_grad():
        for name, buffer in model.named_buffers():
            backbone = _backbone_name(name)
            module_name, _, attr = name.rpartition(".")
            owner = model.get_submodule(module_name)
            if backbone is None or attr in owner._non_persistent_buffers_set:
                continue
            key = keys.key(backbone)
            if key in keys.checkpoint.files:
                buffer.copy_(keys.checkpoint.read(key).to(buffer.dtype))


def _unsharded(model_dir, method, heads, ctx, family, head_formats, activation_checkpointing, encoder) -> ShardedModel:
    """One process: the recipe's own path (runtime.SingleProcess)."""
    from workflow_scripts.models.heads import MultiHeadModel

    if encoder is not None and any(p.is_meta for p in encoder.parameters()):
        encoder = None  # a meta backbone built for the sharded path: load the real one
    encoder = encoder if encoder is not None else load_backbone(model_dir, method)
    built_heads = _build_heads(heads, encoder)
    if activation_checkpointing:
        encoder.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model = MultiHeadModel(encoder, built_heads, family.name).to(ctx.device)
    peft_model = None
    if method.adapters:
        trained = head_formats if head_formats is not None else dict.fromkeys(built_heads, ("", 0))
        peft_model = attach(model, method, trained)
        model = inner(peft_model)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    return ShardedModel(model, peft_model, LoadStats(local_param_bytes=size, total_param_bytes=size))


__all__ = [
    "CheckpointMismatch",
    "LoadStats",
    "ShardedModel",
    "empty_backbone",
    "empty_mlm_head",
    "load_sharded_model",
    "local_part",
]
