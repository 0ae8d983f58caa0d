"""Shared fixtures: the repository, a demo tokenizer, and helpers to run the workflow."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Two OpenMP runtimes share this process (torch's, and faiss's with its OpenBLAS). With the
# default policy an idle runtime's threads keep spinning after its work, and on two busy
# cores a torch training test run after test_backbones (which scores retrieval with faiss)
# became 5-30x slower: test_demo_models' pre-training took 7 s alone, 31-92 s after it.
# Passive threads sleep instead. Set before anything loads either library; subprocesses of
# the tests inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent
DEMO_HUB = REPO / "demo" / "hub"
# For the environment of processes that start training ranks: the multiprocess tests test the
# gloo/CPU path, which a GPU workstation's ranks would otherwise leave for NCCL on its GPUs
# (and, with one GPU, put two ranks on it).
HIDDEN_GPUS = {"CUDA_VISIBLE_DEVICES": ""}


# ----- test tiers ----------------------------------------------------------------------------

# What a test costs, as a pytest marker (pyproject.toml): `make test-fast` runs the unit tier
# only, `make test` all four. A test without a tier would silently drop out of the fast run,
# one with two would run in both partial runs and say nothing true about its cost.
TIERS = ("unit", "integration", "multiprocess", "cluster")


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the check covers every collected test
def pytest_collection_modifyitems(config, items):
    problems = []
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
        if len(tiers) != 1:
            problems.append(f"{item.nodeid}: {'no tier' if not tiers else 'tiers ' + ', '.join(tiers)}")
    if problems:
        raise pytest.UsageError(
            f"each test needs exactly one tier marker of {', '.join(TIERS)} "
            f"(pytestmark = pytest.mark.unit in the module, or on the test):\n  " + "\n  ".join(problems)
        )
    if hasattr(config, "workerinput"):  # a pytest-xdist worker (`make test` runs two)
        items[:] = in_worker_groups(items)


# ----- two workers (pytest-xdist, --dist loadgroup) ----------------------------------------

# The suite's expensive fixtures are module-scoped (a demo run per module) or session-scoped
# (demo_checkout, shared by several modules): a module split over two workers would run its
# fixture twice. So each module is one group, and the modules using demo_checkout one group
# together. Groups are handed out in the order of the items, a new one to whichever worker
# is free: the longest go first (the shared demo, then by the module's costliest tier in
# LONGEST_FIRST order), so that both workers finish near the same time.
SHARED_DEMO = "demo_checkout"
LONGEST_FIRST = ("cluster", "integration", "multiprocess", "unit")


def in_worker_groups(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items, each marked with its xdist group, ordered longest group first."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.module.__name__, []).append(item)
    group_of = {
        module: SHARED_DEMO if any(SHARED_DEMO in i.fixturenames for i in tests) else module
        for module, tests in modules.items()
    }
    rank: dict[str, int] = {}
    for module, tests in modules.items():
        group = group_of[module]
        heaviest = min(LONGEST_FIRST.index(m.name) for i in tests for m in i.iter_markers() if m.name in TIERS)
        cost = -1 if group == SHARED_DEMO else heaviest
        rank[group] = min(rank.get(group, cost), cost)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of[item.module.__name__]))
    return sorted(items, key=lambda i: rank[group_of[i.module.__name__]])  # stable: module order kept


def local_settings(path: str, languages: list[str] | None = None, options: dict | None = None):
    """A data.prepare job's settings reading ``path`` of the demo's Hub mirror."""
    from workflow_scripts.spec.data_settings import DataSettings

    settings = {"source": "local", "local_root": str(DEMO_HUB), "hub": {"path": path}, "options": options or {}}
    return DataSettings.parse({**settings, **({"languages": languages} if languages else {})})


def phase_settings(tasks: dict[str, dict], **fields):
    """A training phase's settings (spec/phase_settings.PhaseSettings) as a test writes them:
    the schema's defaults of a ``training.<phase>`` block (the target phase's learning rate),
    full fine-tuning at the schema's precision, ``tasks`` (each task's options) and ``fields``
    over them."""
    from workflow_scripts.spec.phase_settings import MethodSettings, PhaseHyperparameters, PhaseSettings
    from workflow_scripts.spec.schema import default, setting

    phase = {
        key: default(key, definition="phase")
        for key in PhaseHyperparameters.keys()
        if "default" in setting(key, definition="phase")
    }
    phase["learning_rate"] = default("training", "target", "learning_rate")
    return PhaseSettings.parse({**phase, "method": MethodSettings(), "tasks": tasks, **fields}, "phase_settings")


def gold_span_logits(encoded, peak: float = 10.0):
    """Start/end logits peaked at each feature's gold answer tokens (an oracle model)."""
    import numpy as np

    starts, ends = [], []
    for f in encoded.features:
        s, e = np.zeros(len(f["input_ids"])), np.zeros(len(f["input_ids"]))
        s[f["start_positions"]] += peak
        e[f["end_positions"]] += peak
        starts.append(s)
        ends.append(e)
    return starts, ends


