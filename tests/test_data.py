"""Loaders on the demo mirror (same schema as the Hub) and their error messages."""

import json

import pyarrow.parquet as pq
import pytest

from conftest import DEMO_HUB, local_settings
from workflow_scripts.data.prepare import SCHEMAS, prepare, read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.tasks import NLI_LABELS, get_task

pytestmark = pytest.mark.unit


def test_every_canonical_file_has_its_format_schema(demo_data):
    for name, path in demo_data.items():
        task = get_task(name.split(".")[0])
        table = pq.read_table(path)
        assert table.column_names == ["id", "lang", *SCHEMAS[task.format]]
        ids = table.column("id").to_pylist()
        assert len(ids) == len(set(ids)), f"duplicate ids in {name}"


def test_xnli_mixed_language_split_and_string_labels(demo_data):
    rows = read_table(demo_data["xnli.dev"]).to_pylist()
    assert {r["lang"] for r in rows} == {"en", "de", "ru", "sw"}
    raw = [json.loads(l) for l in (DEMO_HUB / "google/xtreme/XNLI/validation.jsonl").open()]
    assert [NLI_LABELS[r["label"]] for r in rows] == [r["gold_label"] for r in raw]


def test_tatoeba_trailing_newlines_are_stripped(demo_data):
    rows = read_table(demo_data["tatoeba.test"]).to_pylist()
    raw = (DEMO_HUB / "google/xtreme/tatoeba.deu/validation.jsonl").open().readline()
    assert json.loads(raw)["source_sentence"].endswith("\n")
    assert all(not r["source"].endswith("\n") and not r["target"].endswith("\n") for r in rows)


def test_udpos_label_ids_become_tag_strings(demo_data):
    rows = read_table(demo_data["udpos.test"]).to_pylist()
    assert {r["lang"] for r in rows} == {"en", "de", "ru"}
    assert all(len(r["tokens"]) == len(r["tags"]) for r in rows)
    assert {t for r in rows for t in r["tags"]} <= set(get_task("udpos").labels)


def test_span_answers_point_at_their_text(demo_data):
    for r in read_table(demo_data["squad.train"]).to_pylist():
        for text, start in zip(r["answer_texts"], r["answer_starts"]):
            assert r["context"][start : start + len(text)] == text


def test_missing_language_fails_loudly(tmp_path):
    with pytest.raises(InputError, match="fr"):
        prepare("xnli", "dev", local_settings("google/xtreme", ["en", "fr"]), tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


def _mirror(tmp_path, lines) -> DataSettings:
    path = tmp_path / "nyu-mll/glue/mnli/train.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return DataSettings.parse({"source": "local", "local_root": str(tmp_path), "hub": {"path": "nyu-mll/glue"}})


def test_corrupt_file_is_named_with_its_line(tmp_path):
    good = json.dumps({"premise": "a", "hypothesis": "b", "label": 0, "idx": 0})
    settings = _mirror(tmp_path, [good, '{"premise": "a", "hyp'])
    with pytest.raises(InputError, match=r"mnli/train.jsonl, line 2"):
        prepare("mnli", "train", settings, tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


def test_label_outside_label_set_is_named(tmp_path):
    settings = _mirror(tmp_path, [json.dumps({"premise": "a", "hypothesis": "b", "label": 7, "idx": 0})])
    with pytest.raises(InputError, match="label 7 outside"):
        prepare("mnli", "train", settings, tmp_path / "out.parquet")


def test_missing_mirror_file_is_named(tmp_path):
    settings = DataSettings.parse({"source": "local", "local_root": str(tmp_path), "hub": {"path": "nyu-mll/glue"}})
    with pytest.raises(InputError, match="missing data file .*mnli/train.jsonl"):
        prepare("mnli", "train", settings, tmp_path / "out.parquet")


def test_corrupt_parquet_is_named(tmp_path):
    bad = tmp_path / "train.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InputError, match="corrupt data file .*train.parquet"):
        read_table(bad)
    with pytest.raises(InputError, match="missing data file"):
        read_table(tmp_path / "absent.parquet")


def test_hub_mode_reads_the_pinned_revision_and_records_provenance(tmp_path, monkeypatch):
    """The Hub path with load_dataset and the Hub's answers replaced by fixtures: the rows are
    read at the commit the revision resolved to (tests/test_hub.py runs a real Hub server)."""
    import datasets
    import huggingface_hub

    calls = []
    rows = [json.loads(l) for l in (DEMO_HUB / "nyu-mll/glue/mnli/validation_matched.jsonl").open()]

    def fake_load_dataset(path, name, split, revision):
        calls.append((path, name, split, revision))
        return rows

    class FakeApi:
        def repo_info(self, repo_id, repo_type, revision):
            return type("Info", (), {"sha": "0123abcd" * 5})()

        def dataset_info(self, path, revision):
            return type("Info", (), {"sha": revision, "siblings": []})()

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.delenv("XSTILTS_HUB_LOCK", raising=False)
    out = tmp_path / "dev.parquet"
    prepare(
        "mnli", "dev", DataSettings.parse({"source": "hub", "hub": {"path": "nyu-mll/glue", "revision": "v1"}}), out
    )
    assert calls == [("nyu-mll/glue", "mnli", "validation_matched", "0123abcd" * 5)]
    provenance = json.loads(pq.read_schema(out).metadata[b"xstilts"])
    assert provenance["resolved_sha"] == "0123abcd" * 5 and provenance["revision"] == "v1"
    assert read_table(out).num_rows == len(rows)
