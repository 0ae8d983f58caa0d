"""The retention probe: how much of its pretraining a backbone keeps at one stage of the grid
(docs/multimodal.md, "Forgetting").

One probe reads one model directory (the pretrained backbone, an intermediate model or a
zero-shot target model; LoRA and QLoRA lineages rebuilt as training and evaluation rebuild
them, ``adapters.load_backbone``) and measures, on a fixed held-out sample of sentences per
language (``ProbeText``):

- **the LM loss**, mean cross-entropy per predicted token:
  - encoders: masked-LM loss. A seeded draw masks ``mask_probability`` of each sentence's
    non-special tokens (at least one), every one replaced by the mask token (the 80/10/10
    replacement is a training device). The draw depends on the seed, the language, the
    sentence's place in the sample and its token count only, so every stage of a backbone
    predicts the same tokens from the same inputs;
  - decoders: next-token loss over every token after the first;
  - the LM head is the pretrained checkpoint's (``--base``): saved intermediate and target
    models keep only the backbone. Its output matrix is the probed model's own input
    embeddings wherever the checkpoint ties them (XLM-R's MLM head always, as the pipeline's
    MLM task does: ``heads.load_mlm_head``); the rest of the head (an encoder's transform and
    bias, an untied decoder's output matrix) is the base's at every stage;
  - a family without an LM head (``seq2seq_encoder``) gets no loss, said in the file;
- **Tatoeba-style alignment** with English: each sentence's vector (the backbone's retrieval
  layer and pooling, ``retrieval.embed``) and its translation's, nearest neighbour by cosine
  in both directions (``retrieval.tatoeba_nearest``, exact search: ``neighbours.knn``).

The file records per language the loss, the predicted tokens, the sentences, a digest of the
exact inputs (equal at every stage of a backbone; the table checks it) and the alignment, with
the model probed and its lineage.

CLI: ``python -m workflow_scripts.evaluation.retention --settings JSON --probe JSON --model DIR
--base DIR --text FILE --threads N --output FILE``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from workflow_scripts.common import configure_torch, device, seed_everything, setup_logging, write_json
from workflow_scripts.data.prepare import provenance, read_table
from workflow_scripts.evaluation.retrieval import LAYER_CONVENTION, embed, tatoeba_nearest, tatoeba_score
from workflow_scripts.models.adapters import Method, check_available, lineage, load_backbone
from workflow_scripts.models.backbones import get_family
from workflow_scripts.models.heads import load_mlm_head, load_tokenizer
from workflow_scripts.precision import Precision
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.retention_settings import OBJECTIVES, ProbeText, RetentionProbeSettings
from workflow_scripts.spec.run_identity import ProbeIdentity

# Rows of hidden states whose logits are computed at once: a vocabulary of 250k makes a
# whole batch's logits several GB.
LOGIT_ROWS = 512


@dataclass(frozen=True)
class ProbeSample:
    """The probe's text: the sentences of each language, and each other language's sentences
    with their English translations (alignment)."""

    sentences: dict[str, list[str]]
    pairs: dict[str, list[tuple[str, str]]]


# ----- the held-out text ------------------------------------------------------------------------


def _drawn(n: int, k: int, rng: random.Random) -> list[int]:
    """``k`` positions of ``range(n)`` (all of them when fewer), in their order."""
    return sorted(rng.sample(range(n), k)) if n > k else list(range(n))


def _rows_by_language(path: str | Path, text: ProbeText) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in read_table(path, text.format).to_pylist():
        grouped.setdefault(row["lang"], []).append(row)
    return grouped


def _bitext_sample(path: str | Path, text: ProbeText, seed: int) -> ProbeSample:
    """Tatoeba's rows: each language's sentence (``source``) with its English one (``target``);
    English's own sentences are the distinct English sides of every language's rows."""
    grouped = _rows_by_language(path, text)
    sentences: dict[str, list[str]] = {}
    pairs: dict[str, list[tuple[str, str]]] = {}
    for lang in text.languages[1:]:
        rows = grouped.get(lang)
        if not rows:
            raise InputError(f"{path}: no rows of language {lang!r} (retention.languages, tasks.{text.task}.languages)")
        chosen = [rows[i] for i in _drawn(len(rows), text.sentences, random.Random(f"{seed}:{lang}"))]
        pairs[lang] = [(r["source"].strip(), r["target"].strip()) for r in chosen]
        sentences[lang] = [source for source, _ in pairs[lang]]
    english = list(dict.fromkeys(e for lang in text.languages[1:] for _, e in pairs[lang]))
    sentences["en"] = [english[i] for i in _drawn(len(english), text.sentences, random.Random(f"{seed}:en"))]
    return ProbeSample(sentences={lang: sentences[lang] for lang in text.languages}, pairs=pairs)


def _parallel_rows_sample(path: str | Path, text: ProbeText, seed: int) -> ProbeSample:
    """A classification file whose languages hold the same rows in the same order (the demo's
    XNLI): the same positions of every language, its first text (``text_a``)."""
    grouped = _rows_by_language(path, text)
    counts = {lang: len(grouped.get(lang, ())) for lang in text.languages}
    if len(set(counts.values())) != 1 or not counts["en"]:
        raise InputError(
            f"{path}: a classification file is read as parallel rows, the same number in every language; "
            f"it has {counts} (retention.text, retention.languages)"
        )
    positions = _drawn(counts["en"], text.sentences, random.Random(f"{seed}:positions"))
    sentences = {lang: [grouped[lang][i]["text_a"].strip() for i in positions] for lang in text.languages}
    pairs = {lang: list(zip(sentences[lang], sentences["en"])) for lang in text.languages[1:]}
    return ProbeSample(sentences=sentences, pairs=pairs)


def read_sample(path: str | Path, text: ProbeText, seed: int) -> ProbeSample:
    """The held-out sample of ``text``'s prepared file, drawn with ``seed`` (English first)."""
    if not text.languages or text.languages[0] != "en":
        raise InputError(f"--settings text.languages must start with en, got {list(text.languages)}")
    if text.format == "retrieval":
        return _bitext_sample(path, text, seed)
    return _parallel_rows_sample(path, text, seed)


