"""Sharded loading (workflow_scripts/training/sharded_loading.py): every rank reads only its rows of the
base, yet builds the model the existing path builds (whole base on every rank, then FSDP2).

One torchrun run of tests/sharded_loading_worker.py on 2 CPU processes (gloo) builds, for each
scenario, both models from the same seed and saves their gathered state dicts, their logits on
one batch and each rank's load statistics; the tests below compare them. Backbones: a tiny
XLM-R encoder (one safetensors file, saved with its MLM head), a tiny Llama decoder (sharded
into several files with an index) and a tiny mT5 encoder (saved with its decoder, which is not
read). Vocabulary sizes are odd, so the embedding shards are uneven. Precision fp32 unless a
scenario says otherwise; a LoRA scenario's precision is its checkpoint's dtype, the dtype
its frozen base is held in by both paths.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import HIDDEN_GPUS, REPO
from workflow_scripts.models.adapters import Method, attach, lineage, load_backbone
from workflow_scripts.models.backbones import family_of
from workflow_scripts.models.heads import MultiHeadModel, make_head
from workflow_scripts.precision import Precision
from workflow_scripts.spec import launch
from workflow_scripts.spec.basics import InputError
from workflow_scripts.training import distributed as D
from workflow_scripts.training import sharded_loading as S

WORKER = str(REPO / "tests" / "sharded_loading_worker.py")
WORLD = 2
ADAPTER_HEADS = {"nli": ("classification", 3)}


def _save_backbones(root):
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MT5Config,
        MT5ForConditionalGeneration,
        XLMRobertaConfig,
        XLMRobertaForMaskedLM,
    )

    torch.manual_seed(0)
    XLMRobertaForMaskedLM(
        XLMRobertaConfig(
            vocab_size=101,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=40,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    ).save_pretrained(root / "enc")
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=103,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
    ).save_pretrained(root / "dec", max_shard_size="12KB")
    MT5ForConditionalGeneration(
        MT5Config(
            vocab_size=107,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
            dropout_rate=0.0,
        )
    ).save_pretrained(root / "t5")
    # the decoder in bf16 (config dtype bfloat16: from_pretrained loads it so, also on CPU), and
    # that copy without a config dtype (from_pretrained then takes the weights' dtype)
    LlamaForCausalLM.from_pretrained(root / "dec", dtype=torch.bfloat16).save_pretrained(root / "dec_bf16")
    shutil.copytree(root / "dec_bf16", root / "dec_bf16_no_dtype")
    config = json.loads((root / "dec_bf16_no_dtype" / "config.json").read_text())
    config.pop("dtype", None)
    config.pop("torch_dtype", None)
    (root / "dec_bf16_no_dtype" / "config.json").write_text(json.dumps(config))
    # the bf16 decoder's values in fp32: the weights full fine-tuning of dec_bf16 starts from
    LlamaForCausalLM.from_pretrained(root / "dec_bf16", dtype=torch.float32).save_pretrained(root / "dec_bf16_as_fp32")
    names = ("enc", "dec", "t5", "dec_bf16", "dec_bf16_no_dtype", "dec_bf16_as_fp32")
    return {name: root / name for name in names}


def _save_adapter(model_dir, out, seed: int):
    """A phase trained with LoRA on ``model_dir``, as adapters.save_adapter_phase writes it:
    the adapter with its head, config.json and the manifest naming base and earlier adapters.
    Its B matrices are random (trained), so merging it changes the backbone."""
    method = Method(name="lora", rank=4, alpha=8, dropout=0.0)
    encoder = load_backbone(model_dir, method)
    torch.manual_seed(seed)
    family = family_of(model_dir)
    heads = {name: make_head(fmt, encoder.config.hidden_size, n, 0.0, 0.02) for name, (fmt, n) in ADAPTER_HEADS.items()}
    peft_model = attach(MultiHeadModel(encoder, heads, family.name), method, ADAPTER_HEADS)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.3)
    out.mkdir(parents=True)
    peft_model.save_pretrained(str(out / "adapter"))
    found = lineage(model_dir)
    shutil.copyfile(os.path.join(found.base, "config.json"), out / "config.json")
    manifest = {
        "family": family.name,
        "method": {"name": "lora", "rank": 4, "alpha": 8},
        "base": found.base,
        "merged": list(found.with_own()),
        "own": True,
        "heads": {name: list(spec) for name, spec in ADAPTER_HEADS.items()},
    }
    (out / "xstilts_backbone.json").write_text(json.dumps(manifest))
    return out


def _broken_copies(dirs, root):
    """The decoder without one weight (in its index), the encoder with a stray weight."""
    from safetensors.torch import load_file, save_file

    missing = root / "dec_missing"
    shutil.copytree(dirs["dec"], missing)
    index = json.loads((missing / S.SAFETENSORS_INDEX).read_text())
    dropped = "model.layers.1.self_attn.v_proj.weight"
    del index["weight_map"][dropped]
    (missing / S.SAFETENSORS_INDEX).write_text(json.dumps(index))
    stray = root / "enc_stray"
    shutil.copytree(dirs["enc"], stray)
    weights = load_file(stray / S.SAFETENSORS)
    weights["roberta.encoder.layer.0.attention.self.query.weight_old"] = torch.zeros(2, 2)
    save_file(weights, stray / S.SAFETENSORS, metadata={"format": "pt"})
    reshaped = root / "enc_reshaped"
    shutil.copytree(dirs["enc"], reshaped)
    weights = load_file(reshaped / S.SAFETENSORS)
    weights["roberta.encoder.layer.1.attention.self.key.weight"] = torch.zeros(31, 32)
    save_file(weights, reshaped / S.SAFETENSORS, metadata={"format": "pt"})
    return missing, dropped, stray, reshaped


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded_loading")
    dirs = {k: str(v) for k, v in _save_backbones(root).items()}
    enc_a1 = _save_adapter(dirs["enc"], root / "enc_a1", seed=1)
    dec_a1 = _save_adapter(dirs["dec"], root / "dec_a1", seed=2)
    dec_a2 = _save_adapter(dec_a1, root / "dec_a2", seed=3)  # lineage: base + a1 merged, then a2
    t5_a1 = _save_adapter(dirs["t5"], root / "t5_a1", seed=4)
    dec_bf16_a1 = _save_adapter(dirs["dec_bf16"], root / "dec_bf16_a1", seed=5)  # an fp32 adapter on a bf16 base
    missing, dropped, stray, reshaped = _broken_copies({k: root / k for k in dirs}, root)
    return {
        **dirs,
        "enc_a1": str(enc_a1),
        "dec_a1": str(dec_a1),
        "dec_a2": str(dec_a2),
        "t5_a1": str(t5_a1),
        "dec_bf16_a1": str(dec_bf16_a1),
        "dec_missing": str(missing),
        "dropped": dropped,
        "enc_stray": str(stray),
        "enc_reshaped": str(reshaped),
        "root": root,
    }


SCENARIOS = [
    # name, directory, method, extra
    ("encoder_full_mlm", "enc", "full", {"mlm": True}),
    # (activation checkpointing: on the encoder; a Llama decoder's backward under the composable
    # checkpoint fails in the existing path too while use_cache is on: the recomputation
    # appends to the KV cache its forward filled)
    ("encoder_lora_merged", "enc_a1", "lora", {"activation_checkpointing": True}),
    ("decoder_full_two_merged", "dec_a2", "full", {}),
    ("decoder_lora", "dec", "lora", {}),
    ("seq2seq_full", "t5", "full", {}),
    ("seq2seq_lora_merged", "t5_a1", "lora", {}),
    # a bf16 frozen base, fp32 LoRA and heads in the same FSDP2 units, gathered in bf16
    ("decoder_bf16_lora_merged", "dec_bf16_a1", "lora", {"precision": "bf16"}),
    # full fine-tuning of a bf16 checkpoint: fp32 master weights, the model its fp32 copy gives;
    # in fp32, and in bf16 (FSDP2's mixed precision: gathered and computed in bf16)
    ("decoder_bf16_full", "dec_bf16", "full", {"reference_dir": "dec_bf16_as_fp32"}),
    ("decoder_bf16_full_mixed", "dec_bf16", "full", {"reference_dir": "dec_bf16_as_fp32", "precision": "bf16"}),
]
FORWARD = [s[0] for s in SCENARIOS if s[3].get("forward", True)]
ERRORS = [
    ("missing_key", "dec_missing", "full"),
    ("unexpected_key", "enc_stray", "full"),
    ("wrong_shape", "enc_reshaped", "lora"),
    ("qlora", "dec", "qlora"),
]


@pytest.fixture(scope="module")
def runs(models):
    root = models["root"]
    scenarios = [
        {"name": n, "dir": models[d], "method": m, "seed": 17 + i, **extra}
        for i, (n, d, m, extra) in enumerate(SCENARIOS)
    ]
    for scenario in scenarios:
        if "reference_dir" in scenario:
            scenario["reference_dir"] = models[scenario["reference_dir"]]
    scenarios += [{"name": n, "dir": models[d], "method": m, "seed": 1, "expect_error": True} for n, d, m in ERRORS]
    (root / "scenarios.json").write_text(json.dumps(scenarios))
    out = root / "results.pt"
    command = launch.launch_command([WORKER, "--scenarios", str(root / "scenarios.json"), "--out", str(out)], 1, WORLD)
    command[:1] = [sys.executable, "-m", "torch.distributed.run"]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **HIDDEN_GPUS)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return torch.load(out, weights_only=False)


def _differences(a: dict, b: dict) -> list[str]:
    assert sorted(a) == sorted(b), sorted(set(a) ^ set(b))
    return [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", [s[0] for s in SCENARIOS])
def test_sharded_loading_builds_the_existing_paths_model_tensor_for_tensor(runs, name):
    """The gathered full state dict (backbone with merged adapters, heads, LoRA matrices as
    initialised from the seed) equals the existing path's, key for key and bit for bit."""
    found = runs[name]
    assert len(found["reference"]) > 20
    if name == "decoder_bf16_lora_merged":  # a bf16 base, fp32 LoRA and heads
        assert {t.dtype for t in found["sharded"].values()} == {torch.bfloat16, torch.float32}
    if name == "encoder_full_mlm":  # the MLM head predicts with the (sharded, loaded) input embeddings
        assert all(s["ties"] == [True] for s in found["stats"])
        assert torch.equal(
            found["sharded"]["heads.mlm.decoder.weight"], found["sharded"]["encoder.embeddings.word_embeddings.weight"]
        )
    assert _differences(found["reference"], found["sharded"]) == []
    if "lora" in name:  # the new adapter and the heads' trained copies are there
        assert any("lora_A" in k for k in found["sharded"]) and any("modules_to_save" in k for k in found["sharded"])


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", FORWARD)
def test_sharded_model_gives_the_existing_paths_logits_and_gradients(runs, name):
    """One forward pass (eval) gives the same logits, bit for bit; one backward pass (train)
    gives every rank the same gradient shards for the same trainable parameters."""
    found = runs[name]
    assert sorted(found["reference_logits"]) == sorted(found["sharded_logits"])
    for head, expected in found["reference_logits"].items():
        assert torch.equal(found["sharded_logits"][head], expected), head
    for stats in found["stats"]:
        assert stats["trainable"] == stats["reference_trainable"] and stats["trainable"]
        assert stats["ties"] == stats["reference_ties"]
        if "lora" in name:  # a frozen base: only the new adapter and the heads train
            assert all("lora_" in n or n.startswith("heads.") for n in stats["trainable"])
        assert stats["gradient_names_equal"] and stats["gradient_mismatches"] == []
        assert stats["gradients"] >= 4  # at least the xnli head's
        if name in ("encoder_full_mlm", "seq2seq_full"):  # full fine-tuning of a base: the backbone too
            assert stats["gradients"] > 20
        # (decoder_full_two_merged: load_backbone leaves a backbone with merged adapters frozen,
        # requires_grad False as peft's merge_and_unload returns it; the sharded path does the same)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["decoder_bf16_full", "decoder_bf16_full_mixed"])
