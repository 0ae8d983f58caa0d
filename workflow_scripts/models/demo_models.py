"""The embedded demo's own models: a small XLM-R and small MarianMT translators, built and
trained on the demo text, then saved in the layout of their Hub counterparts.

The paper preset downloads xlm-roberta-large and OPUS-MT. Offline, the demo stands in for
them with models that do, in miniature, what the real ones were trained to do:

- the encoder gets a unigram tokenizer trained on the demo data and a short pre-training on
  the demo's parallel corpora (``pretrain_encoder``: MLM, TLM and a cross-lingual
  contrastive loss), so that it learns, and aligns its languages, before any task;
- each translator gets SentencePiece models and is trained on the parallel corpus of its
  direction, whose pairs include contexts with one span wrapped in the answer markers of
  span re-alignment (workflow_scripts/translation/translate.py), so that marker recovery, fuzzy
  matching and drops all occur.

Afterwards both load exactly like the real models (AutoTokenizer, MarianMTModel, ...).
Parallel corpora use the OPUS-100 row schema: ``{"translation": {"en": ..., "de": ...}}``.
"""

from __future__ import annotations

import io
import json
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path, configure_torch, seed_everything
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.model_settings import (
    DecoderPretraining,
    DemoDecoder,
    DemoEncoder,
    DemoTranslator,
    EncoderPretraining,
    TranslatorTraining,
)

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
# What the shared training loop reads of a pre-training's or a translator training's settings.
Schedule = EncoderPretraining | DecoderPretraining | TranslatorTraining
_MARKER_RE = re.compile(r"</?b>")


def iter_texts(paths: Iterable[str | Path]) -> Iterator[str]:
    """Every piece of text in canonical data files: strings and lists of strings."""
    import pyarrow as pa

    from workflow_scripts.data.prepare import read_table

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


