"""Short real training runs on demo data: multi-task with MLM, and a target phase."""

import json
import shutil

import pandas as pd
import pytest

from conftest import local_settings, phase_settings
from workflow_scripts.data.prepare import prepare
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.task_options import ScoringOptions
from workflow_scripts.training.curves import CURVE_FILE
from workflow_scripts.training.recipe import train_phase

pytestmark = pytest.mark.unit

# What these short runs change of a phase's defaults (conftest.phase_settings).
PHASE = {
    "dev_examples": 40,
    "eval_batch_size": 32,
    "eval_every": 4,
    "learning_rate": 1e-3,
    "max_micro_batch": 4,
    "multitask_epochs": 1,
    "max_steps": 12,
}
XNLI = {"xnli": {"batch_size": 8, "epochs": 1, "max_length": 48, "select_language": "en"}}


@pytest.fixture(scope="module")
def mlm_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("mlm") / "train.parquet"
    prepare(
        "mlm",
        "train",
        local_settings("wikimedia/wikipedia", ["en", "de"], {"sentences": 60, "alpha": 0.3}),
        out,
    )
    return out


def test_multitask_with_mlm_trains_and_saves_the_encoder(tmp_path, demo_data, demo_encoder_dir, mlm_data):
    tasks = {
        "mnli": {"batch_size": 8, "epochs": 1, "max_length": 48, "select_language": "en"},
        "mlm": {"batch_size": 8, "epochs": 1, "max_length": 48},
    }
    settings = phase_settings(tasks, **PHASE, language="en")
    data = {
        "mnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["mnli.train"])},
        "mlm": {"train": str(mlm_data)},
    }
    log = train_phase("intermediate", demo_encoder_dir, data, settings, seed=5, threads=1, output=tmp_path / "enc")
    assert set(log["task_probabilities"]) == {"mnli", "mlm"}
    assert log["total_steps"] == 12 and log["history"][-1]["step"] == 12
    assert all(h["loss"] == h["loss"] for h in log["history"])  # finite, not NaN
    # Model selection scores MNLI only; MLM is excluded from the score.
    assert set(log["best"]["scores"]) == {"mnli"}
    saved = tmp_path / "enc"
    assert (saved / "config.json").is_file() and not (saved / "heads.pt").exists()
    assert json.loads((saved / "train_log.json").read_text())["seed"] == 5
    # The curve beside the model: train rows every log_every (10) steps and at the last step,
    # each sampled task's loss among them; eval rows before the first step and at each evaluation.
    curve = pd.read_csv(saved / CURVE_FILE, keep_default_na=False)
    train_rows, eval_rows = curve[curve.event == "train"], curve[curve.event == "eval"]
    assert sorted(set(train_rows.step)) == [10, 12] and sorted(set(eval_rows.step)) == [0, 4, 8, 12]
    assert set(train_rows[train_rows.quantity == "loss"].task) == {"", "mnli", "mlm"}
    assert set(train_rows.quantity) == {"loss", "lr", "grad_norm", "tokens_per_s", "peak_memory_mb"}
    assert (train_rows.value > 0).all() and set(eval_rows.task) == {"", "mnli"}
    selection = eval_rows[eval_rows.quantity == "score"].set_index("step").value
    assert [selection[h["step"]] for h in log["history"]] == [h["score"] for h in log["history"]]
    assert log["curve"] == {"file": CURVE_FILE, "log_every": 10, "rows": len(curve)}
    # The encoder ran with SDPA attention; throughput counts the steps' real tokens.
    speed = log["throughput"]
    assert speed["attention"] == "sdpa" and speed["device"] in ("cpu", "cuda")
    assert speed["examples"] == 12 * 8 and 0 < speed["tokens"] <= speed["padded_tokens"]
    assert speed["examples_per_s"] > 0 and log["padding_share"] == 1 - speed["tokens"] / speed["padded_tokens"]


def test_a_non_finite_loss_stops_training_at_once_naming_its_step_and_task(
    tmp_path, demo_data, demo_encoder_dir, monkeypatch
):
    import torch

    from workflow_scripts.training import recipe
    from workflow_scripts.training.curves import Diverged

    real_forward = recipe.forward
    steps_run = []

    def diverging(model, fmt, name, batch):  # finite for six steps, then NaN
        logits, loss = real_forward(model, fmt, name, batch)
        steps_run.append(1)
        return logits, (loss * torch.tensor(float("nan")) if len(steps_run) > 6 else loss)

    monkeypatch.setattr(recipe, "forward", diverging)
    settings = phase_settings(XNLI, **PHASE).replace(eval_every=100, max_micro_batch=8)  # one forward per step
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    with pytest.raises(Diverged, match="the loss of task xnli at step 7 is nan") as raised:
        train_phase(
            "target",
            demo_encoder_dir,
            data,
            settings,
            seed=1,
            threads=1,
            output=tmp_path / "nan",
            checkpoint_dir=tmp_path / "ckpt",
            checkpoint_every=100,
            log_every=4,
        )
    assert (raised.value.step, raised.value.task) == (7, "xnli")
    # Read at the end of its window (steps 5-8): not one step more was trained.
    assert len(steps_run) == 8
    assert not (tmp_path / "nan").exists() and not (tmp_path / "ckpt" / "checkpoint").exists()


