"""XTREME-R loaders: the XCOPA recipe (SIQA, COPA, XCOPA) on the demo mirror and on real XCOPA
rows (tests/real_data/xcopa, see its README), and the wider language lists of PAN-X, UD-POS,
Tatoeba and XQuAD, whose extra languages come from a second source named in the report."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from conftest import DEMO_HUB, local_settings
from workflow_scripts.data.prepare import prepare, provenance, read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings

pytestmark = pytest.mark.unit

REAL = Path(__file__).resolve().parent / "real_data"
XCOPA_SAMPLE = ["et", "qu", "sw", "th", "zh"]


def load(tmp_path: Path, task: str, split: str, settings: DataSettings) -> tuple[list[dict], dict]:
    out = tmp_path / f"{task}-{split}.parquet"
    prepare(task, split, settings, out)
    return read_table(out).to_pylist(), provenance(out)["report"]


def write_rows(root: Path, path: str, config: str, split: str, rows: list[dict]) -> None:
    file = root / path / config / f"{split}.jsonl"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----- the XCOPA recipe on the demo mirror ------------------------------------------------------


@pytest.mark.parametrize(
    "task,split,langs,n",
    [
        ("siqa", "train", None, 600),
        ("siqa", "dev", None, 100),
        ("copa", "train", None, 400),
        ("copa", "dev", None, 100),
        ("xcopa", "dev", ["de", "ru", "sw"], 150),
        ("xcopa", "test", ["de", "ru", "sw"], 300),
    ],
)
def test_xcopa_recipe_loads_the_demo_mirror(tmp_path, task, split, langs, n):
    path = {"siqa": "allenai/social_i_qa", "copa": "aps/super_glue", "xcopa": "cambridgeltl/xcopa"}[task]
    rows, report = load(tmp_path, task, split, local_settings(path, langs))
    n_choices = 3 if task == "siqa" else 2
    assert len(rows) == n and len({r["id"] for r in rows}) == n
    assert {r["lang"] for r in rows} == set(langs or ["en"])
    assert all(len(r["choices"]) == n_choices and 0 <= r["label"] < n_choices for r in rows)
    assert len({r["label"] for r in rows}) == n_choices  # every position holds answers
    if task == "siqa":
        hub = jsonl(DEMO_HUB / path / "default" / f"{ {'train': 'train', 'dev': 'validation'}[split] }.jsonl")
        assert [r["context"] for r in rows] == [f"{h['context']} {h['question']}" for h in hub]
        assert [r["label"] for r in rows] == [int(h["label"]) - 1 for h in hub]
    else:
        assert all(r["context"].endswith((" What was the cause?", " What was the effect?")) for r in rows)
    assert all(c.get("examples") for c in report["load_counts"].values())
    if task == "xcopa":  # the demo's languages are parallel and agree on every question
        assert report["question_check"]["items_with_majority"] == n // 3
        assert not any(c.get("question_disagrees") for c in report["load_counts"].values())


# ----- real XCOPA rows ------------------------------------------------------------------------------


@pytest.fixture()
def real_xcopa(tmp_path) -> Path:
    """The release's rows (the Hub's columns are the release's) in the Hub mirror layout."""
    root = tmp_path / "hub"
    for lang in XCOPA_SAMPLE:
        for release_split, hub_split in (("val", "validation"), ("test", "test")):
            write_rows(
                root,
                "cambridgeltl/xcopa",
                lang,
                hub_split,
                jsonl(REAL / "xcopa" / lang / f"{release_split}.{lang}.jsonl"),
            )
    return root


def xcopa_settings(root: Path, options: dict | None = None) -> DataSettings:
    return DataSettings.parse(
        {
            "source": "local",
            "local_root": str(root),
            "hub": {"path": "cambridgeltl/xcopa"},
            "languages": XCOPA_SAMPLE,
            "options": options or {},
        }
    )