def test_full_fine_tuning_of_a_bf16_checkpoint_holds_fp32_master_weights_on_every_rank(runs, models, name):
    """A checkpoint stored in bf16: every rank's shards are fp32 (FSDP2 needs one dtype for a
    unit's trainable parameters, and the heads are fp32), holding the stored values exactly,
    also when the forward runs in bf16 (the mixed policy casts the gathered copy, not the shards)."""
    with S._Checkpoint(models["dec_bf16"]) as checkpoint:
        assert {checkpoint.slice(key).get_dtype() for key in checkpoint.files} == {"BF16"}
    for stats in runs[name]["stats"]:
        assert stats["dtypes"] == stats["trainable_dtypes"] == ["torch.float32"], stats["rank"]
    assert {t.dtype for t in runs[name]["sharded"].values()} == {torch.float32}


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", [s[0] for s in SCENARIOS if s[2] == "lora"])
def test_an_adapter_phase_gathers_only_the_trainable_tensors(runs, name):
    """What rank 0 receives for writing an adapter phase: the LoRA matrices and the heads'
    trained copies (``requires_grad``), each whole and equal to the full gather's, and not
    one tensor of the frozen base."""
    found = runs[name]
    assert sorted(found["trainable"]) == found["stats"][0]["trainable"]
    assert len(found["trainable"]) < len(found["sharded"]) / 2
    for key, value in found["trainable"].items():
        assert value.dtype == torch.float32 and torch.equal(value, found["sharded"][key]), key
    assert not any(k.endswith("base_layer.weight") or "original_module" in k for k in found["trainable"])


