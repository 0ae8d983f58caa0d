"""Loaders, features and scorers on samples of the real releases (tests/real_data, see its README).

- XQuAD as its authors released it, converted the way the Hub's builder does (contexts,
  questions and answer texts stripped, ``answer_start`` left as it was), must load in all
  11 languages with the shifted answers re-located where the release itself puts them.
- UD v2.5 ``.conllu`` excerpts must give exactly what XTREME's own preprocessing gives
  (``xtreme_udpos_reference/`` was produced by running it on the same excerpts).
- Oracles: gold spans and gold tags pushed through encode -> decode/merge -> metric give 100.
"""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from conftest import gold_span_logits
from workflow_scripts.data.features import IGNORE, decode_spans, encode, merge_tags
from workflow_scripts.data.prepare import prepare, provenance, read_table
from workflow_scripts.evaluation.metrics import seqeval_f1, squad_v1
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.task_options import FormatOptions
from workflow_scripts.spec.tasks import get_task

pytestmark = pytest.mark.unit

REAL = Path(__file__).resolve().parent / "real_data"
UD_RELEASE = REAL / "ud-treebanks-v2.5"
XQUAD_LANGS = ["ar", "de", "el", "en", "es", "hi", "ru", "th", "tr", "vi", "zh"]
# Questions whose context starts with whitespace in the real XQuAD (all of them are in the
# sample): the Hub's stripped copy shifts their answers.
XQUAD_SHIFTED = {"ar": 26, "de": 0, "el": 0, "en": 5, "es": 5, "hi": 13, "ru": 5, "th": 10, "tr": 0, "vi": 5, "zh": 100}


def release(lang: str) -> dict:
    return json.loads((REAL / "xquad" / f"xquad.{lang}.json").read_text(encoding="utf-8"))


def hub_rows(doc: dict):
    """The Hub builder's conversion of a SQuAD-format file: every string stripped, offsets kept."""
    for article in doc["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                yield {
                    "id": qa["id"],
                    "title": article.get("title", "").strip(),
                    "context": para["context"].strip(),
                    "question": qa["question"].strip(),
                    "answers": {
                        "answer_start": [a["answer_start"] for a in qa["answers"]],
                        "text": [a["text"].strip() for a in qa["answers"]],
                    },
                }


def write_mirror(root: Path, config: str, split: str, rows) -> None:
    path = root / "google" / "xtreme" / config / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


