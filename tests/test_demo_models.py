"""The demo's own models: corpus reading, the encoder's pre-training and the translator's
training (workflow_scripts/models/demo_models.py). The end-to-end effect on the demo run is
checked in test_workflow.py."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from workflow_scripts.models.backbones.family import mean_pooled
from workflow_scripts.models.demo_models import (
    build_demo_encoder,
    build_demo_translator,
    corpus_languages,
    pretraining_examples,
    read_parallel,
)
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.model_settings import DemoEncoder, DemoTranslator, TranslatorTraining

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
ENCODER = DemoEncoder.defaults().replace(
    vocab_size=2000,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=130,
    seed=0,
)
PRETRAINING = ENCODER.pretraining.replace(
    steps=80, batch_size=32, learning_rate=5e-3, max_length=48, mlm_probability=0.15, contrastive_weight=1.0
)


def small_corpus(tmp_path: Path, lang: str, n: int) -> Path:
    """The first ``n`` pairs of the demo's en-<lang> corpus."""
    path = tmp_path / f"en-{lang}.jsonl"
    with (REPO / "demo/parallel" / f"en-{lang}.jsonl").open(encoding="utf-8") as f:
        path.write_text("".join(islice(f, n)), encoding="utf-8")
    return path


def test_parallel_rows_are_read_and_bad_ones_named(tmp_path, caplog):
    path = tmp_path / "en-de.jsonl"
    rows = [
        {"translation": {"en": "Anna bought the book.", "de": "Anna kaufte das Buch."}},
        {"translation": {"en": "  ", "de": "Leer."}},  # no English text: skipped and counted
        {"translation": {"en": "Omar found the cup."}},
    ]  # no German side: skipped and counted
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n", encoding="utf-8")
    assert read_parallel(path, "en", "de") == [("Anna bought the book.", "Anna kaufte das Buch.")]
    assert read_parallel(path, "de", "en") == [("Anna kaufte das Buch.", "Anna bought the book.")]
    assert "skipped 2 rows" in caplog.text
    path.write_text(json.dumps(rows[0]) + "\n" + '{"text": "no translation object"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"en-de.jsonl:2: not a parallel-corpus row"):
        read_parallel(path, "en", "de")
    with pytest.raises(InputError, match="no en-ru sentence pairs"):
        read_parallel(_write(tmp_path / "en-ru.jsonl", [rows[0]]), "en", "ru")


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_corpus_names_give_the_language_pair(tmp_path):
    assert corpus_languages("demo/parallel/en-sw.jsonl") == ("en", "sw")
    with pytest.raises(InputError, match="named <lang>-<lang>.jsonl"):
        corpus_languages(tmp_path / "parallel.jsonl")
    sentences, pairs = pretraining_examples([small_corpus(tmp_path, "de", 300)])
    assert len(pairs) == 300 and len(sentences) <= 600
    assert not any("<b>" in s or "</b>" in s for s in sentences), "the encoder never sees span markers"


def test_a_translator_refuses_a_corpus_of_another_pair(tmp_path):
    with pytest.raises(InputError, match="en-de translator trains on a parallel corpus named en-de.jsonl"):
        build_demo_translator(
            DemoTranslator.defaults().replace(
                vocab_size=300, d_model=16, layers=1, heads=2, ffn_dim=32, max_position_embeddings=64
            ),
            [],
            "de",
            tmp_path / "mt",
            corpus=small_corpus(tmp_path, "ru", 50),
        )
    assert not (tmp_path / "mt").exists()


def _retrieval_accuracy(model_dir: Path, pairs: list[tuple[str, str]]) -> float:
    """Share of sentences whose translation is the nearest of all candidates (mean-pooled
    last layer, cosine), as Tatoeba scores it."""
    import torch
    import torch.nn.functional as F

    from workflow_scripts.models.heads import load_encoder, load_tokenizer

    tokenizer, encoder = load_tokenizer(model_dir), load_encoder(model_dir).eval()

    def embed(texts: list[str]):
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = encoder(**batch).last_hidden_state
        return F.normalize(mean_pooled(hidden, batch["attention_mask"]), dim=-1)

    similarity = embed([s for s, _ in pairs]) @ embed([t for _, t in pairs]).T
    return float((similarity.argmax(1) == torch.arange(len(pairs))).float().mean())


def test_encoder_pretraining_aligns_translations_and_lowers_the_loss(tmp_path, demo_data):
    """80 steps on 600 en-de pairs: held-out translations become each other's nearest
    neighbours, where the same encoder without pre-training is at chance."""
    corpus = small_corpus(tmp_path, "de", 600)
    held_out = read_parallel(_held_out(tmp_path), "en", "de")
    text = [str(p) for p in demo_data.values()]
    build_demo_encoder(ENCODER.replace(pretraining=PRETRAINING), text, tmp_path / "trained", [corpus], threads=2)
    untrained = ENCODER.replace(pretraining=PRETRAINING.replace(steps=0))
    build_demo_encoder(untrained, text, tmp_path / "random", [corpus])
    log = json.loads((tmp_path / "trained/xstilts_demo.json").read_text())["pretraining"]
    assert log["steps"] == 80 and log["pairs"] == 600
    assert log["loss_curve"][-1] < log["loss_curve"][0] / 2
    assert json.loads((tmp_path / "random/xstilts_demo.json").read_text())["pretraining"] is None
    chance = 1 / len(held_out)
    trained, random_init = (
        _retrieval_accuracy(tmp_path / "trained", held_out),
        _retrieval_accuracy(tmp_path / "random", held_out),
    )
    assert trained > 0.5 > 10 * chance, (trained, random_init)
    assert random_init < 0.2, (trained, random_init)


def _held_out(tmp_path: Path) -> Path:
    """100 pairs after the 600 the test trains on: single whole sentences without markers."""
    out = tmp_path / "held_out"
    out.mkdir(exist_ok=True)
    rows = []
    for src, tgt in read_parallel(REPO / "demo/parallel/en-de.jsonl", "en", "de")[600:]:
        if src.count(".") == 1 and src.endswith(".") and len(src.split()) > 4 and "<b>" not in src + tgt:
            rows.append({"translation": {"en": src, "de": tgt}})
        if len(rows) == 100:
            break
    return _write(out / "en-de.jsonl", rows)


def test_translator_training_learns_the_corpus(tmp_path):
    settings = DemoTranslator.defaults().replace(
        vocab_size=400,
        d_model=32,
        layers=1,
        heads=2,
        ffn_dim=64,
        max_position_embeddings=64,
        seed=0,
        training=TranslatorTraining(steps=150, batch_size=32, learning_rate=5e-3, max_length=48),
    )
    corpus = small_corpus(tmp_path, "de", 400)
    build_demo_translator(settings, [], "de", tmp_path / "mt", corpus=corpus)
    log = json.loads((tmp_path / "mt/xstilts_demo.json").read_text())["training"]
    assert log["steps"] == 150 and log["pairs"] == 400
    assert log["loss_curve"][-1] < log["loss_curve"][0] / 2
    # The span markers tokenise without unknown pieces on both sides, so the model can carry them.
    from transformers import MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(str(tmp_path / "mt"))
    marked = "Anna bought the <b>book</b> at the market."
    assert tokenizer.unk_token_id not in tokenizer(marked)["input_ids"]
    assert tokenizer.unk_token_id not in tokenizer(text_target=marked)["input_ids"]
    # Into English from the same corpus (translate-test).
    build_demo_translator(
        settings.replace(training=settings.training.replace(steps=2)),
        [],
        "en",
        tmp_path / "mt_en",
        source_lang="de",
        corpus=corpus,
    )
    assert json.loads((tmp_path / "mt_en/tokenizer_config.json").read_text())["source_lang"] == "de"


# ----- the demo vocabulary is a function of its texts ---------------------------------------


def test_canonical_vocab_undoes_the_trainers_hash_order():
    """Two vocabularies as two processes' trainer runs give them: float noise, tied pieces in
    another order, the added characters' scores shuffled among them. Both come out equal."""
    from workflow_scripts.models.demo_models import REQUIRED_CHAR_STEP, SPECIAL_TOKENS, canonical_vocab

    low = -14.786061199408493
    trained = [("▁the", -2.5), ("▁ball", -3.8985419547062907), ("12", -9.4), ("13", -9.4), ("▁c", low)]
    added = ["Q", "J", "x"]  # "x" is the most frequent of them in the texts
    one = trained + [(ch, low + k * REQUIRED_CHAR_STEP) for k, ch in enumerate(added)]
    other = [("▁ball", -3.898541954706289), ("▁the", -2.5000000000000018), ("13", -9.4), ("12", -9.4), ("▁c", low)] + [
        (ch, low + k * REQUIRED_CHAR_STEP) for k, ch in enumerate(reversed(added))
    ]
    head = [(t, 0.0) for t in SPECIAL_TOKENS]
    texts = ["xx Q J x", "the ball 12 13 c"]
    first, second = canonical_vocab(head + one, texts), canonical_vocab(head + other, texts)
    assert first == second
    assert first[: len(head)] == head
    body = first[len(head) :]
    assert [p for p, _ in body] == ["▁the", "▁ball", "12", "13", "x", "J", "Q", "▁c"]
    assert dict(body)["x"] == round(low + 2 * REQUIRED_CHAR_STEP, 6)  # the most frequent, the highest


def test_the_demo_vocabulary_is_the_same_in_every_process(tmp_path):
    """Each Python process seeds the trainer's hash maps anew; the vocabulary (and so every
    demo model) must not depend on it. Rare characters and tied numbers are what differed."""
    import subprocess
    import sys

    texts = [f"Scene {i:03d}: a red ball left of a blue box. {'QJXZ'[i % 4]}{'vwk'[i % 3]}" for i in range(300)]
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = (
        "import json, sys; from workflow_scripts.models.demo_models import train_unigram_vocab; "
        f"print(json.dumps(train_unigram_vocab(json.load(open({str(tmp_path / 'texts.json')!r})), 120)))"
    )
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
        for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]