# ----- inputs: token ids and masked positions ---------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """One language's token ids and, for a masked-LM probe, the positions masked in each."""

    ids: list[list[int]]
    masked: list[list[int]] | None

    def digest(self) -> str:
        """What a stage's probe read: equal digests, equal inputs."""
        return hashlib.sha256(json.dumps([self.ids, self.masked]).encode()).hexdigest()


def masked_positions(maskable: Sequence[int], probability: float, rng: random.Random) -> list[int]:
    """A seeded share of ``maskable`` positions, at least one (none when there is none)."""
    if not maskable:
        return []
    count = max(1, round(probability * len(maskable)))
    return sorted(rng.sample(list(maskable), min(count, len(maskable))))


def encode_language(
    tokenizer, sentences: list[str], lang: str, settings: RetentionProbeSettings, masked: bool
) -> Inputs:
    """Token ids of each sentence (special tokens as the tokenizer adds them) and, when
    ``masked``, the positions masked: drawn from (seed, language, place in the sample)."""
    encoded = tokenizer(sentences, truncation=True, max_length=settings.max_length, return_special_tokens_mask=True)
    ids = [list(row) for row in encoded["input_ids"]]
    if not masked:
        return Inputs(ids=ids, masked=None)
    positions = []
    for k, special in enumerate(encoded["special_tokens_mask"]):
        maskable = [i for i, s in enumerate(special) if not s]
        rng = random.Random(f"{settings.seed}:{lang}:{k}")
        positions.append(masked_positions(maskable, settings.mask_probability, rng))
    return Inputs(ids=ids, masked=positions)


def _batches(inputs: Inputs, size: int) -> Iterator[tuple[list[list[int]], list[list[int]] | None]]:
    for start in range(0, len(inputs.ids), size):
        masked = inputs.masked[start : start + size] if inputs.masked is not None else None
        yield inputs.ids[start : start + size], masked


def _padded(rows: list[list[int]], pad: int, dev):
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, : len(r)] = torch.tensor(r, dtype=torch.long)
        attention[k, : len(r)] = 1
    return ids.to(dev), attention.to(dev)


# ----- losses -----------------------------------------------------------------------------------


def _summed_cross_entropy(head, hidden, gold, precision: Precision, dev) -> float:
    """The summed cross-entropy of ``head(hidden)`` against ``gold``, in fp32, a block of rows at a time."""
    import torch.nn.functional as F

    total = 0.0
    for start in range(0, len(gold), LOGIT_ROWS):
        with precision.autocast(dev):
            logits = head(hidden[start : start + LOGIT_ROWS])
        total += float(F.cross_entropy(logits.float(), gold[start : start + LOGIT_ROWS], reduction="sum"))
    return total