@pytest.mark.parametrize(
    "split,release_split,disagree", [("dev", "val", {"th": 13, "sw": 1}), ("test", "test", {"th": 11, "sw": 1})]
)
def test_real_xcopa_builds_the_reference_input(tmp_path, real_xcopa, split, release_split, disagree):
    rows, report = load(tmp_path, "xcopa", split, xcopa_settings(real_xcopa))
    assert len(rows) == 20 * len(XCOPA_SAMPLE)
    for lang in XCOPA_SAMPLE:
        release = jsonl(REAL / "xcopa" / lang / f"{release_split}.{lang}.jsonl")
        mine = [r for r in rows if r["lang"] == lang]
        assert [r["id"] for r in mine] == [f"xcopa-{split}-{lang}-{x['idx']}" for x in release]
        # run_xcopa.py: first segment f"{premise} What was the {question}?", the choices as
        # they are, the label unchanged.
        assert [r["context"] for r in mine] == [f"{x['premise']} What was the {x['question']}?" for x in release]
        assert [r["choices"] for r in mine] == [[x["choice1"], x["choice2"]] for x in release]
        assert [r["label"] for r in mine] == [x["label"] for x in release]
    # Thai says "effect" on every row, and one Swahili row disagrees too: reported, kept.
    counts = report["load_counts"]
    assert {
        lang: c.get("question_disagrees", 0) for lang, c in counts.items() if c.get("question_disagrees")
    } == disagree
    assert report["question_check"] == {"languages": XCOPA_SAMPLE, "items_with_majority": 20, "repair": "none"}


def test_real_xcopa_questions_repaired_by_the_majority_on_request(tmp_path, real_xcopa):
    rows, report = load(tmp_path, "xcopa", "dev", xcopa_settings(real_xcopa, {"question_repair": "majority"}))
    by_id = {r["id"]: r for r in rows}
    # Validation idx 4: "The burger meat browned." -- its cause; Thai's row says "effect".
    assert by_id["xcopa-dev-th-4"]["context"] == "เนื้อสุกแล้ว What was the cause?"
    assert by_id["xcopa-dev-et-4"]["context"].endswith("What was the cause?")
    assert report["load_counts"]["th"]["question_repaired"] == 13
    questions = {}
    for r in rows:
        questions.setdefault(r["id"].rsplit("-", 1)[1], set()).add(r["context"].rsplit(" ", 1)[1])
    assert all(len(words) == 1 for words in questions.values())  # every language now agrees
    with pytest.raises(InputError, match="three or more languages"):
        load(
            tmp_path,
            "xcopa",
            "dev",
            xcopa_settings(real_xcopa, {"question_repair": "majority"}).replace(languages=["et", "th"]),
        )


def test_real_xcopa_oracle_submission_scores_100_and_its_mirror_0(tmp_path, real_xcopa):
    """The gold labels of the real rows, written as the leaderboard's jsonl and read back as
    the official evaluate.py reads them, score accuracy 100; the other choice scores 0."""
    from workflow_scripts.evaluation.metrics import accuracy
    from workflow_scripts.evaluation.predictions import write_predictions

    rows, _ = load(tmp_path, "xcopa", "test", xcopa_settings(real_xcopa))
    gold = {lang: [r["label"] for r in rows if r["lang"] == lang] for lang in XCOPA_SAMPLE}
    for name, predicted in (("oracle", gold), ("mirror", {l: [1 - g for g in v] for l, v in gold.items()})):
        write_predictions("xcopa", predicted, tmp_path / name)
        for lang in XCOPA_SAMPLE:
            labels = [json.loads(line)["label"] for line in (tmp_path / name / f"test-{lang}.jsonl").open()]
            assert accuracy(labels, gold[lang]) == {"accuracy": 100.0 if name == "oracle" else 0.0}


# ----- bad rows: repaired or dropped, counted, named ----------------------------------------------


def test_bad_copa_and_siqa_rows_are_repaired_or_dropped_and_counted(tmp_path, caplog):
    root = tmp_path / "hub"
    copa = jsonl(DEMO_HUB / "aps/super_glue/copa/train.jsonl")[:10]
    copa[1]["question"] = " Cause"  # repaired
    copa[2]["label"] = 2  # no such choice: dropped
    copa[3]["question"] = "why"  # dropped
    copa[4]["label"] = -1  # unlabeled: skipped
    copa[5]["choice2"] = ""  # dropped
    write_rows(root, "aps/super_glue", "copa", "train", copa)
    siqa = jsonl(DEMO_HUB / "allenai/social_i_qa/default/validation.jsonl")[:10]
    siqa[0]["label"] = "4"
    siqa[1]["label"] = ""
    write_rows(root, "allenai/social_i_qa", "default", "validation", siqa)
    settings = {"source": "local", "local_root": str(root)}
    with caplog.at_level(logging.WARNING, logger="xstilts"):
        rows, report = load(
            tmp_path, "copa", "train", DataSettings.parse({**settings, "hub": {"path": "aps/super_glue"}})
        )
    assert len(rows) == 6 and rows[1]["context"] == f"{copa[1]['premise']} What was the cause?"
    assert report["load_counts"]["en"] == {
        "rows": 10,
        "examples": 6,
        "question_normalised": 1,
        "unlabeled": 1,
        "dropped_bad_label": 1,
        "dropped_bad_question": 1,
        "dropped_empty_text": 1,
    }
    assert "aps/super_glue copa train row 2: row dropped (bad label: 2)" in caplog.text
    rows, report = load(
        tmp_path, "siqa", "dev", DataSettings.parse({**settings, "hub": {"path": "allenai/social_i_qa"}})
    )
    assert len(rows) == 8 and report["load_counts"]["en"]["dropped_bad_label"] == 1
    assert report["load_counts"]["en"]["unlabeled"] == 1


