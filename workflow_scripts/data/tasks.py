"""The task catalogue: every intermediate and target task of the paper, its format and metric.

A task's *identity* (format, labels, metric, which data trains and selects a target) is
fixed here in code; *where its data lives* (Hub id, revision, languages) is configuration.
Standard library only: the Snakefile imports this to validate the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CLASSIFICATION = "classification"
MULTIPLE_CHOICE = "multiple_choice"
SPAN = "span"
TAGGING = "tagging"
RETRIEVAL = "retrieval"  # parallel sentence pairs (Tatoeba)
MINING = "mining"  # monolingual corpora plus gold alignments (BUCC)
# Queries and candidates in one file, each query naming its gold candidates (Mewsli-X,
# LAReQA): a dual encoder trained on (query, gold candidate) pairs ranks the candidates.
RANKING = "ranking"
MLM = "mlm"
# Text plus an image (SNLI-VE: the hypothesis, the premise image): the image enters the
# backbone as a projected visual prefix (multimodal/prefix.py); intermediate tasks only.
VISUAL_CLASSIFICATION = "visual_classification"
# A question about an image, answered from an answer vocabulary with soft targets (VQA v2;
# multimodal/vqa.py). The vocabulary comes from the training split, as CCG's tag set does.
VISUAL_ANSWER = "visual_answer"
# Captions and their images, trained contrastively: the text backbone's pooled caption
# against the projected image (multimodal/prefix.py), the other images of the batch as negatives.
VISUAL_RETRIEVAL = "visual_retrieval"
VISUAL_FORMATS = (VISUAL_CLASSIFICATION, VISUAL_ANSWER, VISUAL_RETRIEVAL)
FORMATS = (CLASSIFICATION, MULTIPLE_CHOICE, SPAN, TAGGING, RETRIEVAL, MINING, RANKING, MLM, *VISUAL_FORMATS)

NLI_LABELS = ("entailment", "neutral", "contradiction")
# Text-only controls of each image task, read from its own rows (PROTOCOL.md §9).
CONTROLS = {"snli_ve": ("snli_caption", "hypothesis_only")}
UPOS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
             "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
PANX_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")


@dataclass(frozen=True)
class Task:
    name: str
    format: str
    metric: str
    splits: tuple[str, ...]
    labels: tuple[str, ...] = ()
    num_choices: int = 0
    # Targets only: which task's train split trains it and which dev split selects the model;
    # zero-shot uses their English rows (PROTOCOL.md §3: "Model selection uses English dev
    # only"), other transfer settings other languages (transfer.py).
    train_from: str | None = None
    select_from: str | None = None
    eval_splits: tuple[str, ...] = field(default=())
    # Languages the source data has no dev split for (their dev scores are left out, by name).
    dev_missing: frozenset[str] = frozenset()
    # Tasks trained, each selected on its own dev split, before the target's own training
    # (XTREME-R's XCOPA: SIQA, then COPA); the config can switch them off.
    stages: tuple[str, ...] = ()
    # Images per example of an image task (NLVR2: a pair); 0 for text tasks.
    images_per_example: int = 0

    @property
    def is_retrieval(self) -> bool:
        """Scored without target training, on the encoder the intermediate phase left."""
        return self.format in (RETRIEVAL, MINING)

    @property
    def is_target(self) -> bool:
        return bool(self.eval_splits)

    @property
    def trains(self) -> bool:
        return self.train_from is not None

    @property
    def visual(self) -> bool:
        """Reads images (through the cached features of a frozen vision encoder)."""
        return self.format in VISUAL_FORMATS

    @property
    def num_labels(self) -> int:
        return len(self.labels)


def _t(*args, **kwargs) -> Task:
    return Task(*args, **kwargs)


TASKS: dict[str, Task] = {t.name: t for t in (
    # Intermediate tasks (English), PROTOCOL.md §2.
    _t("anli_plus", CLASSIFICATION, "accuracy", ("train", "dev"), NLI_LABELS),
    _t("mnli", CLASSIFICATION, "accuracy", ("train", "dev"), NLI_LABELS),
    _t("qqp", CLASSIFICATION, "accuracy", ("train", "dev"), ("not_duplicate", "duplicate")),
    _t("squad", SPAN, "squad_v1", ("train", "dev")),
    _t("squad_v2", SPAN, "squad_v2", ("train", "dev")),
    _t("hellaswag", MULTIPLE_CHOICE, "accuracy", ("train", "dev"), num_choices=4),
    _t("ccg", TAGGING, "accuracy", ("train", "dev")),  # tag set read from the user's file
    _t("cosmosqa", MULTIPLE_CHOICE, "accuracy", ("train", "dev"), num_choices=4),
    _t("commonsenseqa", MULTIPLE_CHOICE, "accuracy", ("train", "dev"), num_choices=5),
    _t("mlm", MLM, "mlm_loss", ("train",)),
    # XTREME-R's XCOPA recipe trains on these (PROTOCOL.md §8); each is also an intermediate task.
    _t("siqa", MULTIPLE_CHOICE, "accuracy", ("train", "dev"), num_choices=3),
    _t("copa", MULTIPLE_CHOICE, "accuracy", ("train", "dev"), num_choices=2),
    # SNLI-VE (PROTOCOL.md §9): the hypothesis with the Flickr30k image as premise, and its
    # text-only controls, built from SNLI-VE's own rows, ids and image-disjoint splits: the
    # SNLI caption the image replaced as premise, or no premise.
    _t("snli_ve", VISUAL_CLASSIFICATION, "accuracy", ("train", "dev"), NLI_LABELS, images_per_example=1),
    # NLVR2 (Suhr et al. 2019): is a statement true of a pair of images (left, right)?
    _t("nlvr2", VISUAL_CLASSIFICATION, "accuracy", ("train", "dev"), ("False", "True"), images_per_example=2),
    # VQA v2 (Goyal et al. 2017): open questions about COCO images; answers from the train split's vocabulary.
    _t("vqa_v2", VISUAL_ANSWER, "vqa_accuracy", ("train", "dev"), images_per_example=1),
    # Image-caption retrieval on Flickr30k's Karpathy splits (5 captions per image).
    _t("flickr30k", VISUAL_RETRIEVAL, "recall_at_1", ("train", "dev"), images_per_example=1),
    _t("snli_caption", CLASSIFICATION, "accuracy", ("train", "dev"), NLI_LABELS),
    _t("hypothesis_only", CLASSIFICATION, "accuracy", ("train", "dev"), NLI_LABELS),
    # The XNLI authors' machine translations of MNLI train (and XNLI's human dev): the data of
    # translated MNLI configs, used instead of translating MNLI ourselves (PROTOCOL.md §4).
    _t("xnli_mt", CLASSIFICATION, "accuracy", ("train", "dev"), NLI_LABELS),
    # XTREME targets, PROTOCOL.md §3.
    _t("xnli", CLASSIFICATION, "accuracy", ("dev", "test"), NLI_LABELS,
       train_from="mnli", select_from="xnli", eval_splits=("dev", "test")),
    _t("pawsx", CLASSIFICATION, "accuracy", ("train", "dev", "test"), ("different", "paraphrase"),
       train_from="pawsx", select_from="pawsx", eval_splits=("dev", "test")),
    _t("udpos", TAGGING, "seqeval_f1", ("train", "dev", "test"), UPOS_TAGS,
       train_from="udpos", select_from="udpos", eval_splits=("dev", "test"),
       dev_missing=frozenset({"kk", "th", "tl", "yo"})),
    _t("panx", TAGGING, "seqeval_f1", ("train", "dev", "test"), PANX_TAGS,
       train_from="panx", select_from="panx", eval_splits=("dev", "test")),
    _t("xquad", SPAN, "squad_v1", ("test",),
       train_from="squad", select_from="squad", eval_splits=("test",)),
    _t("mlqa", SPAN, "mlqa", ("dev", "test"),
       train_from="squad", select_from="mlqa", eval_splits=("dev", "test")),
    # TyDiQA-GoldP's dev set is its test set, so selecting on its English part would peek at
    # test data: select on SQuAD's (English) dev instead.
    _t("tydiqa", SPAN, "squad_v1", ("train", "test"),
       train_from="tydiqa", select_from="squad", eval_splits=("test",)),
    _t("bucc", MINING, "bucc_f1", ("dev", "test"), eval_splits=("dev", "test")),
    _t("tatoeba", RETRIEVAL, "tatoeba_accuracy", ("test",), eval_splits=("test",)),
    # XTREME-R targets, PROTOCOL.md §8. XCOPA has no English rows: COPA's English dev selects.
    _t("xcopa", MULTIPLE_CHOICE, "accuracy", ("dev", "test"), num_choices=2,
       train_from="copa", select_from="copa", eval_splits=("dev", "test"), stages=("siqa",)),
    # Mewsli-X: train on English Wikipedia mention-entity pairs; dev and test are WikiNews
    # mentions against the candidate entities' descriptions (both files hold the candidates).
    _t("mewslix", RANKING, "map_at_20", ("train", "dev", "test"),
       train_from="mewslix", select_from="mewslix", eval_splits=("dev", "test")),
    # LAReQA on XQuAD-R: train and select on SQuAD v1.1 turned into (question, answer
    # sentence) pairs; the test pools the sentences of all 11 languages.
    _t("lareqa", RANKING, "map_at_20", ("train", "dev", "test"),
       train_from="lareqa", select_from="lareqa", eval_splits=("test",)),
)}

INTERMEDIATE_TASKS = tuple(n for n, t in TASKS.items() if not t.is_target)
TARGET_TASKS = tuple(n for n, t in TASKS.items() if t.is_target)
# Tasks whose translations are published data rather than our MT output.
PROVIDED_TRANSLATIONS = {"mnli": "xnli_mt"}
# Formats whose data the translation step can translate (labels carry over; spans re-aligned).
TRANSLATABLE_FORMATS = (CLASSIFICATION, MULTIPLE_CHOICE, SPAN)


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}") from None


def qa_answer_score(metric: str, scores: dict[str, float]) -> float:
    """One number per task for the XTREME average: QA counts (F1 + EM) / 2."""
    if "f1" in scores and "exact_match" in scores:
        return (scores["f1"] + scores["exact_match"]) / 2
    return scores[primary_metric(metric)]


def primary_metric(metric: str) -> str:
    return {"squad_v1": "f1", "squad_v2": "f1", "mlqa": "f1", "seqeval_f1": "f1",
            "bucc_f1": "f1", "mlm_loss": "loss", "map_at_20": "map_at_20",
            "recall_at_1": "recall_at_1"}.get(metric, "accuracy")
