"""The cost model: FLOPs per token, the measured MFU it reads, a job's tokens from the grid,
and the time limit sized from the estimate (planning/job_cost.py, job_work.py,
job_estimates.py; spec/task_sizes.py)."""

from __future__ import annotations

import copy
import math

import pytest

from workflow_scripts.planning import job_cost
from workflow_scripts.planning.job_cost import Shape, Tokens, flops_per_token
from workflow_scripts.spec.phase_steps import accumulation_steps
from workflow_scripts.spec.task_sizes import SizesError, TaskSizes

pytestmark = pytest.mark.unit

N, LAYERS, WIDTH, SEQ = 3.0e8, 24, 1024, 128


def test_flops_per_token_follow_what_each_mode_computes():
    attention = LAYERS * SEQ * WIDTH
    assert flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "train") == 6 * N + 12 * attention
    # a frozen base: forward and activation gradients, no weight gradients
    assert flops_per_token(N, LAYERS, WIDTH, SEQ, "lora", "train") == 4 * N + 12 * attention
    assert flops_per_token(N, LAYERS, WIDTH, SEQ, "qlora", "train") == 4 * N + 12 * attention
    assert flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "inference") == 2 * N + 4 * attention
    with pytest.raises(ValueError, match="mode"):
        flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "serve")


def test_recompute_and_a_vocabulary_head_add_what_they_compute():
    attention = LAYERS * SEQ * WIDTH
    plain = flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "train")
    # activation checkpointing: every layer's forward once more
    assert flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "train", recompute=True) == plain + 2 * N + 4 * attention
    assert flops_per_token(N, LAYERS, WIDTH, SEQ, "lora", "train", recompute=True) == 6 * N + 16 * attention
    # MLM's head (d x d + V x d for XLM-R large) rides on every token's path: +83% of N
    head = Shape("encoder", "full", "bf16", N, LAYERS, WIDTH, vocab=250002).vocabulary_head
    assert head / 3.03e8 == pytest.approx(0.848, abs=0.01)
    with_head = flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "train", head=head)
    assert with_head == pytest.approx(plain + 6 * head)
    assert flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "inference", head=head) == 2 * (N + head) + 4 * attention


def test_the_host_is_paid_per_micro_step_at_the_measured_depth(monkeypatch):
    """A step of 3 micro-batches pays the host's shortest micro-step 3 times; the measured row
    nearest the backbone's depth sets it."""
    table = {
        "gpu": "NVIDIA H200",
        "source": "test",
        "file": "t.json",
        "rows": [],
        "host_rows": [
            {"layers": 12, "seconds": 0.05, "engine": "eager"},
            {"layers": 24, "seconds": 0.08, "engine": "eager"},
        ],
    }
    monkeypatch.setattr(job_cost, "measured_tables", lambda: {"H200": table})
    assert job_cost.host_step_seconds("H200", 24)[0] == 0.08 and job_cost.host_step_seconds("H200", 10)[0] == 0.05
    shape = Shape("encoder", "full", "bf16", 1e6, 24, 64)
    one = job_cost.estimate(shape, [Tokens("train", 1e6, SEQ, steps=1000)], "H200", mfu=0.5)
    three = job_cost.estimate(shape, [Tokens("train", 1e6, SEQ, steps=1000, micro_steps=3000)], "H200", mfu=0.5)
    assert one.minutes == pytest.approx(1000 * 0.08 / 60) and three.minutes == pytest.approx(3 * one.minutes)
    assert "host-bound: 0.08 s per micro-step, measured on H200, 24 layers, eager" in three.basis


def test_the_measured_row_nearest_in_width_and_length_sets_the_mfu():
    rows = job_cost.measured_tables()["H200"]["rows"]
    rate = job_cost.throughput("H200", "encoder", "full", "bf16", "train", 1024, 128)
    row = next(r for r in rows if (r["family"], r["method"], r["mode"], r["precision"], r["seq_len"]) ==
               ("encoder", "full", "train", "bf16", 128))  # fmt: skip
    assert rate.mfu == row["mfu"] and rate.tflops == pytest.approx(989.4 * row["mfu"])
    assert "measured on H200" in rate.basis and "seq 128" in rate.basis
    longer = job_cost.throughput("H200", "encoder", "full", "bf16", "train", 1024, 512)
    assert "seq 384" in longer.basis  # the 384-token row is nearer 512 than the 128-token one
    # fp16 rides the same 16-bit peak; QLoRA has a row of its own
    qlora = job_cost.throughput("H200", "decoder", "qlora", "bf16", "train", 4096, 512)
    lora = job_cost.throughput("H200", "decoder", "lora", "bf16", "train", 4096, 512)
    assert qlora.mfu != lora.mfu and "qlora" in qlora.basis