def test_a_row_without_the_columns_names_file_and_row(tmp_path):
    root = tmp_path / "hub"
    write_rows(root, "aps/super_glue", "copa", "validation", [{"premise": "p", "choice1": "a", "label": 0}])
    with pytest.raises(InputError, match=r"aps/super_glue copa validation row 0: not a COPA row"):
        load(
            tmp_path,
            "copa",
            "dev",
            DataSettings.parse({"source": "local", "local_root": str(root), "hub": {"path": "aps/super_glue"}}),
        )


def test_unknown_languages_fail_with_a_clear_error(tmp_path):
    # The Hub: XCOPA's own language list, before anything is downloaded.
    hub = DataSettings.parse({"source": "hub", "hub": {"path": "cambridgeltl/xcopa"}, "languages": ["sw", "en"]})
    with pytest.raises(InputError, match=r"cambridgeltl/xcopa has no language \['en'\].*et ht id it qu"):
        load(tmp_path, "xcopa", "test", hub)
    # A local mirror: the missing file, named with its config.
    with pytest.raises(InputError, match=r"cambridgeltl/xcopa/fr/test.jsonl .*config fr"):
        load(tmp_path, "xcopa", "test", local_settings("cambridgeltl/xcopa", ["sw", "fr"]))
    with pytest.raises(InputError, match="no Tatoeba code known for 'xx'"):
        load(tmp_path, "tatoeba", "test", local_settings("google/xtreme", ["de", "xx"]))
    with pytest.raises(InputError, match="no UD language name known for 'lt'.*options.ud_release_extra"):
        load(tmp_path, "udpos", "test", local_settings("google/xtreme", ["de", "lt"]))


# ----- wider language lists: the extra languages' second source -----------------------------------


def demo_copy(root: Path, config: str) -> None:
    shutil.copytree(DEMO_HUB / "google/xtreme" / config, root / "google/xtreme" / config)


def test_panx_reads_xtreme_r_languages_from_wikiann(tmp_path):
    root = tmp_path / "hub"
    demo_copy(root, "PAN-X.de")
    wikiann = [
        {
            "tokens": ["Ion", "lucrează", "la", "Siemens", "în", "Cluj", "-", "Napoca", "."],
            "ner_tags": [1, 0, 0, 3, 0, 5, 6, 6, 0],
            "langs": ["ro"] * 9,
            "spans": ["PER: Ion", "ORG: Siemens", "LOC: Cluj - Napoca"],
        }
    ] * 3
    write_rows(root, "unimelb-nlp/wikiann", "ro", "test", wikiann)
    settings = DataSettings.parse(
        {"source": "local", "local_root": str(root), "hub": {"path": "google/xtreme"}, "languages": ["de", "ro"]}
    )
    rows, report = load(tmp_path, "panx", "test", settings)
    ro = [r for r in rows if r["lang"] == "ro"]
    assert len(ro) == 3 and ro[0]["tags"] == ["B-PER", "O", "O", "B-ORG", "O", "B-LOC", "I-LOC", "I-LOC", "O"]
    assert report["sources"] == {"de": "google/xtreme PAN-X.de", "ro": "unimelb-nlp/wikiann ro"}
    assert report["extra_sources"] == {"unimelb-nlp/wikiann": {"revision": "main", "resolved_sha": None}}
    # Another copy of WikiANN by option.
    shutil.copytree(root / "unimelb-nlp/wikiann", root / "me/wikiann")
    rows, report = load(tmp_path, "panx", "test", settings.replace(options={"wikiann_path": "me/wikiann"}))
    assert report["sources"]["ro"] == "me/wikiann ro"
    with pytest.raises(InputError, match="unimelb-nlp/wikiann/pl/test.jsonl"):
        load(tmp_path, "panx", "test", settings.replace(languages=["de", "pl"]))


