"""The visual prefix (multimodal/prefix.py), the feature bank (multimodal/bank.py), the embed
step's repair-count-log of bad images (multimodal/embed.py) and the pairing of image and
text arms (modality.py)."""

from __future__ import annotations

import io
import random

import numpy as np
import pandas as pd
import pytest
import torch

from workflow_scripts.multimodal import scene_world
from workflow_scripts.multimodal.prefix import AFTER_TEXT, PREFIX, VisualClassificationHead, join
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.task_options import ScoringOptions

pytestmark = pytest.mark.unit


def _texts(lengths, width, hidden=4):
    embeds = torch.randn(len(lengths), width, hidden, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    return embeds, mask


def test_after_the_text_keeps_every_text_position_and_puts_the_image_before_the_padding():
    embeds, mask = _texts([3, 5], width=5)
    visual = torch.full((2, 2, 4), 7.0)
    joined, joined_mask = join(embeds, mask, visual, AFTER_TEXT)
    assert joined.shape == (2, 7, 4)
    for row, length in enumerate([3, 5]):
        assert torch.equal(joined[row, :length], embeds[row, :length])  # the text's positions are unchanged
        assert torch.equal(joined[row, length : length + 2], visual[row])  # the image right after it
        assert joined_mask[row].tolist() == [1] * (length + 2) + [0] * (5 - length)


def test_a_prefix_puts_the_image_first_and_the_text_after_it():
    embeds, mask = _texts([2, 4], width=4)
    visual = torch.full((2, 3, 4), -1.0)
    joined, joined_mask = join(embeds, mask, visual, PREFIX)
    assert torch.equal(joined[:, :3], visual) and torch.equal(joined[:, 3:], embeds)
    assert joined_mask[0].tolist() == [1, 1, 1, 1, 1, 0, 0]


def test_the_head_projects_bank_rows_at_the_embedding_scale_and_never_saves_the_bank():
    bank = torch.randn(10, 5, 16, generator=torch.Generator().manual_seed(1)).half()
    head = VisualClassificationHead(bank, 8, torch.nn.Linear(8, 3), init_std=0.02)
    tokens = head(image_index=torch.tensor([[0], [9]]))
    assert tokens.shape == (2, 5, 8) and tokens.dtype == torch.float32
    assert float(tokens.detach().std()) < 0.05  # near the token embeddings' scale, not the features'
    assert not any("bank" in k for k in head.state_dict())
    assert head(torch.zeros(2, 8)).shape == (2, 3)


def test_a_visual_prediction_does_not_depend_on_the_batch_it_is_in(tmp_path):
    """The visual tokens follow each text, not the batch's padded width: an example scored
    alone and beside a longer one gets the same logits (a bug placing them after the padding
    would shift their positions with the batch)."""
    from transformers import XLMRobertaConfig, XLMRobertaModel

    from workflow_scripts.models.heads import MultiHeadModel, forward, make_head
    from workflow_scripts.spec.tasks import CLASSIFICATION, VISUAL_CLASSIFICATION

    torch.manual_seed(0)
    encoder = XLMRobertaModel(
        XLMRobertaConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        ),
        add_pooling_layer=False,
    )
    bank = torch.randn(4, 3, 8)
    head = VisualClassificationHead(bank, 16, make_head(CLASSIFICATION, 16, 3, 0.0, 0.02), 0.02)
    model = MultiHeadModel(encoder, {"snli_ve": head}).eval()
    short, long = [0, 5, 6, 2], [0, 7, 8, 9, 10, 11, 12, 2]
    pad = 1
    alone = {
        "input_ids": torch.tensor([short]),
        "attention_mask": torch.ones(1, 4, dtype=torch.long),
        "image_index": torch.tensor([[2]]),
    }
    together = {
        "input_ids": torch.tensor([short + [pad] * 4, long]),
        "attention_mask": torch.tensor([[1] * 4 + [0] * 4, [1] * 8]),
        "image_index": torch.tensor([[2], [3]]),
    }
    with torch.no_grad():
        a, _ = forward(model, VISUAL_CLASSIFICATION, "snli_ve", alone)
        b, _ = forward(model, VISUAL_CLASSIFICATION, "snli_ve", together)
        other_image, _ = forward(model, VISUAL_CLASSIFICATION, "snli_ve", {**alone, "image_index": torch.tensor([[3]])})
    torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(a, other_image)  # the image is read


