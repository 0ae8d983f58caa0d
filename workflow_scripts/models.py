"""Models: fetch or build the encoder and the MarianMT translators; task heads.

Real mode snapshots Hub repos (pinned revision) into local directories, so training jobs
only ever load local directories and run on offline compute nodes. Demo mode builds the
same architectures tiny and randomly initialised, with tokenizers trained on the demo
text: an XLM-R encoder with a SentencePiece-unigram vocabulary and a Marian model with
SentencePiece source/target models, both loaded afterwards exactly like the real ones.

CLI: ``python -m workflow_scripts.models encoder|translator --settings JSON --output DIR
[--text PARQUET ...]``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .common import LOG, InputError, atomic_path, load_settings, seed_everything, setup_logging
from .tasks import CLASSIFICATION, MLM, MULTIPLE_CHOICE, SPAN, TAGGING

# Only what loading needs: skips TF/Flax/ONNX duplicates of multi-GB checkpoints.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.spm", "*.txt", "sentencepiece*"]
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def fetch_hub_model(hub_id: str, revision: str, output: Path) -> None:
    from huggingface_hub import HfApi, snapshot_download

    sha = HfApi().model_info(hub_id, revision=revision).sha  # pin the commit actually fetched
    with atomic_path(output) as tmp:
        snapshot_download(repo_id=hub_id, revision=sha, local_dir=tmp, allow_patterns=HUB_PATTERNS)
        source = {"hub_id": hub_id, "revision": revision, "resolved_sha": sha}
        (tmp / "xstilts_source.json").write_text(json.dumps(source) + "\n")


def iter_texts(paths: Iterable[str | Path]) -> Iterator[str]:
    """Every piece of text in canonical data files: strings and lists of strings."""
    import pyarrow as pa

    from .data import read_table

    for path in paths:
        table = read_table(path)
        for name in table.column_names:
            if name in ("id", "lang"):
                continue
            col = table.column(name)
            if pa.types.is_string(col.type):
                yield from (s for s in col.to_pylist() if s)
            elif pa.types.is_list(col.type) and pa.types.is_string(col.type.value_type):
                for items in col.to_pylist():
                    if items:
                        yield " ".join(items)


def train_unigram_vocab(texts: list[str], vocab_size: int) -> list[tuple[str, float]]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(texts, trainer)
    vocab = json.loads(tok.to_str())["model"]["vocab"]
    if [p for p, _ in vocab[:len(SPECIAL_TOKENS)]] != SPECIAL_TOKENS:
        raise RuntimeError("unigram trainer did not put the special tokens first")
    return [(piece, float(score)) for piece, score in vocab]


def build_demo_encoder(settings: dict[str, Any], text_files: list[str], output: Path) -> None:
    """A tiny random-init XLM-R (with its MLM head) and a unigram tokenizer on the demo text."""
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaTokenizer

    seed_everything(int(settings.get("seed", 0)))
    texts = list(iter_texts(text_files))
    if not texts:
        raise InputError(f"no text to train the demo tokenizer in {text_files}")
    vocab = train_unigram_vocab(texts, int(settings["vocab_size"]))
    tokenizer = XLMRobertaTokenizer(vocab=vocab)
    tokenizer.model_max_length = int(settings["max_position_embeddings"]) - 2
    config = XLMRobertaConfig(
        vocab_size=len(vocab), hidden_size=settings["hidden_size"],
        num_hidden_layers=settings["num_hidden_layers"], num_attention_heads=settings["num_attention_heads"],
        intermediate_size=settings["intermediate_size"],
        max_position_embeddings=settings["max_position_embeddings"], type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id)
    model = XLMRobertaForMaskedLM(config)
    with atomic_path(output) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    LOG.info("demo encoder: vocab %d, %d parameters -> %s", len(vocab), model.num_parameters(), output)


def build_demo_translator(settings: dict[str, Any], text_files: list[str], lang: str, output: Path,
                          source_lang: str = "en") -> None:
    """A tiny random-init MarianMT model with SentencePiece models trained on the demo text."""
    import io

    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    seed_everything(int(settings.get("seed", 0)))
    texts = list(iter_texts(text_files))
    if not texts:
        raise InputError(f"no text to train the demo translator's vocabulary in {text_files}")
    with atomic_path(output) as tmp:
        tmp.mkdir()
        pieces: dict[str, None] = {}
        for side in ("source", "target"):
            buf = io.BytesIO()
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts), model_writer=buf, vocab_size=int(settings["vocab_size"]),
                model_type="unigram", character_coverage=1.0, num_threads=1,
                bos_id=-1, eos_id=2, unk_id=1, pad_id=-1, hard_vocab_limit=False, minloglevel=2)
            (tmp / f"{side}.spm").write_bytes(buf.getvalue())
            proc = spm.SentencePieceProcessor(model_proto=buf.getvalue())
            pieces.update((proc.id_to_piece(i), None) for i in range(proc.get_piece_size()))
        # Marian layout: </s> = 0, <unk> = 1, <pad> last (also the decoder start token).
        ordered = ["</s>", "<unk>"] + [p for p in pieces if p not in ("</s>", "<unk>", "<s>", "<pad>")] + ["<pad>"]
        vocab = {p: i for i, p in enumerate(ordered)}
        (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        tokenizer = MarianTokenizer(source_spm=str(tmp / "source.spm"), target_spm=str(tmp / "target.spm"),
                                    vocab=str(tmp / "vocab.json"), source_lang=source_lang, target_lang=lang,
                                    model_max_length=int(settings["max_position_embeddings"]))
        pad = vocab["<pad>"]
        config = MarianConfig(
            vocab_size=len(vocab), d_model=settings["d_model"], encoder_layers=settings["layers"],
            decoder_layers=settings["layers"], encoder_attention_heads=settings["heads"],
            decoder_attention_heads=settings["heads"], encoder_ffn_dim=settings["ffn_dim"],
            decoder_ffn_dim=settings["ffn_dim"], max_position_embeddings=settings["max_position_embeddings"],
            pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
            scale_embedding=True, share_encoder_decoder_embeddings=True)
        model = MarianMTModel(config)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    LOG.info("demo translator %s-%s: vocab %d -> %s", source_lang, lang, len(vocab), output)


# ---------------------------------------------------------------------------------------
# Encoder + heads used by training and evaluation.


def load_tokenizer(model_dir: str | Path):
    from transformers import AutoTokenizer

    _require_model_dir(model_dir)
    return AutoTokenizer.from_pretrained(str(model_dir))


def _require_model_dir(model_dir: str | Path) -> None:
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise InputError(f"model directory {path} has no config.json (missing or incomplete)")


def load_encoder(model_dir: str | Path):
    """The bare encoder (no pooler, no LM head) from a local directory."""
    from transformers import AutoModel

    _require_model_dir(model_dir)
    # SDPA: PyTorch's fused attention kernels (flash / memory-efficient on GPUs).
    return AutoModel.from_pretrained(str(model_dir), add_pooling_layer=False, attn_implementation="sdpa")


def load_mlm_head(model_dir: str | Path):
    """The pretrained LM head, so MLM continues the pretraining objective rather than restarting it."""
    from transformers import AutoModelForMaskedLM

    mlm = AutoModelForMaskedLM.from_pretrained(str(model_dir))
    return mlm.lm_head if hasattr(mlm, "lm_head") else mlm.get_output_embeddings()


def make_head(fmt: str, hidden: int, num_labels: int, dropout: float, init_std: float):
    """A freshly initialised output head (heads never carry over between phases)."""
    if fmt == CLASSIFICATION:
        head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.Tanh(),
                             nn.Dropout(dropout), nn.Linear(hidden, num_labels))
    elif fmt == MULTIPLE_CHOICE:
        head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.Tanh(),
                             nn.Dropout(dropout), nn.Linear(hidden, 1))
    elif fmt == SPAN:
        head = nn.Linear(hidden, 2)
    elif fmt == TAGGING:
        head = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, num_labels))
    else:
        raise ValueError(f"no fresh head for format {fmt!r}")
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=init_std)
            nn.init.zeros_(module.bias)
    return head.to(torch.float32)


class MultiHeadModel(nn.Module):
    """One shared encoder, one output head per task of the phase."""

    def __init__(self, encoder: nn.Module, heads: dict[str, nn.Module]) -> None:
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict(heads)


def forward(model, fmt: str, task: str, batch: dict[str, Any]):
    """Logits for one batch of one task. Returns (logits, loss or None)."""
    import torch.nn.functional as F

    head = model.heads[task]
    if fmt == MULTIPLE_CHOICE:
        n_choices = batch["input_ids"].shape[1]
        flat = {k: batch[k].flatten(0, 1) for k in ("input_ids", "attention_mask")}
        hidden = model.encoder(**flat).last_hidden_state[:, 0]
        logits = head(hidden).view(-1, n_choices)
        loss = F.cross_entropy(logits, batch["labels"]) if "labels" in batch else None
        return logits, loss
    hidden = model.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    if fmt == CLASSIFICATION:
        logits = head(hidden[:, 0])
        loss = F.cross_entropy(logits, batch["labels"]) if "labels" in batch else None
    elif fmt == SPAN:
        logits = head(hidden)  # (batch, length, 2)
        loss = None
        if "start_positions" in batch:
            mask = batch["attention_mask"] == 0
            start = logits[..., 0].masked_fill(mask, -1e4)
            end = logits[..., 1].masked_fill(mask, -1e4)
            loss = (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2
    elif fmt in (TAGGING, MLM):
        logits = head(hidden)
        loss = None
        if "labels" in batch:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), ignore_index=-100)
    else:
        raise ValueError(f"unknown format {fmt!r}")
    return logits, loss


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Fetch (hub) or build (demo) the encoder or a translator.")
    ap.add_argument("kind", choices=["encoder", "translator"])
    ap.add_argument("--settings", required=True)
    ap.add_argument("--output", required=True, type=Path)
    ap.add_argument("--lang", help="target language of the translator")
    ap.add_argument("--from-lang", default="en", help="source language of the translator (default en)")
    ap.add_argument("--text", nargs="*", default=[], help="canonical data files to train demo vocabularies on")
    args = ap.parse_args(argv)
    try:
        settings = load_settings(args.settings)
        if settings["source"] == "hub":
            fetch_hub_model(settings["hub_id"], settings["revision"], args.output)
        elif args.kind == "encoder":
            build_demo_encoder(settings["demo"], args.text, args.output)
        else:
            if not args.lang:
                raise InputError("--lang is required for a translator")
            build_demo_translator(settings["demo"], args.text, args.lang, args.output, args.from_lang)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