def read_parallel(path: str | Path, source: str, target: str) -> list[tuple[str, str]]:
    """(source, target) sentence pairs of an OPUS-100-style JSON-lines file. A row without
    text on either side is skipped and counted; a file without any pair is an error."""
    pairs, skipped = [], 0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)["translation"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise InputError(
                    f"{path}:{line_no}: not a parallel-corpus row with a 'translation' object ({err})"
                ) from None
            src, tgt = row.get(source), row.get(target)
            if not (isinstance(src, str) and src.strip() and isinstance(tgt, str) and tgt.strip()):
                skipped += 1
                continue
            pairs.append((src, tgt))
    if skipped:
        LOG.warning("%s: skipped %d rows without both %s and %s text", path, skipped, source, target)
    if not pairs:
        raise InputError(f"{path}: no {source}-{target} sentence pairs")
    return pairs


_PAIR_NAME = re.compile(r"^([a-z]{2,3})-([a-z]{2,3})\.jsonl$")


def corpus_languages(path: str | Path) -> tuple[str, str]:
    """The two languages of a parallel corpus named ``<l1>-<l2>.jsonl``."""
    found = _PAIR_NAME.match(Path(path).name)
    if not found:
        raise InputError(f"{path}: a parallel corpus is named <lang>-<lang>.jsonl (e.g. en-de.jsonl)")
    return found[1], found[2]


def train_unigram_vocab(texts: list[str], vocab_size: int) -> list[tuple[str, float]]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    vocab = json.loads(tok.to_str())["model"]["vocab"]
    if [p for p, _ in vocab[: len(SPECIAL_TOKENS)]] != SPECIAL_TOKENS:
        raise RuntimeError("unigram trainer did not put the special tokens first")
    return canonical_vocab([(piece, float(score)) for piece, score in vocab], texts)


# The unigram trainer adds each character it must keep but did not learn at the lowest score
# plus k times this step, k in the order of a hash set.
REQUIRED_CHAR_STEP = 1e-4
SCORE_DECIMALS = 6


def canonical_vocab(vocab: list[tuple[str, float]], texts: Iterable[str]) -> list[tuple[str, float]]:
    """The trainer's vocabulary in a form that depends on the texts alone.

    Why: tokenizers' unigram trainer iterates hash maps and sets seeded anew in every process.
    The same texts then give scores that differ in the last bits, tied pieces (digits,
    numbers) in another order, and the characters it had to add (``REQUIRED_CHAR_STEP``)
    with their scores shuffled among them. A piece's id is its place in the list, and the
    demo model's embedding rows are initialised by id, so each process built another model.
    Here: the added characters take the same scores, the most frequent character the
    highest; scores are rounded to ``SCORE_DECIMALS`` (far above the float noise); the
    pieces after the special tokens are ordered by score, then by text.
    """
    import unicodedata
    from collections import Counter

    head, body = vocab[: len(SPECIAL_TOKENS)], vocab[len(SPECIAL_TOKENS) :]
    if not body:
        return list(vocab)
    low = min(score for _, score in body)
    added = [
        piece
        for piece, score in body
        if len(piece) == 1
        and abs((score - low) / REQUIRED_CHAR_STEP - round((score - low) / REQUIRED_CHAR_STEP)) < 1e-6
    ]
    scores = dict(body)
    if len(added) > 1:
        counts = Counter(ch for text in texts for ch in unicodedata.normalize("NFKC", text))
        values = sorted((scores[p] for p in added), reverse=True)
        for piece, value in zip(sorted(added, key=lambda p: (-counts[p], p)), values):
            scores[piece] = value
    rounded = sorted(
        ((piece, round(score, SCORE_DECIMALS)) for piece, score in scores.items()), key=lambda item: (-item[1], item[0])
    )
    return list(head) + rounded


# ---------------------------------------------------------------------------------------
# A small seeded training loop shared by both pre-trainings.


def _optimise(
    model, batches: Iterator[Any], loss_of: Callable[[Any], Any], opts: Schedule, what: str
) -> dict[str, Any]:
    """AdamW with linear warm-up and decay for ``opts.steps`` steps; returns the loss
    curve (mean loss per tenth of the run), which the build log and metadata keep."""
    import torch

    steps = opts.steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=opts.learning_rate, weight_decay=0.01)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))
    )
    model.train()
    curve, window, started = [], [], time.time()
    for step in progress(range(steps), desc=what, unit="step"):
        loss = loss_of(next(batches))
        if not torch.isfinite(loss):
            raise RuntimeError(f"{what}: non-finite loss at step {step}")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        window.append(float(loss.detach()))
        if len(window) == max(1, steps // 10) or step == steps - 1:
            curve.append(round(sum(window) / len(window), 4))
            LOG.info("%s: step %d/%d, loss %.3f", what, step + 1, steps, curve[-1])
            window = []
    model.eval()
    return {"steps": steps, "loss_curve": curve, "seconds": round(time.time() - started, 1)}


def _batches(n: int, batch_size: int, rng: random.Random) -> Iterator[list[int]]:
    """Endless shuffled passes over ``range(n)`` in batches."""
    while True:
        order = list(range(n))
        rng.shuffle(order)
        for k in range(0, n - batch_size + 1 if n >= batch_size else 1, batch_size):
            yield order[k : k + batch_size]


# ---------------------------------------------------------------------------------------
# Encoder.


def pretraining_examples(corpora: Sequence[str | Path]) -> tuple[list[str], list[tuple[str, str]]]:
    """Sentences of every language (once each) and the sentence pairs, markers removed."""
    sentences: dict[str, None] = {}
    pairs: list[tuple[str, str]] = []
    for path in corpora:
        for src, tgt in read_parallel(path, *corpus_languages(path)):
            src, tgt = _MARKER_RE.sub("", src), _MARKER_RE.sub("", tgt)
            sentences.update(((src, None), (tgt, None)))
            pairs.append((src, tgt))
    return list(sentences), pairs


def _padded(rows: Sequence[Sequence[int]], value: int):
    import torch

    out = torch.full((len(rows), max(len(r) for r in rows)), value)
    for k, r in enumerate(rows):
        out[k, : len(r)] = torch.tensor(r)
    return out


def pretrain_encoder(
    model, tokenizer, corpora: Sequence[str | Path], opts: EncoderPretraining, seed: int
) -> dict[str, Any]:
    """InfoXLM-style pre-training (Chi et al. 2021), seeded: masked LM on single sentences
    and on translation pairs (both sides in one input, in random order: TLM), plus a
    cross-lingual contrastive loss that pulls the mean-pooled states of a sentence and its
    translation together against the batch's other translations. At demo scale MLM and TLM
    alone do not align languages within minutes; the contrastive term does, and it is what
    retrieval (mean-pooled states) and zero-shot transfer need from pre-training."""
    import torch
    import torch.nn.functional as F

    from workflow_scripts.data.features import mask_tokens
    from workflow_scripts.models.backbones.family import mean_pooled

    sentences, pairs = pretraining_examples(corpora)
    rng = random.Random(seed)
    max_length, batch_size = opts.max_length, opts.batch_size
    encoded = tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"] if sentences else []
    # Every side of a pair is one of the sentences: the contrastive batches reuse its encoding.
    position = {sentence: k for k, sentence in enumerate(sentences)}
    sides = [[encoded[position[pair[k]]] for pair in pairs] for k in (0, 1)]
    swapped = [(b, a) if rng.random() < 0.5 else (a, b) for a, b in pairs]
    if swapped:
        encoded += tokenizer([a for a, _ in swapped], [b for _, b in swapped], truncation=True, max_length=max_length)[
            "input_ids"
        ]
    generator = torch.Generator().manual_seed(seed)
    special = [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    pad = tokenizer.pad_token_id
    temperature, contrast = opts.temperature, bool(pairs) and opts.contrastive_weight > 0

    def batches() -> Iterator[tuple[dict[str, Any], list[Any]]]:
        pair_batches = _batches(len(pairs), batch_size, rng) if contrast else None
        for ids in _batches(len(encoded), batch_size, rng):
            input_ids = _padded([encoded[i] for i in ids], pad)
            attention_mask = (input_ids != pad).long()
            masked, labels = mask_tokens(
                input_ids,
                attention_mask,
                tokenizer.mask_token_id,
                len(tokenizer),
                special,
                generator,
                opts.mlm_probability,
            )
            mlm = {"input_ids": masked, "attention_mask": attention_mask, "labels": labels}
            chosen = next(pair_batches) if pair_batches else []
            yield mlm, [_padded([side[i] for i in chosen], pad) for side in sides] if chosen else []

    def embed(input_ids):
        attention_mask = (input_ids != pad).long()
        hidden = model.roberta(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return F.normalize(mean_pooled(hidden, attention_mask), dim=-1)

    def loss_of(batch) -> Any:
        mlm, translation = batch
        loss = model(**mlm).loss
        if translation:
            xlco = translation_contrast(embed(translation[0]), embed(translation[1]), temperature)
            loss = loss + opts.contrastive_weight * xlco
        return loss

    LOG.info("encoder pre-training: %d sentences and %d translation pairs", len(sentences), len(pairs))
    log = _optimise(model, batches(), loss_of, opts, "encoder pre-training (MLM + TLM + contrastive)")
    return {**log, "sentences": len(sentences), "pairs": len(pairs)}


def build_demo_encoder(
    settings: DemoEncoder, text_files: list[str], output: Path, corpora: Sequence[str | Path] = (), threads: int = 1
) -> None:
    """A tiny XLM-R (with its MLM head) and a unigram tokenizer on the demo text; pre-trained
    on ``corpora`` when given and ``settings.pretraining.steps`` > 0."""
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaTokenizer

    configure_torch(threads)
    seed = settings.seed
    seed_everything(seed)
    texts = list(iter_texts(text_files))
    if not texts:
        raise InputError(f"no text to train the demo tokenizer in {text_files}")
    vocab = train_unigram_vocab(texts, settings.vocab_size)
    tokenizer = XLMRobertaTokenizer(vocab=vocab)
    tokenizer.model_max_length = settings.max_position_embeddings - 2
    config = XLMRobertaConfig(
        vocab_size=len(vocab),
        hidden_size=settings.hidden_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=settings.num_attention_heads,
        intermediate_size=settings.intermediate_size,
        max_position_embeddings=settings.max_position_embeddings,
        type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = XLMRobertaForMaskedLM(config)
    _pretrain_and_save(model, tokenizer, pretrain_encoder, settings.pretraining, corpora, seed, output)
    LOG.info("demo encoder: vocab %d, %d parameters -> %s", len(vocab), model.num_parameters(), output)


def _pretrain_and_save(
    model,
    tokenizer,
    pretrain: Callable[..., dict[str, Any]],
    opts: EncoderPretraining | DecoderPretraining,
    corpora: Sequence[str | Path],
    seed: int,
    output: Path,
) -> None:
    """Pre-train a demo backbone on ``corpora`` when its settings ask for steps, then write it
    in its Hub layout with the pre-training log (``xstilts_demo.json``), in one piece."""
    log: dict[str, Any] = {"pretraining": None}
    if corpora and opts.steps > 0:
        log["pretraining"] = pretrain(model, tokenizer, corpora, opts, seed)
    with atomic_path(output) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "xstilts_demo.json").write_text(json.dumps(log, indent=1) + "\n")


# ---------------------------------------------------------------------------------------
# Translators.


def train_translator(
    model, tokenizer, pairs: list[tuple[str, str]], opts: TranslatorTraining, seed: int
) -> dict[str, Any]:
    """Teacher-forced cross-entropy on the corpus pairs, through MarianMTModel's own loss."""

    rng = random.Random(seed)
    max_length = opts.max_length
    sources = tokenizer([s for s, _ in pairs], truncation=True, max_length=max_length)["input_ids"]
    targets = tokenizer(text_target=[t for _, t in pairs], truncation=True, max_length=max_length)["input_ids"]
    pad = tokenizer.pad_token_id

    def batches() -> Iterator[dict[str, Any]]:
        for ids in _batches(len(pairs), opts.batch_size, rng):
            input_ids = _padded([sources[i] for i in ids], pad)
            yield {
                "input_ids": input_ids,
                "attention_mask": (input_ids != pad).long(),
                "labels": _padded([targets[i] for i in ids], -100),
            }

    log = _optimise(model, batches(), lambda batch: model(**batch).loss, opts, "translator training")
    return {**log, "pairs": len(pairs)}


def build_demo_translator(
    settings: DemoTranslator,
    text_files: list[str],
    lang: str,
    output: Path,
    source_lang: str = "en",
    corpus: str | Path | None = None,
    threads: int = 1,
) -> None:
    """A tiny MarianMT model with SentencePiece models trained on the demo text (and the
    corpus); trained on ``corpus`` when given and ``settings.training.steps`` > 0."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    configure_torch(threads)
    seed = settings.seed
    seed_everything(seed)
    texts = list(iter_texts(text_files))
    pairs: list[tuple[str, str]] = []
    if corpus:
        if set(corpus_languages(corpus)) != {source_lang, lang}:
            raise InputError(
                f"{corpus}: a {source_lang}-{lang} translator trains on a parallel corpus"
                f" named {source_lang}-{lang}.jsonl or {lang}-{source_lang}.jsonl"
            )
        pairs = read_parallel(corpus, source_lang, lang)
        texts += [s for pair in pairs for s in pair]
    if not texts:
        raise InputError(f"no text to train the demo translator's vocabulary in {text_files}")
    with atomic_path(output) as tmp:
        tmp.mkdir()
        pieces: dict[str, None] = {}
        for side in ("source", "target"):
            buf = io.BytesIO()
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts),
                model_writer=buf,
                vocab_size=settings.vocab_size,
                model_type="unigram",
                character_coverage=1.0,
                num_threads=1,
                bos_id=-1,
                eos_id=2,
                unk_id=1,
                pad_id=-1,
                hard_vocab_limit=False,
                minloglevel=2,
            )
            (tmp / f"{side}.spm").write_bytes(buf.getvalue())
            proc = spm.SentencePieceProcessor(model_proto=buf.getvalue())
            pieces.update((proc.id_to_piece(i), None) for i in range(proc.get_piece_size()))
        # Marian layout: </s> = 0, <unk> = 1, <pad> last (also the decoder start token).
        ordered = ["</s>", "<unk>"] + [p for p in pieces if p not in ("</s>", "<unk>", "<s>", "<pad>")] + ["<pad>"]
        vocab = {p: i for i, p in enumerate(ordered)}
        (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
        tokenizer = MarianTokenizer(
            source_spm=str(tmp / "source.spm"),
            target_spm=str(tmp / "target.spm"),
            vocab=str(tmp / "vocab.json"),
            source_lang=source_lang,
            target_lang=lang,
            model_max_length=settings.max_position_embeddings,
        )
        pad = vocab["<pad>"]
        config = MarianConfig(
            vocab_size=len(vocab),
            d_model=settings.d_model,
            encoder_layers=settings.layers,
            decoder_layers=settings.layers,
            encoder_attention_heads=settings.heads,
            decoder_attention_heads=settings.heads,
            encoder_ffn_dim=settings.ffn_dim,
            decoder_ffn_dim=settings.ffn_dim,
            max_position_embeddings=settings.max_position_embeddings,
            pad_token_id=pad,
            eos_token_id=0,
            decoder_start_token_id=pad,
            forced_eos_token_id=0,
            scale_embedding=True,
            share_encoder_decoder_embeddings=True,
        )
        model = MarianMTModel(config)
        # As in OPUS-MT, the decoder starts from a zero vector: Marian's <pad> embedding is zero
        # and <pad> is never generated. CTranslate2 relies on it (it drops that row and starts
        # from zeros). The embeddings are tied to the output layer, whose gradient would move
        # the row, so its gradient is zeroed.
        embeddings = model.get_input_embeddings().weight
        with torch.no_grad():
            embeddings[pad].zero_()
        embeddings.register_hook(lambda grad: grad.index_fill(0, torch.tensor([pad]), 0.0))
        model.generation_config.bad_words_ids = [[pad]]
        log: dict[str, Any] = {"training": None}
        if pairs and settings.training.steps > 0:
            log["training"] = train_translator(model, tokenizer, pairs, settings.training, seed)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "xstilts_demo.json").write_text(json.dumps(log, indent=1) + "\n")
    LOG.info("demo translator %s-%s: vocab %d -> %s", source_lang, lang, len(vocab), output)


# ---------------------------------------------------------------------------------------
# Decoder.

# Llama 2's ids for the first three (<unk> 0, <s> 1, </s> 2), then a pad token of its own:
# Llama tokenizers ship none, and padding with </s> would make padding and the end of the
# text one token, which last-token pooling and the LM labels must tell apart.
DECODER_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]


def train_byte_level_bpe(texts: list[str], vocab_size: int):  # -> tokenizers.Tokenizer
    """A byte-level BPE tokenizer (GPT-2 / Llama 3 style) trained on ``texts``, with the
    special tokens first and a template that brackets every input in ``<s> … </s>``.

    Every byte is in the initial alphabet, so nothing tokenises to ``<unk>`` (it is there for
    loaders that expect one). No normaliser: bytes cover any text, and offsets then index the
    raw text.

    Word-split input (``is_split_into_words=True``, the tagging tasks): the backend encodes
    each word on its own. With ``add_prefix_space=False`` a word then gets the pieces of a
    word-start without a space ("bought" -> b, o, ug, ht) where running text has
    "Ġbought", so tagging would see other tokens than every other task. transformers 4's
    GPT-2/RoBERTa fast tokenizers refused such input; transformers 5's generic backend
    (``TokenizersBackend`` = ``PreTrainedTokenizerFast``) accepts it silently, and its
    ``add_prefix_space`` argument is only recorded, not applied to a tokenizer.json.
    So the prefix space is set where it acts: in the ByteLevel pre-tokenizer saved in
    tokenizer.json. Then "Anna bought" and ["Anna", "bought"] give the same ids, and the
    post-processor's ByteLevel step trims the "Ġ" out of the offsets.

    The BPE trainer is deterministic: same texts, same vocabulary and merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=DECODER_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    # "<s> $A </s>": the last token of an input is always </s>, which has attended to all of
    # it (last-token pooling reads it); pairs close each side with </s>, as the decoder's
    # pre-training on translation pairs saw them.
    template = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=True, add_prefix_space=True), template])
    # Drop the prefix space again when decoding, so decode(encode(text)) gives back the text.
    tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return tok