@pytest.mark.multiprocess
def test_merged_adapters_change_the_backbone(runs, models):
    """The lineage cases are not vacuous: the merged weights differ from the base's."""
    from safetensors.torch import load_file

    base = load_file(os.path.join(models["enc"], S.SAFETENSORS))
    merged = runs["encoder_lora_merged"]["sharded"]
    key = "encoder.encoder.layer.0.attention.self.query.base_layer.weight"
    assert not torch.equal(merged[key], base["roberta.encoder.layer.0.attention.self.query.weight"])
    two = runs["decoder_full_two_merged"]["sharded"]["encoder.layers.1.self_attn.o_proj.weight"]
    one = load_backbone(models["dec_a1"], Method(name="lora")).layers[1].self_attn.o_proj.weight
    assert not torch.equal(two, one)


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", [s[0] for s in SCENARIOS])
def test_each_rank_materialises_and_reads_about_its_share(runs, name):
    """Parameter bytes held by a rank: its shard, ~1/W of the model (+ one row per tensor of
    FSDP2's uneven last shard); bytes read from the checkpoint: at most that (the heads and
    new adapters are drawn, not read); no slice read larger than one tensor's share."""
    stats = runs[name]["stats"]
    assert len(stats) == WORLD
    total = stats[0]["total_param_bytes"]
    assert all(s["total_param_bytes"] == total for s in stats)
    assert sum(s["local_param_bytes"] for s in stats) == total
    for s in stats:
        print(
            f"{name} rank {s['rank']}: {s['local_param_bytes']} of {total} parameter bytes "
            f"({s['local_param_bytes'] / total:.3f}), storage {s['storage_bytes']}, read {s['read_bytes']} "
            f"(largest slice {s['largest_read']}), adapters {s['adapter_read_bytes']}"
        )
        assert abs(s["local_param_bytes"] - total / WORLD) <= 0.05 * total / WORLD
        assert s["read_bytes"] <= s["local_param_bytes"]
        assert s["storage_bytes"] <= 1.05 * total / WORLD  # FSDP2's padded shards
    state = runs[name]["reference"]
    biggest = max(t.numel() * t.element_size() for t in state.values())
    # the largest read is the share of the largest tensor (the odd-sized embedding: 51 of 101 rows)
    assert max(s["largest_read"] for s in stats) <= 1.05 * biggest / WORLD


