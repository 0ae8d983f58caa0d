"""The Hub path against a real Hub-compatible server: olah on loopback (tests/hub_server.py)
serving the demo's data sets, a script-only repository with its Parquet export, and the
demo's models as Hub repositories.

- revisions resolve to commits and are locked; a changed upstream and a config that
  disagrees with the lock stop with both revisions named;
- ``refs/convert/parquet`` is read, a script-only revision is refused with the fix;
- the demo grid's Hub-reading jobs, with ``data.source: hub`` and ``models.source: hub``,
  prepare the local-folder demo's rows and model files: every later job reads only those;
- a task of one's own read from local files in that grid (docs/guides/own_data.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import DEMO_HUB, REPO, copy_repo, file_digests, local_settings, planned_jobs, snakemake
from hub_server import HubServer, config_splits, mirror_dataset, mirror_model, mirror_script_dataset, new_commit
from workflow_scripts.spec.data_settings import DataSettings

pytestmark = pytest.mark.integration

# A repository whose main holds a loading script, its data on refs/convert/parquet (as the
# Hub keeps the datasets it converted); the hub demo reads xnli_mt from it.
SCRIPT_ONLY = "facebook/xnli"
PARQUET_EXPORT = "refs/convert/parquet"


def demo_datasets() -> dict[str, Path]:
    """Every dataset of the demo mirror laid out as Hub configs, by Hub id."""
    found = {}
    for folder in sorted(DEMO_HUB.glob("*/*")):
        if folder.is_dir() and config_splits(folder):
            found[str(folder.relative_to(DEMO_HUB))] = folder
    return found


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    mirrors = root / "mirrors"
    commits = {}
    for repo_id, folder in demo_datasets().items():
        if repo_id == SCRIPT_ONLY:
            commits[repo_id], commits[f"{repo_id}@{PARQUET_EXPORT}"] = mirror_script_dataset(folder, mirrors, repo_id)
        else:
            commits[repo_id] = mirror_dataset(folder, mirrors, repo_id)
    server = HubServer(mirrors, root / "server").start()
    server.commits = commits
    server.hf_home = root / "hf_home"
    yield server
    server.stop()


@pytest.fixture
def endpoint(hub, monkeypatch):
    """This process's Hub client pointed at the loopback server."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.delenv("XSTILTS_HUB_LOCK", raising=False)
    return hub


def test_revisions_resolve_lock_and_catch_a_changed_upstream(endpoint, tmp_path):
    from workflow_scripts.revisions import HubRepo, RevisionError, locked_commit, read_lock

    lock = tmp_path / "hub.lock.json"
    glue = HubRepo("dataset", "nyu-mll/glue", "main")
    export = HubRepo("dataset", SCRIPT_ONLY, PARQUET_EXPORT)
    assert locked_commit(glue, lock) == endpoint.commits["nyu-mll/glue"]
    # A ref outside the branches, as the Hub's Parquet export is, resolves through the refs list.
    assert locked_commit(export, lock) == endpoint.commits[f"{SCRIPT_ONLY}@{PARQUET_EXPORT}"]
    assert read_lock(lock) == {
        "datasets/nyu-mll/glue": {"main": endpoint.commits["nyu-mll/glue"]},
        f"datasets/{SCRIPT_ONLY}": {PARQUET_EXPORT: endpoint.commits[f"{SCRIPT_ONLY}@{PARQUET_EXPORT}"]},
    }

    changed = new_commit(endpoint.mirrors, "dataset", "nyu-mll/glue", "NOTES.md", "a later upload\n")
    with pytest.raises(RevisionError) as err:
        locked_commit(glue, lock)
    message = str(err.value)
    assert "nyu-mll/glue" in message and changed in message and endpoint.commits["nyu-mll/glue"] in message
    assert "changed upstream" in message
    # Without a lock the revision means what it means today.
    assert locked_commit(glue, None) == changed
    endpoint.commits["nyu-mll/glue"] = changed  # what main is for the tests after this one


