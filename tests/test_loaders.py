"""Every task's loader on fixtures in the real Hub schema (the demo mirror under demo/hub)."""

import pytest

from conftest import REPO, local_settings
from workflow_scripts.data.loaders import load_converter
from workflow_scripts.data.prepare import SCHEMAS, prepare, provenance, read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.tasks import TASKS, few_shot_target, get_task

pytestmark = pytest.mark.unit

# task -> (Hub path, languages of the evaluation splits, options)
SOURCES = {
    "anli_plus": ("facebook/anli", None, {}),
    "mnli": ("nyu-mll/glue", None, {}),
    "qqp": ("nyu-mll/glue", None, {}),
    "squad": ("rajpurkar/squad", None, {}),
    "squad_v2": ("rajpurkar/squad_v2", None, {}),
    "hellaswag": ("Rowan/hellaswag", None, {}),
    "ccg": ("ccgbank", None, {"path": str(REPO / "demo/ccg")}),
    "cosmosqa": ("allenai/cosmos_qa", None, {}),
    "commonsenseqa": ("tau/commonsense_qa", None, {}),
    "mlm": ("wikimedia/wikipedia", ["en", "de", "ru", "sw"], {"sentences": 100, "alpha": 0.3, "seed": 0}),
    "xnli_mt": ("facebook/xnli", ["de", "ru", "sw"], {}),
    "xnli": ("google/xtreme", ["en", "de", "ru", "sw"], {}),
    "pawsx": ("google/xtreme", ["en", "de"], {}),
    "udpos": ("google/xtreme", ["en", "de", "ru"], {}),
    "panx": ("google/xtreme", ["en", "de", "ru"], {}),
    "xquad": ("google/xtreme", ["en", "de", "ru"], {}),
    "mlqa": ("google/xtreme", ["en", "de"], {}),
    "tydiqa": ("google/xtreme", ["en", "ru", "sw"], {}),
    "bucc": ("bucc2018", ["de", "ru"], {}),
    "tatoeba": ("google/xtreme", ["de", "ru", "sw"], {}),
    "siqa": ("allenai/social_i_qa", None, {}),
    "copa": ("aps/super_glue", None, {}),
    "xcopa": ("cambridgeltl/xcopa", ["de", "ru", "sw"], {}),
    "mewslix": ("izhx/mewsli-x", ["en", "de", "ru"], {}),
    "lareqa": ("rajpurkar/squad", ["en", "de", "ru"], {"xquad_r_path": str(REPO / "demo/xquad-r")}),
    "snli_ve": ("HuggingFaceM4/SNLI-VE", None, {}),
    "nlvr2": ("lil-lab/nlvr2", None, {"path": "demo/hub/lil-lab/nlvr2"}),
    "vqa_v2": ("visualqa/vqa_v2", None, {"path": "demo/hub/visualqa/vqa_v2"}),
    "flickr30k": ("karpathy/flickr30k", None, {"path": "demo/hub/karpathy/flickr30k"}),
    "snli_caption": ("HuggingFaceM4/SNLI-VE", None, {}),
    "hypothesis_only": ("HuggingFaceM4/SNLI-VE", None, {}),
    # IGLUE's targets: samples of the release's own files (tests/real_data, see its README)
    "xvnli": ("floschne/xvnli", ["en", "ar", "ru"], {"path": "tests/real_data/xvnli"}),
    "xvnli_caption": ("floschne/xvnli", ["en", "ar", "ru"], {"path": "tests/real_data/xvnli"}),
    "xvnli_hypothesis_only": ("floschne/xvnli", ["en", "ar", "ru"], {"path": "tests/real_data/xvnli"}),
    "marvl": ("floschne/marvl", ["id", "sw", "zh"], {"path": "tests/real_data/marvl"}),
    "xflickrco": ("floschne/xflickrco", ["en", "de", "ja"], {"path": "tests/real_data/xflickrco"}),
    # IGLUE's translate-test copies (real lines of the release's *_gmt files)
    "xvnli_gmt": ("floschne/xvnli", ["ar", "ru"], {"path": "tests/real_data/xvnli_gmt"}),
    "xvnli_caption_gmt": ("floschne/xvnli", ["ar", "ru"], {"path": "tests/real_data/xvnli_gmt"}),
    "xvnli_hypothesis_only_gmt": ("floschne/xvnli", ["ar", "ru"], {"path": "tests/real_data/xvnli_gmt"}),
    "marvl_gmt": ("floschne/marvl", ["id", "sw", "zh"], {"path": "tests/real_data/marvl_gmt"}),
    "xflickrco_gmt": ("floschne/xflickrco", ["de", "ja"], {"path": "tests/real_data/xflickrco_gmt"}),
    # IGLUE's few-shot pools: real shot files and translated dev lines, XVNLI's from the demo's
    # release (its translated dev files are not in the stored copy of e-bug/iglue)
    "xvnli_few_shot": ("e-bug/iglue", ["de", "ru"], {"path": "demo/hub/e-bug/iglue/datasets/XVNLI/annotations"}),
    "xvnli_caption_few_shot": ("e-bug/iglue", ["de"], {"path": "demo/hub/e-bug/iglue/datasets/XVNLI/annotations"}),
    "xvnli_hypothesis_only_few_shot": (
        "e-bug/iglue",
        ["sw"],
        {"path": "demo/hub/e-bug/iglue/datasets/XVNLI/annotations"},
    ),
    "marvl_few_shot": (
        "e-bug/iglue",
        ["id"],
        {"path": "tests/real_data/marvl_few_shot", "dev_path": "tests/real_data/nlvr2_dev"},
    ),
    "xflickrco_few_shot": (
        "e-bug/iglue",
        ["de"],
        {"path": "tests/real_data/xflickrco_few_shot", "dev_path": "tests/real_data/flickr30k_gmt"},
    ),
}
CASES = [(t, s) for t in TASKS for s in TASKS[t].splits]


