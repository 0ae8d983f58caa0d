"""Compiled forwards (workflow_scripts/models/compiled.py): the engine each device gets, the
length buckets that bound a job's shapes, and compiled training that matches eager training
with no graph break, for the demo encoder (full) and a demo decoder (LoRA)."""

from __future__ import annotations

import pytest
import torch

from conftest import phase_settings
from workflow_scripts.data.features import IGNORE, collate
from workflow_scripts.models import compiled
from workflow_scripts.models.demo_models import build_demo_decoder
from workflow_scripts.spec.model_settings import DemoDecoder
from workflow_scripts.training.recipe import train_phase

pytestmark = pytest.mark.unit

# Losses of the same steps on the same (bucketed) batches, compiled against eager: the
# traced graphs run the same operations, but the backward's are regrouped; over 8 steps of
# training the dev-time losses stay this close (relative).
LOSS_TOLERANCE = 1e-5

PHASE = {
    "dropout": 0.1,
    "dev_examples": 24,
    "eval_batch_size": 16,
    "eval_every": 4,
    "learning_rate": 1e-3,
    "max_micro_batch": 4,
    "multitask_epochs": 1,
    "warmup_ratio": 0.0,
    "max_steps": 8,
}


@pytest.fixture
def engine_reset():
    yield
    compiled.configure("never", "cpu")


def test_buckets_round_up_and_bound_the_widths():
    assert [compiled.bucket_width(n) for n in (1, 32, 33, 128, 129, 384, 385, 513)] == [
        32,
        32,
        64,
        128,
        192,
        384,
        448,
        640,
    ]
    for n in range(1, 700):
        assert n <= compiled.bucket_width(n) < n + 128
    assert compiled.widths_up_to(128) == [32, 64, 96, 128]
    assert len(compiled.widths_up_to(384)) == 8 and len(compiled.widths_up_to(512)) == 10
    with pytest.raises(ValueError, match="at least one token"):
        compiled.bucket_width(0)


def test_auto_compiles_on_a_gpu_only_and_never_a_sharded_run():
    assert not compiled.decide("auto", "cpu").compiled
    assert compiled.decide("auto", "cuda").compiled
    assert compiled.decide("auto", "cuda", parameters=278_000_000).compiled  # XLM-R base
    tiny = compiled.decide("auto", "cuda", parameters=400_000)  # the demo's: compiling outlasts training
    assert not tiny.compiled and "400,000 parameters" in tiny.reason
    assert compiled.decide("always", "cuda", parameters=400_000).compiled
    assert compiled.decide("always", "cpu").compiled
    assert not compiled.decide("never", "cuda").compiled
    sharded = compiled.decide("always", "cuda", distributed=True)
    assert not sharded.compiled and "sharded" in sharded.reason
    with pytest.raises(ValueError, match="compile: expected one of auto, always, graphs, never, got 'on'"):
        compiled.decide("on", "cuda")  # type: ignore[arg-type]


def test_graphs_replay_cuda_graphs_on_a_gpu_and_compile_without_them_elsewhere():
    on_gpu = compiled.decide("graphs", "cuda", parameters=400_000)  # asked for: no size threshold
    assert on_gpu.compiled and on_gpu.cuda_graphs and on_gpu.bucketed and on_gpu.record()["cuda_graphs"]
    on_cpu = compiled.decide("graphs", "cpu")
    assert on_cpu.compiled and not on_cpu.cuda_graphs and "CUDA graphs need a GPU" in on_cpu.reason
    sharded = compiled.decide("graphs", "cuda", distributed=True)
    assert not sharded.compiled and not sharded.cuda_graphs
    assert not any(compiled.decide(mode, "cuda").cuda_graphs for mode in ("auto", "always", "never"))


class _Recorded:
    """A stand-in for torch.compile's wrapper that records how it was made and called."""

    def __init__(self, calls, model, **kwargs):
        self.model, self.kwargs, self.calls = model, kwargs, calls

    def __call__(self, *args):
        self.calls.append("forward")
        return self.model(*args)


def test_a_graphs_engine_asks_inductor_for_cuda_graphs_and_marks_each_step(monkeypatch, engine_reset):
    calls: list[str] = []
    made: list[_Recorded] = []

    def fake_compile(model, **kwargs):
        made.append(_Recorded(calls, model, **kwargs))
        return made[-1]

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("step"))

    def model(fmt, task, batch):
        return batch["x"], None

    for engine, options, marks in (
        (compiled.decide("graphs", "cuda"), {"options": {"triton.cudagraphs": True}}, ["step", "forward"]),
        (compiled.decide("always", "cuda"), {}, ["forward"]),
    ):
        monkeypatch.setattr(compiled, "_ENGINE", engine)
        compiled._COMPILED.clear()
        made.clear()
        calls.clear()
        for _ in range(2):  # one wrapper per model, a step mark before each of its forwards
            assert compiled.forward(model, "classification", "nli", {"x": torch.ones(1)})[0] == 1
        assert len(made) == 1 and made[0].kwargs == {"backend": "inductor", "dynamic": False, **options}
        assert calls == marks * 2