@pytest.mark.multiprocess
def test_a_checkpoint_missing_a_weight_is_an_error_naming_key_and_file(runs, models):
    for error in runs["missing_key"]["errors"]:
        assert "CheckpointMismatch" in error["classes"] and "InputError" in error["classes"]
        assert models["dropped"] in error["message"] and S.SAFETENSORS_INDEX in error["message"]
        assert error["message"].startswith("missing key")


@pytest.mark.multiprocess
def test_a_stray_backbone_weight_in_the_checkpoint_is_an_error_naming_it(runs):
    for error in runs["unexpected_key"]["errors"]:
        assert "CheckpointMismatch" in error["classes"]
        assert "roberta.encoder.layer.0.attention.self.query.weight_old" in error["message"]
        assert S.SAFETENSORS in error["message"]


@pytest.mark.multiprocess
def test_a_weight_of_another_shape_is_an_error_naming_it(runs):
    for error in runs["wrong_shape"]["errors"]:
        assert "CheckpointMismatch" in error["classes"]
        assert "roberta.encoder.layer.1.attention.self.key.weight" in error["message"]
        assert "(31, 32)" in error["message"] and "(32, 32)" in error["message"]


@pytest.mark.unit
def test_adapters_other_than_plain_lora_are_refused(models, tmp_path):
    """DoRA (a magnitude vector) or a rank pattern cannot be merged row by row as plain LoRA is."""
    for change in ({"use_dora": True}, {"rank_pattern": {"q_proj": 8}}):
        adapter = tmp_path / next(iter(change))
        shutil.copytree(models["dec_a1"], adapter)
        config_file = adapter / "adapter" / "adapter_config.json"
        config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **change}))
        with pytest.raises(InputError, match=f"plain LoRA.*{next(iter(change))}"):
            S._Adapter(adapter)


