"""The GPU memory planner: its per-parameter arithmetic, how the estimate moves with GPUs,
method and checkpointing, the smallest GPU count, and the config check and CLI."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest
import yaml

from workflow_scripts.planning import memory_model as mm
from workflow_scripts.planning import memory_plan as mp
from workflow_scripts.planning import memory_table as mt
from workflow_scripts.spec.method import METHODS

pytestmark = pytest.mark.unit

REPO = mp.__file__.rsplit("/workflow_scripts/", 1)[0]
GB = 1e9

XXL = {
    "name": "xlmr_xxl",
    "family": "encoder",
    "method": "full",
    "precision": "bf16",
    "parameters": 10.7e9,
    "architecture": {
        "hidden_size": 4096,
        "num_layers": 48,
        "num_attention_heads": 32,
        "vocab_size": 250880,
        "intermediate_size": 16384,
    },
}
BLOOM = {
    "name": "bloomz",
    "family": "decoder",
    "precision": "bf16",
    "parameters": 176e9,
    "activation_checkpointing": True,
    "lora": {"rank": 16},
    "architecture": {"hidden_size": 14336, "num_layers": 70, "num_attention_heads": 112, "vocab_size": 250880},
}


def backbone(base: dict, **changes) -> dict:
    entry = copy.deepcopy(base)
    entry.update(changes)
    return entry


def workflow_config(**backbone_changes) -> dict:
    """A config of the workflow's shape with one XLM-R XXL backbone and two phases."""
    entry = backbone(XXL, **{"gpus": {"per_node": 8, "nodes": 1, "memory_gb": 80}, **backbone_changes})
    entry.pop("name")
    return {
        "backbones": {
            "xlmr_xxl": entry,
            "demo": {"family": "encoder", "hub_id": "FacebookAI/xlm-roberta-large", "revision": "main"},
        },
        "tasks": {
            "mnli": {"max_length": 256, "batch_size": 24},
            "squad": {"max_length": 384, "batch_size": 8},
            "mlm": {"max_length": 256, "batch_size": 8},
            "xnli": {"max_length": 128, "batch_size": 4},
            "pawsx": {"max_length": 128, "batch_size": 32},
            "tatoeba": {"max_length": 512},
        },
        "intermediate": {"none": {"tasks": []}, "mnli": {"tasks": ["mnli"]}, "squad": {"tasks": ["squad"]}},
        "targets": ["xnli", "pawsx", "tatoeba"],
        "training": {"intermediate": {"max_micro_batch": 16}, "target": {"max_micro_batch": 16}},
    }


def test_full_finetuning_state_is_the_documented_16_bytes_per_parameter():
    # fp32 master weights 4 + fp32 gradients 4 + two fp32 moments 8, whatever the precision.
    assert mm.TRAINABLE_BYTES["fp16"] == mm.TRAINABLE_BYTES["bf16"]  # the precision policy's fp16
    assert mm.COMPUTE_BYTES["fp16"] == mm.COMPUTE_BYTES["bf16"] == 2
    for precision, (w, g, o) in {"bf16": (4, 4, 8), "fp32": (4, 4, 8)}.items():
        bb = backbone(XXL, precision=precision)
        est = mm.estimate(bb, seq_len=128, micro_batch=1, gpus=1, head_parameters=0)
        assert est.weights / 10.7e9 == pytest.approx(w)
        assert est.gradients / 10.7e9 == pytest.approx(g)
        assert est.optimizer / 10.7e9 == pytest.approx(o)
        assert est.state / 10.7e9 == pytest.approx(16)


def test_fp32_doubles_activations_not_state():
    bf16 = mm.estimate(backbone(XXL), 256, 8, 1)
    fp32 = mm.estimate(backbone(XXL, precision="fp32"), 256, 8, 1)
    assert fp32.activations == pytest.approx(2 * bf16.activations)
    assert fp32.state == pytest.approx(bf16.state)


def test_doubling_gpus_halves_sharded_state_but_not_activations():
    two = mm.estimate(backbone(XXL), 256, 8, gpus=2)
    four = mm.estimate(backbone(XXL), 256, 8, gpus=4)
    for field in ("weights", "gradients", "optimizer"):
        assert getattr(four, field) == pytest.approx(getattr(two, field) / 2)
    assert four.activations == two.activations
    assert four.buffers == two.buffers
    assert four.total < two.total


