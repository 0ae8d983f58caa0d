"""The preflight (workflow_scripts/preflight.py) on the demo, and its optimizer
steps on CPU. Its Hub checks run against the loopback Hub in tests/test_hub.py, its Slurm
checks against the test cluster in tests/test_slurm.py."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_repo


def run_preflight(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts.preflight", *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def rows(report: str) -> list[list[str]]:
    """The report's table rows as cells (check, subject, status, detail, fix)."""
    return [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in report.splitlines()
        if line.startswith("| ") and not line.startswith("| check")
    ]


@pytest.mark.integration
def test_the_demo_passes(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    proc = run_preflight(repo, "--output", "preflight.md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = rows((repo / "preflight.md").read_text())
    assert not [r for r in table if r[2] == "BLOCKER"]
    data = {r[1]: r[3] for r in table if r[0] == "data"}
    # Every folder the demo reads, with its count of files.
    assert data["tasks.udpos.options.ud_release"].endswith(": 9 files")
    assert "tasks.xnli_mt.hub.path" in data and "models.demo_corpora" in data


@pytest.mark.integration
def test_a_missing_folder_and_a_bad_config_are_blockers(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    import shutil

    shutil.rmtree(repo / "demo" / "hub" / "rajpurkar" / "squad")
    proc = run_preflight(repo)
    assert proc.returncode == 1
    blocker = [r for r in rows(proc.stdout) if r[2] == "BLOCKER"]
    assert [r[1] for r in blocker] == ["tasks.squad.hub.path"], proc.stdout
    assert "does not exist" in blocker[0][3]

    (repo / "bad.yaml").write_text((repo / "config.yaml").read_text().replace("seeds: [1, 2]", "seeds: one"))
    proc = run_preflight(repo, "--configfile", "bad.yaml")
    assert proc.returncode == 1
    assert rows(proc.stdout)[0][:3] == ["config", "bad.yaml", "BLOCKER"], proc.stdout


LORA = {"rank": 4, "alpha": 8, "dropout": 0.0}


@pytest.mark.unit
@pytest.mark.parametrize(
    "method",
    [
        {"name": "full", "precision": "fp32"},
        {"name": "full", "precision": "bf16"},
        {"name": "full", "precision": "fp16"},
        # a bf16 base feeding fp32 heads: only training's autocast makes the dtypes meet
        {"name": "lora", "precision": "bf16", **LORA},
        {"name": "qlora", "precision": "bf16", **LORA},
    ],
    ids=lambda m: f"{m['name']}-{m['precision']}",
)
def test_a_few_optimizer_steps_on_the_real_weights(demo_encoder_dir, method):
    """What the preflight runs on each backbone where a GPU is, here on CPU, with each
    precision and method as training runs them."""
    from workflow_scripts.preflight import SMOKE_STEPS, smoke_steps

    losses = smoke_steps(demo_encoder_dir, "encoder", method, "cpu")
    assert len(losses) == SMOKE_STEPS and all(math.isfinite(x) for x in losses)
    # The steps train: the loss of the same batch moves.
    assert losses[0] != losses[-1]


@pytest.mark.integration
@pytest.mark.parametrize(
    "preset, missing",
    [
        ("paper", ["model FacebookAI/xlm-roberta-large@main", "dataset google/xtreme@main", "tasks.ccg.options.path"]),
        (
            "xtreme_r",
            ["dataset izhx/mewsli-x@main", "dataset rajpurkar/squad@main", "dataset unimelb-nlp/wikiann@main"],
        ),
        ("multimodal", ["model openai/clip-vit-base-patch32@main", "tasks.snli_ve.images"]),
    ],
)
def test_presets_offline_name_what_is_missing(preset, missing):
    """Where no Hub answers, every repository of a preset is a blocker naming itself, and so
    is every local folder it lacks; the GPU plan is still made."""
    from conftest import REPO

    proc = run_preflight(
        REPO, "--configfile", f"config/{preset}.yaml", env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = rows(proc.stdout)
    blockers = {r[1]: r for r in table if r[2] == "BLOCKER"}
    for subject in missing:
        assert subject in blockers, f"{subject} not reported:\n{proc.stdout}"
    hub = [r for r in table if r[0] == "hub"]
    assert hub and all(r[2] == "BLOCKER" and r[3].startswith("could not reach http://127.0.0.1:9: ") for r in hub)
    assert any(r[0] == "gpus" and r[2] == "ok" for r in table), proc.stdout
    if preset == "paper":  # the default disk policy, one job at once (docs/sweeps_and_disk.md's table)
        (disk,) = [r for r in table if r[0] == "disk"]
        planned = re.search(r"trained models ([\d.]+) GB \(keep_target_models: none: at the peak (\d+) of 741", disk[3])
        assert planned and int(planned.group(2)) == 90 + 2, disk[3]
        assert "90 intermediate kept, 2 target at once (1 jobs at once)" in disk[3]


@pytest.fixture(scope="module")
def demo_config() -> dict:
    """The demo's config, which translates (squad_de, translate-test XNLI) with CTranslate2."""
    from workflow_scripts.preflight import load_config

    return load_config([])


@pytest.mark.unit
def test_translation_check_runs_where_a_gpu_is_and_names_the_fix(demo_config, monkeypatch):
    from workflow_scripts import preflight
    from workflow_scripts.translation import translators

    def unloadable(name_or_path: str) -> None:
        raise OSError(f"{name_or_path}: cannot open shared object file")

    monkeypatch.setattr(preflight, "local_gpus", lambda: [("NVIDIA H100 80GB HBM3", 79.2)])
    monkeypatch.setattr(translators, "find_packaged_cublas12", lambda search_path=None: None)
    monkeypatch.setattr(translators, "load_shared_library", unloadable)
    [warning] = preflight.check_translation(demo_config)  # the jobs would fall back to transformers
    assert (warning.check, warning.subject, warning.status) == ("translation", "ctranslate2", preflight.WARNING)
    assert "libcublas.so.12" in warning.detail and "fall back to the transformers backend" in warning.detail
    assert "pip install -r requirements-gpu.txt" in warning.fix and translators.CUBLAS_12_PACKAGE in warning.fix
    assert "LD_LIBRARY_PATH" in warning.fix and "translation.backend: transformers" in warning.fix

    monkeypatch.setattr(translators, "load_shared_library", lambda name_or_path: None)
    [ok] = preflight.check_translation(demo_config)
    assert ok.status == preflight.OK and "libcublas.so.12" in ok.detail


@pytest.mark.unit
def test_translation_check_is_skipped_without_a_gpu_another_backend_or_anything_to_translate(demo_config, monkeypatch):
    from workflow_scripts import preflight
    from workflow_scripts.workflow import grid, transfer

    monkeypatch.setattr(preflight, "local_gpus", lambda: [])
    [no_gpu] = preflight.check_translation(demo_config)
    assert no_gpu.status == preflight.SKIPPED and "no CUDA device here" in no_gpu.detail

    monkeypatch.setattr(preflight, "local_gpus", lambda: [("NVIDIA H100 80GB HBM3", 79.2)])
    transformers = {**demo_config, "translation": {**demo_config["translation"], "backend": "transformers"}}
    [other] = preflight.check_translation(transformers)
    assert other.status == preflight.SKIPPED and "transformers" in other.detail

    monkeypatch.setattr(grid, "translation_jobs", lambda config: [])
    monkeypatch.setattr(transfer, "test_translations", lambda config: [])
    [nothing] = preflight.check_translation(demo_config)
    assert nothing.status == preflight.SKIPPED and "translates nothing" in nothing.detail