def test_an_unreachable_hub_reads_the_locked_commit(endpoint, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from workflow_scripts.revisions import HubRepo, HubUnreachable, locked_commit

    lock = tmp_path / "hub.lock.json"
    repo = HubRepo("model", "nobody/anything", "main")
    lock.write_text(json.dumps({"models/nobody/anything": {"main": "a" * 40}}))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert locked_commit(repo, lock) == "a" * 40
    with pytest.raises(HubUnreachable, match="nobody/other"):
        locked_commit(HubRepo("model", "nobody/other", "main"), lock)


def test_unknown_repositories_and_revisions_are_named(endpoint):
    from workflow_scripts.revisions import HubRepo, RevisionError, resolve

    with pytest.raises(RevisionError, match="not found .*config key tasks.mnli.hub"):
        resolve(HubRepo("dataset", "nyu-mll/no-such-data", "main", "tasks.mnli.hub"))
    with pytest.raises(RevisionError, match="no ref 'refs/convert/duckdb'.*refs/convert/parquet"):
        resolve(HubRepo("dataset", SCRIPT_ONLY, "refs/convert/duckdb"))


def test_the_preflight_tells_a_missing_repository_from_an_unreachable_hub(endpoint, tmp_path, monkeypatch):
    """Each Hub id's row of the preflight: on a live Hub a misspelt id is not found (with the
    closest id the config names), and a ref the repository lacks is named as such; where
    nothing answers, every id could not be reached, whether it exists or not."""
    from huggingface_hub import constants

    from workflow_scripts import preflight
    from workflow_scripts.revisions import HubRepo
    from workflow_scripts.workflow import hub_sources

    asked = [
        HubRepo("dataset", "nyu-mll/glue", "main", "tasks.mnli.hub"),
        HubRepo("dataset", "nyu-mll/glu", "main", "tasks.qqp.hub"),
        HubRepo("dataset", SCRIPT_ONLY, "refs/convert/duckdb", "tasks.xnli.hub"),
    ]
    monkeypatch.setattr(hub_sources, "config_repos", lambda config: asked)

    def rows() -> dict[str, preflight.Finding]:
        return {f.subject: f for f in preflight.check_hub({}, tmp_path / "hub.lock.json")[0]}

    live = rows()
    assert live["dataset nyu-mll/glue@main"].status == preflight.OK
    typo = live["dataset nyu-mll/glu@main"]
    assert typo.status == preflight.BLOCKER
    assert typo.detail.startswith(
        f"not found on the Hub at {endpoint.endpoint} (check the id: did you mean 'nyu-mll/glue'?"
    )
    assert "tasks.qqp.hub" in typo.detail and "correct the id" in typo.fix
    revision = live[f"dataset {SCRIPT_ONLY}@refs/convert/duckdb"]
    assert revision.status == preflight.BLOCKER, revision
    assert revision.detail.startswith(f"dataset {SCRIPT_ONLY} exists; its revision 'refs/convert/duckdb' does not")

    closed = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setattr(constants, "ENDPOINT", closed)
    for subject, row in rows().items():
        assert row.status == preflight.BLOCKER, subject
        assert row.detail.startswith(f"could not reach {closed}: "), row.detail
        assert "not found" not in row.detail and "HF_ENDPOINT" in row.fix


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prepare(
    hub: HubServer, task: str, split: str, settings: DataSettings, output: Path, lock: Path
) -> subprocess.CompletedProcess:
    env = {
        **hub.environment(hub.hf_home),
        "XSTILTS_HUB_LOCK": str(lock),
        "PYTHONPATH": str(REPO),
        "PATH": str(Path(sys.executable).parent),
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_scripts.data.prepare",
            "--task",
            task,
            "--split",
            split,
            "--settings",
            settings.to_json(),
            "--output",
            str(output),
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def _rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_parquet_export_read_and_a_script_only_revision_refused(hub, tmp_path):
    from workflow_scripts.data.prepare import prepare, provenance

    lock = tmp_path / "hub.lock.json"
    settings = DataSettings.parse(
        {"source": "hub", "hub": {"path": SCRIPT_ONLY, "revision": PARQUET_EXPORT}, "languages": ["de"]}
    )
    proc = _prepare(hub, "xnli_mt", "train", settings, tmp_path / "hub.parquet", lock)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prepare("xnli_mt", "train", local_settings(SCRIPT_ONLY, ["de"]), tmp_path / "local.parquet")
    assert _rows(tmp_path / "hub.parquet") == _rows(tmp_path / "local.parquet")
    assert provenance(tmp_path / "hub.parquet")["resolved_sha"] == hub.commits[f"{SCRIPT_ONLY}@{PARQUET_EXPORT}"]

    settings = settings.replace(hub={"path": SCRIPT_ONLY, "revision": "main"})
    proc = _prepare(hub, "xnli_mt", "train", settings, tmp_path / "script.parquet", lock)
    assert proc.returncode != 0
    assert f"Hub dataset {SCRIPT_ONLY} at revision 'main' holds a loading script (xnli.py)" in proc.stderr
    assert PARQUET_EXPORT in proc.stderr
    assert not (tmp_path / "script.parquet").exists()


def test_every_demo_dataset_reads_the_same_rows_from_the_hub(hub, tmp_path):
    """Each task of the demo grid prepared from the Hub equals the local-folder reading."""
    from workflow_scripts.data.prepare import prepare

    cases = [
        ("mnli", "dev", "nyu-mll/glue", None),
        ("squad", "dev", "rajpurkar/squad", None),
        ("xnli", "test", "google/xtreme", ["en", "de", "ru", "sw"]),
        ("xquad", "test", "google/xtreme", ["en", "de", "ru"]),
        ("panx", "dev", "google/xtreme", ["en", "de", "ru"]),
        ("tatoeba", "test", "google/xtreme", ["de", "ru", "sw"]),
    ]
    lock = tmp_path / "hub.lock.json"
    for task, split, path, langs in cases:
        settings = DataSettings.parse(
            {"source": "hub", "hub": {"path": path}, **({"languages": langs} if langs else {})}
        )
        out = tmp_path / f"{task}.{split}.hub.parquet"
        proc = _prepare(hub, task, split, settings, out, lock)
        assert proc.returncode == 0, f"{task} {split}: {proc.stderr[-3000:]}"
        prepare(task, split, local_settings(path, langs), tmp_path / f"{task}.{split}.local.parquet")
        assert _rows(out) == _rows(tmp_path / f"{task}.{split}.local.parquet"), f"{task} {split}"


# ----- the demo grid through the Hub ---------------------------------------------------------------


def bucc_archives(folder: Path) -> Path:
    """The demo's BUCC files packed as the release packs them:
    bucc2018-<lang>-en.<set>-gold.tar.bz2 holding bucc2018/<lang>-en/<lang>-en.<set>.*."""
    import tarfile

    folder.mkdir(exist_ok=True)
    source = DEMO_HUB / "bucc2018"
    for lang_set in sorted({f.name.rsplit(".", 1)[0] for f in source.iterdir()}):
        lang = lang_set.split("-")[0]
        with tarfile.open(folder / f"bucc2018-{lang_set}-gold.tar.bz2", "w:bz2") as tar:
            for file in sorted(source.glob(f"{lang_set}.*")):
                tar.add(file, arcname=f"bucc2018/{lang}-en/{file.name}")
    return folder


def hub_demo_config(repo: Path) -> Path:
    """The default demo config reading its data and models from the Hub: the demo's backbones
    as xstilts-demo/<name>, its translators under their OPUS-MT ids, BUCC from its release
    archives, xnli_mt from the Parquet export of a script-only repository."""
    config = yaml.safe_load((repo / "config.yaml").read_text())
    config["experiment"] = "demo_hub"
    config["data"] = {"source": "hub"}
    config["models"]["source"] = "hub"
    for name, entry in config["backbones"].items():
        entry.update({"hub_id": f"xstilts-demo/{name}", "revision": "main"})
    config["tasks"]["bucc"]["options"] = {"archives": str(bucc_archives(repo / "bucc_archives"))}
    config["tasks"]["xnli_mt"]["hub"]["revision"] = PARQUET_EXPORT
    path = repo / "demo_hub.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def lock_entries(lock: dict) -> list[tuple[str, str]]:
    return [(repo, revision) for repo, pinned in lock.items() for revision in pinned]


def publish_demo_models(hub: HubServer, checkout: Path, config: dict) -> None:
    models = checkout / "results" / "demo" / "models"
    for name in config["backbones"]:
        mirror_model(models / "backbones" / name, hub.mirrors, f"xstilts-demo/{name}")
    for group, folder in (("translators", "translator"), ("translators_to_en", "translator_to_en")):
        for lang, entry in config["models"][group].items():
            mirror_model(models / folder / lang, hub.mirrors, entry["hub_id"])


# The rules that read the Hub. Every later job reads only their outputs, so equal outputs give
# the local demo's trainings, metric files and tables (two runs on one machine give identical
# tables: test_workflow.py).
HUB_READING_RULES = ("prepare_task_data", "prepare_backbone", "prepare_translator", "prepare_translator_to_english")


def parquet_rows(path: Path):
    import pyarrow.parquet as pq

    # the schema metadata records where the rows came from (the Hub commit or the local folder)
    return pq.read_table(path).replace_schema_metadata(None)


def test_demo_grid_through_the_hub_prepares_the_local_demos_data_and_models(hub, demo_checkout):
    config_path = hub_demo_config(demo_checkout)
    config = yaml.safe_load(config_path.read_text())
    publish_demo_models(hub, demo_checkout, config)
    env = hub.environment(hub.hf_home)
    until = ("--until", *HUB_READING_RULES)
    proc = snakemake(demo_checkout, "--cores", "2", "--configfile", config_path.name, *until, env=env)
    assert proc.returncode == 0, proc.stderr[-5000:]

    local, through_hub = demo_checkout / "results" / "demo", demo_checkout / "results" / "demo_hub"
    prepared = sorted((through_hub / "data").glob("*/*.parquet"))
    assert {p.parent.name for p in prepared} == {p.parent.name for p in (local / "data").glob("*/*.parquet")}
    for path in prepared:
        rows = parquet_rows(path)
        assert rows.num_rows and rows.equals(parquet_rows(local / path.relative_to(through_hub))), path
    models = [through_hub / "models" / "backbones" / name for name in config["backbones"]]
    for group, folder in (("translators", "translator"), ("translators_to_en", "translator_to_en")):
        models += [through_hub / "models" / folder / lang for lang in config["models"][group]]
    for model in models:
        # the weights, tokenizer and family files; xstilts_source.json says where each came from
        got = {
            k: v for k, v in file_digests(model).items() if not k.startswith(".cache/") and k != "xstilts_source.json"
        }
        expected = {k: v for k, v in file_digests(local / model.relative_to(through_hub)).items() if k in got}
        assert "model.safetensors" in got and got == expected, model

    # Every Hub repository the run read is locked at the commit it read.
    lock = json.loads((through_hub / "hub.lock.json").read_text())
    assert lock["datasets/nyu-mll/glue"] == {"main": hub.commits["nyu-mll/glue"]}
    assert lock[f"datasets/{SCRIPT_ONLY}"] == {PARQUET_EXPORT: hub.commits[f"{SCRIPT_ONLY}@{PARQUET_EXPORT}"]}
    assert set(lock) >= {f"models/xstilts-demo/{name}" for name in config["backbones"]}
    source = json.loads((through_hub / "models" / "backbones" / "xlmr_tiny" / "xstilts_source.json").read_text())
    assert source["resolved_sha"] == lock["models/xstilts-demo/xlmr_tiny"]["main"]

    # The preflight of the Hub demo passes: every repository resolves, to its locked commit.
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.preflight", "--configfile", config_path.name],
        cwd=demo_checkout,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env, "PYTHONPATH": str(demo_checkout)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hub_rows = [line for line in proc.stdout.splitlines() if line.startswith("| hub |")]
    assert len(hub_rows) == len(lock_entries(lock)) and all(
        "| ok | commit" in r and "(locked)" in r for r in hub_rows
    ), proc.stdout

    # Nothing left to do; and a config that now asks for another revision stops before any job.
    proc = snakemake(demo_checkout, "-n", "--configfile", config_path.name, *until, env=env)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0 and re.search(r"^total\s+0$", said, flags=re.M), said[-3000:]
    config["tasks"]["mnli"]["hub"]["revision"] = "v2"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake(demo_checkout, "-n", "--configfile", config_path.name, env=env)
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "config key tasks.mnli.hub: reads dataset nyu-mll/glue at revision 'v2'" in said
    assert f"'main' = {hub.commits['nyu-mll/glue']}" in said


# ----- a task of one's own, from local files, in the Hub grid ------------------------------------


def test_own_data_guide_reads_its_files_in_a_grid_read_from_the_hub(hub, tmp_path):
    """docs/guides/own_data.md followed in the demo grid read from the Hub: the task's splits
    are prepared from its JSON Lines and CSV files (repairs counted, sha256 recorded) beside a
    task read from the Hub; editing one file reruns that split's preparation only; a column
    the mapping needs that a file lacks stops the config check, naming key, file and columns."""
    from test_guides import follow

    repo = copy_repo(tmp_path / "repo")
    follow("own_data.md", repo)
    config_path = hub_demo_config(repo)
    env = hub.environment(hub.hf_home)
    data = Path("results/demo_hub/data")
    own = [str(data / "my_nli" / f"{split}.parquet") for split in ("train", "dev")]
    targets = [*own, str(data / "mnli" / "train.parquet")]
    # the targets before --configfile, which takes every file name that follows it
    proc = snakemake(repo, "--cores", "2", *targets, "--configfile", config_path.name, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]

    from workflow_scripts.data.prepare import provenance

    train = provenance(repo / own[0])
    file = repo / "my_data" / "my_nli" / "train.jsonl"
    assert train["source"] == "files" and train["file"] == "my_data/my_nli/train.jsonl"
    assert train["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert train["report"] == {"file_rows": 6, "repairs": {"label_spelling": 1}}
    assert [r["label"] for r in _rows(repo / own[0])] == [0, 2, 0, 1, 2, 1]
    assert _rows(repo / own[1])[0]["text_b"] == "A woman is making music."
    assert provenance(repo / own[1])["file_type"] == "csv"
    # the Hub task beside it read the Hub, at the commit the lock holds; the local task is in no lock
    lock = json.loads((repo / "results" / "demo_hub" / "hub.lock.json").read_text())
    assert provenance(repo / targets[2])["resolved_sha"] == lock["datasets/nyu-mll/glue"]["main"]
    assert not [repo_id for repo_id in lock if "my_nli" in repo_id]

    # an edit of the training file reruns the training split's preparation and nothing else
    file.write_text(file.read_text() + file.read_text().splitlines(keepends=True)[0])
    jobs = planned_jobs(repo, *targets, "--configfile", config_path.name)
    assert jobs == {("prepare_task_data", own[0])}, jobs

    # a column the mapping needs that the file lacks stops the check before any job
    config = yaml.safe_load(config_path.read_text())
    config["tasks"]["my_nli"]["data"]["columns"]["label"] = "verdict"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake(repo, "-n", *targets, "--configfile", config_path.name, env=env)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config key tasks.my_nli.data.files.train:" in said, said[-3000:]
    assert "has no column 'verdict' (for label); its columns: premise, hypothesis, gold" in said
