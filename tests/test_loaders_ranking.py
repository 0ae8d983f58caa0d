"""Mewsli-X and LAReQA loaders (loaders/ranking.py): queries built as XTREME-R's reference
builds them, gold candidates linked across languages, bad rows dropped and counted."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from workflow_scripts.data.loaders.ranking import lareqa_rows, mention_query, sentence_breaks
from workflow_scripts.data.prepare import prepare, provenance, read_table


def test_a_mention_query_is_one_marked_sentence_with_the_mention_prepended():
    text = "First sentence here. The verdict for {old} Smith came back.\\nLater."
    context = {"text": text, "sentence_spans": [{"start": 0, "end": 20}, {"start": 21, "end": 59},
                                                {"start": 60, "end": len(text)}]}
    start = text.index("Smith")
    mention = {"example_id": "m1", "entity_id": "Q1", "mention_span": {"start": start, "end": start + 5,
                                                                       "text": "Smith"}}
    # braces already in the text become parentheses; one sentence of context
    assert mention_query(context, mention) == "Smith: The verdict for (old) { Smith } came back."
    across = {**mention, "mention_span": {"start": 15, "end": 25, "text": text[15:25]}}
    assert mention_query(context, across) is None


def test_lareqa_golds_are_the_answer_sentences_of_the_same_question_in_every_language():
    def row(lang, qid, context, answer_start):
        return {"id": qid, "question": f"{lang} q", "context": context,
                "answers": {"text": ["x"], "answer_start": [answer_start]}}

    en = "Anna came. Peter left! Maria stayed?"
    de = "Anna kam. Peter ging! Maria blieb?"
    counts = Counter()
    rows = list(lareqa_rows({"en": [row("en", "q1", en, en.index("Peter")), row("en", "q2", en, 500)],
                             "de": [row("de", "q1", de, de.index("Peter"))]}, counts))
    queries = {r["id"]: r for r in rows if r["side"] == "query"}
    assert queries["q1_en"]["gold"] == queries["q1_de"]["gold"] == ["de_1_1", "en_1_1"]
    assert "q2_en" not in queries and counts["answer_in_no_sentence"] == 1  # dropped, counted
    candidates = [r for r in rows if r["side"] == "candidate"]
    assert [r["text"] for r in candidates if r["lang"] == "en"] == ["Anna came.", "Peter left!", "Maria stayed?"]
    assert all(r["context"] in (en, de) for r in candidates)
    assert counts["paragraphs_split_by_rule"] == 2
    assert sentence_breaks("一。二。") == [(0, 2), (2, 4)]


def load_german_mentions(tmp_path, mentions: list[dict]) -> Path:
    """One candidate (Q1, "Anna lives here.") and one German article "Anna kam." with the given
    mentions, in the Hub mirror's layout; the prepared test split's path."""
    hub = tmp_path / "hub" / "izhx/mewsli-x"
    entity = {"entity_id": "Q1", "title": "A", "description": "Anna lives here.", "description_language": "en",
              "description_url": "u", "sentence_spans": [{"start": 0, "end": 16}]}
    (hub / "candidate_entities").mkdir(parents=True)
    (hub / "candidate_entities/test.jsonl").write_text(json.dumps(entity) + "\n")
    (hub / "de").mkdir()
    context = {"text": "Anna kam.", "sentence_spans": [{"start": 0, "end": 9}], "language": "de"}
    (hub / "de/test.jsonl").write_text(json.dumps({"context": context, "mentions": mentions}) + "\n")
    out = tmp_path / "test.parquet"
    prepare("mewslix", "test", {"source": "local", "local_root": str(tmp_path / "hub"),
                                "hub": {"path": "izhx/mewsli-x"}, "languages": ["de"]}, out)
    return out


def test_mewslix_drops_and_counts_mentions_whose_entity_is_not_a_candidate(tmp_path):
    mentions = [{"example_id": f"m{i}", "entity_id": e, "mention_span": {"start": 0, "end": 4, "text": "Anna"}}
                for i, e in enumerate(["Q1", "Q404"])]
    out = load_german_mentions(tmp_path, mentions)
    rows = read_table(out).to_pylist()
    assert [r["id"] for r in rows if r["side"] == "query"] == ["m0"]
    report = provenance(out)["report"]
    assert report["load_counts"]["gold_not_in_pool"] == 1 and report["version"] == "20220518_6"


def test_real_xquad_r_links_11_gold_answers_per_question_and_the_oracle_scores_100():
    """tests/real_data/xquad_r: the first two paragraphs of XQuAD-R in its 11 languages
    (github google-research-datasets/lareqa), as the Hub's rows (one per question)."""
    from workflow_scripts.evaluation.ranking import map_at_k

    root = Path(__file__).parent / "real_data" / "xquad_r"
    by_lang = {}
    for path in sorted(root.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        by_lang[path.stem] = [{"id": qa["id"], "question": qa["question"], "context": p["context"],
                               "sentence_breaks": p["sentence_breaks"],
                               "answers": {"text": [a["text"] for a in qa["answers"]],
                                           "answer_start": [a["answer_start"] for a in qa["answers"]]}}
                              for article in data for p in article["paragraphs"] for qa in p["qas"]]
    counts = Counter()
    rows = list(lareqa_rows(by_lang, counts))
    queries = [r for r in rows if r["side"] == "query"]
    candidates = [r for r in rows if r["side"] == "candidate"]
    assert len(by_lang) == 11 and len(queries) == 11 * 30 and not counts
    # every question's answer sentence is found in all 11 languages: 11 gold answers each
    assert all(len(r["gold"]) == 11 and {g.split("_")[0] for g in r["gold"]} == set(by_lang) for r in queries)
    pool = {r["id"] for r in candidates}
    ranked = {r["id"]: list(r["gold"]) + sorted(pool - set(r["gold"]))[:9] for r in queries}
    assert map_at_k(ranked, {r["id"]: r["gold"] for r in queries}, 20, "lareqa") == {"map_at_20": 100.0}
    # a gold answer ranked 12th instead of 11th costs something: the oracle's 100 is not a given
    worse = {q: ids[:10] + [ids[11], ids[10]] + ids[12:] for q, ids in ranked.items()}
    assert map_at_k(worse, {r["id"]: r["gold"] for r in queries}, 20, "lareqa")["map_at_20"] < 100.0


MEWSLIX_REAL = Path(__file__).parent / "real_data" / "mewslix"


def test_official_mewslix_mock_test_data_scores_what_evaluate_test_expects():
    """google-research/xtreme's mock Mewsli-X labels and predictions (one real test id per
    language): its evaluate_test.py expects avg_map@20 = 14.39025156130419."""
    from workflow_scripts.evaluation.ranking import MEWSLIX, map_at_k

    scores = []
    for labels in sorted((MEWSLIX_REAL / "xtreme_mock" / "labels").glob("test-*.json")):
        gold = json.loads(labels.read_text())
        ranked = json.loads((MEWSLIX_REAL / "xtreme_mock" / "predictions" / labels.name).read_text())
        scores.append(map_at_k(ranked, gold, 20, convention=MEWSLIX)["map_at_20"])
    assert len(scores) == 11
    assert sum(scores) / len(scores) == pytest.approx(14.39025156130419, abs=1e-9)


def test_real_wikinews_mentions_load_as_the_reference_builds_them_and_the_oracle_scores_100(tmp_path):
    """Google's release-format fixture (two real WikiNews articles, three linked mentions):
    the text matches its MD5, each query is the reference's string, and ranking each
    mention's gold entity first scores mAP@20 = 100. No real candidate rows are public, so
    the pool's descriptions here are the test's own (the gold ids are the real ones)."""
    import hashlib

    from workflow_scripts.evaluation.ranking import MEWSLIX, map_at_k

    articles = [json.loads(line) for line in (MEWSLIX_REAL / "example_mentions.jsonl").read_text("utf-8").splitlines()]
    for article in articles:
        text = article["context"]["text"]
        for mention in article["mentions"]:
            assert hashlib.md5(text.encode("utf-8")).hexdigest() == mention["metadata"]["text_md5"]
    helsinki = articles[0]["mentions"][0]
    assert mention_query(articles[0]["context"], helsinki) == (
        "Helsinki: In { Helsinki } , the Finnish trade union for bus and truck drivers has gone on strike on "
        "Sunday evening, mainly over the use of part-time labor.")

    hub = tmp_path / "hub" / "izhx/mewsli-x"
    golds = [m["entity_id"] for a in articles for m in a["mentions"]]
    pool = [{"entity_id": e, "title": e, "description": f"Entity {e}. Described by the test.",
             "description_language": "en", "description_url": "", "sentence_spans": [{"start": 0, "end": 6 + len(e)}]}
            for e in golds + ["Q42", "Q64"]]
    (hub / "candidate_entities").mkdir(parents=True)
    (hub / "candidate_entities/test.jsonl").write_text("".join(json.dumps(e) + "\n" for e in pool))
    for article in articles:
        lang = article["context"]["language"]
        (hub / lang).mkdir()
        (hub / lang / "validation.jsonl").write_text(json.dumps(article, ensure_ascii=False) + "\n", encoding="utf-8")
    out = tmp_path / "dev.parquet"
    prepare("mewslix", "dev", {"source": "local", "local_root": str(tmp_path / "hub"),
                               "hub": {"path": "izhx/mewsli-x"}, "languages": ["ar", "en"]}, out)
    rows = read_table(out).to_pylist()
    queries = {r["id"]: r for r in rows if r["side"] == "query"}
    assert sorted(q["lang"] for q in queries.values()) == ["ar", "ar", "en"]
    assert queries[helsinki["example_id"]]["text"] == mention_query(articles[0]["context"], helsinki)
    oracle = {qid: q["gold"] + [e["entity_id"] for e in pool if e["entity_id"] not in q["gold"]]
              for qid, q in queries.items()}
    assert map_at_k(oracle, {qid: q["gold"] for qid, q in queries.items()}, 20, convention=MEWSLIX) == {"map_at_20": 100.0}


def test_released_no_text_mentions_stop_with_the_way_to_restore_them():
    from workflow_scripts.common import InputError

    article = json.loads((MEWSLIX_REAL / "example_mentions_no_text.jsonl").read_text("utf-8").splitlines()[0])
    with pytest.raises(InputError, match="restore_text"):
        mention_query(article["context"], article["mentions"][0])


def test_a_mention_whose_span_text_disagrees_with_the_context_is_dropped_and_counted(tmp_path):
    mentions = [{"example_id": "good", "entity_id": "Q1", "mention_span": {"start": 0, "end": 4, "text": "Anna"}},
                {"example_id": "shifted", "entity_id": "Q1", "mention_span": {"start": 1, "end": 5, "text": "Anna"}}]
    out = load_german_mentions(tmp_path, mentions)
    assert [r["id"] for r in read_table(out).to_pylist() if r["side"] == "query"] == ["good"]
    assert provenance(out)["report"]["load_counts"]["span_text_mismatch"] == 1