def test_every_task_of_the_catalogue_has_a_loader_and_a_fixture():
    assert set(TASKS) == set(SOURCES)
    assert all(callable(load_converter(TASKS[t])) for t in TASKS)


@pytest.mark.parametrize("task_name,split", CASES, ids=[f"{t}-{s}" for t, s in CASES])
def test_loader_yields_the_canonical_schema(tmp_path, task_name, split):
    path, langs, options = SOURCES[task_name]
    settings = local_settings(path, langs, options)
    out = tmp_path / "out.parquet"
    n = prepare(task_name, split, settings, out)
    task = get_task(task_name)
    table = read_table(out, task.format)
    pool_column = ["shots"] if task.shot_pool else []  # a few-shot pool's rows name their shots
    assert table.column_names == ["id", "lang", *SCHEMAS[task.format], *pool_column] and n == table.num_rows > 0
    rows = table.to_pylist()
    assert len({r["id"] for r in rows}) == len(rows) or task.format == "mining"
    # Every language asked for, train included: which train languages a target reads is
    # the grid's choice (grid_settings.data_settings), not the loader's.
    expected_langs = set(langs or ["en"])
    if split == "dev":
        expected_langs -= task.dev_missing
    if task.shot_pool and split == "dev" and few_shot_target(task_name).few_shot.selection == "english":
        expected_langs = {"en"}  # one English dev split selects every language's few-shot model
    if task.format == "ranking":  # a query's language; the candidates pool every language; training is English
        expected_langs = expected_langs if split in task.eval_splits else {"en"}
        pool = {r["id"] for r in rows if r["side"] == "candidate"}
        queries = [r for r in rows if r["side"] == "query"]
        assert queries and all(r["gold"] and set(r["gold"]) <= pool for r in queries)
        rows = queries
    assert {r["lang"] for r in rows} == expected_langs
    if task.format in ("classification", "multiple_choice") and task.labels:
        assert all(0 <= r["label"] < task.num_labels for r in rows)
    if task.format == "multiple_choice":
        assert all(len(r["choices"]) == task.num_choices and 0 <= r["label"] < task.num_choices for r in rows)
    if task.format == "span":
        for r in rows:
            for text, start in zip(r["answer_texts"], r["answer_starts"]):
                assert r["context"][start : start + len(text)] == text
    if task.format == "tagging":
        assert all(len(r["tokens"]) == len(r["tags"]) > 0 for r in rows)
        if task.labels:
            assert {t for r in rows for t in r["tags"]} <= set(task.labels)


def test_awkward_cases_of_the_real_schemas(tmp_path):
    def load(task, split, langs=None, options=None):
        out = tmp_path / f"{task}-{split}.parquet"
        prepare(
            task,
            split,
            local_settings(SOURCES[task][0], langs or SOURCES[task][1], options or SOURCES[task][2]),
            out,
        )
        return read_table(out).to_pylist()

    # SNLI rows without annotator consensus (label -1) are dropped from ANLI+.
    assert not any(r["id"].startswith("snli") and r["label"] < 0 for r in load("anli_plus", "train"))
    # SQuAD v2 keeps unanswerable questions as empty answer lists.
    assert any(not r["answer_texts"] for r in load("squad_v2", "dev"))
    # Unlabeled test rows (empty answerKey, label -1) never reach the canonical files.
    assert all(r["label"] >= 0 for r in load("commonsenseqa", "dev") + load("cosmosqa", "dev"))
    # PAWS-X string labels become integers.
    assert {r["label"] for r in load("pawsx", "test")} == {0, 1}
    # TyDiQA: a mixed-language split, the language read from the id prefix.
    test = load("tydiqa", "test")
    assert all(r["id"].startswith({"en": "english", "ru": "russian", "sw": "swahili"}[r["lang"]]) for r in test)
    # BUCC: source sentences carry their gold English ids; distractors carry none.
    bucc = load("bucc", "dev", ["de"])
    assert any(r["gold"] for r in bucc) and any(r["side"] == "source" and not r["gold"] for r in bucc)
    # MLM: languages sampled with q ~ p^alpha, every language present.
    assert {r["lang"] for r in load("mlm", "train")} == {"en", "de", "ru", "sw"}


