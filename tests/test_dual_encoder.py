"""Ranking targets: inputs (data/ranking_inputs.py), the dual encoder (models/dual_encoder.py),
pooled scoring (evaluation/pool_ranking.py), and target stages."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conftest import phase_settings
from workflow_scripts.data import ranking_inputs
from workflow_scripts.data.prepare import read_table, to_table
from workflow_scripts.evaluation import pool_ranking
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.task_options import ScoringOptions, TaskOptions
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.training.phase_data import carry_head
from workflow_scripts.training.recipe import train_phase

pytestmark = pytest.mark.unit

# What these runs change of a phase's defaults (conftest.phase_settings).
PHASE = {
    "dropout": 0.0,
    "dev_examples": 30,
    "eval_batch_size": 32,
    "eval_every": 10,
    "learning_rate": 2e-3,
    "max_micro_batch": 16,
    "multitask_epochs": 1,
}
# mean pooling: the fixture encoder's first token is untrained (models/dual_encoder.py)
OPTS = {
    "batch_size": 16,
    "epochs": 6,
    "max_length": 40,
    "max_query_length": 40,
    "lowercase": False,
    "pooling": "mean",
    "select_language": "en",
}
# how the scoring reads the same task
SCORING = ScoringOptions.parse(
    {**{k: v for k, v in OPTS.items() if k in ScoringOptions.keys()}, "eval_batch_size": 16, "precision": "bf16"}
)


def ranking_rows(pairs: list[dict], query_lang: str, split: str) -> list[dict]:
    """Tatoeba pairs as a ranking file: each English sentence a query whose gold is its
    translation; the translations are the pool (plus, in training, nothing else)."""
    rows = []
    for i, p in enumerate(pairs):
        rows.append(
            {
                "id": f"{split}-q{i}",
                "lang": query_lang,
                "side": "query",
                "text": p["target"],
                "context": "",
                "gold": [f"{split}-c{i}"],
            }
        )
    for i, p in enumerate(pairs):
        rows.append(
            {
                "id": f"{split}-c{i}",
                "lang": p["lang"],
                "side": "candidate",
                "text": p["source"],
                "context": "",
                "gold": [],
            }
        )
    return rows


@pytest.fixture(scope="module")
def ranking_files(tmp_path_factory, demo_data):
    """Train and select on German pairs (the encoder is not pre-trained: nothing transfers
    to another language), test with queries in two languages against one pool."""
    pairs = read_table(demo_data["tatoeba.test"]).to_pylist()
    by_lang = {lang: [p for p in pairs if p["lang"] == lang] for lang in ("de", "ru", "sw")}
    out = tmp_path_factory.mktemp("ranking")
    task = get_task("mewslix")
    test = ranking_rows(by_lang["de"][60:], "en", "test")
    # a second query language over the same pool: Swahili sentences' English sides
    test += [{**r, "id": r["id"].replace("q", "qx"), "lang": "sw"} for r in test if r["side"] == "query"]
    train = ranking_rows(by_lang["de"][:60], "en", "train")
    files = {"train": train, "dev": train, "test": test}
    paths = {}
    for split, rows in files.items():
        paths[split] = out / f"{split}.parquet"
        pq.write_table(to_table(task, rows), paths[split])
    return paths


def test_training_features_pair_each_query_with_its_gold_and_refuse_a_missing_one(tokenizer):
    rows = [
        {"id": "q", "lang": "en", "side": "query", "text": "Anna bought a book", "context": "", "gold": ["c"]},
        {"id": "c", "lang": "de", "side": "candidate", "text": "Anna kaufte", "context": " ein Buch\n", "gold": []},
    ]
    (feat,) = ranking_inputs.encode(tokenizer, rows, TaskOptions.parse(OPTS), train=True)
    assert feat["input_ids"] == tokenizer("Anna bought a book")["input_ids"]
    # the candidate's context follows its text directly, newlines removed (the reference's input)
    assert feat["candidate_ids"] == tokenizer("Anna kaufte ein Buch")["input_ids"]
    scoring = ranking_inputs.encode(tokenizer, rows, TaskOptions.parse(OPTS), train=False)
    assert [f["example"] for f in scoring] == [0, 1]
    rows[0]["gold"] = ["elsewhere"]
    with pytest.raises(InputError, match="'q'.*one gold candidate present"):
        ranking_inputs.encode(tokenizer, rows, TaskOptions.parse(OPTS), train=True)


def test_lowercase_applies_to_queries_and_candidates(tokenizer):
    rows = [
        {"id": "q", "lang": "en", "side": "query", "text": "ANNA", "context": "", "gold": []},
        {"id": "c", "lang": "de", "side": "candidate", "text": "BUCH", "context": "", "gold": []},
    ]
    lower = ranking_inputs.encode(tokenizer, rows, TaskOptions.parse({**OPTS, "lowercase": True}), train=False)
    assert [f["input_ids"] for f in lower] == [tokenizer("anna")["input_ids"], tokenizer("buch")["input_ids"]]


def test_a_dual_encoder_learns_to_rank_and_scores_every_language_against_one_pool(
    tmp_path, ranking_files, demo_encoder_dir, monkeypatch
):
    import torch

    from workflow_scripts.common import device
    from workflow_scripts.evaluation.evaluate import _load_target_model

    data = {"mewslix": {"train": str(ranking_files["train"]), "dev": str(ranking_files["dev"])}}
    settings = phase_settings({"mewslix": OPTS}, **PHASE).replace(eval_every=2)
    log = train_phase("target", demo_encoder_dir, data, settings, seed=3, threads=1, output=tmp_path / "model")
    first, best = log["history"][0]["scores"]["mewslix"]["map_at_20"], log["best"]["scores"]["mewslix"]["map_at_20"]
    # memorised: far above the first evaluation and the chance of a 60-candidate pool
    assert best > first + 20 and best > 50, (first, best)
    heads = torch.load(tmp_path / "model" / "heads.pt", weights_only=True)
    assert heads["mewslix.logit_scale"].shape == (1,) and float(heads["mewslix.logit_scale"]) != 100.0

    model, tokenizer = _load_target_model(get_task("mewslix"), tmp_path / "model", device())
    rows = read_table(ranking_files["test"]).to_pylist()
    by_lang = pool_ranking.rows_by_language(rows, ["en", "sw"], "test")
    embedded = []
    real_embed = pool_ranking.embed_rows
    monkeypatch.setattr(pool_ranking, "embed_rows", lambda *a: embedded.append(len(a[3])) or real_embed(*a))
    scorer = pool_ranking.PoolScorer(model, get_task("mewslix"), tokenizer, SCORING, device())
    en, en_ranked = scorer.score(by_lang["en"])
    sw, _ = scorer.score(by_lang["sw"])
    # the 40-candidate pool is embedded once for both languages; then each language's 40 queries
    assert embedded == [40, 40, 40]
    assert en == sw  # the same English queries under two language labels
    assert all(len(found) == 20 for found in en_ranked.values())
    # the same as embedding everything together
    direct, _ = pool_ranking.score(
        by_lang["en"],
        real_embed(
            model,
            get_task("mewslix"),
            tokenizer,
            by_lang["en"],
            SCORING,
            device(),
        ),
        "mewslix",
    )
    assert direct == pytest.approx(en)


def test_a_language_without_queries_is_refused(ranking_files):
    rows = read_table(ranking_files["test"]).to_pylist()
    with pytest.raises(InputError, match=r"no queries for languages \['de'\]"):
        pool_ranking.rows_by_language(rows, ["en", "de"], "test.parquet")


def test_selection_ranks_the_first_queries_among_their_golds_and_the_first_candidates():
    rows = [
        {
            "id": f"q{i}",
            "lang": "en" if i % 2 else "de",
            "side": "query",
            "text": "",
            "context": "",
            "gold": [f"c{9 - i}"],
        }
        for i in range(10)
    ] + [{"id": f"c{i}", "lang": "de", "side": "candidate", "text": "", "context": "", "gold": []} for i in range(10)]
    subset = pool_ranking.selection_subset(rows, 3, "en", "dev")
    assert [r["id"] for r in subset if r["side"] == "query"] == ["q1", "q3", "q5"]
    assert sorted(r["id"] for r in subset if r["side"] == "candidate") == ["c0", "c1", "c2", "c4", "c6", "c8"]


def test_a_stage_head_carries_over_to_the_target(tmp_path, demo_encoder_dir):
    """XCOPA after SIQA: the target phase's fresh multiple-choice head takes the stage's
    trained weights (same format, whatever the number of choices)."""
    import torch

    from conftest import local_settings
    from workflow_scripts.data.prepare import prepare
    from workflow_scripts.models.heads import make_head

    prepare("hellaswag", "train", local_settings("Rowan/hellaswag"), tmp_path / "hs.parquet")
    data = {"hellaswag": {"train": str(tmp_path / "hs.parquet"), "dev": str(tmp_path / "hs.parquet")}}
    tasks = {"hellaswag": {"batch_size": 8, "epochs": 1, "max_length": 40, "select_language": "en"}}
    settings = phase_settings(tasks, **PHASE, max_steps=4)
    train_phase("target", demo_encoder_dir, data, settings, seed=1, threads=1, output=tmp_path / "stage")
    saved = torch.load(tmp_path / "stage" / "heads.pt", weights_only=True)
    heads = {"xcopa": make_head("multiple_choice", 32, 0, 0.0, 0.02)}
    carry_head(tmp_path / "stage", heads, "hellaswag", "xcopa")
    assert all(
        torch.equal(heads["xcopa"].state_dict()[k], saved[f"hellaswag.{k}"]) for k in heads["xcopa"].state_dict()
    )
    with pytest.raises(InputError, match="no trained head 'siqa'"):
        carry_head(tmp_path / "stage", heads, "siqa", "xcopa")
    wrong = {"xcopa": make_head("classification", 32, 3, 0.0, 0.02)}
    with pytest.raises(InputError, match="does not fit"):
        carry_head(tmp_path / "stage", wrong, "hellaswag", "xcopa")
    log = json.loads((tmp_path / "stage" / "train_log.json").read_text())
    assert log["total_steps"] == 4
