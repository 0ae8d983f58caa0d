"""The demo's tiny decoder (workflow_scripts/models/demo_models.py, ``build_demo_decoder``): it loads
like a Hub Llama snapshot, its byte-level BPE tokenizer does what the task code asks of a
tokenizer (pairs, word-split input, offsets, padding with a token of its own), and its
pre-training learns, deterministically."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from workflow_scripts.models.demo_models import build_demo_decoder, read_parallel
from workflow_scripts.spec.model_settings import BackbonePrepare, DemoDecoder, DemoEncoder

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
DECODER = DemoDecoder.defaults().replace(
    vocab_size=1000,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=128,
    seed=0,
)
PRETRAINING = DECODER.pretraining.replace(
    steps=120, batch_size=32, learning_rate=5e-3, max_length=48, contrastive_weight=1.0, temperature=0.05
)
TRAIN_PAIRS = 600


def _corpus(directory: Path, rows: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "en-de.jsonl"
    path.write_text("".join(rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first pairs of the demo's en-de corpus."""
    with (REPO / "demo/parallel/en-de.jsonl").open(encoding="utf-8") as f:
        return _corpus(tmp_path_factory.mktemp("corpus"), list(islice(f, TRAIN_PAIRS)))


@pytest.fixture(scope="module")
def held_out() -> list[tuple[str, str]]:
    """100 plain single-sentence pairs after the ones the decoder trains on."""
    pairs = read_parallel(REPO / "demo/parallel/en-de.jsonl", "en", "de")[TRAIN_PAIRS:]
    plain = [
        (en, de)
        for en, de in pairs
        if en.endswith(".") and en.count(".") == 1 and len(en.split()) > 4 and "<b>" not in en + de
    ]
    return plain[:100]


@pytest.fixture(scope="module")
def text(demo_data) -> list[str]:
    return [str(p) for p in demo_data.values()]


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory, text, corpus) -> Path:
    out = tmp_path_factory.mktemp("decoder") / "decoder"
    build_demo_decoder(DECODER.replace(pretraining=PRETRAINING), text, out, [corpus], threads=2)
    return out


@pytest.fixture(scope="module")
def untrained_dir(tmp_path_factory, text, corpus) -> Path:
    out = tmp_path_factory.mktemp("decoder") / "untrained"
    build_demo_decoder(DECODER.replace(pretraining=PRETRAINING.replace(steps=0)), text, out, [corpus])
    return out


@pytest.fixture(scope="module")
def tok(decoder_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(decoder_dir))


def test_loads_like_a_hub_llama(decoder_dir, tok):
    from transformers import AutoModel, AutoModelForCausalLM, LlamaForCausalLM, LlamaModel

    assert isinstance(AutoModel.from_pretrained(str(decoder_dir)), LlamaModel)
    lm = AutoModelForCausalLM.from_pretrained(str(decoder_dir))
    assert isinstance(lm, LlamaForCausalLM)
    config = lm.config
    assert (config.model_type, config.hidden_size, config.num_key_value_heads) == ("llama", 64, 2)
    assert config.vocab_size == len(tok) <= DECODER.vocab_size
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        tok.bos_token_id,
        tok.eos_token_id,
        tok.pad_token_id,
    )
    assert tok.is_fast and tok.model_max_length == DECODER.max_position_embeddings


def test_pad_is_a_token_of_its_own(tok):
    assert tok.pad_token == "<pad>" and tok.padding_side == "right"
    assert len({tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id}) == 4
    batch = tok(["Anna bought the book.", "Anna"], padding=True)
    assert batch["input_ids"][1][-1] == tok.pad_token_id and batch["attention_mask"][1][-1] == 0
    assert "token_type_ids" not in batch, "Llama has no segment embeddings"


def test_every_input_ends_with_eos(tok):
    single = tok("Anna bought the book.")["input_ids"]
    assert single[0] == tok.bos_token_id and single[-1] == tok.eos_token_id
    pair = tok("Anna bought the book.", "Anna kaufte das Buch.")["input_ids"]
    assert pair[0] == tok.bos_token_id and pair[-1] == tok.eos_token_id
    assert pair.count(tok.eos_token_id) == 2 and pair.count(tok.bos_token_id) == 1
    # Truncation keeps the closing </s>: last-token pooling always reads it.
    assert tok("Anna bought the book. " * 20, truncation=True, max_length=8)["input_ids"][-1] == tok.eos_token_id


def test_word_split_input_tokenises_as_running_text(tok):
    words = ["Maria", "wusch", "das", "rote", "Auto", "bei", "Fluss."]
    split = tok(words, is_split_into_words=True, return_offsets_mapping=True)
    assert split["input_ids"] == tok(" ".join(words))["input_ids"], "the prefix space makes both agree"
    word_ids = split.word_ids()
    assert word_ids[0] is None and word_ids[-1] is None
    assert sorted({w for w in word_ids if w is not None}) == list(range(len(words)))
    # One first piece per word (what tagging labels), and offsets inside each word.
    firsts = [k for k, w in enumerate(word_ids) if w is not None and w != word_ids[k - 1]]
    assert len(firsts) == len(words)
    for k, w in enumerate(word_ids):
        if w is not None:
            start, end = split["offset_mapping"][k]
            assert 0 <= start < end <= len(words[w])
    # Batches of word lists, as the tagging features pass them.
    batch = tok([words, words[:2]], is_split_into_words=True, padding=True)
    assert sorted(set(batch.word_ids(1)) - {None}) == [0, 1]