def decoder_tokenizer(backend, model_max_length: int):  # -> transformers.PreTrainedTokenizerFast
    """The transformers tokenizer around a trained backend, as AutoTokenizer will load it."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        # Recorded for readers of tokenizer_config.json; the pre-tokenizer is what applies it.
        add_prefix_space=True,
        padding_side="right",
        model_max_length=model_max_length,
        # Llama has no segment embeddings: nothing would read token type ids.
        model_input_names=["input_ids", "attention_mask"],
    )


def decoder_pretraining_ids(
    tokenizer, corpora: Sequence[str | Path], max_length: int, rng: random.Random
) -> tuple[list[list[int]], list[str], list[tuple[str, str]]]:
    """Token ids of every sentence alone ("<s> s </s>"), then of every translation pair in one
    sequence ("<s> a </s> b </s>", the sides in random order): next-token prediction over a
    pair is the decoder's translation language modelling, where each language is predicted
    with its translation in view. Returns the ids, the sentences (the first ids, in order)
    and the pairs."""
    sentences, pairs = pretraining_examples(corpora)
    encoded = tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"] if sentences else []
    swapped = [(b, a) if rng.random() < 0.5 else (a, b) for a, b in pairs]
    if swapped:
        encoded += tokenizer([a for a, _ in swapped], [b for _, b in swapped], truncation=True, max_length=max_length)[
            "input_ids"
        ]
    return encoded, sentences, pairs


def translation_contrast(source, target, temperature: float):
    """InfoXLM's cross-lingual contrastive loss: each sentence's normalised vector should
    be nearest its own translation's among the batch's, in both directions."""
    import torch
    import torch.nn.functional as F

    similarity = source @ target.T / temperature
    gold = torch.arange(len(similarity))
    return (F.cross_entropy(similarity, gold) + F.cross_entropy(similarity.T, gold)) / 2


def pretrain_decoder(
    model, tokenizer, corpora: Sequence[str | Path], opts: DecoderPretraining, seed: int
) -> dict[str, Any]:
    """Causal LM pre-training, seeded, on the corpora's sentences and translation pairs, plus,
    when ``opts.contrastive_weight`` > 0, the encoder's cross-lingual contrastive loss on
    the last-token states of a sentence and its translation (``pretrain_encoder`` says why;
    next-token prediction alone leaves the languages unaligned here too).

    Besides ``_optimise``'s curve (the training loss, contrastive term included, as means per
    tenth of the run, the first of which has already learnt) the log keeps the language-model
    loss alone on one fixed batch before and after: the start and end of the same measurement."""
    import torch
    import torch.nn.functional as F

    from workflow_scripts.models.backbones.family import last_token

    rng = random.Random(seed)
    max_length, batch_size = opts.max_length, opts.batch_size
    encoded, sentences, pairs = decoder_pretraining_ids(tokenizer, corpora, max_length, rng)
    # Every side of a pair is one of the sentences: the contrastive batches reuse its encoding.
    position = {sentence: k for k, sentence in enumerate(sentences)}
    sides = [[encoded[position[pair[k]]] for pair in pairs] for k in (0, 1)]
    weight = opts.contrastive_weight if pairs else 0.0
    temperature = opts.temperature
    pad = tokenizer.pad_token_id

    def lm_batch(rows: Sequence[Sequence[int]]) -> dict[str, Any]:
        input_ids = _padded(rows, pad)
        # Padding is masked out of attention and of the loss; </s> stays a label, so the
        # model learns where a text ends.
        return {
            "input_ids": input_ids,
            "attention_mask": (input_ids != pad).long(),
            "labels": input_ids.masked_fill(input_ids == pad, -100),
        }

    def batches() -> Iterator[tuple[dict[str, Any], list[Any]]]:
        pair_batches = _batches(len(pairs), batch_size, rng) if weight > 0 else None
        for ids in _batches(len(encoded), batch_size, rng):
            chosen = next(pair_batches) if pair_batches else []
            yield (
                lm_batch([encoded[i] for i in ids]),
                [_padded([side[i] for i in chosen], pad) for side in sides] if chosen else [],
            )

    def embed(input_ids):
        attention_mask = (input_ids != pad).long()
        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        # the decoder family's sequence vector: its last real token, the only one that saw it all
        return F.normalize(last_token(hidden, attention_mask), dim=-1)

    def loss_of(batch) -> Any:
        lm, translation = batch
        loss = model(**lm).loss
        if translation:
            loss = loss + weight * translation_contrast(embed(translation[0]), embed(translation[1]), temperature)
        return loss

    probe = lm_batch(
        [encoded[i] for i in random.Random(seed + 1).sample(range(len(encoded)), min(len(encoded), 4 * batch_size))]
    )

    def probe_loss() -> float:
        model.eval()
        with torch.no_grad():
            return round(float(model(**probe).loss), 4)

    start = probe_loss()
    LOG.info("decoder pre-training: %d sentences and %d translation pairs", len(sentences), len(pairs))
    what = "decoder pre-training (causal LM" + (" + contrastive)" if weight > 0 else ")")
    log = _optimise(model, batches(), loss_of, opts, what)
    return {**log, "loss_start": start, "loss_end": probe_loss(), "sentences": len(sentences), "pairs": len(pairs)}


def build_demo_decoder(
    settings: DemoDecoder, text_files: list[str], output: Path, corpora: Sequence[str | Path] = (), threads: int = 1
) -> None:
    """A tiny Llama (LlamaForCausalLM) and a byte-level BPE tokenizer on the demo text,
    pre-trained on ``corpora`` when given and ``settings.pretraining.steps`` > 0; saved
    like a Hub Llama snapshot (AutoTokenizer, AutoModel, AutoModelForCausalLM load it).

    The tokenizer also learns from the corpora's sentences, as the translators' vocabularies
    do: the pre-training text should be made of learnt pieces, not bytes, or the sequences
    grow and pre-training costs more for the same text."""
    from transformers import LlamaConfig, LlamaForCausalLM

    configure_torch(threads)
    seed = settings.seed
    seed_everything(seed)
    texts = list(iter_texts(text_files))
    if not texts:
        raise InputError(f"no text to train the demo tokenizer in {text_files}")
    sentences = pretraining_examples(corpora)[0] if corpora else []
    backend = train_byte_level_bpe(texts + sentences, settings.vocab_size)
    max_positions = settings.max_position_embeddings
    tokenizer = decoder_tokenizer(backend, max_positions)
    heads = settings.num_attention_heads
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=settings.hidden_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=heads,
        num_key_value_heads=settings.num_key_value_heads or heads,
        intermediate_size=settings.intermediate_size,
        max_position_embeddings=max_positions,
        # Tied input and output embeddings, as small Llamas (3.2 1B/3B) have: at this size the
        # output layer would otherwise hold most of the parameters.
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    _pretrain_and_save(model, tokenizer, pretrain_decoder, settings.pretraining, corpora, seed, output)
    LOG.info("demo decoder: vocab %d, %d parameters -> %s", len(tokenizer), model.num_parameters(), output)
