"""The precision policy (workflow_scripts/precision.py): autocast, loss scaling and load dtypes as
the table in docs/backbones.md says, on CPU (where bf16 and fp16 autocast and bf16 checkpoints
exist too); bf16 refused on a GPU that only emulates it; fp32 master weights for a bf16
checkpoint; an fp16 phase trains with loss scaling and records what ran."""

from __future__ import annotations

import pytest
import torch

from workflow_scripts.models import adapters
from workflow_scripts.models.adapters import Method
from workflow_scripts.precision import Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.evaluation_settings import EvaluationSettings

pytestmark = pytest.mark.unit
CPU = torch.device("cpu")


@pytest.mark.parametrize("name,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)])
def test_the_forward_computes_in_the_precisions_dtype_on_a_cpu(name, dtype):
    layer = torch.nn.Linear(8, 4)
    with Precision(name).autocast(CPU):
        out = layer(torch.randn(2, 8))
    assert out.dtype == dtype


def test_only_fp16_scales_the_loss_and_every_method_loads_its_own_dtype():
    assert [Precision(n).grad_scaler(CPU).is_enabled() for n in ("fp32", "bf16", "fp16")] == [False, False, True]
    bf16 = Precision("bf16")
    assert bf16.base_dtype("full") == torch.float32  # master weights, whatever the checkpoint stores
    assert bf16.base_dtype("lora") == torch.bfloat16 and bf16.base_dtype("qlora") is None
    assert Precision("fp32").base_dtype("lora") == torch.float32
    # the one check of a precision's name: the record a job's settings are parsed with
    with pytest.raises(InputError, match=r"--settings\.precision: 'tf32' is not one of 'bf16', 'fp16', 'fp32'"):
        EvaluationSettings.parse(
            {"languages": ["en"], "max_length": 8, "eval_batch_size": 8, "precision": "tf32"}, "--settings"
        )


def test_bf16_is_refused_on_a_gpu_that_only_emulates_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "Tesla V100-SXM2-32GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (7, 0))
    gpu = torch.device("cuda", 0)
    with pytest.raises(
        InputError, match=r"backbones.x: precision bf16: Tesla V100-SXM2-32GB \(compute capability 7.0\)"
    ):
        Precision("bf16").check_device(gpu, "backbones.x")
    Precision("fp16").check_device(gpu)  # fp16 and fp32 run there
    Precision("bf16").check_device(CPU)  # CPUs compute bf16 autocast themselves


@pytest.fixture(scope="module")
def demo_config() -> dict:
    from workflow_scripts.preflight import load_config

    return load_config([])


def test_the_preflight_blocks_bf16_on_such_a_gpu(monkeypatch, demo_config):
    from workflow_scripts import preflight

    config = {**demo_config, "backbones": {k: {**v, "precision": "bf16"} for k, v in demo_config["backbones"].items()}}
    monkeypatch.setattr(preflight, "local_gpus", lambda: [("Tesla T4", 15.0)])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (7, 5))
    findings = preflight.check_precision(config)
    assert {f.status for f in findings} == {preflight.BLOCKER} and len(findings) == len(config["backbones"])
    assert "fp16 or fp32" in findings[0].fix
    monkeypatch.setattr(preflight, "local_gpus", lambda: [])
    [skipped] = preflight.check_precision(config)
    assert skipped.status == preflight.SKIPPED


def test_full_fine_tuning_of_a_bf16_checkpoint_trains_fp32_master_weights(demo_encoder_dir, tmp_path):
    from workflow_scripts.models.heads import load_encoder

    stored = tmp_path / "bf16"
    load_encoder(demo_encoder_dir).to(torch.bfloat16).save_pretrained(stored)
    for name in ("tokenizer_config.json", "sentencepiece.bpe.model", "special_tokens_map.json"):
        if (demo_encoder_dir / name).is_file():
            (stored / name).write_bytes((demo_encoder_dir / name).read_bytes())
    assert load_encoder(stored).dtype == torch.bfloat16  # what transformers 5 does without a dtype
    full = adapters.load_backbone(stored, Method(name="full", precision="bf16"))
    assert {p.dtype for p in full.parameters()} == {torch.float32}
    lora = adapters.load_backbone(stored, Method(name="lora", precision="fp16"))
    assert {p.dtype for p in lora.parameters()} == {torch.float16}


def test_an_fp16_phase_trains_with_loss_scaling_and_records_its_policy(demo_data, demo_encoder_dir, tmp_path):
    from conftest import phase_settings
    from workflow_scripts.training.recipe import train_phase

    settings = phase_settings(
        {"mnli": {"batch_size": 8, "epochs": 1, "max_length": 48, "select_language": "en"}},
        dropout=0.0,
        dev_examples=16,
        eval_batch_size=16,
        eval_every=4,
        learning_rate=1e-3,
        max_micro_batch=8,
        multitask_epochs=1,
        warmup_ratio=0.0,
        max_steps=8,
        language="en",
        method={"name": "full", "precision": "fp16"},
    )
    mnli = str(demo_data["mnli.train"])
    log = train_phase(
        "intermediate", demo_encoder_dir, {"mnli": {"train": mnli, "dev": mnli}}, settings, 1, 1, tmp_path
    )
    record = log["backbone"]["precision"]
    assert record == {
        "precision": "fp16",
        "device": "cpu",
        "autocast": "float16",
        "weights": "float32",
        "trained_weights": "float32",
        "loss_scaling": True,
    }
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in log["history"])