def masked_lm_loss(model, head, inputs: Inputs, mask_id: int, pad: int, batch: int, precision, dev):
    """(summed loss, masked tokens) of a masked-LM probe over one language's inputs."""
    import torch

    total, tokens = 0.0, 0
    for ids, masked in _batches(inputs, batch):
        input_ids, attention = _padded(ids, pad, dev)
        rows = torch.tensor([k for k, found in enumerate(masked) for _ in found], dtype=torch.long, device=dev)
        cols = torch.tensor([p for found in masked for p in found], dtype=torch.long, device=dev)
        if not len(rows):
            continue
        gold = input_ids[rows, cols]
        corrupted = input_ids.clone()
        corrupted[rows, cols] = mask_id
        with precision.autocast(dev):
            hidden = model(input_ids=corrupted, attention_mask=attention).last_hidden_state
        total += _summed_cross_entropy(head, hidden[rows, cols], gold, precision, dev)
        tokens += len(gold)
    return total, tokens


def next_token_loss(model, head, inputs: Inputs, pad: int, batch: int, precision, dev):
    """(summed loss, predicted tokens) of a next-token probe: every token after the first."""
    total, tokens = 0.0, 0
    for ids, _ in _batches(inputs, batch):
        input_ids, attention = _padded(ids, pad, dev)
        with precision.autocast(dev):
            hidden = model(input_ids=input_ids, attention_mask=attention).last_hidden_state
        predicted = attention[:, 1:].bool()
        gold = input_ids[:, 1:][predicted]
        if not len(gold):
            continue
        total += _summed_cross_entropy(head, hidden[:, :-1][predicted], gold, precision, dev)
        tokens += len(gold)
    return total, tokens


# ----- the model and its LM head ----------------------------------------------------------------


def load_lm_head(base_dir: str | Path, model, family: str):
    """The pretrained checkpoint's LM head over ``model`` and what it is: an encoder's masked-LM
    head (``heads.load_mlm_head``: its output matrix tied to ``model``'s embeddings), a decoder's
    output layer (tied to ``model``'s embeddings when the checkpoint ties them, else the base's
    own), or (None, why) for a family without one."""
    from torch import nn

    if family == "encoder":
        head = load_mlm_head(base_dir, model)
        return head, "the base checkpoint's masked-LM head; its output matrix tied to the probed model's embeddings"
    if family != "decoder":
        return None, f"a {family} backbone has no LM head: alignment only"
    from transformers import AutoConfig, AutoModelForCausalLM

    embeddings = model.get_input_embeddings()
    if getattr(AutoConfig.from_pretrained(str(base_dir)), "tie_word_embeddings", False):
        head = nn.Linear(embeddings.weight.shape[1], embeddings.weight.shape[0], bias=False)
        head.weight = embeddings.weight
        return head, "the base checkpoint's output layer, tied to the probed model's embeddings"
    causal = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=embeddings.weight.dtype)
    return causal.get_output_embeddings(), "the base checkpoint's own output layer (untied)"


def load_probed(model_dir: Path, base_dir: Path, settings: RetentionProbeSettings, dev):
    """(backbone, tokenizer, LM head, what the head is): the backbone a directory stands for,
    its lineage's adapters merged (QLoRA: stacked) in memory as evaluation loads it, every stage
    in the dtype the backbone's method loads its base in."""
    method = Method.from_settings(settings.method)
    check_available(method, dev)
    model = load_backbone(model_dir, method).to(dev)
    model.eval()
    head, described = load_lm_head(base_dir, model, settings.family)
    if head is not None:
        head = head.to(dev).eval()
    return model, load_tokenizer(model_dir), head, described


# ----- alignment ------------------------------------------------------------------------------