def test_activations_follow_the_measured_per_token_constants_and_grow_with_sequence_and_batch():
    s, b, h, f, layers = 256, 8, 4096, 16384, 48
    est = mm.estimate(backbone(XXL), s, b, 1)
    per_token = mm.ACTIVATION_HIDDEN["encoder"] * h + mm.ACTIVATION_FFN["encoder"] * f
    assert est.activations == pytest.approx(layers * s * b * per_token)
    assert mm.estimate(backbone(XXL), s, 2 * b, 1).activations == pytest.approx(2 * est.activations)
    # SDPA keeps no attention scores: activations are linear in the sequence length.
    assert mm.estimate(backbone(XXL), 2 * s, b, 1).activations == pytest.approx(2 * est.activations)


def test_lora_is_smaller_than_full_and_qlora_smaller_than_lora():
    full, lora, qlora = (mm.estimate(backbone(XXL, method=m), 256, 8, 1) for m in ("full", "lora", "qlora"))
    assert lora.state < full.state
    assert qlora.state < lora.state
    assert qlora.total < lora.total < full.total
    assert qlora.trainable_parameters == lora.trainable_parameters < full.trainable_parameters


def test_lora_base_is_two_bytes_and_qlora_base_about_half_a_byte_per_parameter():
    arch = {k: v for k, v in XXL["architecture"].items() if k != "vocab_size"}
    no_embedding = backbone(XXL, architecture=arch)
    adapter_state = 16 * mm.lora_adapter_parameters(mm.parse_backbone("x", backbone(no_embedding, method="lora")))
    lora = mm.estimate(backbone(no_embedding, method="lora"), 128, 1, 1, head_parameters=0)
    qlora = mm.estimate(backbone(no_embedding, method="qlora"), 128, 1, 1, head_parameters=0)
    assert (lora.state - adapter_state) / 10.7e9 == pytest.approx(2)
    assert 0.5 < (qlora.state - adapter_state) / 10.7e9 < 0.53  # NF4 plus its quantisation constants
    # QLoRA keeps the embedding in bf16: a vocabulary makes the base larger.
    with_embedding = mm.estimate(backbone(XXL, method="qlora"), 128, 1, 1, head_parameters=0)
    assert with_embedding.state > qlora.state


def test_lora_adapter_count_from_rank_layers_hidden_and_target_modules():
    entry = backbone(XXL, method="lora", lora={"rank": 8, "target_modules": ["query", "value"]})
    bb = mm.parse_backbone("x", entry)
    assert mm.lora_adapter_parameters(bb) == 48 * 2 * 8 * (4096 + 4096)
    # The MLP layers too: intermediate.dense (h -> f) and output.dense, which also matches the
    # attention output (h -> h) and the MLP's output (f -> h).
    wider = mm.parse_backbone(
        "x",
        backbone(
            entry, lora={"rank": 8, "target_modules": ["query", "key", "value", "output.dense", "intermediate.dense"]}
        ),
    )
    assert mm.lora_adapter_parameters(wider) == 48 * (4 * 8 * 2 * 4096 + 2 * 8 * (4096 + 16384))


def test_lora_defaults_are_the_schemas_and_the_familys_attention_projections():
    """Without `lora` settings the planner plans what training trains: the schema's rank and
    the family's own target modules."""
    from workflow_scripts.models.adapters import Method
    from workflow_scripts.spec import method

    assert method.LORA_DEFAULTS["rank"] == Method().rank == 16
    for family, arch in [
        ("encoder", XXL["architecture"]),
        ("seq2seq_encoder", XXL["architecture"]),
        ("decoder", BLOOM["architecture"]),
    ]:
        bb = mm.parse_backbone("x", backbone(XXL, family=family, architecture=arch, method="lora"))
        assert bb.lora_rank == 16 and len(bb.target_modules) == 4
        assert mm.lora_adapter_parameters(bb) == arch["num_layers"] * 4 * 16 * 2 * arch["hidden_size"]