def test_same_seed_same_result(tmp_path, demo_data, demo_encoder_dir):
    settings = phase_settings(XNLI, **PHASE)
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}
    logs = [
        train_phase("target", demo_encoder_dir, data, settings, seed=2, threads=1, output=tmp_path / f"m{k}")
        for k in range(2)
    ]
    assert [h["loss"] for h in logs[0]["history"]] == [h["loss"] for h in logs[1]["history"]]
    assert logs[0]["best"] == logs[1]["best"]
    assert (tmp_path / "m0/heads.pt").read_bytes() == (tmp_path / "m1/heads.pt").read_bytes()


def test_training_without_examples_in_the_phase_language_is_refused(tmp_path, demo_data, demo_encoder_dir):
    tasks = {"mnli": {"batch_size": 8, "epochs": 1, "max_length": 48, "select_language": "de"}}
    settings = phase_settings(tasks, **PHASE, language="de")
    data = {"mnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["mnli.train"])}}
    with pytest.raises(InputError, match="no de dev examples|no de training examples"):
        train_phase("intermediate", demo_encoder_dir, data, settings, seed=1, threads=1, output=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_early_stopping_restores_the_best_weights_and_lr_follows_the_schedule(tmp_path, demo_data, demo_encoder_dir):
    import torch

    from workflow_scripts.data.prepare import read_table
    from workflow_scripts.evaluation.evaluate import score_rows
    from workflow_scripts.models.heads import MultiHeadModel, load_encoder, load_tokenizer, make_head
    from workflow_scripts.spec.tasks import get_task
    from workflow_scripts.training.sampling import linear_schedule

    tasks = {"xnli": {"batch_size": 8, "epochs": 3, "max_length": 48, "select_language": "en"}}
    settings = phase_settings(tasks, **PHASE).replace(learning_rate=1e-2, eval_every=2, patience=3, max_steps=60)
    data = {"xnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["xnli.dev"])}}

    def got_worse(log):
        return any(h["score"] < log["best"]["score"] for h in log["history"] if h["step"] > log["best"]["step"])

    # A run whose dev score dropped after its best evaluation, so that restoring matters
    # (the first of a few fixed seeds; the assertion below fails if none of them does).
    for seed in (11, 3, 2, 1, 5, 7):
        shutil.rmtree(tmp_path / "m", ignore_errors=True)
        log = train_phase("target", demo_encoder_dir, data, settings, seed=seed, threads=1, output=tmp_path / "m")
        if got_worse(log):
            break
    assert got_worse(log)
    history = log["history"]
    assert history[-1]["step"] < log["total_steps"]
    assert history[-1]["step"] - log["best"]["step"] == settings.patience * settings.eval_every
    # The saved model is the best one: re-scoring it gives the best dev score, not the last.
    encoder = load_encoder(tmp_path / "m")
    model = MultiHeadModel(encoder, {"xnli": make_head("classification", encoder.config.hidden_size, 3, 0.0, 0.02)})
    model.heads.load_state_dict(torch.load(tmp_path / "m/heads.pt", weights_only=True))
    rows = [r for r in read_table(demo_data["xnli.dev"]).to_pylist() if r["lang"] == "en"][:40]
    rescored = score_rows(
        model,
        get_task("xnli"),
        load_tokenizer(tmp_path / "m"),
        rows,
        ScoringOptions(max_length=48, eval_batch_size=32, precision="bf16"),
        torch.device("cpu"),
    )
    assert rescored == log["best"]["scores"]["xnli"]
    # Learning rate at each evaluation: linear warmup then linear decay.
    for h in history:
        expected = settings.learning_rate * linear_schedule(h["step"], log["total_steps"], log["warmup_steps"])
        assert h["lr"] == pytest.approx(expected)


def test_the_mlm_head_predicts_with_the_encoders_input_embeddings(demo_encoder_dir, tokenizer):
    """As in XLM-R's pretraining and in jiant: one matrix, which the MLM loss trains from the
    output side too. A head holding its own copy would leave unseen tokens' rows untouched."""
    import torch

    from workflow_scripts.models.heads import MultiHeadModel, load_encoder, load_mlm_head

    encoder = load_encoder(demo_encoder_dir)
    head = load_mlm_head(demo_encoder_dir, encoder)
    model = MultiHeadModel(encoder, {"mlm": head})
    embeddings = encoder.get_input_embeddings().weight
    assert head.decoder.weight is embeddings
    own = sum(p.numel() for p in head.parameters() if p is not embeddings)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in encoder.parameters()) + own

    batch = tokenizer(["the cat sat on the mat"], return_tensors="pt")
    absent = next(t for t in range(len(tokenizer)) if t not in set(batch["input_ids"][0].tolist()))
    logits = head(encoder(**batch).last_hidden_state)
    torch.nn.functional.cross_entropy(logits[0], batch["input_ids"][0]).backward()
    assert embeddings.grad[absent].abs().sum() > 0  # reached through the softmax over the vocabulary
