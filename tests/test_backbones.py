"""Backbone families and training methods: every task format on every family, pooling,
word alignment with byte-level BPE, MLM refused where a family has none, and LoRA adapters
that save and reload to the same predictions (heads included) and chain intermediate ->
target without writing the base model again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import phase_settings
from workflow_scripts.common import device
from workflow_scripts.data.features import collate, encode, words_need_spaces
from workflow_scripts.data.prepare import read_table
from workflow_scripts.evaluation.evaluate import _load_target_model, predict_and_score_rows
from workflow_scripts.models import adapters
from workflow_scripts.models.adapters import Method
from workflow_scripts.models.backbones import family_of
from workflow_scripts.models.backbones.family import last_token, pool
from workflow_scripts.models.heads import (
    MultiHeadModel,
    forward,
    load_encoder,
    load_mlm_head,
    load_tokenizer,
    make_head,
)
from workflow_scripts.precision import Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.task_options import FormatOptions, ScoringOptions
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.training.recipe import train_phase

pytestmark = pytest.mark.unit

FAMILIES = ("encoder", "seq2seq_encoder", "decoder")
TEXTS = [
    "the cat sat on the mat",
    "a dog barks at the moon",
    "der Hund bellt den Mond an",
    "die Katze sitzt auf der Matte",
    "what does the fox say",
    "where is the answer in this text",
]


def _corpus(demo_data) -> list[str]:
    from workflow_scripts.models.demo_models import iter_texts

    return list(iter_texts([str(p) for p in demo_data.values()]))[:3000] + TEXTS


def _save_seq2seq_encoder(out: Path, demo_data) -> Path:
    """A tiny mT5 encoder-decoder checkpoint with a T5 (unigram) tokenizer, as on the Hub."""
    from transformers import MT5Config, MT5ForConditionalGeneration, T5Tokenizer

    from workflow_scripts.models.demo_models import train_unigram_vocab

    vocab = [(t, s) for t, s in train_unigram_vocab(_corpus(demo_data), 600) if t not in ("<s>", "<mask>")]
    # T5 order: pad 0, eos 1, unk 2
    specials = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab = specials + [(t, s) for t, s in vocab if t not in dict(specials)]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    torch.manual_seed(0)
    config = MT5Config(
        vocab_size=len(vocab),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    MT5ForConditionalGeneration(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _byte_level_tokenizer(texts: list[str], add_prefix_space: bool, with_pad: bool):
    """A Llama-3 / BLOOM-style byte-level BPE tokenizer; optionally without a pad token,
    as Llama tokenizers ship."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "</s>", "<unk>"] + (["<pad>"] if with_pad else [])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=700, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        **({"pad_token": "<pad>"} if with_pad else {}),
    )