@pytest.mark.parametrize(
    "family,model_type",
    [
        ("encoder", "xlm-roberta"),
        ("encoder", "deberta-v2"),
        ("seq2seq_encoder", "mt5"),
        ("decoder", "llama"),
        ("decoder", "bloom"),
    ],
)
def test_every_family_default_is_sized_and_no_larger_than_planned(family, model_type):
    """The planner sizes a family's defaults as those of its usual architecture (it does not
    know the model type): the other architectures' own names must be known and no larger."""
    from workflow_scripts.spec.families import facts

    modules = list(facts(family).lora_targets_of(model_type))
    assert all(m in mm.MODULE_SHAPES for m in modules), modules
    actual = mm.parse_backbone("x", backbone(XXL, family=family, method="lora", lora={"target_modules": modules}))
    planned = mm.parse_backbone("x", backbone(XXL, family=family, method="lora"))
    assert mm.lora_adapter_parameters(actual) <= mm.lora_adapter_parameters(planned)


def test_a_module_the_planner_cannot_size_names_its_key():
    entry = backbone(XXL, method="lora", lora={"target_modules": ["query", "dense"]})
    with pytest.raises(mm.PlanError, match=r"config key backbones\.x\.lora\.target_modules\[1\]: .*'dense'"):
        mm.parse_backbone("x", entry)
    # Full fine-tuning trains no adapter: its lora block is not planned.
    assert mm.parse_backbone("x", backbone(entry, method="full")).target_modules == ()


def test_activation_checkpointing_lowers_activations():
    plain = mm.estimate(backbone(XXL), 256, 8, 4)
    checkpointed = mm.estimate(backbone(XXL, activation_checkpointing=True), 256, 8, 4)
    assert checkpointed.activations < plain.activations / 5
    assert checkpointed.state == plain.state