def test_pawsx_reads_every_release_row_from_the_paws_x_dataset(tmp_path):
    """The release's TSV (id, sentence1, sentence2, label), read as paws-x reads it (tabs
    only) and as google/xtreme's builder reads it (CSV quoting, rows of four fields kept): a
    field that opens with a quote loses its quotes, and one whose quote never closes swallows
    the lines after it, which the builder then drops. With options.pawsx_path the loader
    reads the paws-x rows: none lost, the text as in the file."""
    import csv
    import json

    tsv = (
        "id\tsentence1\tsentence2\tlabel\n"
        '1\t" Blue " is a song .\tThe song is called " Blue " .\t1\n'
        '2\tThe river flows north .\t" North is where the river flows .\t0\n'
        "3\tAnna sold the car .\t Anna bought the car .\t0\n"
    )
    lines = tsv.splitlines(keepends=True)
    paws_x = [
        {"id": int(r["id"]), "sentence1": r["sentence1"], "sentence2": r["sentence2"], "label": int(r["label"])}
        for r in csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    ]
    xtreme = [
        {"sentence1": r[1], "sentence2": r[2], "label": r[3]}
        for r in list(csv.reader(lines, delimiter="\t"))[1:]
        if len(r) == 4
    ]
    assert len(paws_x) == 3 and len(xtreme) == 1 and xtreme[0]["sentence1"] != paws_x[0]["sentence1"]
    for path, config, rows in (
        ("google-research-datasets/paws-x", "de", paws_x),
        ("google/xtreme", "PAWS-X.de", xtreme),
    ):
        file = tmp_path / path / config / "test.jsonl"
        file.parent.mkdir(parents=True)
        file.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def load(options):
        out = tmp_path / "pawsx.parquet"
        prepare(
            "pawsx",
            "test",
            DataSettings.parse(
                {
                    "source": "local",
                    "local_root": str(tmp_path),
                    "hub": {"path": "google/xtreme"},
                    "languages": ["de"],
                    "options": options,
                }
            ),
            out,
        )
        return read_table(out).to_pylist(), provenance(out)["report"]

    rows, report = load({"pawsx_path": "google-research-datasets/paws-x"})
    assert [(r["text_a"], r["text_b"], r["label"]) for r in rows] == [
        ('" Blue " is a song .', 'The song is called " Blue " .', 1),
        ("The river flows north .", '" North is where the river flows .', 0),
        ("Anna sold the car .", "Anna bought the car .", 0),
    ]  # stripped, as XTREME strips
    assert report["sources"] == {"de": "google-research-datasets/paws-x de"}
    assert len(load({})[0]) == 1  # google/xtreme's configs: two rows gone


def test_missing_ccg_path_is_named(tmp_path):
    with pytest.raises(InputError, match=r"CCG file .*nowhere/train.tsv does not exist.*LDC2005T13"):
        prepare(
            "ccg",
            "train",
            local_settings("ccgbank", options={"path": str(tmp_path / "nowhere")}),
            tmp_path / "out.parquet",
        )


def test_missing_language_in_a_per_language_config_is_named(tmp_path):
    with pytest.raises(InputError, match="PAN-X.fr"):
        prepare("panx", "test", local_settings("google/xtreme", ["en", "fr"]), tmp_path / "out.parquet")


def test_mlm_quotas_follow_alpha_smoothed_language_shares(tmp_path):
    import json

    from workflow_scripts.data.loaders.mlm import split_sentences

    for lang, n_articles in (("en", 90), ("de", 20)):
        path = tmp_path / f"wikimedia/wikipedia/20231101.{lang}/train.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text(
            "".join(
                json.dumps({"id": str(i), "url": "", "title": "t", "text": f"One {i}. Two {i}!\nThree {i}?"}) + "\n"
                for i in range(n_articles)
            )
        )
    settings = DataSettings.parse(
        {
            "source": "local",
            "local_root": str(tmp_path),
            "hub": {"path": "wikimedia/wikipedia"},
            "languages": ["en", "de"],
            "options": {"sentences": 100, "alpha": 0.3, "seed": 1},
        }
    )
    prepare("mlm", "train", settings, tmp_path / "mlm.parquet")
    rows = read_table(tmp_path / "mlm.parquet").to_pylist()
    # p = (90, 20) / 110; p^0.3 = (0.9416, 0.5996) -> shares (0.611, 0.389) of 100 sentences.
    counts = {lang: sum(r["lang"] == lang for r in rows) for lang in ("en", "de")}
    assert counts == {"en": 61, "de": 39}
    assert all(r["text"].split()[0] in ("One", "Two", "Three") for r in rows)
    assert split_sentences("北京很大。上海也很大。") == ["北京很大。", "上海也很大。"]
    assert split_sentences("यह है। वह है।\nA b. C d") == ["यह है।", "वह है।", "A b.", "C d"]