@pytest.fixture(autouse=True, scope="module")
def default_experiment():
    """The config check roots this process's paths at the checked config's experiment
    (spec/paths.py ``use_experiment``); a module that ran it in-process (a fixture loading
    config/paper.yaml) must not leave the next module of its worker with paths under that
    experiment."""
    from workflow_scripts.spec import paths

    yield
    paths.use_experiment(paths.DEFAULT_EXPERIMENT)


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> dict[str, Path]:
    """A few canonical demo files, prepared through the real loaders."""
    from workflow_scripts.data.prepare import prepare

    out = tmp_path_factory.mktemp("data")
    specs = {
        ("squad", "train"): local_settings("rajpurkar/squad"),
        ("mnli", "train"): local_settings("nyu-mll/glue"),
        ("udpos", "test"): local_settings("google/xtreme", ["en", "de", "ru"]),
        ("xnli", "dev"): local_settings("google/xtreme", ["en", "de", "ru", "sw"]),
        ("tatoeba", "test"): local_settings("google/xtreme", ["de", "ru", "sw"]),
    }
    files = {}
    for (task, split), settings in specs.items():
        files[f"{task}.{split}"] = out / f"{task}.{split}.parquet"
        prepare(task, split, settings, files[f"{task}.{split}"])
    return files


@pytest.fixture(scope="session")
def demo_encoder_dir(tmp_path_factory, demo_data) -> Path:
    from workflow_scripts.models.demo_models import build_demo_encoder
    from workflow_scripts.spec.model_settings import DemoEncoder

    out = tmp_path_factory.mktemp("encoder") / "encoder"
    settings = DemoEncoder.defaults().replace(
        vocab_size=2000,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=258,
    )
    build_demo_encoder(settings, [str(p) for p in demo_data.values()], out)  # no corpora: not pre-trained
    return out


@pytest.fixture(scope="session")
def tokenizer(demo_encoder_dir):
    from workflow_scripts.models.heads import load_tokenizer

    return load_tokenizer(demo_encoder_dir)


def comparable_metrics(metrics: dict) -> dict:
    """A metric file without what legitimately differs between runs of the same model: its
    wall time and where the model lives."""
    metrics.pop("wall_time_s")
    for model in metrics["models"].values():
        model.pop("path")
    return metrics


def train_log_record(**fields) -> dict:
    """A train log (spec/result_files.py's TrainLog) with neutral values but ``fields``: what
    a test writes beside a model whose training it does not run."""
    best = {"step": 0, "score": 0.0, "scores": {}, **fields.pop("best", {})}
    log = {
        "phase": "target",
        "seed": 1,
        "total_steps": 0,
        "warmup_steps": 0,
        "best": best,
        "history": [],
        "task_probabilities": {},
        "padding_share": 0.0,
        "throughput": {},
        "backbone": {},
        "settings": {},
        "settings_hash": "",
        "resumed_at_step": None,
        "stopped_early": False,
        "curve": {},
        "visual": None,
        "intermediate_visual": None,
        "intermediate_recipe": None,
        "wall_time_s": 0.0,
    }
    return {**log, **fields}