def test_mlm_logits_scale_with_vocabulary():
    without = mm.estimate(backbone(XXL), 256, 8, 1)
    with_mlm = mm.estimate(backbone(XXL), 256, 8, 1, with_mlm_logits=True)
    logits = with_mlm.activations - without.activations
    assert logits >= 256 * 8 * 250880 * 4
    small_vocab = backbone(XXL, architecture={**XXL["architecture"], "vocab_size": 250880 // 2})
    half = mm.estimate(small_vocab, 256, 8, 1, with_mlm_logits=True).activations - without.activations
    assert half == pytest.approx(logits / 2)


@pytest.mark.parametrize(
    "entry",
    [
        backbone(XXL),
        backbone(XXL, method="lora"),
        backbone(XXL, method="qlora"),
        backbone(BLOOM, method="lora"),
        backbone(BLOOM, method="full"),
    ],
)
def test_min_gpus_is_the_smallest_count_that_fits(entry):
    count = mm.min_gpus(entry, 256, 8, gpu_memory_gb=80)
    assert count is not None
    capacity = 80 * GB * mm.USABLE_FRACTION
    assert mm.estimate(entry, 256, 8, count).total <= capacity
    for fewer in range(1, count):
        assert mm.estimate(entry, 256, 8, fewer).total > capacity


def test_xlmr_xxl_full_finetuning_needs_at_least_three_80gb_gpus():
    # docs/protocol.md §10: 10.7B full ~171 GB of state, >= 3 x 80 GB before activations.
    assert mm.min_gpus(backbone(XXL), 128, 8, 80) >= 3
    assert mm.min_gpus(backbone(XXL, activation_checkpointing=True), 128, 1, 80) >= 3


def test_qlora_plans_one_gpu_only():
    """The engine shards bf16/fp32 rows, not 4-bit blocks: QLoRA fits one GPU or none, even
    where its per-GPU share over several would be smaller (BLOOMZ-176B: ~102 GB of state)."""
    qlora = backbone(BLOOM, method="qlora")
    assert mm.estimate(qlora, 256, 8, 2).total < 80 * GB * mm.USABLE_FRACTION < mm.estimate(qlora, 256, 8, 1).total
    assert mm.min_gpus(qlora, 256, 8, 80) is None
    assert mm.min_gpus(backbone(XXL, method="qlora"), 256, 8, 80) == 1
    lora = mm.min_gpus(backbone(BLOOM, method="lora"), 256, 8, 80)
    # 100B+ LoRA does not fit one 80 GB GPU (docs/protocol.md §10: 100B LoRA ~200 GB).
    assert lora is not None and lora > 2


def test_min_gpus_is_none_when_activations_alone_exceed_a_device():
    no_checkpointing = backbone(BLOOM, method="qlora", activation_checkpointing=False)
    assert mm.min_gpus(no_checkpointing, 2048, 16, 80) is None


def workloads(config: dict, phase: str, **kwargs) -> dict[str, tuple[int, int, bool]]:
    shape = mp.phase_shape(config, phase, **kwargs)
    return {w.task: (w.seq_len, w.micro_batch, w.with_mlm_logits) for w in shape.workloads}


def test_phase_workloads_are_the_phase_tasks_with_capped_micro_batches():
    config = workflow_config()
    assert workloads(config, "intermediate") == {"mnli": (256, 16, False), "squad": (384, 8, False)}
    # tatoeba is scored without training: no target workload.
    assert workloads(config, "target") == {"xnli": (128, 4, False), "pawsx": (128, 16, False)}
    config["training"]["target"]["max_micro_batch"] = 2
    assert workloads(config, "target") == {"xnli": (128, 2, False), "pawsx": (128, 2, False)}
    assert {w[0] for w in workloads(config, "target", seq_len=64).values()} == {64}


def test_auto_micro_batch_is_the_largest_that_fits_each_backbones_gpus():
    """max_micro_batch: auto: the whole batch where the card holds it (one micro-step per
    step), else the largest cap whose every task fits; the plan and the jobs' settings agree."""
    config = workflow_config(activation_checkpointing=True)
    config["training"]["intermediate"]["max_micro_batch"] = "auto"
    assert mp.resolved_micro_batch(config, "xlmr_xxl", "intermediate") == 24  # mnli's batch: it fits
    assert mp.resolved_micro_batch(config, "xlmr_xxl", "target") == 16  # a number stays as it is
    assert mp.resolved_micro_batch(config, "demo", "intermediate") == 32  # unsized: the schema's default
    small = workflow_config(gpus={"per_node": 8, "nodes": 1, "memory_gb": 40})
    small["training"]["intermediate"]["max_micro_batch"] = "auto"
    cap = mp.resolved_micro_batch(small, "xlmr_xxl", "intermediate")
    assert 1 <= cap < 24
    bb = mm.parse_backbone("xlmr_xxl", small["backbones"]["xlmr_xxl"])
    shape = mp.phase_shape(small, "intermediate")
    heads = mp.job_head_parameters(shape, bb.architecture)

    def peak(c):
        return max(
            mm.estimate(bb, w.seq_len, w.micro_batch, bb.gpus, w.with_mlm_logits, heads).total
            for w in shape.capped(c).workloads
        )

    assert peak(cap) <= mm.usable_bytes(40) < peak(cap + 1)
    plan = next(p for p in mp.plan_config(small) if p.backbone == "xlmr_xxl" and p.phase == "intermediate")
    assert plan.fits and plan.micro_batch == min(cap, 24)


def test_auto_micro_batch_is_refused_where_the_micro_batch_holds_the_negatives():
    config = workflow_config()
    config["tasks"]["lareqa"] = {"max_length": 256, "batch_size": 16}
    config["targets"].append("lareqa")
    config["training"]["target"]["max_micro_batch"] = "auto"
    with pytest.raises(mm.PlanError, match=r"training\.target\.max_micro_batch: auto .* lareqa contrast"):
        mp.check_fits(config)


def test_multiple_choice_counts_one_sequence_per_choice():
    config = workflow_config()
    config["tasks"]["hellaswag"] = {"max_length": 256, "batch_size": 24}
    config["intermediate"]["hellaswag"] = {"tasks": ["hellaswag"]}
    assert workloads(config, "intermediate")["hellaswag"] == (256, 16 * 4, False)


def test_plan_takes_the_task_with_the_largest_activations():
    config = workflow_config()
    plans = {p.phase: p for p in mp.plan_config(config) if p.backbone == "xlmr_xxl"}
    # squad: 384 x 8 against mnli: 256 x 16 -- mnli holds more tokens, but the peak is the
    # larger of the two estimates whichever it is.
    bb = mm.parse_backbone("xlmr_xxl", config["backbones"]["xlmr_xxl"])
    acts = {t: mm.activation_bytes(bb, s, b) for t, (s, b, _) in workloads(config, "intermediate").items()}
    assert plans["intermediate"].task == max(acts, key=acts.get)
    assert plans["target"].task == "pawsx"
    assert not mp.phase_shape({**config, "intermediate": {"none": {"tasks": []}}}, "intermediate")
    assert [
        p.skipped
        for p in mp.plan_config({**config, "intermediate": {"none": {"tasks": []}}})
        if p.backbone == "xlmr_xxl" and p.phase == "intermediate"
    ] == ["no task trains in this phase"]


def test_mlm_logits_only_for_the_mlm_task_of_an_intermediate_config_with_mlm():
    config = workflow_config()
    assert "mlm" not in workloads(config, "intermediate")
    config["intermediate"]["mnli_mlm"] = {"tasks": ["mnli"], "mlm": True}
    inter = workloads(config, "intermediate")
    assert inter["mlm"] == (256, 8, True) and inter["mnli"][2] is False
    assert not any(w[2] for w in workloads(config, "target").values())


def test_multitask_job_trains_all_its_heads():
    config = workflow_config()
    single = mp.plan_config(config)
    config["intermediate"]["multitask"] = {"tasks": ["mnli", "squad"]}
    multi = mp.plan_config(config)
    pick = lambda plans: next(p for p in plans if p.backbone == "xlmr_xxl" and p.phase == "intermediate")
    assert pick(multi).estimate.trainable_parameters > pick(single).estimate.trainable_parameters


def test_check_fits_passes_a_config_that_fits_and_skips_backbones_without_size():
    config = workflow_config(activation_checkpointing=True)
    mp.check_fits(config)
    skipped = [p for p in mp.plan_config(config) if p.backbone == "demo"]
    assert skipped and all(p.skipped and "parameters" in p.skipped for p in skipped)


def test_check_fits_names_the_gpus_key_and_the_numbers():
    config = workflow_config(gpus={"per_node": 2, "nodes": 1, "memory_gb": 80}, activation_checkpointing=True)
    with pytest.raises(mm.PlanError) as err:
        mp.check_fits(config)
    message = str(err.value)
    assert "config key backbones.xlmr_xxl.gpus" in message
    assert "2 x 80 GB" in message and "10.7B" in message
    for line in message.splitlines():
        needed = float(re.search(r"needs ([0-9.]+) GB per GPU", line).group(1))
        smallest = int(re.search(r"smallest count that fits on 80 GB GPUs: (\d+)", line).group(1))
        assert needed > 80 * mm.USABLE_FRACTION
        assert smallest > 2  # two did not fit
    # With the smallest count of every phase the same config passes.
    counts = [p.min_gpus for p in mp.plan_config(config) if p.skipped is None]
    config["backbones"]["xlmr_xxl"]["gpus"]["per_node"] = max(counts)
    mp.check_fits(config)


def test_check_fits_names_a_bad_method_key():
    with pytest.raises(mm.PlanError, match=r"backbones\.xlmr_xxl\.method"):
        mp.check_fits(workflow_config(method="prefix_tuning"))


def test_module_imports_nothing_the_snakefile_lacks():
    """The Snakefile imports the planner: the standard library and PyYAML (Snakemake's own
    dependency, which reads the task catalogue) only; no torch, numpy or pandas."""
    code = (
        "import sys, workflow_scripts.planning.memory_plan; "
        "print(sorted(m for m in ('torch', 'numpy', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def run_cli(tmp_path, config: dict, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts.planning.memory_plan", str(path), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
    )


def test_cli_prints_a_table_and_exits_0_when_everything_fits(tmp_path):
    result = run_cli(tmp_path, workflow_config(activation_checkpointing=True), "--gpu-memory-gb", "80")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| xlmr_xxl")]
    assert {row.split("|")[2].strip() for row in rows} == {"intermediate", "target"}
    assert "skipped" in result.stdout  # the demo backbone


def test_cli_plans_lora_as_the_workflow_trains_it(tmp_path):
    """The CLI reads a config as written, without the defaults Snakemake fills in: it must
    plan the schema's rank and the configured target modules, MLP layers included."""
    from workflow_scripts.spec import method

    mlp = ["query", "key", "value", "output.dense", "intermediate.dense"]

    def plan(lora: dict) -> str:  # on one GPU, where the adapters' state is not divided
        gpus = {"per_node": 1, "memory_gb": 80}
        result = run_cli(tmp_path, workflow_config(method="lora", lora=lora, gpus=gpus, activation_checkpointing=True))
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert plan({"target_modules": mlp}) == plan({"rank": method.LORA_DEFAULTS["rank"], "target_modules": mlp})
    assert plan({"target_modules": mlp}) != plan({})  # the MLP's adapters are planned


def test_cli_exits_1_and_names_the_key_for_a_misfit(tmp_path):
    result = run_cli(tmp_path, workflow_config(gpus={"per_node": 1, "nodes": 1, "memory_gb": 40}))
    assert result.returncode == 1
    assert "| xlmr_xxl" in result.stdout and "**no**" in result.stdout
    assert "config key backbones.xlmr_xxl.gpus" in result.stderr


def test_reference_plan_covers_every_backbone_and_method():
    table = mt.reference_plan_markdown()
    for name in mt.REFERENCE_BACKBONES:
        for method in METHODS:
            assert f"| {name} | " in table and f" | {method} | " in table
    assert len([line for line in table.splitlines() if line.startswith("| ") and "---" not in line]) == 1 + 15


def test_mt5_xxl_encoder_is_about_half_of_mt5_xxl():
    # mT5-XXL has 13B parameters; its encoder keeps the shared 250k x 4096 embedding.
    assert 5.5e9 < mt.MT5_XXL_ENCODER_PARAMETERS < 5.8e9
    assert mt.MT5_XXL_ENCODER_PARAMETERS - 250112 * 4096 > 4.5e9


def test_check_fits_suggests_checkpointing_when_no_gpu_count_can_fit():
    config = workflow_config(gpus={"per_node": 8, "nodes": 2, "memory_gb": 24})
    config["tasks"]["squad"] = {"max_length": 512, "batch_size": 32}
    with pytest.raises(mm.PlanError) as err:
        mp.check_fits(config)
    line = next(line for line in str(err.value).splitlines() if "intermediate phase" in line)
    assert line.startswith("config key backbones.xlmr_xxl.gpus:") and "16 x 24 GB" in line
    assert "no count up to 1024 fits" in line and "backbones.xlmr_xxl.activation_checkpointing" in line


def test_heads_are_sized_by_task_format():
    arch = mm.Architecture(hidden_size=1024, num_layers=24, num_attention_heads=16, vocab_size=250002)
    span, tagging = mp.task_head_parameters("squad", arch), mp.task_head_parameters("udpos", arch)
    classification = mp.task_head_parameters("mnli", arch)
    assert span < tagging < classification  # the dense h x h layer dominates
    assert mp.task_head_parameters("mlm", arch) > classification  # its output bias spans the vocabulary


# ----- image tasks (docs/protocol.md §9) -------------------------------------------------------------


def image_config(**vision) -> dict:
    config = workflow_config()
    config["tasks"].update(
        {t: {"max_length": 128, "batch_size": 16} for t in ("snli_ve", "nlvr2", "vqa_v2", "flickr30k", "snli_caption")}
    )
    config["intermediate"].update(
        {t: {"tasks": [t]} for t in ("snli_ve", "nlvr2", "vqa_v2", "flickr30k", "snli_caption")}
    )
    if vision:
        config["vision"] = vision
    return config


@pytest.mark.parametrize(
    "vision,per_image",
    [
        ({}, 50),  # the schema's default tower, CLIP ViT-B/32 at 224 px: 7 x 7 patches and a class token
        ({"hub_id": "openai/clip-vit-large-patch14-336"}, 577),
        ({"hub_id": "openai/clip-vit-large-patch14"}, 257),
        ({"hub_id": "google/siglip-so400m-patch14-384"}, 729),  # no class token
        ({"hub_id": "google/siglip-so400m-patch14-384", "features": "pooled"}, 1),
        ({"hub_id": "facebook/dinov2-large", "visual_tokens": 261}, 261),
    ],
)
def test_image_tasks_lengthen_the_sequence_by_their_visual_tokens(vision, per_image):
    inter = workloads(image_config(**vision), "intermediate")
    assert inter["snli_caption"] == (128, 16, False)  # the text-only control
    assert inter["snli_ve"] == (128 + per_image, 16, False)
    assert inter["vqa_v2"] == (128 + per_image, 16, False)
    assert inter["nlvr2"] == (128 + 2 * per_image, 16, False)  # a pair of images
    assert inter["flickr30k"] == (128, 16, False)  # the caption is read alone
    # and the plan's activation estimate follows the longer sequence
    bb = mm.parse_backbone("xlmr_xxl", workflow_config()["backbones"]["xlmr_xxl"])
    assert mm.activation_bytes(bb, *inter["nlvr2"][:2]) > mm.activation_bytes(bb, *inter["snli_caption"][:2])


def test_the_demo_tower_gives_its_own_patch_grid():
    config = image_config(demo={"image_size": 32, "patch_size": 8})
    config["models"] = {"source": "demo"}
    assert workloads(config, "intermediate")["snli_ve"][0] == 128 + 17


def test_a_tower_whose_tokens_cannot_be_read_names_the_key_to_set():
    with pytest.raises(mm.PlanError, match="vision.visual_tokens.*facebook/dinov2-large"):
        mp.phase_shape(image_config(hub_id="facebook/dinov2-large"), "intermediate")
    # a grid without an image task never asks
    assert mp.phase_shape({**workflow_config(), "vision": {"hub_id": "facebook/dinov2-large"}}, "intermediate")


def test_image_heads_count_their_projector_and_vqa_its_answer_vocabulary():
    arch = mm.Architecture(hidden_size=1024, num_layers=24, num_attention_heads=16, vocab_size=250002)
    caption, image = mp.task_head_parameters("snli_caption", arch), mp.task_head_parameters("snli_ve", arch)
    assert image - caption == 2 * 1024 * 1024 + 2 * 1024 + 1024  # the projector and one slot
    two_way = mp.task_head_parameters("pawsx", arch)  # a text classification head with NLVR2's two labels
    assert mp.task_head_parameters("nlvr2", arch) - two_way == 2 * 1024 * 1024 + 2 * 1024 + 2 * 1024  # two slots
    assert mp.task_head_parameters("vqa_v2", arch) > image + 3000 * 1024


# ----- the plan against PyTorch's tracker (benchmarks/memory_plan_vs_tracker.py, small shapes)


def tracker_benchmark():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "memory_plan_vs_tracker", f"{REPO}/benchmarks/memory_plan_vs_tracker.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


def small_encoder_config(layers: int):
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(
        vocab_size=8000,
        hidden_size=512,
        num_hidden_layers=layers,
        num_attention_heads=8,
        intermediate_size=2048,
        max_position_embeddings=130,
        type_vocab_size=1,
        pad_token_id=1,
        attention_probs_dropout_prob=0.0,  # as the benchmark: what CUDA's SDPA keeps
    )


@pytest.mark.parametrize(("method", "task"), [("full", "mnli"), ("qlora", "mnli"), ("full", "mlm")])
def test_the_plan_agrees_with_torchs_memory_tracker_on_a_small_encoder(method, task, monkeypatch):
    """One training step of a small XLM-R under FakeTensorMode and torch's MemTracker, as the
    benchmark runs the real shapes: the planner's tensor peak within the benchmark's 15%."""
    bench = tracker_benchmark()
    monkeypatch.setattr(bench, "SEQ_LEN", 128)
    monkeypatch.setattr(bench, "MICRO_BATCH", 4)
    shape = bench.Shape("small", "encoder", 4, 8, 512, 2048, 8000, small_encoder_config, "XLMRobertaLayer")
    row = bench.compare(bench.Case(shape, method, task))
    assert abs(row.ratio - 1) <= bench.TOLERANCE, row


def test_the_paper_presets_jobs_take_one_micro_step_per_step_on_an_80gb_card():
    """config/paper.yaml's max_micro_batch is auto: XLM-R large on one 80 GB GPU holds every
    intermediate task's whole batch (MNLI 24 x 256, HellaSwag 24 x 4 x 256)."""
    from workflow_scripts.preflight import load_config
    from workflow_scripts.workflow import grid_settings

    config = load_config([f"{REPO}/config/paper.yaml"])
    for name, inter in config["intermediate"].items():
        if not inter["tasks"]:
            continue
        settings = grid_settings.intermediate_settings(config, "xlmr_large", name)
        assert settings.max_micro_batch == mp.resolved_micro_batch(config, "xlmr_large", "intermediate")
        assert all(settings.max_micro_batch >= opts.batch_size for opts in settings.tasks.values()), name