def test_a_bucketed_batch_is_padded_and_masked_as_a_dynamic_one():
    feats = [{"input_ids": [5] * n, "labels": [1] * n} for n in (3, 40)]
    dynamic = collate(feats, "tagging", pad_id=0)
    bucketed = collate(feats, "tagging", pad_id=0, pad_width=compiled.bucket_width)
    assert dynamic["input_ids"].shape == (2, 40) and bucketed["input_ids"].shape == (2, 64)
    assert torch.equal(bucketed["input_ids"][:, :40], dynamic["input_ids"])
    assert int(bucketed["attention_mask"].sum()) == 43 and not bucketed["attention_mask"][:, 40:].any()
    assert (bucketed["labels"][:, 40:] == IGNORE).all()
    choices = [{"input_ids": [[5] * 7, [5] * 70], "labels": 1}]
    assert collate(choices, "multiple_choice", 0, pad_width=compiled.bucket_width)["input_ids"].shape == (1, 2, 96)


def _train(tmp_path, backbone, data, settings, mode, name):
    return train_phase(
        "intermediate", backbone, data, settings, seed=3, threads=1, output=tmp_path / name, compile=mode
    )


def _eager_and_compiled(tmp_path, backbone, data, settings, monkeypatch):
    """Two runs of one phase: eager on the compiled run's length buckets (the same batches,
    so the same dropout masks), then compiled by aot_eager (the graphs inductor would
    compile, run op by op)."""
    import torch._dynamo

    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")
    eager_bucketed = compiled.Engine(False, "eager on the compiled run's buckets", bucketed=True)
    with monkeypatch.context() as patch:
        patch.setattr(compiled, "decide", lambda *args, **kwargs: eager_bucketed)
        eager = _train(tmp_path, backbone, data, settings, "never", "eager")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    return eager, _train(tmp_path, backbone, data, settings, "always", "compiled")


def _assert_compiled_matches_eager(eager, compiled_log, shapes_bound):
    losses = [h["loss"] for h in eager["history"]]
    assert len(losses) == 2
    assert [h["loss"] for h in compiled_log["history"]] == pytest.approx(losses, rel=LOSS_TOLERANCE)
    ran = compiled_log["throughput"]["engine"]
    assert ran["compiled"] and ran["backend"] == "aot_eager"
    assert ran["graph_breaks"] == 0
    assert 0 < ran["graphs"] <= shapes_bound
    assert not eager["throughput"]["engine"]["compiled"]
    assert compiled_log["padding_share"] == pytest.approx(eager["padding_share"])


def test_compiled_encoder_training_matches_eager_without_graph_breaks(
    tmp_path, demo_data, demo_encoder_dir, monkeypatch, engine_reset
):
    """Full fine-tuning of the demo encoder, with dropout: compiled forwards draw the same
    masks (fallback_random) and give eager's losses; the graphs stay within the buckets."""
    mnli = str(demo_data["mnli.train"])
    data = {"mnli": {"train": mnli, "dev": mnli}}
    settings = phase_settings({"mnli": {"batch_size": 8, "epochs": 1, "max_length": 48}}, **PHASE, language="en")
    eager, with_compiler = _eager_and_compiled(tmp_path, demo_encoder_dir, data, settings, monkeypatch)
    # widths 32 and 64 (max_length 48), micro-batches of 4 rows, training and evaluation
    # (evaluation batches of 16 and the last, shorter one)
    _assert_compiled_matches_eager(eager, with_compiler, shapes_bound=len(compiled.widths_up_to(48)) * 4)
    assert with_compiler["best"]["step"] == eager["best"]["step"]
    assert with_compiler["best"]["score"] == pytest.approx(eager["best"]["score"])


def test_compiled_decoder_lora_training_matches_eager_without_graph_breaks(
    tmp_path, demo_data, monkeypatch, engine_reset
):
    decoder = tmp_path / "decoder"
    shape = DemoDecoder.defaults().replace(
        vocab_size=600,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        seed=0,
    )
    build_demo_decoder(
        shape.replace(pretraining=shape.pretraining.replace(steps=0)), [str(demo_data["mnli.train"])], decoder
    )
    mnli = str(demo_data["mnli.train"])
    data = {"mnli": {"train": mnli, "dev": mnli}}
    method = {"name": "lora", "precision": "fp32", "rank": 4, "alpha": 8, "dropout": 0.0}
    settings = phase_settings(
        {"mnli": {"batch_size": 8, "epochs": 1, "max_length": 48}}, **PHASE, method=method, language="en"
    )
    eager, with_compiler = _eager_and_compiled(tmp_path, decoder, data, settings, monkeypatch)
    _assert_compiled_matches_eager(eager, with_compiler, shapes_bound=len(compiled.widths_up_to(48)) * 4)