def test_another_kind_reads_the_measured_table_on_its_own_peak_and_the_config_can_set_the_mfu():
    h200 = job_cost.throughput("H200", "decoder", "lora", "bf16", "train", 4096, 512)
    a100 = job_cost.throughput("A100", "decoder", "lora", "bf16", "train", 4096, 512)
    assert a100.mfu == h200.mfu and a100.tflops == pytest.approx(312.0 * h200.mfu)
    assert "measured on H200, on the A100 peak" in a100.basis
    fp32 = job_cost.throughput("A100", "decoder", "lora", "fp32", "train", 4096, 512)
    assert "by default" in fp32.basis and fp32.tflops == pytest.approx(19.5 * job_cost.DEFAULT_MFU)
    set_by_config = job_cost.throughput("H100", "encoder", "full", "bf16", "train", 1024, 128, mfu=0.5)
    assert set_by_config.tflops == pytest.approx(989.4 * 0.5) and "cost.mfu" in set_by_config.basis
    with pytest.raises(job_cost.CostError, match="cost.gpu"):
        job_cost.gpu_kind("V100")


def test_an_estimate_is_its_flops_at_the_throughput_and_its_wall_time_divides_by_the_gpus():
    shape = Shape("encoder", "full", "bf16", N, LAYERS, WIDTH, gpus=4)
    work = [Tokens("train", 1e9, SEQ), Tokens("inference", 1e8, SEQ)]
    found = job_cost.estimate(shape, work, "H100", mfu=0.25)
    flops = 1e9 * flops_per_token(N, LAYERS, WIDTH, SEQ, "full", "train") + 1e8 * flops_per_token(
        N, LAYERS, WIDTH, SEQ, "full", "inference"
    )
    assert found.flops == pytest.approx(flops)
    assert found.gpu_hours == pytest.approx(flops / (989.4e12 * 0.25) / 3600)
    assert found.minutes == pytest.approx(found.gpu_hours * 60 / 4)


def test_documented_sizes_count_per_language_or_name_the_bad_key():
    sizes = TaskSizes.parse({"source": "a release", "train": 100, "test": {"en": 10, "de": 7}}, "task entry x.yaml")
    assert sizes.examples("train") == 100 and sizes.examples("train", ["en"]) == 100
    assert sizes.examples("test", ["en", "de"]) == 17 and sizes.examples("test") == 17
    assert sizes.examples("test", ["fr"]) is None and sizes.examples("dev") is None
    with pytest.raises(SizesError, match=r"x.yaml: sizes.test.de"):
        TaskSizes.parse({"source": "s", "test": {"de": -1}}, "task entry x.yaml")
    with pytest.raises(SizesError, match="sizes.source"):
        TaskSizes.parse({"train": 1}, "task entry x.yaml")
    with pytest.raises(SizesError, match="sizes.validation"):
        TaskSizes.parse({"source": "s", "validation": 1}, "task entry x.yaml")


def test_the_measured_gpus_are_the_kinds_the_schema_offers():
    from workflow_scripts.spec.schema import setting

    assert setting("cost", "gpu")["enum"] == list(job_cost.PEAK_TFLOPS)
    assert all(kind in job_cost.PEAK_TFLOPS for kind in job_cost.measured_tables())


# ----- a job of the grid ------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_config():
    from workflow_scripts.preflight import load_config

    return load_config([])


def sized(config, backbone="xlmr_tiny", parameters=5.6e8, runtime=240):
    """The demo config with one backbone given XLM-R large's size (so the model can estimate it)."""
    config = copy.deepcopy(config)
    config["backbones"][backbone].update(
        parameters=parameters,
        architecture={"hidden_size": 1024, "num_layers": 24, "num_attention_heads": 16, "vocab_size": 250002},
    )
    config.setdefault("resources", {})["train_target"] = {"runtime": runtime}
    return config


def test_a_training_job_counts_the_steps_the_loop_takes_and_its_dev_evaluations(demo_config, monkeypatch, tmp_path):
    from workflow_scripts.planning import job_work
    from workflow_scripts.spec.tasks import TASKS
    from workflow_scripts.workflow import grid, grid_settings

    monkeypatch.chdir(tmp_path)  # no prepared data here: the documented sizes are counted
    settings = grid_settings.target_settings(demo_config, "xlmr_tiny", "xnli")
    data = grid.target_data(demo_config, "xnli", "en.dev-en")
    work = job_work.data_map_tokens(demo_config, settings, data)
    opts = settings.tasks["xnli"]
    train = TASKS["mnli"].sizes.examples("train", ["en"])
    steps = int(opts.epochs) * math.ceil(train / opts.batch_size)
    if settings.max_steps:
        steps = min(steps, settings.max_steps)
    trained = next(t for t in work if t.mode == "train")
    assert trained.tokens == pytest.approx(steps * opts.batch_size * opts.max_length)
    micro_per_step = math.ceil(opts.batch_size / settings.max_micro_batch)
    assert trained.micro_steps == pytest.approx(steps * micro_per_step) and not trained.vocabulary_logits
    # each of 2 ranks takes half the batch in its micro-batches
    halves = job_work.data_map_tokens(demo_config, settings, data, gpus=2)
    ranks = math.ceil(math.ceil(opts.batch_size / 2) / settings.max_micro_batch)
    assert next(t for t in halves if t.mode == "train").micro_steps == pytest.approx(steps * ranks)
    assert accumulation_steps(24, 1, 8) == 3 and accumulation_steps(24, 2, 8) == 2
    dev = next(t for t in work if t.mode == "inference")
    evaluations = math.ceil(steps / min(settings.eval_every, steps))
    dev_rows = min(TASKS["xnli"].sizes.examples("dev", ["en"]), settings.dev_examples)
    assert dev.tokens == pytest.approx(evaluations * dev_rows * opts.max_length)