def test_offsets_cover_the_text_without_spaces(tok):
    text = "Мария купила книгу. Anna bought the book!"
    encoding = tok(text, return_offsets_mapping=True)
    offsets = encoding["offset_mapping"]
    assert offsets[0] == offsets[-1] == (0, 0), "<s> and </s> cover no text"
    pieces = [text[a:b] for a, b in offsets[1:-1]]
    assert all(not p.startswith(" ") for p in pieces), "ByteLevel's trim_offsets leaves spaces out"
    assert "".join(pieces) == text.replace(" ", "")
    assert tok.unk_token_id not in encoding["input_ids"], "byte-level: no unknown pieces"
    assert tok.decode(encoding["input_ids"], skip_special_tokens=True) == text


def _last_token_retrieval(model_dir: Path, pairs: list[tuple[str, str]]) -> float:
    """Share of English sentences whose translation is the nearest German one, with each
    sentence read at its last token (</s>), as the decoder family pools."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(str(model_dir)), AutoModel.from_pretrained(str(model_dir))

    def embed(texts: list[str]):
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        last = hidden[torch.arange(len(texts)), batch["attention_mask"].sum(1) - 1]
        return F.normalize(last, dim=-1)

    similarity = embed([en for en, _ in pairs]) @ embed([de for _, de in pairs]).T
    return float((similarity.argmax(1) == torch.arange(len(pairs))).float().mean())


def test_pretraining_lowers_the_loss_and_aligns_translations(decoder_dir, untrained_dir, held_out):
    log = json.loads((decoder_dir / "xstilts_demo.json").read_text())["pretraining"]
    assert log["steps"] == PRETRAINING.steps and log["pairs"] == TRAIN_PAIRS
    assert log["loss_end"] < log["loss_start"] / 2, log
    assert log["loss_curve"][-1] < log["loss_curve"][0] / 2, log
    assert json.loads((untrained_dir / "xstilts_demo.json").read_text())["pretraining"] is None
    # The contrastive term aligns the languages at the token the decoder family pools;
    # without pre-training that is at chance (1 in 100).
    trained, untrained = _last_token_retrieval(decoder_dir, held_out), _last_token_retrieval(untrained_dir, held_out)
    assert trained > 0.5 and untrained < 0.2, (trained, untrained)


def test_same_settings_same_model(tmp_path, text, corpus):
    """Pure causal LM (no contrastive term), a few steps: two builds, identical files."""
    settings = DECODER.replace(pretraining=PRETRAINING.replace(steps=6, contrastive_weight=0.0))
    for name in ("a", "b"):
        build_demo_decoder(settings, text, tmp_path / name, [corpus], threads=2)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    log = json.loads((tmp_path / "a/xstilts_demo.json").read_text())["pretraining"]
    assert log["loss_end"] < log["loss_start"], "six steps already move the loss"


def test_the_cli_writes_a_complete_directory_naming_its_family(tmp_path, text, corpus):
    from workflow_scripts.models import prepare as prepare_models
    from workflow_scripts.models.backbones import family_of

    demo = DECODER.replace(pretraining=PRETRAINING.replace(steps=2))
    out = tmp_path / "models" / "decoder"
    prepare_models.main(
        [
            "backbone",
            "--settings",
            BackbonePrepare(source="demo", family="decoder", demo=demo).to_json(),
            "--output",
            str(out),
            "--text",
            *text,
            "--corpus",
            str(corpus),
            "--threads",
            "1",
        ]
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "xstilts_backbone.json",
        "xstilts_demo.json",
    ]
    assert [p.name for p in out.parent.iterdir()] == ["decoder"], "no temporary directory left behind"
    assert json.loads((out / "xstilts_demo.json").read_text())["pretraining"]["steps"] == 2
    assert family_of(out).name == "decoder"


def test_the_cli_fetches_a_hub_backbone_and_records_its_family(tmp_path, monkeypatch):
    from workflow_scripts.models import prepare as prepare_models

    fetched = []

    def fetch(hub_id, revision, output):
        fetched.append((hub_id, revision))
        output.mkdir()
        (output / "config.json").write_text("{}")

    monkeypatch.setattr(prepare_models, "fetch_hub_model", fetch)
    settings = BackbonePrepare(source="hub", family="decoder", hub_id="meta-llama/Llama-3.2-1B", revision="main")
    prepare_models.main(["backbone", "--settings", settings.to_json(), "--output", str(tmp_path / "d")])
    assert fetched == [("meta-llama/Llama-3.2-1B", "main")]
    assert json.loads((tmp_path / "d" / "xstilts_backbone.json").read_text()) == {"family": "decoder"}


def test_the_demo_builds_no_seq2seq_backbone(tmp_path):
    from workflow_scripts.models import prepare as prepare_models

    with pytest.raises(SystemExit, match="the demo builds encoder and decoder backbones, not seq2seq_encoder"):
        prepare_models.main(
            [
                "backbone",
                "--settings",
                json.dumps({"source": "demo", "family": "seq2seq_encoder", "demo": DemoEncoder.defaults().to_dict()}),
                "--output",
                str(tmp_path / "m"),
            ]
        )
    assert not (tmp_path / "m").exists()