def metric_file_record(run: dict, scores: dict, **fields) -> dict:
    """A metric file (spec/result_files.py's MetricFile) of ``run`` with ``scores`` (split ->
    language -> metric -> value), their language averages, and neutral values but ``fields``."""
    run = {"backbone": "b", "setting": "zero_shot", **run}
    average = {
        split: {m: sum(v[m] for v in per.values()) / len(per) for m in next(iter(per.values()))}
        for split, per in scores.items()
    }
    languages = sorted({lang for per in scores.values() for lang in per})
    record = {
        "target": run["target"],
        "metric": "accuracy",
        "primary": "accuracy",
        "languages": languages,
        "splits": list(scores),
        "setting": run["setting"],
        "scores": scores,
        "average": average,
        "task_score": {},
        "task_score_convention": "",
        "data_provenance": {},
        "seed": run["seed"],
        "settings": {},
        "settings_hash": "",
        "seqeval_version": "",
        "versions": {},
        "precision": {},
        "retrieval": None,
        "wall_time_s": 0.0,
        "backbone": {},
        "run": run,
    }
    return {**record, **fields}


def checkpoint_step(checkpoints: Path) -> int:
    """The step of the newest training checkpoint under a checkpoint directory (0: none):
    a single process's (meta.json) or a sharded run's (the DCP version LATEST names)."""
    meta = checkpoints / "checkpoint" / "meta.json"
    if meta.is_file():
        return json.loads(meta.read_text())["step"]
    from workflow_scripts.training.distributed import read_extra

    try:
        extra = read_extra(checkpoints / "checkpoint")
    except (OSError, EOFError, RuntimeError):  # a version pruned or removed while it was read
        return 0
    return extra["step"] if extra else 0


def use_config_catalogues(config: dict, monkeypatch) -> None:
    """Register the task entries of a config's ``task_catalogues`` for one test only (the
    Snakefile registers them for its run)."""
    from workflow_scripts.spec import tasks

    for directory in config.get("task_catalogues", []):
        for name, task in tasks.read_catalogue(REPO / directory).items():
            monkeypatch.setitem(tasks.TASKS, name, task)


# ----- running the workflow ------------------------------------------------------------------


def validated_config(path: Path) -> dict:
    """A config file's layers resolved and the schema's defaults filled in, as the Snakefile
    has them before its grid check."""
    from snakemake.utils import validate

    from workflow_scripts.workflow import config_check, config_layers, grid_checks

    config = config_layers.load([path])
    schema = str(config_check.schema_for_validation())
    grid_checks.check_schema(config, schema)
    validate(config, schema)
    return config