def test_time_limits_follow_the_estimate_and_the_allocations_cover_a_long_training(demo_config, monkeypatch, tmp_path):
    from workflow_scripts.planning.job_estimates import job_time

    monkeypatch.chdir(tmp_path)
    job = {"backbone": "xlmr_tiny", "intermediate": "none", "target": "xnli", "recipe": "en.dev-en", "seed": "1"}
    # the demo's own backbones have no parameter count: no estimate, the configured runtime
    assert job_time(demo_config, "train_target", job, "train_target").estimate is None
    config = sized(demo_config)
    found = job_time(config, "train_target", job, "train_target")
    assert found.estimate is not None and "measured on H200" in found.basis
    assert found.runtime == min(240, math.ceil(found.estimate.minutes * 1.5 + 10))
    tighter = job_time(
        {**config, "cost": {"safety_factor": 1.0, "floor_minutes": 0}}, "train_target", job, "train_target"
    )
    assert tighter.runtime == min(240, math.ceil(found.estimate.minutes))
    # a 100x larger backbone on a short partition: capped, continued over allocations
    big = sized(demo_config, parameters=5.6e10, runtime=60)
    long = job_time(big, "train_target", job, "train_target")
    assert long.runtime == 60 and long.allocations > 1
    # a measured expected_runtime replaces the estimate
    big["resources"]["train_target"]["expected_runtime"] = 100
    measured = job_time(big, "train_target", job, "train_target")
    assert measured.minutes == 100 and measured.basis == "resources.train_target.expected_runtime"


def test_documented_sizes_are_no_part_of_what_a_job_reads_of_the_catalogue(monkeypatch):
    import dataclasses

    from workflow_scripts.spec import tasks
    from workflow_scripts.spec.codehash import task_fingerprint

    before = task_fingerprint(["mnli", "xnli"])
    assert tasks.TASKS["mnli"].sizes is not None
    monkeypatch.setitem(tasks.TASKS, "mnli", dataclasses.replace(tasks.TASKS["mnli"], sizes=None))
    assert task_fingerprint(["mnli", "xnli"]) == before


def test_translation_is_estimated_from_its_flops_at_the_stated_generation_mfu(monkeypatch, tmp_path):
    """A translation job of the paper grid: its rows (documented sizes, nothing prepared here)
    at the task's length through OPUS-MT's encoder and, per beam, its decoder and output
    projection; the plan names the assumed MFU; the Slurm limit stays the configured one."""
    from workflow_scripts.planning import job_estimates, job_work, memory_plan
    from workflow_scripts.preflight import load_config
    from workflow_scripts.spec.tasks import TASKS

    monkeypatch.chdir(tmp_path)
    config = load_config([f"{job_cost.MEASURED_DIR.parents[2]}/config/paper.yaml"])
    job = {"task": "squad", "lang": "de", "split": "train"}
    hub_id, translator, tokens = job_work.translation_job(config, "translate_task_data", job)
    length, per_example = memory_plan.task_sequence(config, "squad")
    assert hub_id == "Helsinki-NLP/opus-mt-en-de" and translator.width == 512
    assert tokens == TASKS["squad"].sizes.examples("train", ["en"]) * length * per_example
    per_layer = 8 * 512**2 + 2 * 512 * 2048
    assert translator.generated_flops() == 2 * (6 * per_layer + 512 * 60000)
    found = job_estimates.job_estimate(config, "translate_task_data", job)
    assert found.flops == pytest.approx(tokens * (translator.source_flops() + 4 * translator.generated_flops()))
    assert found.minutes == pytest.approx(found.flops / (989.4e12 * job_cost.GENERATION_MFU) / 60)
    assert "MFU 0.05 assumed for beam search, not measured" in found.basis
    limit = job_estimates.job_time(config, "translate_task_data", job, "translate_task_data")
    assert limit.runtime == config["resources"]["translate_task_data"]["runtime"]
    scoring = job_estimates.job_estimate(config, "score_translation_quality", {"lang": "ru"})
    assert scoring is not None and scoring.flops < found.flops


def test_a_prompted_job_counts_every_shot_count_and_choice(monkeypatch, tmp_path):
    from workflow_scripts.planning import job_work, memory_plan
    from workflow_scripts.preflight import load_config
    from workflow_scripts.spec.tasks import TASKS

    config = load_config([])
    monkeypatch.chdir(tmp_path)  # no prepared data here: the documented sizes are counted
    xnli = TASKS["xnli"]
    (work,) = job_work.prompted_tokens(config, "xnli", ["en", "de"], [0, 4])
    length, _ = memory_plan.task_sequence(config, "xnli")
    rows = job_work.examples("no/such/results/data/xnli/test.parquet", ["en", "de"])
    assert work.tokens == rows * (1 + 5) * length * xnli.num_labels and work.mode == "inference"
