"""Padding-free batches (workflow_scripts/models/packing.py): the packing each device and
forward gets, the packed fields of a batch, an encoder's packed hidden states against its
padded ones, and training on packed batches that matches training on padded ones."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from conftest import phase_settings
from workflow_scripts.data.features import collate
from workflow_scripts.models import compiled, packing
from workflow_scripts.training.recipe import train_phase

pytestmark = pytest.mark.unit

# The same steps on the same batches, packed against padded: the attention sums over the
# same keys, in another order; over 8 steps the dev-time losses stay this close (relative).
LOSS_TOLERANCE = 1e-5


@pytest.fixture
def engine_reset():
    yield
    compiled.configure("never", "cpu")


def test_auto_packs_where_the_varlen_kernel_runs_and_says_why_not_elsewhere():
    assert packing.decide("auto", "cuda", "encoder", "bf16", 0.1, training=False).enabled  # evaluation
    assert packing.decide("auto", "cuda", "encoder", "fp16", 0.0, training=True).enabled
    dropout = packing.decide("auto", "cuda", "encoder", "bf16", 0.1, training=True)
    assert not dropout.enabled and "no attention dropout" in dropout.reason and "p=0.1" in dropout.reason
    fp32 = packing.decide("auto", "cuda", "encoder", "fp32", 0.0, training=False)
    assert not fp32.enabled and "fp32" in fp32.reason
    cpu = packing.decide("auto", "cpu", "encoder", "fp32", 0.0, training=False)
    assert not cpu.enabled and "auto on cpu" in cpu.reason
    assert not packing.decide("auto", "cuda", "decoder", "bf16", 0.0, training=False).enabled
    always = packing.decide("always", "cpu", "encoder", "fp32", 0.1, training=True)
    assert always.enabled and "sequence by sequence" in always.reason
    assert not packing.decide("never", "cuda", "encoder", "bf16", 0.0, training=False).enabled
    # attention that would cross sequences (DeBERTa's relative positions), or a GPU without
    # the kernel (before Ampere): padded, whatever the mode
    deberta = packing.decide("always", "cuda", "encoder", "bf16", 0.0, training=False, architecture="deberta-v2")
    assert not deberta.enabled and "deberta-v2" in deberta.reason
    old_gpu = packing.decide("auto", "cuda", "encoder", "fp16", 0.0, training=False, flash_capable=False)
    assert not old_gpu.enabled and "FlashAttention" in old_gpu.reason
    with pytest.raises(ValueError, match="padding_free: expected one of auto, always, never, got 'on'"):
        packing.decide("on", "cuda", "encoder", "bf16", 0.0, training=False)  # type: ignore[arg-type]


def test_compiled_streams_take_a_few_widths():
    widths = {packing.stream_width(n) for n in range(1, 7169)}
    assert len(widths) == 15 and min(widths) == packing.STREAM_MULTIPLE
    assert all(n <= packing.stream_width(n) < 1.25 * n + packing.STREAM_MULTIPLE for n in range(1, 7169))


def test_the_architecture_is_read_under_the_adapters():
    encoder = _encoder()
    assert packing.architecture_of(encoder) == "xlm-roberta"

    class OwnAttention(torch.nn.Module):  # (a model whose attention is its own)
        config = encoder.config

    assert packing.architecture_of(OwnAttention()) == ""


def test_packed_fields_restart_positions_per_sequence_and_pad_the_stream_with_its_own_segment():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    fields = packing.pack_fields(mask)
    assert fields["cu_seq_lens"].tolist() == [0, 3, 8, 9] and fields["cu_seq_lens"].dtype == torch.int32
    assert fields["packed_positions"].tolist() == [0, 1, 2, 0, 1, 2, 3, 4, 0]
    assert fields["packed_index"].tolist() == [0, 1, 2, 5, 6, 7, 8, 9, 10]
    streamed = packing.pack_fields(mask, stream_multiple=4)
    # 9 tokens and at least one dummy: a stream of 12, the dummies a segment of their own,
    # pointing past the batch's 15 positions
    assert streamed["cu_seq_lens"].tolist() == [0, 3, 8, 9, 12]
    assert streamed["packed_index"].tolist()[9:] == [15, 16, 17]
    exact = packing.pack_fields(torch.ones(2, 4, dtype=torch.long), stream_multiple=4)
    assert exact["cu_seq_lens"].tolist() == [0, 4, 8, 12]  # a full stream still gets its dummy segment


def _encoder(dropout: float = 0.0):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(0)
    config = XLMRobertaConfig(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=40,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        pad_token_id=1,
    )
    return XLMRobertaModel(config, add_pooling_layer=False).eval()


def _padded_batch(lengths: list[int], width: int):
    ids = torch.full((len(lengths), width), 1)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(3, 120, (n,))
        mask[row, :n] = 1
    return ids, mask


@pytest.mark.parametrize("stream_multiple", [None, packing.STREAM_MULTIPLE], ids=["eager", "compiled stream"])
def test_packed_hidden_states_are_the_padded_ones_at_every_real_token(stream_multiple):
    encoder = _encoder()
    ids, mask = _padded_batch([5, 17, 2, 11], width=20)
    padded = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    packing.register_attention()
    encoder.config._attn_implementation = packing.ATTENTION
    packed = packing.hidden_states(encoder, ids, packing.pack_fields(mask, stream_multiple))
    real = mask.bool()
    assert packed.shape == padded.shape
    torch.testing.assert_close(packed[real], padded[real], rtol=1e-5, atol=1e-6)
    assert not packed[~real].any()
    # a padded call through the packed implementation is sdpa's, mask included
    torch.testing.assert_close(encoder(input_ids=ids, attention_mask=mask).last_hidden_state, padded)


def test_a_multiple_choice_batch_packs_its_choices_as_sequences(tokenizer):
    encoder = _encoder()
    feats = [
        {"input_ids": [[0, 7, 8, 2], [0, 9, 2]], "labels": 0},
        {"input_ids": [[0, 5, 2], [0, 6, 6, 6, 6, 2]], "labels": 1},
    ]
    batch = collate(feats, "multiple_choice", pad_id=1, pack=lambda mask: packing.pack_fields(mask))
    assert batch["cu_seq_lens"].tolist() == [0, 4, 7, 10, 16]
    flat_ids, flat_mask = batch["input_ids"].flatten(0, 1), batch["attention_mask"].flatten(0, 1)
    padded = encoder(input_ids=flat_ids, attention_mask=flat_mask).last_hidden_state
    packing.register_attention()
    encoder.config._attn_implementation = packing.ATTENTION
    packed = packing.hidden_states(encoder, flat_ids, batch)
    torch.testing.assert_close(packed[flat_mask.bool()], padded[flat_mask.bool()], rtol=1e-5, atol=1e-6)


def test_image_and_retrieval_batches_stay_padded():
    feats = [{"input_ids": [0, 5, 2], "labels": 1, "image_index": 0}]
    batch = collate(feats, "visual_classification", pad_id=1, pack=lambda mask: packing.pack_fields(mask))
    assert not packing.is_packed(batch)


def _undropped_encoder(demo_encoder_dir, tmp_path):
    """The demo encoder without dropout inside it: packed and padded batches then run the
    same arithmetic (their dropout masks would be drawn in other shapes)."""
    out = tmp_path / "undropped"
    shutil.copytree(demo_encoder_dir, out)
    config = json.loads((out / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.mark.parametrize(
    ("task", "data_key", "fields"),
    [
        ("mnli", "mnli.train", {"batch_size": 8, "epochs": 1, "max_length": 48}),
        (
            "squad",
            "squad.train",
            {
                "batch_size": 8,
                "epochs": 1,
                "max_length": 64,
                "max_query_length": 24,
                "doc_stride": 32,
                "max_answer_length": 10,
                "n_best": 20,
            },
        ),
    ],
    ids=["classification", "span"],
)
def test_training_on_packed_batches_matches_training_on_padded_ones(
    tmp_path, demo_data, demo_encoder_dir, engine_reset, task, data_key, fields
):
    encoder = _undropped_encoder(demo_encoder_dir, tmp_path)
    data = {task: {"train": str(demo_data[data_key]), "dev": str(demo_data[data_key])}}
    phase = {"dropout": 0.0, "dev_examples": 24, "eval_batch_size": 16, "eval_every": 4, "max_micro_batch": 4}
    settings = phase_settings({task: fields}, **phase, learning_rate=1e-3, warmup_ratio=0.0, max_steps=8, language="en")

    def run(mode: str) -> dict:
        return train_phase(
            "intermediate", encoder, data, settings, seed=3, threads=1, output=tmp_path / mode, padding_free=mode
        )

    padded, packed = run("never"), run("always")
    losses = [h["loss"] for h in padded["history"]]
    assert len(losses) == 2
    assert [h["loss"] for h in packed["history"]] == pytest.approx(losses, rel=LOSS_TOLERANCE)
    assert packed["best"]["score"] == pytest.approx(padded["best"]["score"])
    ran, did_not = packed["throughput"]["engine"], padded["throughput"]["engine"]
    assert ran["padding_free"] and "always" in ran["padding_free_reason"]
    assert not did_not["padding_free"] and "never" in did_not["padding_free_reason"]
    # the packed forward computes no padding; the padded one computes some
    assert packed["padding_share"] == 0 < padded["padding_share"]


def test_packed_training_with_attention_dropout_runs_on_the_cpu(tmp_path, demo_data, demo_encoder_dir, engine_reset):
    """Where the varlen kernel cannot run (a CPU, attention dropout on), packed attention
    goes sequence by sequence: it trains, and the log says how."""
    mnli = str(demo_data["mnli.train"])
    data = {"mnli": {"train": mnli, "dev": mnli}}
    settings = phase_settings(
        {"mnli": {"batch_size": 8, "epochs": 1, "max_length": 48}},
        dropout=0.1,
        dev_examples=16,
        eval_every=4,
        max_micro_batch=8,
        max_steps=4,
        language="en",
    )
    log = train_phase(
        "intermediate",
        demo_encoder_dir,
        data,
        settings,
        seed=3,
        threads=1,
        output=tmp_path / "m",
        padding_free="always",
    )
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in log["history"])
    assert "sequence by sequence on cpu" in log["throughput"]["engine"]["padding_free_reason"]


@pytest.mark.parametrize("fmt", ["tagging", "mlm", "span", "classification"])
def test_every_packable_format_gives_the_padded_loss(fmt):
    """Each head reads the packed batch's hidden states in the padded layout: the loss of a
    batch is the padded batch's (MLM masked with the same seed both ways)."""
    from torch import nn

    from workflow_scripts.models.heads import MultiHeadModel, task_logits

    encoder = _encoder()
    torch.manual_seed(1)
    head = nn.Linear(32, 120 if fmt == "mlm" else 2 if fmt == "span" else 5)
    model = MultiHeadModel(encoder, {"t": head}).eval()
    lengths = [6, 19, 3, 11]
    feats = []
    for n in lengths:
        ids = torch.randint(5, 120, (n,)).tolist()
        feature = {"input_ids": ids, "labels": [k % 5 for k in range(n)] if fmt == "tagging" else 1}
        if fmt == "span":
            feature = {"input_ids": ids, "start_positions": n // 2, "end_positions": n - 1}
        elif fmt == "mlm":
            feature = {"input_ids": ids}
        feats.append(feature)

    def loss(pack):
        mlm = {"mask_id": 4, "vocab_size": 120, "special_ids": [0, 1, 2], "generator": torch.Generator().manual_seed(0)}
        batch = collate(feats, fmt, pad_id=1, mlm=mlm if fmt == "mlm" else None, pack=pack)
        return task_logits(model, fmt, "t", batch)[1]

    padded = loss(None)
    packing.register_attention()
    encoder.config._attn_implementation = packing.ATTENTION
    torch.testing.assert_close(loss(lambda mask: packing.pack_fields(mask)), padded, rtol=1e-5, atol=1e-6)
