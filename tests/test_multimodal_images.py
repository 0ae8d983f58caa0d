"""The demo's synthetic image world (multimodal/scene_world.py) and image reading with
repair-count-log (multimodal/images.py)."""

from __future__ import annotations

import io
import logging
import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from workflow_scripts.multimodal import images, scene_world
from workflow_scripts.multimodal.bank import FeatureBank
from workflow_scripts.multimodal.scene_world import COLOURS, LABELS, Scene, Thing
from workflow_scripts.spec.basics import InputError

pytestmark = pytest.mark.unit


def truth(scene: Scene, hypothesis: str) -> str:
    """The label of a hypothesis, judged from the scene alone (an independent oracle)."""
    words = hypothesis.rstrip(".").split()
    if "belongs" in words or "bought" in words:
        return "neutral"
    by_shape = {t.shape: t for t in scene.things}
    if words[:3] == ["There", "is", "a"]:
        colour, shape = words[3], words[4]
        return "entailment" if by_shape[shape].colour == colour else "contradiction"
    thing = by_shape[words[1]]
    value = words[-1]
    attribute = thing.side if value in ("left", "right") else thing.size
    return "entailment" if attribute == value else "contradiction"


def test_hypotheses_carry_the_label_the_scene_gives_them():
    rng = random.Random(7)
    for _ in range(300):
        scene = scene_world.random_scene(rng)
        pairs = scene_world.pairs(scene, rng)
        assert [label for _, label in pairs] == list(LABELS)
        for hypothesis, label in pairs:
            assert truth(scene, hypothesis) == label, (scene, hypothesis)


def test_the_hypothesis_alone_cannot_tell_entailment_from_contradiction():
    """Every entailed or contradicted sentence occurs with both labels across scenes, in
    nearly equal numbers: only the premise (image or caption) decides between them."""
    rng = random.Random(3)
    seen: dict[str, Counter] = {}
    for _ in range(3000):
        scene = scene_world.random_scene(rng)
        for hypothesis, label in scene_world.pairs(scene, rng):
            if label != "neutral":
                seen.setdefault(hypothesis, Counter())[label] += 1
    assert all(set(c) == {"entailment", "contradiction"} for c in seen.values())
    entailed = sum(c["entailment"] for c in seen.values())
    contradicted = sum(c["contradiction"] for c in seen.values())
    assert entailed == contradicted == 3000
    # no sentence leans more than 2:1 either way
    assert all(max(c.values()) <= 2 * min(c.values()) for c in seen.values() if sum(c.values()) >= 60)


def test_a_rendered_scene_shows_each_thing_in_its_colour_on_its_side():
    scene = Scene((Thing("box", "red", "big", "left"), Thing("ball", "green", "small", "right")))
    pixels = scene_world.render(scene, random.Random(0), size=32)
    assert pixels.shape == (32, 32, 3) and pixels.dtype == np.uint8
    left, right = pixels[:, :16].reshape(-1, 3).astype(int), pixels[:, 16:].reshape(-1, 3).astype(int)

    def near(block, colour):
        return int((np.abs(block - np.array(colour)).max(axis=1) < 30).sum())

    assert near(left, COLOURS["red"]) > 40 and near(left, COLOURS["green"]) == 0
    assert near(right, COLOURS["green"]) > 10 and near(right, COLOURS["red"]) == 0
    assert near(right, COLOURS["green"]) < near(left, COLOURS["red"])  # small ball, big box
    assert scene.caption() == "A big red box on the left and a small green ball on the right."


def test_the_world_is_reproducible_from_its_seed():
    def draw(seed):
        rng = random.Random(seed)
        scene = scene_world.random_scene(rng)
        return scene.caption(), scene_world.pairs(scene, rng), scene_world.render(scene, rng).tobytes()

    assert draw(11) == draw(11) and draw(11) != draw(12)