def _png(pixels) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def test_the_embed_step_drops_corrupt_and_missing_images_and_training_drops_their_rows(tmp_path, caplog):
    """A truncated PNG, a missing file and a file whose checksum disagrees with SHA256SUMS are
    each counted and named; the split is embedded, the rows that lost their image are dropped
    (counted) when training matches rows to features, never a failed split."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from workflow_scripts.multimodal.bank import FeatureBank
    from workflow_scripts.multimodal.demo_vision import build_vision_tower
    from workflow_scripts.multimodal.embed import embed_task_images
    from workflow_scripts.spec.model_settings import DemoVision

    settings = DemoVision.defaults().replace(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8
    )
    model, processor = build_vision_tower(settings)
    model.save_pretrained(tmp_path / "tower")
    processor.save_pretrained(tmp_path / "tower")
    rng = random.Random(0)
    images = tmp_path / "images"
    images.mkdir()
    names = [f"{i}.png" for i in range(6)]
    for name in names:
        (images / name).write_bytes(_png(scene_world.render(scene_world.random_scene(rng), rng)))
    sums = {n: hashlib.sha256((images / n).read_bytes()).hexdigest() for n in names}
    (images / "2.png").write_bytes((images / "2.png").read_bytes()[:60])  # truncated after its checksum was taken
    sums["2.png"] = hashlib.sha256((images / "2.png").read_bytes()).hexdigest()
    (images / "3.png").unlink()
    sums["4.png"] = "0" * 64  # the file changed since the manifest
    (images / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))
    rows = [
        {"id": f"r{i}", "lang": "en", "text_a": "There is a red ball.", "images": [names[i % 6]], "label": i % 3}
        for i in range(12)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    with caplog.at_level("WARNING"):
        report = embed_task_images(
            [tmp_path / "train.parquet"], images, tmp_path / "tower", "patches", tmp_path / "cache", tmp_path / "bank"
        )
    assert report["images_dropped"] == {"undecodable": 1, "missing": 1, "checksum_mismatch": 1}
    assert report["rows_without_image"] == {str(tmp_path / "train.parquet"): 6}
    assert "2.png" in caplog.text and "3.png" in caplog.text and "4.png" in caplog.text
    bank = FeatureBank.load(tmp_path / "bank")
    assert sorted(bank.index) == ["0.png", "1.png", "5.png"] and bank.features.shape == (3, 17, 16)
    table = bank.attach(pa.Table.from_pylist(rows), "snli_ve train")
    assert table.num_rows == 6 and {n for row in table.column("images").to_pylist() for n in row} == {
        "0.png",
        "1.png",
        "5.png",
    }
    assert "6 of 12 rows dropped" in caplog.text
    # nothing half-written: a failed step leaves no bank behind
    with pytest.raises(InputError, match="no config.json"):
        embed_task_images(
            [tmp_path / "train.parquet"],
            images,
            tmp_path / "no-tower",
            "patches",
            tmp_path / "cache",
            tmp_path / "bank2",
        )
    assert not (tmp_path / "bank2").exists()


def test_image_configs_pair_with_the_configs_that_swap_the_image_task_for_a_control():
    from workflow_scripts.spec.intermediate_entry import entries
    from workflow_scripts.workflow.grid_settings import arm_pairs

    intermediate = {
        "none": {"tasks": []},
        "ve": {"tasks": ["snli_ve"]},
        "caption": {"tasks": ["snli_caption"]},
        "hyp": {"tasks": ["hypothesis_only"]},
        "ve_mnli": {"tasks": ["snli_ve", "mnli"]},
        "caption_mnli": {"tasks": ["mnli", "snli_caption"]},
        "caption_mlm": {"tasks": ["snli_caption"], "mlm": True},
    }
    pairs = {(p["visual"], p["control"]) for p in arm_pairs(entries({"intermediate": intermediate}))}
    assert pairs == {("ve", "caption"), ("ve", "hyp"), ("ve_mnli", "caption_mnli")}


def test_the_modality_table_pairs_scores_by_seed_and_language_per_language_group():
    from workflow_scripts.reporting.modality import modality_table
    from workflow_scripts.spec.report_settings import ModalitySettings
    from workflow_scripts.spec.transfer_names import ZERO_SHOT

    records = []
    for seed in (1, 2, 3):
        for lang, base in (("en", 80.0), ("de", 70.0), ("sw", 60.0)):
            for config, shift in (("ve", 2.0 if lang == "en" else -1.0), ("caption", 0.0)):
                records.append((ZERO_SHOT, config, "xnli", seed, "test", lang, "accuracy", base + shift + seed * 0.1))
    runs = pd.DataFrame.from_records(
        records, columns=["setting", "intermediate", "target", "seed", "split", "language", "metric", "value"]
    )
    settings = ModalitySettings.parse(
        {
            "targets": ["xnli"],
            "seeds": [1, 2, 3],
            "pairs": [{"visual": "ve", "control": "caption", "task": "snli_ve", "control_task": "snli_caption"}],
        }
    )
    table = modality_table(runs, settings).set_index("group")
    assert table.loc["en", "mean_difference"] == pytest.approx(2.0)
    assert table.loc["zero-shot", "mean_difference"] == pytest.approx(-1.0)
    assert table.loc["zero-shot", "languages"] == 2 and table.loc["all", "languages"] == 3
    assert table.loc["all", "mean_difference"] == pytest.approx(0.0)
    assert bool(table.loc["en", "excludes_zero"]) and table.loc["en", "control_kind"] == "caption premise"


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("Two", "2"),
        ("the net", "net"),
        ("black/white", "black white"),
        ("1,000", "1000"),
        ("yes.", "yes"),
        ("3.5", "3.5"),
        ("dont know", "don't know"),
        ("  Red\n", "red"),
        ("an apple", "apple"),
    ],
)
def test_vqa_answers_are_normalised_as_the_official_evaluation_does(raw, normalised):
    from workflow_scripts.data.vqa_answers import normalize_answer

    assert normalize_answer(raw) == normalised


def test_vqa_accuracy_averages_the_ten_leave_one_out_subsets_and_targets_are_soft():
    from workflow_scripts.data.vqa_answers import answer_vocabulary, soft_targets, vqa_accuracy

    answers = ["2"] * 2 + ["3"] * 8
    # leaving out one of the two "2"s leaves 1 match (1/3), leaving out a "3" leaves 2 (2/3)
    assert vqa_accuracy("2", answers) == pytest.approx((2 * (1 / 3) + 8 * (2 / 3)) / 10)
    assert vqa_accuracy("3", answers) == 1.0 and vqa_accuracy("4", answers) == 0.0
    vocabulary = answer_vocabulary([answers, ["3", "no"]], min_count=2)
    assert vocabulary == ("3", "2")  # most frequent first; "no" (once) is left out
    ids, scores = soft_targets(answers + ["no"], {a: i for i, a in enumerate(vocabulary)})
    assert ids == [0, 1] and scores == pytest.approx([1.0, 2 / 3])


def test_the_vqa_loss_is_binary_cross_entropy_against_the_soft_targets():
    import torch.nn.functional as F
    from transformers import XLMRobertaConfig, XLMRobertaModel

    from workflow_scripts.data.features import collate
    from workflow_scripts.models.heads import MultiHeadModel, forward, make_head
    from workflow_scripts.spec.tasks import CLASSIFICATION, VISUAL_ANSWER

    torch.manual_seed(0)
    encoder = XLMRobertaModel(
        XLMRobertaConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        ),
        add_pooling_layer=False,
    )
    head = VisualClassificationHead(torch.randn(3, 2, 8), 16, make_head(CLASSIFICATION, 16, 5, 0.0, 0.02), 0.02)
    model = MultiHeadModel(encoder, {"vqa_v2": head}).eval()
    features = [
        {"input_ids": [0, 5, 2], "image_index": [1], "answer_ids": [0, 3], "answer_scores": [1.0, 1 / 3]},
        {"input_ids": [0, 7, 8, 2], "image_index": [2], "answer_ids": [], "answer_scores": []},
    ]
    batch = collate(features, VISUAL_ANSWER, pad_id=1)
    assert batch["answer_ids"].tolist() == [[0, 3], [-1, -1]]
    logits, loss = forward(model, VISUAL_ANSWER, "vqa_v2", batch)
    targets = torch.zeros(2, 5)
    targets[0, 0], targets[0, 3] = 1.0, 1 / 3
    expected = F.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / 2
    torch.testing.assert_close(loss, expected)


def test_caption_image_retrieval_trains_captions_of_one_image_as_each_others_positives_and_scores_recall_at_1():
    import numpy as np
    import torch.nn.functional as F
    from transformers import XLMRobertaConfig, XLMRobertaModel

    from workflow_scripts.data.features import Encoded, FeatureStore, collate
    from workflow_scripts.evaluation.evaluate import predict_and_score
    from workflow_scripts.models.heads import MultiHeadModel, forward
    from workflow_scripts.multimodal.prefix import CONTRASTIVE_SCALE
    from workflow_scripts.spec.tasks import VISUAL_RETRIEVAL, get_task

    torch.manual_seed(0)
    encoder = XLMRobertaModel(
        XLMRobertaConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        ),
        add_pooling_layer=False,
    )
    head = VisualClassificationHead(torch.randn(3, 2, 8), 16, torch.nn.Linear(16, 16), 0.02)
    model = MultiHeadModel(encoder, {"flickr30k": head}).eval()
    features = [
        {"input_ids": [0, 5, 2], "image_index": [0]},
        {"input_ids": [0, 6, 7, 2], "image_index": [0]},
        {"input_ids": [0, 9, 2], "image_index": [2]},
    ]
    batch = collate(features, VISUAL_RETRIEVAL, pad_id=1)
    embeddings, loss = forward(model, VISUAL_RETRIEVAL, "flickr30k", batch)
    text, image = embeddings[:, :16], embeddings[:, 16:]
    logits = CONTRASTIVE_SCALE * text @ image.T
    targets = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    expected = (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2
    torch.testing.assert_close(loss, expected)
    # recall@1: each caption's nearest image among the split's distinct images
    rows = [{"images": ["a.png"]}, {"images": ["a.png"]}, {"images": ["b.png"]}]
    vectors = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [0, 1, 0, 1]], dtype=np.float32)  # text | image

    class Fixed(torch.nn.Module):
        pooling = "first"

        def forward(self, fmt, task, batch):
            return torch.from_numpy(vectors[batch["input_ids"][:, 1] - 5]), None

    encoded = Encoded(
        FeatureStore.from_chunks([[{"input_ids": [0, 5 + i, 2], "image_index": [0], "example": i} for i in range(3)]]),
        rows,
    )
    scores, found = predict_and_score(
        Fixed(),
        get_task("flickr30k"),
        encoded,
        1,
        ScoringOptions(max_length=8, eval_batch_size=8, precision="fp32"),
        torch.device("cpu"),
    )
    # an image's vector is that of its first row: a = [1, 0], b = [0, 1]; caption 1 ([0, 1]) finds b, wrongly
    assert found == ["a.png", "b.png", "b.png"] and scores["recall_at_1"] == pytest.approx(200 / 3)


@pytest.mark.parametrize(
    "task,images,error",
    [
        ("nlvr2", [["a.png", "b.png"]], None),
        ("snli_ve", [["a.png"]], None),
        ("nlvr2", [["a.png"]], "nlvr2: its training rows have 1 images each"),
        ("snli_ve", [["a.png", "b.png"]], "snli_ve: its training rows have 2"),
    ],
)
def test_an_image_task_reads_as_many_images_per_row_as_it_declares(tmp_path, task, images, error):
    """The phase and the memory plan both count a task's images per example from the catalogue
    (NLVR2: a pair); rows with another count stop the phase, naming the task."""
    import pyarrow as pa

    from workflow_scripts.multimodal.bank import write_bank
    from workflow_scripts.spec.basics import InputError
    from workflow_scripts.spec.data_map import TaskFiles
    from workflow_scripts.spec.tasks import get_task
    from workflow_scripts.training.image_tasks import prepare_image_task

    write_bank(tmp_path / "bank", {n: np.ones((3, 4), dtype=np.float32) for n in ("a.png", "b.png")}, {})
    rows = pa.Table.from_pylist([{"id": "r0", "text_a": "x", "images": images[0], "label": 0}])
    if error:
        with pytest.raises(InputError, match=error):
            prepare_image_task(get_task(task), rows, TaskFiles(train="", images=str(tmp_path / "bank")), {})
    else:
        assert (
            prepare_image_task(
                get_task(task), rows, TaskFiles(train="", images=str(tmp_path / "bank")), {}
            ).images_per_row
            == get_task(task).images_per_example
        )