@pytest.fixture(scope="module")
def xquad_table(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    for lang in XQUAD_LANGS:
        write_mirror(root, f"XQuAD.{lang}", "validation", hub_rows(release(lang)))
    out = root / "xquad.parquet"
    prepare(
        "xquad",
        "test",
        DataSettings.parse(
            {"source": "local", "local_root": str(root), "hub": {"path": "google/xtreme"}, "languages": XQUAD_LANGS}
        ),
        out,
    )
    return out


def test_stripped_hub_xquad_loads_in_every_language_with_answers_relocated(xquad_table):
    repair = provenance(xquad_table)["report"]["answer_repair"]
    assert {lang: c.get("questions_relocated", 0) for lang, c in repair.items()} == XQUAD_SHIFTED
    assert all(c.get("answers_unresolvable", 0) == 0 for c in repair.values())
    rows = read_table(xquad_table).to_pylist()
    # No question is lost, and each answer is found where the release itself puts it.
    for lang in XQUAD_LANGS:
        original = {
            f"{qa['id']}-{lang}": (para["context"], qa["answers"][0])
            for a in release(lang)["data"]
            for para in a["paragraphs"]
            for qa in para["qas"]
        }
        mine = {r["id"]: r for r in rows if r["lang"] == lang}
        assert set(mine) == set(original) and repair[lang]["questions"] == len(original)
        for uid, (context, answer) in original.items():
            stripped = len(context) - len(context.lstrip())
            r = mine[uid]
            assert r["answer_starts"][0] == answer["answer_start"] - stripped
            assert r["context"][r["answer_starts"][0] :][: len(r["answer_texts"][0])] == r["answer_texts"][0]
    # A row that must not abort the whole split.
    zh = next(r for r in rows if r["id"] == "57096b66200fba1400367fa7-zh")
    assert zh["answer_texts"] == ["2007年2月8日"] and zh["context"].startswith("2007年2月8日")


def test_span_repair_keeps_unlocatable_answers_for_evaluation_only(tmp_path, caplog):
    base = next(hub_rows(release("en")))
    start = base["answers"]["answer_start"][0]
    good = dict(base)
    shifted = {**base, "id": "shifted", "answers": {**base["answers"], "answer_start": [start + 3]}}  # stripped prefix
    moved = {**base, "id": "moved", "answers": {**base["answers"], "answer_start": [start - 3]}}
    lost = {**base, "id": "lost", "answers": {"text": ["no such phrase"], "answer_start": [5]}}
    root = tmp_path / "hub"
    for split in ("train", "validation"):
        path = root / "rajpurkar" / "squad" / "plain_text" / f"{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in (good, shifted, moved, lost)))
    settings = DataSettings.parse({"source": "local", "local_root": str(root), "hub": {"path": "rajpurkar/squad"}})
    prepare("squad", "train", settings, tmp_path / "train.parquet")
    prepare("squad", "dev", settings, tmp_path / "dev.parquet")
    train = {r["id"]: r for r in read_table(tmp_path / "train.parquet").to_pylist()}
    dev = {r["id"]: r for r in read_table(tmp_path / "dev.parquet").to_pylist()}
    assert set(train) == {good["id"], "shifted", "moved"}
    assert train["moved"]["answer_starts"] == train["shifted"]["answer_starts"] == [start]
    assert dev["lost"]["answer_texts"] == ["no such phrase"] and dev["lost"]["answer_starts"] == [-1]
    counts = provenance(tmp_path / "train.parquet")["report"]["answer_repair"]["en"]
    assert (counts["questions_dropped"], counts["answers_prefix"], counts["answers_nearest"]) == (1, 1, 1)
    assert "lost" in caplog.text  # dropped questions are named in the log


def test_a_row_that_is_not_a_span_row_names_file_and_row(tmp_path):
    from workflow_scripts.spec.basics import InputError

    path = tmp_path / "rajpurkar" / "squad" / "plain_text" / "train.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "q1", "context": "c", "question": "q"}) + "\n")
    with pytest.raises(InputError, match=r"rajpurkar/squad plain_text train row 0: question q1 is not a span row"):
        prepare(
            "squad",
            "train",
            DataSettings.parse({"source": "local", "local_root": str(tmp_path), "hub": {"path": "rajpurkar/squad"}}),
            tmp_path / "out.parquet",
        )


def strip_like_the_hub(row: dict) -> dict:
    """What google/xtreme's builder does to a SQuAD-format row: strip every string, keep offsets."""
    return {
        **row,
        "context": row["context"].strip(),
        "question": row["question"].strip(),
        "answers": {
            "answer_start": list(row["answers"]["answer_start"]),
            "text": [t.strip() for t in row["answers"]["text"]],
        },
    }


def test_stripped_hub_mlqa_and_tydiqa_samples_load_without_loss(tmp_path):
    # MLQA de-de dev: rows as the Hub's mlqa loader gives them, stripped as google/xtreme does.
    mlqa = [json.loads(line) for line in (REAL / "mlqa" / "mlqa.de.de.validation.jsonl").open(encoding="utf-8")]
    write_mirror(tmp_path, "MLQA.de.de", "validation", (strip_like_the_hub(r) for r in mlqa))
    out = tmp_path / "mlqa.parquet"
    prepare(
        "mlqa",
        "dev",
        DataSettings.parse(
            {"source": "local", "local_root": str(tmp_path), "hub": {"path": "google/xtreme"}, "languages": ["de"]}
        ),
        out,
    )
    assert [r["id"] for r in read_table(out).to_pylist()] == [f"{r['id']}-de" for r in mlqa]
    assert provenance(out)["report"]["answer_repair"]["de"].get("answers_unresolvable", 0) == 0
    # TyDiQA-GoldP: the real dev (Arabic) and train (Finnish) paragraphs. Train keeps English
    # only, so the Finnish ones go through the evaluation split here; "Altruismi" starts with
    # three spaces, which the Hub strips without moving answer_start.
    tydi = []
    for split in ("dev", "train"):
        doc = json.loads((REAL / "tydiqa" / f"tydiqa-goldp-v1.1-{split}.json").read_text(encoding="utf-8"))
        tydi += list(hub_rows(doc))
    write_mirror(tmp_path, "tydiqa", "validation", tydi)
    out = tmp_path / "tydiqa.parquet"
    prepare(
        "tydiqa",
        "test",
        DataSettings.parse(
            {
                "source": "local",
                "local_root": str(tmp_path),
                "hub": {"path": "google/xtreme"},
                "languages": ["ar", "fi"],
            }
        ),
        out,
    )
    rows = {r["id"]: r for r in read_table(out).to_pylist()}
    assert set(rows) == {r["id"] for r in tydi}
    altruism = rows["finnish-8742325368463988542-0"]
    assert altruism["answer_starts"] == [44 - 3]
    assert altruism["context"][41:].startswith(altruism["answer_texts"][0])
    repair = provenance(out)["report"]["answer_repair"]
    assert repair["fi"]["questions_relocated"] == 1 and repair["ar"].get("questions_relocated", 0) == 0


# ----- UD-POS -------------------------------------------------------------------------------

UD_EXPECTED = {  # (split, lang): (sentences, words) of XTREME's preprocessing on the excerpts
    ("test", "de"): (26, 417),
    ("test", "es"): (20, 473),
    ("test", "ar"): (15, 341),
    ("test", "he"): (15, 274),
    ("test", "el"): (15, 449),
    ("test", "zh"): (15, 395),
    ("test", "en"): (10, 233),
    ("dev", "el"): (10, 312),
    ("train", "en"): (30, 476),
}


def reference(split: str, lang: str) -> list[list[tuple[str, str]]]:
    text = (REAL / "xtreme_udpos_reference" / f"{split}-{lang}.tsv").read_text(encoding="utf-8")
    return [
        [tuple(line.split("\t")) for line in block.split("\n") if line] for block in text.split("\n\n") if block.strip()
    ]


def load_udpos(tmp_path: Path, split: str, langs: list[str], release_path: Path = UD_RELEASE) -> Path:
    out = tmp_path / f"udpos-{split}.parquet"
    prepare(
        "udpos",
        split,
        DataSettings.parse(
            {
                "source": "local",
                "local_root": str(tmp_path),
                "hub": {"path": "google/xtreme"},
                "languages": langs,
                "options": {"ud_release": str(release_path)},
            }
        ),
        out,
    )
    return out


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_udpos_from_the_release_matches_xtreme_preprocessing(tmp_path, split):
    langs = sorted({lang for s, lang in UD_EXPECTED if s == split})
    out = load_udpos(tmp_path, split, langs)  # train: the grid asks for English (no setting trains on others here)
    rows = read_table(out).to_pylist()
    for lang in langs:
        mine = [list(zip(r["tokens"], r["tags"])) for r in rows if r["lang"] == lang]
        assert mine == reference(split, lang)
        assert (len(mine), sum(map(len, mine))) == UD_EXPECTED[(split, lang)]
    report = provenance(out)["report"]
    assert report["udpos_source"] == "ud_release"
    if split == "train":  # every English treebank's train file; ESL ships without text
        assert report["udpos_files"]["en"] == [
            "UD_English-ESL/en_esl-ud-train.conllu",
            "UD_English-GUM/en_gum-ud-train.conllu",
            "UD_English-ParTUT/en_partut-ud-train.conllu",
        ]
        assert report["udpos_counts"]["en"]["sentences_without_text"] == 5


def test_udpos_selects_files_by_language_code_and_fuses_multiword_tokens(tmp_path):
    out = load_udpos(tmp_path, "test", ["el", "zh", "de", "es", "he"])
    files = provenance(out)["report"]["udpos_files"]
    assert files["el"] == ["UD_Greek-GDT/el_gdt-ud-test.conllu"]  # never grc_perseus (Ancient Greek)
    assert files["zh"] == ["UD_Chinese-GSD/zh_gsd-ud-test.conllu"]  # never lzh_kyoto (Classical Chinese)
    words = Counter((r["lang"], w, t) for r in read_table(out).to_pylist() for w, t in zip(r["tokens"], r["tags"]))
    # Fused forms carry the UPOS of the span's head: "zum" = zu + dem, "del" = de + el; in
    # "al" = a + el the determiner is the higher word here.
    assert words[("de", "zum", "ADP")] == 1 and words[("de", "im", "ADP")] == 4
    assert words[("es", "del", "ADP")] == 15 and words[("es", "al", "DET")] == 1
    he = provenance(out)["report"]["udpos_counts"]["he"]
    assert he["multiword_tokens"] == 78 and he["words"] == UD_EXPECTED[("test", "he")][1]


def test_udpos_reads_the_release_archive_as_well_as_its_directory(tmp_path):
    archive = tmp_path / "ud-treebanks-v2.5.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(UD_RELEASE, arcname="ud-treebanks-v2.5")
    from_dir = read_table(load_udpos(tmp_path / "a", "test", ["de", "el"])).to_pylist()
    from_tgz_path = load_udpos(tmp_path / "b", "test", ["de", "el"], archive)
    assert read_table(from_tgz_path).to_pylist() == from_dir
    assert provenance(from_tgz_path)["report"]["release"]["sha256"] is not None


# ----- Tatoeba --------------------------------------------------------------------------------


def test_tatoeba_loses_no_line(tmp_path):
    codes = {"de": "deu", "ru": "rus", "zh": "cmn", "sw": "swh"}
    for code in codes.values():
        src = (REAL / "tatoeba" / f"tatoeba.{code}-eng.{code}").read_text(encoding="utf-8").splitlines(keepends=True)
        eng = (REAL / "tatoeba" / f"tatoeba.{code}-eng.eng").read_text(encoding="utf-8").splitlines(keepends=True)
        assert len(src) == len(eng) > 0
        # The Hub copy keeps each file line with its newline, as LASER's files do.
        write_mirror(
            tmp_path,
            f"tatoeba.{code}",
            "validation",
            (
                {"source_sentence": s, "target_sentence": e, "source_lang": code, "target_lang": "eng"}
                for s, e in zip(src, eng)
            ),
        )
    out = tmp_path / "tatoeba.parquet"
    prepare(
        "tatoeba",
        "test",
        DataSettings.parse(
            {"source": "local", "local_root": str(tmp_path), "hub": {"path": "google/xtreme"}, "languages": list(codes)}
        ),
        out,
    )
    rows = read_table(out).to_pylist()
    for lang, code in codes.items():
        mine = [(r["source"], r["target"]) for r in rows if r["lang"] == lang]
        src = (REAL / "tatoeba" / f"tatoeba.{code}-eng.{code}").read_text(encoding="utf-8").splitlines()
        eng = (REAL / "tatoeba" / f"tatoeba.{code}-eng.eng").read_text(encoding="utf-8").splitlines()
        assert mine == [(s.strip(), e.strip()) for s, e in zip(src, eng)]


# ----- oracles: gold in, 100 out --------------------------------------------------------------


@pytest.fixture(scope="module")
def real_tokenizer():
    """XLM-R's tokenizer class (SentencePiece unigram, NFKC like XLM-R's nmt_nfkc) with a
    vocabulary trained on the real samples: the real XLM-R vocabulary is not reachable here."""
    from transformers import XLMRobertaTokenizer

    from workflow_scripts.models.demo_models import train_unigram_vocab

    texts = [
        p["context"] + " " + qa["question"]
        for lang in XQUAD_LANGS
        for a in release(lang)["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    ]
    texts += [
        " ".join(w for w, _ in s)
        for f in (REAL / "xtreme_udpos_reference").glob("*.tsv")
        for s in reference(*f.stem.split("-"))
    ]
    return XLMRobertaTokenizer(vocab=train_unigram_vocab(texts, 3000))


def test_span_oracle_gold_spans_decode_to_f1_100(xquad_table, real_tokenizer):
    task = get_task("xquad")
    # The paper's QA settings (docs/protocol.md §3).
    opts = FormatOptions(max_length=384, doc_stride=128, max_query_length=64, n_best=20, max_answer_length=30)
    rows = read_table(xquad_table).to_pylist()
    encoded = encode(task, real_tokenizer, rows, opts, train=True)
    preds = decode_spans(encoded, *gold_span_logits(encoded), opts, allow_null=False)
    # The text of each answer's gold token span; answers longer than max_answer_length tokens
    # cannot be decoded and are counted and excluded by id.
    gold_span, too_long = {}, set()
    for f in encoded.features:
        if f["start_positions"]:
            row = rows[f["example"]]
            gold_span[row["id"]] = row["context"][
                f["offsets"][f["start_positions"]][0] : f["offsets"][f["end_positions"]][1]
            ]
            if f["end_positions"] - f["start_positions"] + 1 > opts.max_answer_length:
                too_long.add(row["id"])
    assert set(gold_span) == {r["id"] for r in rows}  # every answer lies whole inside some window
    # A few per cent are too long with this small vocabulary (more pieces a word than XLM-R's).
    assert len(too_long) < 0.1 * len(rows), sorted(too_long)
    decodable = {uid: text for uid, text in gold_span.items() if uid not in too_long}
    assert {uid: preds[uid] for uid in decodable} == decodable
    for lang in XQUAD_LANGS:
        golds = {r["id"]: r["answer_texts"] for r in rows if r["lang"] == lang and r["id"] in decodable}
        # The token span is the answer where the tokenizer's boundaries fall on the answer's,
        # and a few characters more where a piece runs past it (CJK and Thai have no spaces).
        assert all(golds[uid][0] in preds[uid] for uid in golds)
        aligned = {uid: g for uid, g in golds.items() if preds[uid] == g[0]}
        assert len(aligned) >= 0.8 * len(golds), lang
        assert squad_v1(preds, aligned) == {"exact_match": 100.0, "f1": 100.0}


def test_tag_oracle_gold_tags_merge_back_to_f1_100_across_split_sentences(tmp_path, real_tokenizer):
    task = get_task("udpos")
    out = load_udpos(tmp_path, "test", ["de", "es", "ar", "he", "el", "zh", "en"])
    rows = read_table(out).to_pylist()
    # A short max length forces long sentences (the 62-word German one) into several pieces.
    encoded = encode(task, real_tokenizer, rows, FormatOptions(max_length=24), train=False)
    assert max(Counter(f["example"] for f in encoded.features).values()) > 3
    gold_index = [[task.labels.index(t) for t in r["tags"]] for r in rows]
    logits = []
    for f in encoded.features:
        arr = np.zeros((len(f["input_ids"]), task.num_labels))
        word = f["word_start"]
        for k, lab in enumerate(f["labels"]):
            if lab != IGNORE:
                arr[k, gold_index[f["example"]][word]] = 1.0
                word += 1
        logits.append(arr)
    merged = merge_tags(encoded, logits, task.labels)
    assert [len(m) for m in merged] == [len(r["tokens"]) for r in rows]  # no word lost or added
    assert seqeval_f1(merged, [r["tags"] for r in rows]) == {"f1": 100.0}


def test_release_archives_are_downloaded_once_into_the_cache(tmp_path, monkeypatch):
    import io
    import urllib.request

    from workflow_scripts.data.loaders.source import fetch_archive

    archive = tmp_path / "ud-treebanks-v2.5.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(UD_RELEASE / "UD_German-GSD", arcname="ud-treebanks-v2.5/UD_German-GSD")
    calls = []

    class Response(io.BytesIO):  # the LINDAT server's answer, played by a local file
        headers: ClassVar[dict[str, str]] = {"Content-Length": str(archive.stat().st_size)}

    def fake_urlopen(url):
        calls.append(url)
        return Response(archive.read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    url = "https://lindat.example/ud-treebanks-v2.5.tgz"
    first = fetch_archive(url, cache_dir=tmp_path / "cache")
    second = fetch_archive(url, cache_dir=tmp_path / "cache")
    assert first == second == tmp_path / "cache" / "ud-treebanks-v2.5.tgz" and calls == [url]
    assert first.read_bytes() == archive.read_bytes()


def test_a_broken_sentence_is_dropped_counted_and_named_not_the_split(tmp_path, caplog):
    import shutil

    release_dir = tmp_path / "release"
    shutil.copytree(UD_RELEASE / "UD_German-GSD", release_dir / "UD_German-GSD")
    path = release_dir / "UD_German-GSD" / "de_gsd-ud-test.conllu"
    sentences = path.read_text(encoding="utf-8").split("\n\n")
    sentences[1] = sentences[1].replace("\n1\t", "\nx1\t", 1)  # a corrupt token id in the 2nd sentence
    path.write_text("\n\n".join(sentences), encoding="utf-8")
    out = load_udpos(tmp_path, "test", ["de"], release_dir)
    rows = [list(zip(r["tokens"], r["tags"])) for r in read_table(out).to_pylist()]
    expected = reference("test", "de")
    assert rows == expected[:1] + expected[2:]
    assert provenance(out)["report"]["udpos_counts"]["de"]["sentences_unreadable"] == 1
    assert "de_gsd-ud-test.conllu, line" in caplog.text and "'x1'" in caplog.text


def test_bucc_and_ud_releases_in_hub_mode_never_ask_the_hub(tmp_path, monkeypatch):
    """The paper preset (data.source: hub) reads BUCC and UD from their release archives;
    the Hub is asked for a commit sha only for data that came from it."""
    from workflow_scripts.data.loaders.source import Source

    def no_hub(self):
        raise AssertionError(f"asked the Hub about {self.path}")

    monkeypatch.setattr(Source, "resolved_sha", no_hub)
    demo = REAL.parent.parent / "demo" / "hub" / "bucc2018"
    archives = tmp_path / "archives"
    archives.mkdir()
    for bucc_set in ("sample", "training"):
        with tarfile.open(archives / f"bucc2018-de-en.{bucc_set}-gold.tar.bz2", "w:bz2") as tar:
            for suffix in ("de", "en", "gold"):
                tar.add(demo / f"de-en.{bucc_set}.{suffix}", arcname=f"bucc2018/de-en.{bucc_set}.{suffix}")
    out = tmp_path / "bucc.parquet"
    prepare(
        "bucc",
        "test",
        DataSettings.parse(
            {"source": "hub", "hub": {"path": "bucc2018"}, "languages": ["de"], "options": {"archives": str(archives)}}
        ),
        out,
    )
    rows = read_table(out).to_pylist()
    assert {r["side"] for r in rows} == {"source", "en"} and any(r["gold"] for r in rows)
    meta = provenance(out)
    assert meta["resolved_sha"] is None and meta["report"]["release"]["name"] == "BUCC 2018"
    ud = tmp_path / "ud.parquet"
    prepare(
        "udpos",
        "dev",
        DataSettings.parse(
            {
                "source": "hub",
                "hub": {"path": "google/xtreme"},
                "languages": ["el"],
                "options": {"ud_release": str(UD_RELEASE)},
            }
        ),
        ud,
    )
    assert provenance(ud)["report"]["release"]["name"] == "UD v2.5"