@pytest.mark.multiprocess
def test_qlora_is_refused(runs):
    for error in runs["qlora"]["errors"]:
        assert error["type"] == "InputError"
        assert "full and lora" in error["message"] and "qlora" in error["message"]


@pytest.mark.unit
def test_without_a_process_group_the_existing_path_runs(models):
    """One process: load_backbone + heads + attach, as train.py does (nothing to shard)."""
    ctx = D.Context(0, 1, 0, torch.device("cpu"), None, True)
    method = Method(name="lora", precision="fp32", rank=4, alpha=8, dropout=0.0)
    torch.manual_seed(5)
    built = S.load_sharded_model(
        models["dec_a1"],
        method,
        lambda encoder: {"xnli": make_head("classification", encoder.config.hidden_size, 3, 0.0, 0.02)},
        ctx,
        head_formats={"xnli": ("classification", 3)},
    )
    torch.manual_seed(5)
    encoder = load_backbone(models["dec_a1"], method)
    expected = MultiHeadModel(encoder, {"xnli": make_head("classification", 32, 3, 0.0, 0.02)}, "decoder")
    expected = attach(expected, method, {"xnli": ("classification", 3)}).base_model.model
    assert built.peft_model is not None and built.model is built.peft_model.base_model.model
    assert _differences(expected.state_dict(), built.model.state_dict()) == []
    batch = {"input_ids": torch.tensor([[5, 6, 7, 8]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    logits, _ = built.model("classification", "xnli", batch)
    assert logits.shape == (1, 3)
    # qlora: refused under a process group before any collective (here a context claiming one)
    two = D.Context(0, 2, 0, torch.device("cpu"), "gloo", True)
    with pytest.raises(InputError, match="full and lora"):
        S.load_sharded_model(models["dec"], Method(name="qlora"), {}, two)
    with pytest.raises(InputError, match="full and lora"):
        S.empty_backbone(models["dec"], Method(name="qlora"))
    # a policy other than the method's (whose dtype the meta backbone has): refused, also before any collective
    with pytest.raises(ValueError, match="precision bf16, but the method's is fp32"):
        S.load_sharded_model(models["dec"], Method(name="full", precision="fp32"), {}, two, precision=Precision("bf16"))


@pytest.mark.unit
def test_the_broadcast_of_small_tensors_keeps_mixed_dtypes_and_odd_sizes(tmp_path):
    """Heads, adapters and buffers go out in one buffer of bytes: odd-sized fp32 tensors next
    to int64 and bool ones must come back whole (a one-process gloo group)."""
    import torch.distributed as dist

    tensors = [
        torch.arange(3, dtype=torch.float32),
        torch.arange(5, dtype=torch.int64),
        torch.tensor([True, False, True]),
        torch.arange(7, dtype=torch.bfloat16),
        torch.tensor(2.5),
    ]
    expected = [t.clone() for t in tensors]
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        S._broadcast(tensors)
    finally:
        dist.destroy_process_group()
    assert all(t.dtype == e.dtype and torch.equal(t, e) for t, e in zip(tensors, expected))


@pytest.mark.unit
def test_empty_backbone_holds_no_weights_and_names_every_parameter(models):
    """Class, parameter names, shapes, dtypes (config's or checkpoint's, as from_pretrained
    chooses them), ties and computed buffers of the model load_backbone gives, weights on meta."""
    for key in ("enc_a1", "dec_a2", "t5_a1", "dec_bf16_a1", "dec_bf16_no_dtype"):
        # a frozen LoRA base in the compute dtype: the checkpoint's, for both paths to agree
        method = Method(name="lora", precision="bf16" if "bf16" in key else "fp32")
        meta = S.empty_backbone(models[key], method)
        real = load_backbone(models[key], method)
        assert all(p.is_meta for p in meta.parameters())
        assert type(meta) is type(real) and meta.config.to_dict() == real.config.to_dict()
        assert meta.training == real.training
        assert [(n, p.shape, p.dtype) for n, p in meta.named_parameters()] == [
            (n, p.shape, p.dtype) for n, p in real.named_parameters()
        ]
        for (n, b), (_, c) in zip(meta.named_buffers(), real.named_buffers()):
            assert torch.equal(b, c), n  # position ids, rotary frequencies: computed, not meta