def copy_repo(dest: Path) -> Path:
    """The repository's own files (tracked and untracked, not ignored): no results, no .venv."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def workflow_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment (plus ``env``) with the test's python first on PATH: the rules call
    `python -m workflow_scripts...`."""
    env = {**os.environ, **(env or {})}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def snakemake(
    cwd: Path, *args: str, timeout: int = 1800, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env=workflow_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def snakemake_watched(
    cwd: Path, *args: str, every: float = 5.0, timeout: int = 1800
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`snakemake` as snakemake() runs it, with the progress view (operations/status.py) read
    every ``every`` seconds while it runs and once after: the run's result and what each look
    saw (state, counts per rule, totals, ETA, failed jobs)."""
    import contextlib
    import tempfile
    import time

    from workflow_scripts.operations import status

    env = workflow_env()
    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=True
            )
            deadline = time.monotonic() + timeout
            try:
                while True:
                    try:
                        proc.wait(timeout=every)
                        break
                    except subprocess.TimeoutExpired:
                        if time.monotonic() > deadline:
                            raise
                    try:
                        found = status.collect(cwd)
                    except status.StatusError:  # before Snakemake wrote its log
                        continue
                    seen.append({k: found[k] for k in ("state", "rules", "totals", "eta", "failed_jobs")})
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        with contextlib.suppress(status.StatusError):  # the look after the run ended
            found = status.collect(cwd)
            seen.append({k: found[k] for k in ("state", "rules", "totals", "eta", "failed_jobs")})
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
    return result, seen


def demo_progress_file(tmp_path_factory) -> Path:
    """Where demo_checkout keeps what the progress view saw while the demo ran."""
    return tmp_path_factory.getbasetemp() / "demo_progress.json"


@pytest.fixture(scope="session")
def demo_checkout(tmp_path_factory) -> Path:
    """A copy of the repository after `snakemake --cores 2` ran the default demo: shared by
    the workflow tests and by the XTREME-R demo, which runs beside it in the same checkout.
    The progress view is read every few seconds while it runs (demo_progress_file)."""
    import time

    repo = copy_repo(tmp_path_factory.mktemp("repo"))
    started = time.time()
    proc, seen = snakemake_watched(repo, "--cores", "2")
    print(f"\ndemo run from scratch: {time.time() - started:.0f} s wall")
    demo_progress_file(tmp_path_factory).write_text(json.dumps(seen))
    assert proc.returncode == 0, proc.stderr[-5000:]
    return repo


def run_config_from_scratch(tmp_path_factory, configfile: str) -> Path:
    """A fresh copy of the repository after `snakemake --cores 2 --configfile CONFIG` ran
    there (its wall time printed); the run must succeed."""
    import time

    repo = copy_repo(tmp_path_factory.mktemp("repo"))
    started = time.time()
    proc = snakemake(repo, "--cores", "2", "--configfile", configfile)
    print(f"\n{configfile} from scratch: {time.time() - started:.0f} s wall")
    assert proc.returncode == 0, proc.stderr[-5000:]
    return repo


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under a folder, by relative path."""
    import hashlib

    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def job_counts(out: str) -> dict[str, int]:
    """Jobs per rule from the "Job stats" table of a dry run's output."""
    return {
        line.split()[0]: int(line.split()[1])
        for line in out.split("Job stats:")[1].splitlines()[3:]
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }


def planned_jobs(cwd: Path, *args: str) -> set[tuple[str, str]]:
    """(rule, first output) of every job a dry run would execute."""
    proc = snakemake(cwd, "-n", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs, rule = set(), None
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            rule = m.group(1)
            if rule == "all":
                jobs.add(("all", ""))
            continue
        m = re.match(r"^\s+output: (\S+?),?(?:\s|$)", line)
        if m and rule:
            jobs.add((rule, m.group(1).rstrip(",")))
            rule = None
    return jobs


def paper_with_transfer_block(repo: Path) -> Path:
    """config/paper.yaml with its commented transfer-settings block switched on, as a user
    would: every line from "# transfer:" to the end marker loses its "# "."""
    lines = (repo / "config/paper.yaml").read_text().splitlines()
    start = lines.index("# transfer:")
    end = next(i for i, line in enumerate(lines) if line.startswith("# <<< transfer settings"))
    lines[start:end] = [line[2:] for line in lines[start:end]]
    path = repo / "paper_transfer.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def paper_with_larger_backbones(repo: Path) -> Path:
    """config/paper.yaml with its commented block of larger backbones switched on, as a user
    would: every line from "  # xlmr_xl:" to the end marker loses its "# "."""
    lines = (repo / "config/paper.yaml").read_text().splitlines()
    start = lines.index("  # xlmr_xl:")
    end = next(i for i, line in enumerate(lines) if line.startswith("  # <<< larger backbones"))
    lines[start:end] = [line[:2] + line[4:] for line in lines[start:end]]
    path = repo / "paper_backbones.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


# The rules of the official XTREME evaluate.py readers (google-research/xtreme), for checking
# leaderboard prediction files.
def read_label_file(path) -> list[str]:
    """Classification, BUCC and Tatoeba files: one entry per line."""
    with open(path) as f:
        return [line.strip() for line in f]


def read_tag_file(path) -> list[list[str]]:
    """Tagging files: one tag per line, a blank line ends a sentence."""
    sentences, current = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                current.append(line)
            else:
                sentences.append(current)
                current = []
    if current:
        sentences.append(current)
    return sentences