def png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_missing_truncated_undecodable_and_mischecksummed_images_are_counted_and_their_rows_dropped(tmp_path, caplog):
    rng = random.Random(0)
    good = png(scene_world.render(scene_world.random_scene(rng), rng))
    (tmp_path / "a.png").write_bytes(good)
    (tmp_path / "same_bytes.png").write_bytes(good)
    (tmp_path / "cut.png").write_bytes(good[: len(good) // 2])
    (tmp_path / "noise.png").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "changed.png").write_bytes(png(np.zeros((8, 8, 3), dtype=np.uint8)))
    rows = [
        {"id": 1, "image": "a.png"},
        {"id": 2, "image": "cut.png"},
        {"id": 3, "image": "gone.png"},
        {"id": 4, "image": "noise.png"},
        {"id": 5, "image": "same_bytes.png"},
        {"id": 6, "image": "changed.png"},
        {"id": 7, "image": ["a.png", "cut.png"]},
        {"id": 8, "image": ["a.png", "same_bytes.png"]},
    ]
    names = [n for r in rows for n in (r["image"] if isinstance(r["image"], list) else [r["image"]])]
    with caplog.at_level(logging.WARNING, logger="xstilts"):
        found = images.read_images(tmp_path, names, checksums={"changed.png": "0" * 64}, what="snli_ve train")
    assert sorted(found.pixels) == ["a.png", "same_bytes.png"]
    assert found.dropped == Counter({"undecodable": 2, "missing": 1, "checksum_mismatch": 1})
    assert found.dropped_names == {
        "cut.png": "undecodable",
        "gone.png": "missing",
        "noise.png": "undecodable",
        "changed.png": "checksum_mismatch",
    }
    assert found.digests["a.png"] == found.digests["same_bytes.png"]  # content-addressed
    assert "gone.png" in caplog.text and "cut.png" in caplog.text and "snli_ve train" in caplog.text
    # The pipeline matches rows to what survived through the feature bank: a row loses out when
    # any of its images (NLVR2 has two) is gone.
    bank = FeatureBank(
        np.zeros((len(found.pixels), 1, 1), dtype=np.float16), {n: i for i, n in enumerate(sorted(found.pixels))}, {}
    )
    pairs = [{"id": r["id"], "images": r["image"]} for r in rows if isinstance(r["image"], list)]
    singles = [{"id": r["id"], "images": [r["image"]]} for r in rows if not isinstance(r["image"], list)]
    assert bank.attach(pa.Table.from_pylist(singles), "snli_ve train").column("id").to_pylist() == [1, 5]
    kept = bank.attach(pa.Table.from_pylist(pairs), "nlvr2 train")
    assert kept.column("id").to_pylist() == [8] and kept.column("image_index").to_pylist() == [[0, 1]]
    assert "1 of 2 rows dropped" in caplog.text
    assert found.report()["images_dropped"] == {"undecodable": 2, "missing": 1, "checksum_mismatch": 1}


def test_a_split_with_no_usable_image_stops_naming_the_folder(tmp_path):
    (tmp_path / "x.png").write_bytes(b"not an image")
    with pytest.raises(InputError, match=str(tmp_path)):
        images.read_images(tmp_path, ["x.png", "y.png"], what="vqa train")


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """A random-init CLIP vision tower of a few thousand parameters, with its processor."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    path = tmp_path_factory.mktemp("clip")
    config = CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
        projection_dim=16,
    )
    import torch

    torch.manual_seed(0)
    CLIPVisionModel(config).save_pretrained(path)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def test_image_features_are_computed_once_per_image_bytes_and_reused_by_a_second_task(tmp_path, tiny_clip):
    from workflow_scripts.multimodal.features import PATCHES, POOLED, embed_images

    rng = random.Random(1)
    pictures = [scene_world.render(scene_world.random_scene(rng), rng) for _ in range(5)]
    for i, p in enumerate(pictures):
        (tmp_path / f"{i}.png").write_bytes(png(p))
    (tmp_path / "copy_of_0.png").write_bytes((tmp_path / "0.png").read_bytes())
    first = images.read_images(tmp_path, ["0.png", "1.png", "2.png", "copy_of_0.png"])
    cache = tmp_path / "cache"
    features, counts = embed_images(first.pixels, first.digests, tiny_clip, cache, POOLED, batch_size=2)
    assert counts == {"embedded": 3, "from_cache": 0, "images": 4}  # the copy shares its original's entry
    assert features["0.png"].shape == (16,) and np.array_equal(features["0.png"], features["copy_of_0.png"])
    # a second task over overlapping images embeds only the new ones, and gets the same vectors
    second = images.read_images(tmp_path, ["2.png", "3.png", "4.png", "0.png"])
    again, counts = embed_images(second.pixels, second.digests, tiny_clip, cache, POOLED, batch_size=2)
    assert counts == {"embedded": 2, "from_cache": 2, "images": 4}
    assert np.array_equal(again["2.png"], features["2.png"])
    fresh, _ = embed_images(second.pixels, second.digests, tiny_clip, tmp_path / "other_cache", POOLED)
    np.testing.assert_allclose(fresh["0.png"], features["0.png"], rtol=0, atol=1e-6)  # batch-independent
    patches, counts = embed_images(first.pixels, first.digests, tiny_clip, cache, PATCHES)
    assert counts["embedded"] == 3 and patches["1.png"].shape == (17, 16)  # 16 patches + the class token
    assert not list(cache.rglob("*.partial"))


def test_the_demo_vision_tower_learns_the_scene_attributes_its_captions_name(tmp_path):
    """Contrastive pre-training on the image world: afterwards the frozen tower's pooled
    features of held-out scenes tell their objects' colours and sides apart (a nearest-
    centroid probe fitted on the training scenes), far above the untrained tower's."""
    from workflow_scripts.multimodal.demo_vision import build_demo_vision_tower
    from workflow_scripts.multimodal.features import POOLED, embed_images

    rng = random.Random(5)
    scenes = [scene_world.Scene((scene_world.random_scene(rng).things[0],)) for _ in range(260)]
    pictures = [scene_world.render(s, rng) for s in scenes]
    from workflow_scripts.spec.model_settings import DemoVision, VisionPretraining

    settings = DemoVision.defaults().replace(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
        pretraining=VisionPretraining(steps=150, batch_size=32, learning_rate=1e-3),
    )
    log = build_demo_vision_tower(settings, pictures[:200], [s.caption() for s in scenes[:200]], tmp_path / "trained")
    assert log["last_loss"] < log["first_loss"]
    untrained = tmp_path / "untrained"
    from workflow_scripts.multimodal.demo_vision import build_vision_tower

    model, processor = build_vision_tower(settings)
    model.save_pretrained(untrained)
    processor.save_pretrained(untrained)
    names = {f"{i}.png": p for i, p in enumerate(pictures)}
    digests = {n: images.digest(p.tobytes()) for n, p in names.items()}

    def probe_accuracy(tower) -> float:
        features, _ = embed_images(names, digests, tower, tmp_path / "cache", POOLED)
        x = np.stack([features[f"{i}.png"] for i in range(len(scenes))])
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        attribute = [(s.things[0].colour, s.things[0].side) for s in scenes]
        classes = sorted(set(attribute))
        centroids = np.stack([x[:200][[a == c for a in attribute[:200]]].mean(axis=0) for c in classes])
        predicted = [classes[j] for j in (x[200:] @ centroids.T).argmax(axis=1)]
        return float(np.mean([p == a for p, a in zip(predicted, attribute[200:])]))

    trained_accuracy, untrained_accuracy = probe_accuracy(tmp_path / "trained"), probe_accuracy(untrained)
    assert trained_accuracy >= 0.9 and trained_accuracy > untrained_accuracy + 0.2, (
        trained_accuracy,
        untrained_accuracy,
    )
