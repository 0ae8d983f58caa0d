"""Answer-span re-alignment with a deterministic fake translator that perturbs like MT does."""

import hashlib

import pytest

from workflow_scripts.data import read_table
from workflow_scripts.translate import CLOSE, OPEN, fuzzy_find, read_marked, translate_rows, translate_spans


def test_read_marked_cleans_context_and_points_at_answer():
    ctx, start, ans = read_marked("Er kaufte <b> das Buch </b>gestern.")
    assert ans == "das Buch"
    assert ctx[start:start + len(ans)] == ans
    assert OPEN not in ctx and CLOSE not in ctx
    assert read_marked("Er kaufte das Buch.") is None
    assert read_marked("Er <b>kaufte <b>das</b> Buch.") is None
    assert read_marked("Er </b>kaufte<b> das Buch.") is None
    assert read_marked("Er <b> </b> kaufte.") is None


def test_fuzzy_find_respects_the_distance_limit():
    context = "Gestern kaufte Anna das rote Buch am Markt."
    assert fuzzy_find("rotes Buch", context, 10) == (24, "rote Buch")
    # "Bahnhof" vs any substring is more than len/2 edits away.
    assert fuzzy_find("Bahnhof", context, 10) is None
    # The cap applies even for long answers.
    assert fuzzy_find("das rote Buch am Markt", "ganz andere Worte hier", 3) is None
    assert fuzzy_find("", context, 10) is None


def _bucket(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 100


def perturbing_translator(lost_share: int):
    """Deterministic stand-in for MT: re-cases, re-spaces and inflects; loses or breaks
    the markers for `lost_share`% of inputs; also translates answers alone the same way."""

    def translate_one(text: str) -> str:
        if not text:
            return ""
        b = _bucket(text)
        out = text.replace(".", " .").replace(",", " ,")  # re-spaced punctuation
        if OPEN in out and b < lost_share:
            kind = b % 3
            if kind == 0:
                out = out.replace(OPEN, "").replace(CLOSE, "")          # markers dropped
            elif kind == 1:
                out = out.replace(OPEN, "< b >").replace(CLOSE, "")      # markers broken
            else:
                out = out.replace(OPEN, "").replace(CLOSE, OPEN)         # moved / malformed
        if b % 4 == 0:
            out = out.replace("market", "markets")                     # inflection
        return out

    return lambda texts: [translate_one(t) for t in texts]


def test_every_kept_span_is_exact_and_stats_add_up(demo_data):
    rows = read_table(demo_data["squad.train"]).to_pylist()
    rows.append({**rows[0], "id": "no-answer", "answer_texts": [], "answer_starts": []})
    rows.append({**rows[1], "id": "wrong-start", "answer_starts": [rows[1]["answer_starts"][0] + 1]})
    out, stats = translate_spans(rows, perturbing_translator(lost_share=30), max_distance=10)
    for r in out:
        s, t = r["answer_starts"][0], r["answer_texts"][0]
        assert t and r["context"][s:s + len(t)] == t
    assert stats["kept"] == len(out)
    assert stats["recovered_by_markers"] + stats["recovered_by_fuzzy_match"] == stats["kept"]
    dropped = stats["dropped_no_answer_in_source"] + stats["dropped_unaligned"]
    assert stats["kept"] + dropped == stats["examples"] == len(rows)
    assert stats["dropped_no_answer_in_source"] == 2
    assert stats["recovered_by_fuzzy_match"] > 0


def test_recovery_rate_when_markers_survive_ninety_percent(demo_data):
    rows = read_table(demo_data["squad.train"]).to_pylist()
    _, stats = translate_spans(rows, perturbing_translator(lost_share=10), max_distance=10)
    assert stats["recovered_by_markers"] < len(rows)
    assert stats["kept"] / stats["examples"] >= 0.97


def test_classification_and_choices_keep_labels(demo_data):
    rows = read_table(demo_data["mnli.train"]).to_pylist()[:20]
    out, stats = translate_rows("classification", rows, lambda ts: [t.upper() for t in ts], "de", 10)
    assert [r["label"] for r in out] == [r["label"] for r in rows]
    assert all(r["lang"] == "de" and r["text_a"] == src["text_a"].upper() for r, src in zip(out, rows))
    mc = [{"id": "1", "lang": "en", "context": "c", "choices": ["a", "b", "", "d"], "label": 2}]
    out, _ = translate_rows("multiple_choice", mc, lambda ts: [t + "!" if t else "" for t in ts], "de", 10)
    assert out[0]["choices"] == ["a!", "b!", "", "d!"] and out[0]["label"] == 2
    with pytest.raises(ValueError):
        translate_rows("tagging", [], lambda ts: ts, "de", 10)