def _save_decoder(out: Path, demo_data) -> Path:
    """A tiny Llama with a byte-level BPE tokenizer that has no pad token."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _byte_level_tokenizer(_corpus(demo_data), add_prefix_space=False, with_pad=False)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def backbone_dirs(tmp_path_factory, demo_data, demo_encoder_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("backbones")
    return {
        "encoder": demo_encoder_dir,
        "seq2seq_encoder": _save_seq2seq_encoder(root / "mt5", demo_data),
        "decoder": _save_decoder(root / "llama", demo_data),
    }


ROWS = {
    "xnli": [
        {"id": str(i), "lang": "en", "text_a": TEXTS[i], "text_b": TEXTS[-1 - i], "label": i % 3} for i in range(6)
    ],
    "hellaswag": [
        {"id": str(i), "lang": "en", "context": TEXTS[i], "choices": TEXTS[:4], "label": i % 4} for i in range(4)
    ],
    "udpos": [
        {
            "id": str(i),
            "lang": "en",
            "tokens": TEXTS[i].split(),
            "tags": ["NOUN" if k % 2 else "DET" for k in range(len(TEXTS[i].split()))],
        }
        for i in range(6)
    ],
    # a dual encoder's file: 4 queries, each with its gold among 6 candidates
    "mewslix": [
        {"id": f"q{i}", "lang": "en", "side": "query", "text": TEXTS[i], "context": "", "gold": [f"c{i}"]}
        for i in range(4)
    ]
    + [
        {"id": f"c{i}", "lang": "de", "side": "candidate", "text": TEXTS[-1 - i], "context": "", "gold": []}
        for i in range(6)
    ],
}
OPTS = ScoringOptions(
    max_length=48,
    eval_batch_size=4,
    precision="fp32",
    doc_stride=16,
    max_query_length=12,
    n_best=5,
    max_answer_length=8,
)


def _rows(task: str, demo_data) -> list[dict]:
    if task == "squad":
        return read_table(demo_data["squad.train"], "span").to_pylist()[:6]
    return ROWS[task]


def _model(backbone_dir: Path, task_name: str, seed: int = 0) -> MultiHeadModel:
    task = get_task(task_name)
    encoder = load_encoder(backbone_dir)
    torch.manual_seed(seed)
    head = make_head(task.format, encoder.config.hidden_size, task.num_labels, 0.0, 0.5)
    return MultiHeadModel(encoder, {task_name: head}, family_of(backbone_dir).name)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("task_name", ["xnli", "hellaswag", "squad", "udpos", "mewslix"])
def test_every_task_format_trains_and_scores_on_every_family(family, task_name, backbone_dirs, demo_data):
    backbone_dir = backbone_dirs[family]
    assert family_of(backbone_dir).name == family
    task, tokenizer = get_task(task_name), load_tokenizer(backbone_dir)
    model = _model(backbone_dir, task_name)
    rows = _rows(task_name, demo_data)
    encoded = encode(task, tokenizer, rows, OPTS, train=True)
    batch = collate(encoded.features.take(range(min(4, len(encoded.features)))), task.format, tokenizer.pad_token_id)
    _, loss = forward(model, task.format, task_name, batch)
    assert torch.isfinite(loss)
    loss.backward()
    assert model.encoder.get_input_embeddings().weight.grad.abs().sum() > 0  # the loss reaches the backbone
    scores, predictions = predict_and_score_rows(model, task, tokenizer, rows, OPTS, torch.device("cpu"))
    assert scores and all(0.0 <= v <= 100.0 for v in scores.values())
    # one prediction per row; a ranking file's are its queries' ranked candidates
    assert len(predictions) == len([r for r in rows if r.get("side", "query") == "query"])


def test_a_decoder_tokenizer_without_pad_pads_with_eos_and_masks_by_length(backbone_dirs):
    tokenizer = load_tokenizer(backbone_dirs["decoder"])
    assert tokenizer.pad_token == tokenizer.eos_token and tokenizer.padding_side == "right"
    # a pair's first segment ends with </s>: an id equal to the pad id inside the text stays attended
    enc = tokenizer(["a short one"], ["and its pair"])["input_ids"][0]
    other = tokenizer(["a much longer first sentence here"], ["and its pair too"])["input_ids"][0]
    assert tokenizer.pad_token_id in enc[1:-1]
    batch = collate(
        [{"input_ids": enc, "labels": 0}, {"input_ids": other, "labels": 1}], "classification", tokenizer.pad_token_id
    )
    assert batch["attention_mask"][0].tolist() == [1] * len(enc) + [0] * (len(other) - len(enc))


def test_decoders_pool_the_last_real_token_whichever_side_pads(backbone_dirs):
    model = _model(backbone_dirs["decoder"], "xnli")
    tokenizer = load_tokenizer(backbone_dirs["decoder"])
    model.eval()
    short, long = "the cat sat", "what does the fox say at the moon"
    with torch.no_grad():
        alone = pool(
            "last",
            model.encoder(**tokenizer([short], return_tensors="pt")).last_hidden_state,
            tokenizer([short], return_tensors="pt")["attention_mask"],
        )
        right = tokenizer([short, long], padding=True, return_tensors="pt")
        in_batch = pool(model.pooling, model.encoder(**right).last_hidden_state, right["attention_mask"])
    # right padding: causal attention never sees the pads after a token, so the vector is the same
    torch.testing.assert_close(in_batch[0], alone[0], rtol=1e-5, atol=1e-5)
    hidden = torch.arange(2 * 5 * 1, dtype=torch.float32).view(2, 5, 1)
    left_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    right_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert last_token(hidden, left_mask).flatten().tolist() == [4.0, 9.0]
    assert last_token(hidden, right_mask).flatten().tolist() == [2.0, 9.0]


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_tagging_labels_the_first_piece_of_each_word_with_byte_level_bpe(add_prefix_space, demo_data):
    tokenizer = _byte_level_tokenizer(_corpus(demo_data), add_prefix_space, with_pad=True)
    # without add_prefix_space, pre-split words need their space to be tokenised as in text
    assert words_need_spaces(tokenizer) is (not add_prefix_space)
    task = get_task("udpos")
    rows = ROWS["udpos"] + [
        {"id": "long", "lang": "en", "tokens": ("unbelievably " * 30).split(), "tags": ["ADV"] * 30}
    ]
    encoded = encode(task, tokenizer, rows, FormatOptions(max_length=24), train=True)
    labelled: dict[int, list[str]] = {}
    for feat in encoded.features:
        pieces = tokenizer.convert_ids_to_tokens(feat["input_ids"])
        labelled.setdefault(feat["example"], []).extend(p for p, lab in zip(pieces, feat["labels"]) if lab != -100)
    for i, row in enumerate(rows):
        firsts = labelled[i]
        assert len(firsts) == len(row["tokens"])  # one label per word, long sentence split, not truncated
        for piece, word in zip(firsts, row["tokens"]):
            # each labelled piece is its word's first, as the word is tokenised in running text
            # (after a space: "Ġword", never the bare "word" of a pre-split word)
            assert piece == tokenizer.tokenize(" " + word)[0] and piece.startswith("Ġ")


def test_sentencepiece_tokenizers_take_words_as_they_are(tokenizer):
    assert words_need_spaces(tokenizer) is False


@pytest.mark.parametrize("family", ["seq2seq_encoder", "decoder"])
def test_mlm_is_refused_by_families_without_a_masked_lm_head(family, backbone_dirs):
    backbone_dir = backbone_dirs[family]
    with pytest.raises(InputError, match=f"a {family} backbone has no masked-LM head"):
        load_mlm_head(backbone_dir, load_encoder(backbone_dir))


def test_qlora_without_bitsandbytes_is_named_before_loading_anything(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_bitsandbytes(name, *args, **kwargs):
        if name == "bitsandbytes":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_bitsandbytes)
    with pytest.raises(InputError, match="qlora needs the bitsandbytes package"):
        adapters.check_available(Method(name="qlora"), torch.device("cpu"))
    adapters.check_available(Method(name="lora"), torch.device("cpu"))  # no 4-bit base, no need


def test_an_unknown_method_is_named():
    with pytest.raises(InputError, match="method.name: 'dora' is not one of 'full', 'lora', 'qlora'"):
        Method.from_settings({"name": "dora"})


def test_a_method_setting_training_does_not_know_is_named_not_ignored():
    """Ignored, it would train with the default in its place (`targets` for `target_modules`:
    LoRA on the family's attention projections instead of the modules named)."""
    with pytest.raises(InputError, match="unknown settings key 'targets' \\(did you mean 'target_modules'\\?\\)"):
        Method.from_settings({"name": "lora", "targets": ["query"]})
    method = Method.from_settings({"name": "lora", "target_modules": ["query", "value"]})
    assert method.target_modules == ("query", "value") and method.rank == Method().rank


def _perturb(model) -> None:
    """Nonzero LoRA B matrices and heads different from a fresh init: a reload that dropped
    either would change the predictions."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * 0.3)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("task_name", ["xnli", "mewslix"])
def test_a_lora_target_model_reloads_to_identical_predictions_heads_included(
    family, task_name, backbone_dirs, demo_data, tmp_path
):
    backbone_dir = backbone_dirs[family]
    task = get_task(task_name)
    model = _model(backbone_dir, task_name)
    method = Method(name="lora", precision="fp32", rank=4, alpha=8, dropout=0.0)  # the fp32 model _model built
    peft_model = adapters.attach(model, method, {task_name: (task.format, task.num_labels)})
    trained = adapters.inner(peft_model)
    _perturb(trained)
    trainable = {n for n, p in trained.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trainable) and any(n.startswith(f"heads.{task_name}") for n in trainable)
    assert not any("embed" in n or "word_embeddings" in n for n in trainable)  # the base stays frozen
    tokenizer = load_tokenizer(backbone_dir)
    out = tmp_path / "target"
    out.mkdir()
    adapters.save_adapter_phase(
        peft_model, tokenizer, out, backbone_dir, {task_name: (task.format, task.num_labels)}, method, family
    )
    # no copy of the base: only the adapter's weights are written
    weights = [*out.rglob("*.safetensors"), *out.rglob("*.bin")]
    assert [f.relative_to(out).as_posix() for f in weights] == ["adapter/adapter_model.safetensors"]
    base_bytes = sum(f.stat().st_size for f in Path(backbone_dir).glob("*.safetensors"))
    assert weights[0].stat().st_size < base_bytes
    reloaded, _ = _load_target_model(task, out, torch.device("cpu"))
    rows, dev = ROWS[task_name], torch.device("cpu")
    encoded = encode(task, tokenizer, rows, OPTS, train=False)
    batch = collate(encoded.features.take(range(len(encoded.features))), task.format, tokenizer.pad_token_id)
    batch = {k: batch[k] for k in ("input_ids", "attention_mask")}
    trained.eval()
    reloaded.eval()
    with torch.no_grad():
        before, _ = forward(trained, task.format, task_name, batch)
        after, _ = forward(reloaded, task.format, task_name, batch)
        torch.testing.assert_close(after, before, rtol=0, atol=0)
        # the check can fail: the same adapter with its heads left fresh predicts otherwise
        fresh = _model(backbone_dir, task_name, seed=9)
        fresh.eval()
        assert not torch.allclose(forward(fresh, task.format, task_name, batch)[0], before)
    assert json.loads((out / "xstilts_backbone.json").read_text())["base"] == str(backbone_dir)
    del dev


# What these short runs change of a phase's defaults (conftest.phase_settings).
PHASE = {
    "dropout": 0.0,
    "dev_examples": 20,
    "eval_batch_size": 16,
    "eval_every": 3,
    "learning_rate": 5e-3,
    "max_micro_batch": 8,
    "multitask_epochs": 1,
    "warmup_ratio": 0.0,
    "max_steps": 6,
}


CHAINS = [
    ("encoder", "lora", "bf16"),
    ("decoder", "lora", "bf16"),
    ("encoder", "qlora", "fp32"),
    ("decoder", "qlora", "bf16"),
]


@pytest.mark.parametrize("family,method_name,precision", CHAINS)
def test_adapter_intermediate_then_target_chains_adapters_without_copying_the_base(
    family, method_name, precision, backbone_dirs, demo_data, tmp_path
):
    """mnli with LoRA or QLoRA, then xnli from base + the mnli adapter (merged in memory for
    LoRA, stacked frozen on the 4-bit base for QLoRA) with a fresh adapter: the target
    directory names the chain and how it is applied, evaluation rebuilds it, and the reloaded
    model scores the selection subset exactly as training's best step did."""
    from workflow_scripts.evaluation.evaluate import score_rows

    backbone_dir = backbone_dirs[family]
    method = {"name": method_name, "precision": precision, "rank": 4, "alpha": 8, "dropout": 0.0}
    mnli = str(demo_data["mnli.train"])
    inter = train_phase(
        "intermediate",
        backbone_dir,
        {"mnli": {"train": mnli, "dev": mnli}},
        phase_settings(
            {"mnli": {"batch_size": 8, "epochs": 1, "max_length": 48, "select_language": "en"}},
            **PHASE,
            method=method,
            language="en",
        ),
        seed=1,
        threads=1,
        output=tmp_path / "inter",
    )
    assert inter["backbone"]["trainable_parameters"] < inter["backbone"]["parameters"] / 2
    xnli = str(demo_data["xnli.dev"])
    data = {
        "xnli": {
            "train": [{"path": mnli, "languages": ["en"], "kind": "english"}],
            "dev": [{"path": xnli, "languages": ["en"], "kind": "english"}],
        }
    }
    target = train_phase(
        "target",
        tmp_path / "inter",
        data,
        phase_settings({"xnli": {"batch_size": 8, "epochs": 1, "max_length": 48}}, **PHASE, method=method),
        seed=1,
        threads=1,
        output=tmp_path / "target",
    )
    manifest = json.loads((tmp_path / "target" / "xstilts_backbone.json").read_text())
    assert manifest["base"] == str(backbone_dir) and manifest["merged"] == [str(tmp_path / "inter")]
    assert manifest["lineage_adapters"] == adapters.LINEAGE_ADAPTERS[method_name]
    record = target["backbone"]["precision"]
    assert record["precision"] == precision and record["trained_weights"] == "float32"
    assert not list((tmp_path / "target").glob("model*.safetensors"))
    # the intermediate adapter changed the backbone the target phase started from
    ids = load_tokenizer(backbone_dir)(TEXTS[:2], return_tensors="pt", padding=True)
    chained = adapters.load_backbone(tmp_path / "inter", Method(**method)).eval()
    plain = adapters.load_backbone(backbone_dir, Method(**method)).eval()
    at = next(chained.parameters()).device  # a 4-bit base is put on the GPU where there is one
    with torch.no_grad(), Precision(precision).autocast(at):
        after, before = (m(**ids.to(at)).last_hidden_state.float() for m in (chained, plain))
    assert not torch.allclose(after, before)
    task = get_task("xnli")
    model, tokenizer = _load_target_model(task, tmp_path / "target", device())  # where training scored it
    dev_rows = [r for r in read_table(xnli, "classification").to_pylist() if r["lang"] == "en"][: PHASE["dev_examples"]]
    opts = ScoringOptions(max_length=48, eval_batch_size=16, precision=precision)
    rescored = score_rows(model, task, tokenizer, dev_rows, opts, device())
    assert rescored["accuracy"] == target["best"]["scores"]["xnli"]["accuracy"]
    if method_name == "qlora":  # the base stayed 4-bit: no weight of it can take a gradient
        assert any(p.dtype == torch.uint8 for p in model.encoder.parameters())


def test_a_stacked_qlora_adapter_computes_what_peft_computed_with_it(backbone_dirs, tmp_path):
    """The NF4 base with a saved adapter stacked on it (frozen, unmerged) gives the hidden
    states of peft's own LoRA model with that adapter, to float rounding."""

    backbone_dir = backbone_dirs["decoder"]
    method = Method(name="qlora", precision="fp32", rank=4, alpha=8, dropout=0.0)
    base = adapters.load_backbone(backbone_dir, method)
    model = MultiHeadModel(base, {"nli": make_head("classification", base.config.hidden_size, 3, 0.0, 0.02)}, "decoder")
    peft_model = adapters.attach(model, method, {"nli": ("classification", 3)})
    torch.manual_seed(0)
    for name, parameter in peft_model.named_parameters():
        if "lora_B" in name:  # peft starts B at zero: a stacked zero update would prove nothing
            torch.nn.init.normal_(parameter, std=0.5)
    adapters.save_adapter_phase(
        peft_model,
        load_tokenizer(backbone_dir),
        tmp_path,
        backbone_dir,
        {"nli": ("classification", 3)},
        method,
        "decoder",
    )
    ids = load_tokenizer(backbone_dir)(TEXTS[:3], return_tensors="pt", padding=True).to(next(base.parameters()).device)
    peft_model.eval()
    with torch.no_grad():
        expected = adapters.inner(peft_model).encoder(**ids).last_hidden_state
        stacked = adapters.load_backbone(tmp_path, method).eval()
        assert sum(1 for name, _ in stacked.named_modules() if name.endswith("xstilts_stacked_0")) > 0
        got = stacked(**ids).last_hidden_state
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["encoder", "decoder"])
def test_activation_checkpointing_gives_the_same_gradients(family, backbone_dirs):
    """Recomputing the blocks' activations in the backward pass (for backbones whose
    activations do not fit) changes memory, not the gradients."""
    task = get_task("xnli")
    tokenizer = load_tokenizer(backbone_dirs[family])
    encoded = encode(task, tokenizer, ROWS["xnli"], OPTS, train=True)
    batch = collate(encoded.features.take(range(4)), task.format, tokenizer.pad_token_id)
    grads = []
    for checkpointing in (False, True):
        model = _model(backbone_dirs[family], "xnli")
        if checkpointing:
            model.encoder.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            assert model.encoder.is_activation_checkpointing
        model.train()
        torch.manual_seed(5)  # the same dropout masks in both runs
        forward(model, task.format, "xnli", batch)[1].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "family,config_class,model_class",
    [
        ("encoder", "XLMRobertaConfig", "XLMRobertaModel"),
        ("encoder", "BertConfig", "BertModel"),
        ("encoder", "DebertaV2Config", "DebertaV2Model"),
        ("encoder", "RemBertConfig", "RemBertModel"),
        ("seq2seq_encoder", "MT5Config", "MT5EncoderModel"),
        ("decoder", "LlamaConfig", "LlamaModel"),
        ("decoder", "BloomConfig", "BloomModel"),
        ("decoder", "Qwen2Config", "Qwen2Model"),
    ],
)
def test_lora_targets_hit_every_attention_projection_of_every_layer(family, config_class, model_class):
    """peft matches target names by suffix: a family's names that an architecture spells
    otherwise would leave LoRA on some projections only, silently."""
    import transformers

    from workflow_scripts.models.backbones import get_family

    sizes = {
        "vocab_size": 64,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "d_model": 16,
        "d_kv": 8,
        "d_ff": 32,
        "num_layers": 2,
        "num_heads": 2,
        "n_layer": 2,
        "n_head": 2,
        "input_embedding_size": 16,
    }
    config_type = getattr(transformers, config_class)
    accepted = {k: v for k, v in sizes.items() if hasattr(config_type(), k) or k in ("d_kv", "n_layer", "n_head")}
    config = config_type(**accepted)
    model = getattr(transformers, model_class)(config)
    family_ = get_family(family)
    layers = len(family_.blocks(model))
    names = [n for n, _ in model.named_modules()]
    targets = family_.lora_targets(config)
    for target in targets:
        hits = [n for n in names if n == target or n.endswith("." + target)]
        assert len(hits) == layers, (target, hits)
    # q, k, v and o are all covered (BLOOM fuses q, k and v into one layer)
    assert len(targets) * layers >= (2 if config.model_type == "bloom" else 4) * layers


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_fused_adapter_sum_gives_peft_forward_and_gradients(family, dropout, backbone_dirs, demo_data):
    """adapters.fuse_adapter_sums adds each adapter's output in place; the same model with
    peft's own forward (the class method, which the fused one bypasses) must give the same
    logits and gradients, dropout masks drawn from the same RNG state included."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    method = Method.from_settings({"name": "lora", "rank": 4, "alpha": 8, "dropout": dropout})
    model = _model(backbone_dirs[family], "xnli")
    peft_model = adapters.attach(model, method, {"xnli": ("classification", 3)})
    fused = [m for m in peft_model.modules() if type(m) is LoraLinear and "forward" in vars(m)]
    assert fused, "no LoRA layer got the fused forward"
    _perturb(peft_model)
    inner = adapters.inner(peft_model)
    # float64: the two forwards add the same terms in a different order, and float32 rounding
    # of that (a few 1e-6 on a gradient entry, CPU-dependent) would hide nothing but flake
    inner.double()
    inner.train()
    tokenizer = load_tokenizer(backbone_dirs[family])
    encoded = encode(get_task("xnli"), tokenizer, _rows("xnli", demo_data), OPTS, train=True)
    batch = collate(
        encoded.features.take(range(min(4, len(encoded.features)))), "classification", tokenizer.pad_token_id
    )

    def run():
        inner.zero_grad()
        torch.manual_seed(11)
        logits, loss = forward(inner, "classification", "xnli", batch)
        loss.backward()
        return logits.detach(), {n: p.grad.clone() for n, p in inner.named_parameters() if p.requires_grad}

    fused_logits, fused_grads = run()
    for m in fused:
        del m.forward  # back to peft's LoraLinear.forward
    peft_logits, peft_grads = run()
    torch.testing.assert_close(fused_logits, peft_logits, rtol=1e-10, atol=1e-12)
    for name in peft_grads:
        torch.testing.assert_close(fused_grads[name], peft_grads[name], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("fmt", ["visual_classification", "visual_retrieval"])
def test_an_image_task_trains_with_lora_on_every_family_and_its_adapter_merges_without_the_projector(
    family, fmt, backbone_dirs, tmp_path
):
    """The projector and the feature bank ride on the image task's head: LoRA trains the
    projector through peft's copy of the head, the saved adapter holds the projector but not
    the bank, and the next phase merges the adapter into a text-only backbone."""
    from workflow_scripts.data.features import collate
    from workflow_scripts.multimodal.prefix import VisualClassificationHead

    backbone_dir = backbone_dirs[family]
    encoder = load_encoder(backbone_dir)
    hidden = encoder.config.hidden_size
    torch.manual_seed(0)
    classifier = (
        torch.nn.Linear(hidden, hidden)
        if fmt == "visual_retrieval"
        else make_head("classification", hidden, 3, 0.0, 0.02)
    )
    head = VisualClassificationHead(torch.randn(5, 4, 12), hidden, classifier, 0.02)
    model = MultiHeadModel(encoder, {"image_task": head}, family_of(backbone_dir).name)
    method = Method.from_settings({"name": "lora", "rank": 4, "alpha": 8, "dropout": 0.0})
    peft_model = adapters.attach(model, method, {"image_task": (fmt, 3)})
    inner = adapters.inner(peft_model)
    tokenizer = load_tokenizer(backbone_dir)
    ids = tokenizer(["There is a red ball.", "The cup is small."])["input_ids"]
    batch = collate(
        [{"input_ids": i, "image_index": [k], "labels": k} for k, i in enumerate(ids)], fmt, tokenizer.pad_token_id
    )
    if fmt == "visual_retrieval":
        batch.pop("labels")
    _, loss = forward(inner, fmt, "image_task", batch)
    loss.backward()
    grads = {n for n, p in inner.named_parameters() if p.grad is not None}
    assert any("projector" in n for n in grads) and any("lora_" in n for n in grads)
    torch.optim.SGD([p for p in inner.parameters() if p.requires_grad], lr=1.0).step()  # LoRA's B leaves 0
    out = tmp_path / "inter"
    out.mkdir()
    adapters.save_adapter_phase(
        peft_model, tokenizer, out, backbone_dir, {"image_task": (fmt, 3)}, method, family_of(backbone_dir).name
    )
    from safetensors import safe_open

    with safe_open(str(out / "adapter/adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert any("projector" in k for k in keys) and not any("bank" in k for k in keys)
    merged = adapters.load_backbone(out, method)
    assert not any("projector" in n or "heads" in n for n, _ in merged.named_parameters())
    assert any(
        not torch.equal(a, b)
        for a, b in zip(merged.state_dict().values(), load_encoder(backbone_dir).state_dict().values())
    )
