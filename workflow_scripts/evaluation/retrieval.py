"""Sentence retrieval without training data: Tatoeba 1-NN accuracy and BUCC margin mining;
and image-text retrieval's Recall@k in both directions (IGLUE's xFlickr&CO).

Sentence embedding = one hidden layer pooled over the sequence: by default the mean over all
token positions (special tokens included, padding excluded), as XTREME does for XLM-R;
``first`` or ``last`` token on request, and ``family``: the backbone family's default
(a decoder's last token, the only one that has seen the whole sentence). ``layer`` indexes ``hidden_states`` as transformers returns
them, where index 0 is the embedding output; the paper's "13th layer" of XLM-R large is
index 13 in that convention. The convention is written into every metric file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workflow_scripts.evaluation.neighbours import knn, l2_normalize
from workflow_scripts.models.backbones.family import POOLINGS, pool
from workflow_scripts.precision import Precision
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError

LAYER_CONVENTION = "hidden_states index; 0 = embedding output, i = output of transformer layer i"


def embed(
    model,
    tokenizer,
    sentences: Sequence[str],
    layer: int,
    pooling: str,
    batch_size: int,
    max_length: int,
    dev,
    precision: Precision,
    what: str = "sentences",
) -> np.ndarray:
    """One pooled hidden state per sentence, computed as the backbone's precision policy says
    (the same dtype on a CPU and a GPU) and pooled in fp32; ``what`` names the sentences in
    progress lines."""
    import torch

    n_layers = model.config.num_hidden_layers
    if not 0 <= layer <= n_layers:
        raise InputError(f"retrieval.layer {layer} outside 0..{n_layers} for this encoder")
    if pooling not in POOLINGS:
        raise InputError(f"retrieval.pooling {pooling!r} is not supported (supported: {', '.join(POOLINGS)}, family)")
    order = sorted(range(len(sentences)), key=lambda k: len(sentences[k]))
    out = np.zeros((len(sentences), model.config.hidden_size), dtype=np.float32)
    model.eval()
    with torch.inference_mode():
        with progress(total=len(order), desc=f"embedding {what}", unit="sentence") as bar:
            for b in range(0, len(order), batch_size):
                idx = order[b : b + batch_size]
                enc = tokenizer(
                    [sentences[k] for k in idx],
                    truncation=True,
                    max_length=max_length,
                    padding=True,
                    return_tensors="pt",
                ).to(dev)
                # token_type_ids only where the model takes them (decoders do not)
                enc = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                with precision.autocast(dev):
                    hidden = model(**enc, output_hidden_states=True).hidden_states[layer].float()
                out[idx] = pool(pooling, hidden, enc["attention_mask"]).cpu().numpy()
                bar.update(len(idx))
    return out


def tatoeba_nearest(foreign: np.ndarray, english: np.ndarray, **search: Any) -> np.ndarray:
    """For each English sentence, the index of its nearest foreign sentence (cosine), as the
    XTREME scorer searches (the foreign side is the index, English the queries)."""
    if foreign.shape != english.shape or len(english) == 0:
        raise InputError(f"tatoeba needs equally many non-empty pairs, got {foreign.shape} and {english.shape}")
    _, nearest = knn(l2_normalize(english), l2_normalize(foreign), 1, **search)
    return nearest[:, 0]


def tatoeba_score(nearest: np.ndarray) -> dict[str, float]:
    """Row i of both sides is one gold pair; as in the XTREME scorer, only the gold index counts."""
    return {"accuracy": 100.0 * float((nearest == np.arange(len(nearest))).mean())}


def tatoeba_accuracy(foreign: np.ndarray, english: np.ndarray, **search: Any) -> dict[str, Any]:
    """For each English sentence, is its nearest foreign sentence (cosine) its translation?"""
    return tatoeba_score(tatoeba_nearest(foreign, english, **search))


# ----- BUCC 2018 bitext mining -------------------------------------------------------------
#
# Conventions of the official XTREME/LASER scorer (third_party/utils_retrieve.py), the
# default so that F1 is comparable with published numbers:
# - mining runs on the deduplicated texts of each side;
# - the reader maps a text to one sentence id and drops every text that occurs more than
#   once on its side (read_sent2id), so candidates involving such a text never count;
#   ``duplicates="all_ids"`` instead credits a repeated text to every id carrying it;
# - only candidates with a margin score above 0 are written (mine_bitext, threshold 0);
# - the dev threshold is the midpoint below the best-F1 candidate (bucc_optimize); when no
#   dev candidate is correct it stays 0 and everything mined is kept.

BUCC_DUPLICATES = {
    "drop": "official (XTREME utils_retrieve.read_sent2id): a text occurring more than once on a side maps to no "
    "sentence id, so candidates and gold pairs involving it are never found",
    "all_ids": "a text occurring more than once on a side is credited to every sentence id carrying it",
}


def unique_texts(
    ids: Sequence[str], texts: Sequence[str], duplicates: str = "drop"
) -> tuple[list[str], list[list[str]]]:
    """Deduplicated texts (all of them are embedded and mined) and, for each, the sentence
    ids a candidate with that text counts for: none for a repeated text under ``drop``."""
    if duplicates not in BUCC_DUPLICATES:
        raise InputError(f"retrieval.bucc_duplicates {duplicates!r}: expected one of {sorted(BUCC_DUPLICATES)}")
    by_text: dict[str, list[str]] = {}
    for sid, text in zip(ids, texts):
        by_text.setdefault(text, []).append(sid)
    owners = list(by_text.values())
    if duplicates == "drop":
        owners = [found if len(found) == 1 else [] for found in owners]
    return list(by_text), owners


def margin_candidates(src: np.ndarray, trg: np.ndarray, k: int = 4, **search: Any) -> list[tuple[float, int, int]]:
    """Forward and backward best candidates by ratio margin, kept greedily one-to-one.

    score(x, y) = cos(x, y) / ((mean cos of x's k nearest y + mean cos of y's k nearest x) / 2),
    cosine search on L2-normalised embeddings (``search``: the keyword arguments of
    ``neighbours.knn``; exact by default). A pair claims its source and target even
    when its score is not above 0, but only pairs scoring above 0 are returned, as the
    official miner writes them. Returns (score, src index, trg index), best first.
    """
    src, trg = l2_normalize(src), l2_normalize(trg)
    fwd_sim, fwd_idx = knn(src, trg, k, **search)
    bwd_sim, bwd_idx = knn(trg, src, k, **search)
    fwd_mean, bwd_mean = fwd_sim.mean(axis=1), bwd_sim.mean(axis=1)
    # The k-NN scores are the cosines the margins need: each candidate's margin, then each
    # sentence's best candidate (the first of equal margins).
    fwd_margin = fwd_sim / ((fwd_mean[:, None] + bwd_mean[fwd_idx]) / 2)
    bwd_margin = bwd_sim / ((bwd_mean[:, None] + fwd_mean[bwd_idx]) / 2)
    rows_s, rows_t = np.arange(len(src)), np.arange(len(trg))
    fwd_best, bwd_best = fwd_margin.argmax(axis=1), bwd_margin.argmax(axis=1)
    best: dict[tuple[int, int], float] = {}
    for i, j, s in zip(rows_s, fwd_idx[rows_s, fwd_best], fwd_margin[rows_s, fwd_best]):
        best[(int(i), int(j))] = float(s)
    for j, i, s in zip(rows_t, bwd_idx[rows_t, bwd_best], bwd_margin[rows_t, bwd_best]):
        best[(int(i), int(j))] = float(s)
    used_src, used_trg, kept = set(), set(), []
    for (i, j), s in sorted(best.items(), key=lambda kv: (-kv[1], kv[0])):
        if i not in used_src and j not in used_trg:
            used_src.add(i)
            used_trg.add(j)
            if s > 0:
                kept.append((s, i, j))
    return kept


def expand_to_ids(
    candidates: list[tuple[float, int, int]], src_ids: list[list[str]], trg_ids: list[list[str]]
) -> list[tuple[float, tuple[str, str]]]:
    """Text-level candidates -> (score, (source id, English id)) for the ids the texts count for."""
    return [(s, (a, b)) for s, i, j in candidates for a in src_ids[i] for b in trg_ids[j]]


def prf(predicted: set[tuple[str, str]], gold: set[tuple[str, str]]) -> dict[str, float]:
    tp = len(predicted & gold)
    precision = tp / len(predicted) if predicted else 0.0
    recall = tp / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
    return {"precision": 100 * precision, "recall": 100 * recall, "f1": 100 * f1}


def choose_threshold(candidates: list[tuple[float, tuple[str, str]]], gold: set[tuple[str, str]]) -> float:
    """The official threshold choice: scanning candidates best first, the midpoint between
    the best-F1 candidate's score and the next one's (the first of equal F1s wins); 0, which
    keeps every candidate, when none is correct.

    Where the official code crashes (the best F1 at the last candidate, which has no next
    one), the last candidate's own score is the threshold: every candidate is kept.
    """
    if not gold:
        raise InputError("threshold selection needs gold pairs")
    ordered = sorted(candidates, key=lambda c: -c[0])
    tp, best_f1, threshold = 0, 0.0, 0.0
    for k, (score, pair) in enumerate(ordered):
        tp += pair in gold
        if not tp:
            continue
        precision, recall = tp / (k + 1), tp / len(gold)
        f1 = 2 * precision * recall / (precision + recall)
        if f1 > best_f1:
            best_f1 = f1
            threshold = (score + ordered[k + 1][0]) / 2 if k + 1 < len(ordered) else score
    return threshold


def mined_pairs(candidates: list[tuple[float, tuple[str, str]]], threshold: float) -> set[tuple[str, str]]:
    return {pair for score, pair in candidates if score >= threshold}


# ----- image-text retrieval (IGLUE's xFlickr&CO) ------------------------------------------------
#
# IGLUE's scorer fills a captions x images score matrix. The images are the distinct images of
# the test file in the order of their first row; each caption's one gold image is its row's.
# Text to image ("IR"): a caption's rank is the position of its gold image among all images
# sorted by score. Image to text ("TR"): an image's rank is the best position any of its gold
# captions takes among all captions sorted by score. Recall@k is the share of ranks below k,
# x 100. Ties are broken towards the lower index (a stable sort); IGLUE's sort leaves their
# order unspecified.


def caption_image_index(images_of_rows: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """(the distinct images in the order of their first row, each row's gold image index)."""
    first: dict[str, int] = {}
    for name in images_of_rows:
        first.setdefault(name, len(first))
    return list(first), np.array([first[name] for name in images_of_rows], dtype=np.int64)


def retrieval_ranks(similarity: np.ndarray, gold: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(each caption's rank of its gold image, each image's best rank of its gold captions),
    0-based, from a captions x images similarity matrix and each caption's gold image."""
    similarity = np.asarray(similarity, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.int64)
    if similarity.ndim != 2 or similarity.shape[0] != len(gold) or not similarity.size:
        raise InputError(f"similarity {similarity.shape} does not match {len(gold)} captions")
    n_captions, n_images = similarity.shape
    if gold.min() < 0 or gold.max() >= n_images:
        raise InputError(f"gold image indices outside 0..{n_images - 1}")
    if len(set(gold.tolist())) != n_images:
        raise InputError("an image without a caption: every image needs at least one gold caption")
    # position of each column (row) in its row's (column's) descending stable order
    by_caption = np.argsort(-similarity, axis=1, kind="stable")
    text_to_image = np.argmax(by_caption == gold[:, None], axis=1)
    by_image = np.argsort(-similarity, axis=0, kind="stable")  # [position, image] -> caption
    position = np.empty_like(by_image)
    position[by_image, np.arange(n_images)[None, :]] = np.arange(n_captions)[:, None]
    image_to_text = np.full(n_images, n_captions, dtype=np.int64)
    np.minimum.at(image_to_text, gold, position[np.arange(n_captions), gold])
    return text_to_image, image_to_text


def image_text_recall(similarity: np.ndarray, gold: Sequence[int], ks: Sequence[int] = (1,)) -> dict[str, float]:
    """Recall@k text to image (``ir_recall_at_k``) and image to text (``tr_recall_at_k``),
    x 100, as IGLUE scores xFlickr&CO; ``recall_at_1`` is text to image, the direction the
    flickr30k task's model selection uses."""
    text_to_image, image_to_text = retrieval_ranks(similarity, gold)
    scores = {}
    for k in ks:
        scores[f"ir_recall_at_{k}"] = 100.0 * float((text_to_image < k).mean())
        scores[f"tr_recall_at_{k}"] = 100.0 * float((image_to_text < k).mean())
    if 1 in ks:
        scores["recall_at_1"] = scores["ir_recall_at_1"]
    return scores


# The cut-offs IGLUE's scorer prints for xFlickr&CO, each direction ("Final r1, r5, r10" of
# volta's image and text retrieval, experiments/zero_shot/*/xflickrco/test.<lang>.out).
IMAGE_TEXT_KS = (1, 5, 10)


def image_text_scores(similarity: np.ndarray, gold: Sequence[int]) -> dict[str, float]:
    """image_text_recall at 1, 5 and 10, each with the mean of its two directions
    (``mean_recall_at_k``): IGLUE's tables report text to image and image to text R@1 apart
    (results/xflickrco/xFlickrCO_ir_0.csv, xFlickrCO_tr_0.csv); the mean is one number beside them."""
    scores = image_text_recall(similarity, gold, IMAGE_TEXT_KS)
    for k in IMAGE_TEXT_KS:
        scores[f"mean_recall_at_{k}"] = (scores[f"ir_recall_at_{k}"] + scores[f"tr_recall_at_{k}"]) / 2
    return scores


def score_caption_image_embeddings(
    embeddings: np.ndarray, images_of_rows: Sequence[str]
) -> tuple[dict[str, float], list[str]]:
    """(scores, each caption's top image) of one split of an image-caption retrieval task.

    ``embeddings`` holds each row's unit caption and image vectors side by side, as
    ``multimodal.prefix.contrastive_logits`` returns them; an image's vector does not depend on
    the caption beside it, so the first row naming the image gives it. Every caption is scored
    against every image of the split (IGLUE's captions x images matrix), by cosine."""
    embeddings = np.asarray(embeddings, dtype=np.float64)
    if embeddings.ndim != 2 or embeddings.shape[0] != len(images_of_rows) or embeddings.shape[1] % 2:
        raise InputError(
            f"caption|image embeddings {embeddings.shape} do not match {len(images_of_rows)} rows of two halves"
        )
    half = embeddings.shape[1] // 2
    images, gold = caption_image_index(images_of_rows)
    first_row = {name: row for row, name in reversed(list(enumerate(images_of_rows)))}
    image_vectors = embeddings[[first_row[name] for name in images], half:]
    similarity = embeddings[:, :half] @ image_vectors.T
    top = np.argmax(similarity, axis=1)  # ties: the lower index, as the ranks break them
    return image_text_scores(similarity, gold), [images[j] for j in top]