def alignment(model, tokenizer, pairs: list[tuple[str, str]], settings: RetentionProbeSettings, dev) -> dict:
    """Tatoeba-style accuracy (%) of a language's sentences with their English translations,
    both ways: ``en_to_x`` searches the language's sentences for each English one (XTREME's
    direction), ``x_to_en`` the other way; ``mean`` is their mean."""
    pooling = settings.alignment.pooling
    if pooling == "family":
        pooling = get_family(settings.family).retrieval_pooling
    args = (
        settings.alignment.layer,
        pooling,
        settings.batch_size,
        settings.max_length,
        dev,
        Precision(settings.method.precision),
    )
    foreign = embed(model, tokenizer, [s for s, _ in pairs], *args, what="probe sentences")
    english = embed(model, tokenizer, [e for _, e in pairs], *args, what="their English translations")
    en_to_x = tatoeba_score(tatoeba_nearest(foreign, english, dev=dev))["accuracy"]
    x_to_en = tatoeba_score(tatoeba_nearest(english, foreign, dev=dev))["accuracy"]
    return {"en_to_x": en_to_x, "x_to_en": x_to_en, "mean": (en_to_x + x_to_en) / 2, "pairs": len(pairs)}


# ----- one probe --------------------------------------------------------------------------------


def language_loss(model, head, tokenizer, sentences: list[str], lang: str, settings, dev) -> dict[str, Any]:
    """One language's mean loss per predicted token, its counts and its inputs' digest."""
    objective = OBJECTIVES[settings.family]
    precision = Precision(settings.method.precision)
    inputs = encode_language(tokenizer, sentences, lang, settings, masked=objective == "masked-LM")
    pad = tokenizer.pad_token_id
    if objective == "masked-LM":
        total, tokens = masked_lm_loss(
            model, head, inputs, tokenizer.mask_token_id, pad, settings.batch_size, precision, dev
        )
    else:
        total, tokens = next_token_loss(model, head, inputs, pad, settings.batch_size, precision, dev)
    if not tokens:
        raise InputError(f"language {lang}: its {len(sentences)} probe sentences have no token to predict")
    return {"loss": total / tokens, "tokens": tokens, "inputs_sha256": inputs.digest()}


def probe(model_dir: Path, base_dir: Path, text_file: Path, settings: RetentionProbeSettings, dev) -> dict[str, Any]:
    """Every language's loss and alignment of the model ``model_dir`` stands for."""
    import torch

    sample = read_sample(text_file, settings.text, settings.seed)
    model, tokenizer, head, described = load_probed(model_dir, base_dir, settings, dev)
    languages: dict[str, Any] = {}
    with torch.inference_mode():
        for lang, sentences in sample.sentences.items():
            found: dict[str, Any] = {"sentences": len(sentences)}
            if head is not None:
                found.update(language_loss(model, head, tokenizer, sentences, lang, settings, dev))
            if lang in sample.pairs:
                found["alignment"] = alignment(model, tokenizer, sample.pairs[lang], settings, dev)
            languages[lang] = found
    found_lineage = lineage(model_dir)
    return {
        "model": str(model_dir),
        "lineage": {"base": found_lineage.base, "merged": list(found_lineage.merged), "own": found_lineage.own},
        "base": str(base_dir),
        "objective": OBJECTIVES.get(settings.family),
        "lm_head": described,
        "languages": languages,
        "text": {"file": str(text_file), "provenance": provenance(text_file), **settings.text.to_dict()},
        "alignment_layer_convention": LAYER_CONVENTION,
    }


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", required=True, help="RetentionProbeSettings JSON (workflow/retention.py)")
    ap.add_argument("--probe", required=True, help="which model is probed: ProbeIdentity JSON (spec/run_identity.py)")
    ap.add_argument("--model", required=True, type=Path, help="the model directory probed")
    ap.add_argument("--base", required=True, type=Path, help="the pretrained backbone (its LM head)")
    ap.add_argument("--text", required=True, type=Path, help="the prepared split of retention.text")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--output", required=True, type=Path)
    args = ap.parse_args(argv)
    started = time.time()
    try:
        settings = RetentionProbeSettings.parse(args.settings, "--settings")
        identity = ProbeIdentity.parse(args.probe, "--probe")
        configure_torch(args.threads)
        seed_everything(settings.seed)
        dev = device()
        Precision(settings.method.precision).check_device(dev, "the retention probe")
        record = probe(args.model, args.base, args.text, settings, dev)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None
    method = Method.from_settings(settings.method).name
    record.update(
        probe=identity.to_dict(),
        settings=settings.to_dict(),
        precision=Precision(settings.method.precision).record(dev, method),
        versions={p: version(p) for p in ("torch", "transformers", "numpy")},
        wall_time_s=round(time.time() - started, 3),
    )
    write_json(args.output, record)


if __name__ == "__main__":
    main()