def test_tatoeba_reads_xtreme_r_languages_from_mteb(tmp_path):
    root = tmp_path / "hub"
    demo_copy(root, "tatoeba.deu")
    pairs = [
        {"sentence1": "Mən kitab oxuyuram.", "sentence2": "I am reading a book."},
        {"sentence1": "Salam! ", "sentence2": "Hello!"},
    ]
    write_rows(root, "mteb/tatoeba-bitext-mining", "aze-eng", "test", pairs)
    settings = DataSettings.parse(
        {"source": "local", "local_root": str(root), "hub": {"path": "google/xtreme"}, "languages": ["de", "az"]}
    )
    rows, report = load(tmp_path, "tatoeba", "test", settings)
    az = [r for r in rows if r["lang"] == "az"]
    assert [(r["source"], r["target"]) for r in az] == [
        ("Mən kitab oxuyuram.", "I am reading a book."),
        ("Salam!", "Hello!"),
    ]
    assert report["sources"] == {"az": "mteb/tatoeba-bitext-mining aze-eng", "de": "google/xtreme tatoeba.deu"}
    write_rows(root, "mteb/tatoeba-bitext-mining", "aze-eng", "test", [{"source": "a", "target": "b"}])
    with pytest.raises(InputError, match=r"aze-eng row 0 lacks columns \['sentence1', 'sentence2'\]"):
        load(tmp_path, "tatoeba", "test", settings)


def test_xquad_reads_romanian_from_google_xquad(tmp_path):
    root = tmp_path / "hub"
    demo_copy(root, "XQuAD.de")
    ro = [
        {
            "id": "q1",
            "context": "Ion a cumpărat cartea la piață.",
            "question": "Unde a cumpărat Ion cartea?",
            "answers": {"text": ["la piață"], "answer_start": [22]},
        }
    ]
    write_rows(root, "google/xquad", "xquad.ro", "validation", ro)
    rows, report = load(
        tmp_path,
        "xquad",
        "test",
        DataSettings.parse(
            {"source": "local", "local_root": str(root), "hub": {"path": "google/xtreme"}, "languages": ["de", "ro"]}
        ),
    )
    assert next(r for r in rows if r["lang"] == "ro")["answer_starts"] == [22]
    assert report["sources"] == {"de": "google/xtreme XQuAD.de", "ro": "google/xquad xquad.ro"}
    assert report["answer_repair"]["ro"]["answers_exact"] == 1


ROMANIAN_CONLLU = """# sent_id = demo-ro-1
# text = Ion a cumpărat cartea.
1\tIon\tIon\tPROPN\t_\t_\t3\tnsubj\t_\t_
2\ta\tavea\tAUX\t_\t_\t3\taux\t_\t_
3\tcumpărat\tcumpăra\tVERB\t_\t_\t0\troot\t_\t_
4\tcartea\tcarte\tNOUN\t_\t_\t3\tobj\t_\t_
5\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

"""


@pytest.mark.parametrize("main", ["release", "hub"])
def test_udpos_reads_xtreme_r_languages_from_a_second_release(tmp_path, main):
    extra = tmp_path / "ud-treebanks-v2.7"
    (extra / "UD_Romanian-Demo").mkdir(parents=True)
    (extra / "UD_Romanian-Demo" / "ro_demo-ud-test.conllu").write_text(ROMANIAN_CONLLU, encoding="utf-8")
    options = {"ud_release_extra": {"release": str(extra), "languages": ["ro"]}}
    if main == "release":
        options["ud_release"] = str(REAL / "ud-treebanks-v2.5")
    rows, report = load(tmp_path, "udpos", "test", local_settings("google/xtreme", ["de", "ro"], options))
    assert [(r["tokens"], r["tags"]) for r in rows if r["lang"] == "ro"] == [
        (["Ion", "a", "cumpărat", "cartea", "."], ["PROPN", "AUX", "VERB", "NOUN", "PUNCT"])
    ]
    assert report["release_extra"]["name"] == "UD v2.7" and report["release_extra"]["languages"] == ["ro"]
    assert report["udpos_files"]["ro"] == ["UD_Romanian-Demo/ro_demo-ud-test.conllu"]
    assert report["sources"]["ro"] == f"UD v2.7 release {extra}"
    if main == "release":
        assert report["release"]["name"] == "UD v2.5" and report["sources"]["de"].startswith("UD v2.5 release")
    else:  # German from the Hub's config: the Hub provenance stays (no "release" key)
        assert "release" not in report and report["sources"]["de"] == "google/xtreme udpos.German"
    # a release given as a bare location, not {release, languages, name}: refused as the job starts
    with pytest.raises(InputError, match=r"DataSettings\.options\.ud_release_extra: "):
        local_settings("google/xtreme", ["ro"], {"ud_release_extra": str(extra)})
