"""Preflight: what a grid needs, checked before it spends GPU hours.

One report, one line per check, each problem with its fix; the exit status is 1 when any
check found a blocker. It checks:

- config: the same checks the workflow makes at parse time (schema, tasks, languages,
  releases, the lock);
- hub: every Hub repository the grid reads (``hub_sources.config_repos``) resolves at its
  revision, and to the commit the experiment's lock holds;
- data: every local folder the grid reads is there, with its count of files (the local
  mirror, release folders, image folders with their checksums, demo corpora);
- disk: free space under ``results/`` against the planned sizes of the downloads, the
  trained models and the image-feature caches;
- gpus: the memory plan of every backbone on the GPUs it asks for, against the GPUs this
  machine has and those the Slurm partitions offer;
- slurm: the partitions and accounts a Snakemake profile names exist;
- translation: on a machine with a CUDA GPU, where the grid translates with CTranslate2,
  that its CUDA 12 cuBLAS loads;
- steps: on a machine with a CUDA GPU, a few optimizer steps of every backbone on its real
  weights (prepared by ``snakemake --until prepare_backbone``).

CLI: ``python -m workflow_scripts.preflight [--configfile F ...] [--profile DIR]
[--output FILE]`` (``make preflight CONFIG=F PROFILE=DIR``).
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.models.prepare import HUB_PATTERNS
from workflow_scripts.operations import hub_answers
from workflow_scripts.planning import cost, disk, memory_model, memory_plan, slurm
from workflow_scripts.revisions import HubRepo, RevisionError, read_lock, resolve
from workflow_scripts.spec import paths, task_entry
from workflow_scripts.spec.backbone_entry import entry_of
from workflow_scripts.spec.basics import REPO_ROOT, InputError, repo_path
from workflow_scripts.spec.method import MethodSettings
from workflow_scripts.spec.source_entries import data_of, models_of
from workflow_scripts.spec.translation_settings import translation_of
from workflow_scripts.workflow import backbone_grid, config_check, config_layers, grid, hub_sources, sweep

OK, WARNING, BLOCKER, SKIPPED = "ok", "warning", "blocker", "skipped"
MARKS = {OK: "ok", WARNING: "WARNING", BLOCKER: "BLOCKER", SKIPPED: "skipped"}
GB = 1024**3
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}
SMOKE_STEPS = 3


@dataclass
class Finding:
    check: str
    subject: str
    status: str
    detail: str
    fix: str = ""


# ----- config -----------------------------------------------------------------------------


def load_config(configfiles: list[str]) -> dict[str, Any]:
    """The config as the workflow sees it: the files resolved (their `extends` layers) and
    merged in order (the repository's config.yaml without any), through the workflow's own
    checks (config_check.py)."""
    config = config_layers.load(configfiles)
    config_check.check(config, configfiles, [str(repo_path(d)) for d in config.get("task_catalogues", [])])
    return config


# ----- hub --------------------------------------------------------------------------------


def check_hub(config: dict[str, Any], lock: Path) -> tuple[list[Finding], dict[HubRepo, str]]:
    """One finding per repository and revision; the commits that resolved."""
    by_repo: dict[tuple[str, str, str], list[HubRepo]] = {}
    for repo in hub_sources.config_repos(config):
        by_repo.setdefault((repo.repo_type, repo.repo_id, repo.revision), []).append(repo)
    pinned = read_lock(lock) if lock.is_file() else {}
    findings, resolved = [], {}
    for (repo_type, repo_id, revision), asked in by_repo.items():
        repo = asked[0]
        keys = ", ".join(r.key for r in asked)
        subject = f"{repo_type} {repo_id}@{revision}"
        try:
            commit = resolve(HubRepo(repo_type, repo_id, revision))
        except RevisionError as err:  # not found, gated, no such revision, or no answer: hub_answers.py
            detail = hub_answers.explain(repo, err, known=[r[1] for r in by_repo])
            fix = hub_answers.FIXES[hub_answers.classify(err)]
            findings.append(Finding("hub", subject, BLOCKER, f"{detail} (config keys {keys})", fix))
            continue
        resolved[repo] = commit
        locked = (pinned.get(repo.lock_key) or {}).get(revision)
        if locked and locked != commit:
            findings.append(
                Finding(
                    "hub",
                    subject,
                    BLOCKER,
                    f"now commit {commit}, locked at {locked} in {lock} (config keys {keys})",
                    f"pin revision {locked} in the config, or delete the entry {repo.lock_key!r} "
                    f"from {lock} to move on",
                )
            )
        else:
            findings.append(Finding("hub", subject, OK, f"commit {commit}" + (" (locked)" if locked else "")))
    if not by_repo:
        findings.append(Finding("hub", "-", SKIPPED, "the grid reads nothing from the Hub (local data, demo models)"))
    return findings, resolved


def repo_bytes(repo: HubRepo, commit: str) -> int:
    """Bytes a download of the repository at the commit holds (models: the snapshot's files)."""
    from huggingface_hub import HfApi

    info = HfApi().repo_info(repo.repo_id, repo_type=repo.repo_type, revision=commit, files_metadata=True)
    files = info.siblings or []
    if repo.repo_type == "model":
        files = [s for s in files if any(fnmatch.fnmatch(s.rfilename, p) for p in HUB_PATTERNS)]
    return sum(s.size or 0 for s in files)


# ----- local data -------------------------------------------------------------------------


def count_files(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file()) if path.is_dir() else int(path.is_file())


def _local(value: str) -> Path | None:
    from workflow_scripts.spec.basics import is_url

    return None if is_url(value) else repo_path(value)


def check_local_data(config: dict[str, Any]) -> list[Finding]:
    findings = []

    def folder(subject: str, path: Path, fix: str) -> None:
        if path.exists():
            findings.append(Finding("data", subject, OK, f"{path}: {count_files(path)} files"))
        else:
            findings.append(Finding("data", subject, BLOCKER, f"{path} does not exist", fix))

    for task in hub_sources.read_tasks(config):
        entry = task_entry.entry_of(config, task)
        option = hub_sources.release_set(config, task)
        own = entry.local_data(task)
        if own is not None:  # the task's own files, whatever data.source says
            for split in own.files:
                folder(f"tasks.{task}.data.files.{split}", own.path(split), "put the split's rows there")
        elif option is not None:
            local = _local(str(entry.options[option]))
            if local is not None:
                folder(f"tasks.{task}.options.{option}", local, "download the release there, or give its URL")
        elif (mirror := data_of(config).mirror) is not None and entry.hub is not None:
            folder(
                f"tasks.{task}.hub.path",
                repo_path(mirror) / entry.hub.path,
                "lay the task's rows out as <local_root>/<hub path>/<config>/<split>.jsonl",
            )
    for task in grid.visual_tasks(config):
        images = repo_path(grid.image_dir(config, task))
        if not images.is_dir():
            findings.append(
                Finding(
                    "data",
                    f"tasks.{task}.images",
                    BLOCKER,
                    f"{images} does not exist",
                    "put the task's images there (docs: multimodal)",
                )
            )
            continue
        count = sum(1 for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        sums = images / "SHA256SUMS"
        findings.append(
            Finding(
                "data",
                f"tasks.{task}.images",
                OK if sums.is_file() else BLOCKER,
                f"{images}: {count} images" + ("" if sums.is_file() else ", no SHA256SUMS"),
                "" if sums.is_file() else f"cd {images} && sha256sum *.jpg > SHA256SUMS",
            )
        )
    models = models_of(config)
    if models.demo:
        folder("models.demo_corpora", repo_path(models.demo_corpora), "the demo's parallel corpora")
    return findings


# ----- disk -------------------------------------------------------------------------------


def trained_model_bytes(config: dict[str, Any], backbone: str, snapshot: int | None) -> int | None:
    """Bytes one saved model of the backbone takes: its weights (full: the snapshot's size,
    else its parameter count in float32), its adapters (LoRA, float32)."""
    entry = entry_of(config, backbone)
    if entry.method == "full":
        return snapshot if snapshot is not None else (int(entry.parameters * 4) if entry.parameters else None)
    if memory_model.skip_reason(entry) is not None:
        return None
    bb = memory_model.parse_backbone(backbone, entry)
    return int(memory_model.lora_adapter_parameters(bb) * 4)


TARGET_TRAINING_RULES = slurm.TARGET_TRAINING_RULES


def check_disk(
    config: dict[str, Any], configfiles: list[str], resolved: dict[HubRepo, str], jobs_at_once: int = 1
) -> list[Finding]:
    """Free space under results/ against the Hub downloads and the trained models the disk
    policy keeps at the grid's peak (disk.py)."""
    planned: dict[str, int] = {}
    unknown: list[str] = []
    sizes: dict[HubRepo, int] = {}
    distinct = {(r.repo_type, r.repo_id, r.revision) for r in hub_sources.config_repos(config)}
    unresolved = len(distinct) - len(resolved)
    if unresolved:
        unknown.append(f"{unresolved} Hub repositories that did not resolve")
    for repo, commit in resolved.items():
        try:
            sizes[repo] = repo_bytes(repo, commit)
        except Exception as err:  # a server without file metadata: say so, do not guess
            unknown.append(f"{repo} ({type(err).__name__})")
    planned["Hub downloads"] = sum(sizes.values())
    rules = [job["rule"] for job in cost.dry_run_jobs([str(Path(f).resolve()) for f in configfiles], REPO_ROOT)]
    counts = disk.ModelCounts(
        intermediate=rules.count("train_intermediate"),
        target=sum(rules.count(rule) for rule in TARGET_TRAINING_RULES),
        kept_best=sum(len(grid.kept_models(config, b)) for b in backbone_grid.names(config)),
        jobs_at_once=max(1, jobs_at_once),
        points=max(1, len(sweep.points(config))),
    )
    policy = disk.keep_target_models(config)
    models, how = disk.peak_models(counts, policy, not disk.discards_intermediate_models(config))
    per_model = []
    for name in backbone_grid.names(config):
        snapshot = next((b for r, b in sizes.items() if r.key == f"backbones.{name}"), None)
        size = trained_model_bytes(config, name, snapshot)
        if size is None:
            unknown.append(f"trained models of {name} (no parameter count, no snapshot)")
        else:
            per_model.append(size)
    if per_model:
        # Jobs are spread over the backbones; the largest model bounds them all.
        planned["trained models"] = models * max(per_model)
    free = shutil.disk_usage(repo_path(paths.RESULTS) if repo_path(paths.RESULTS).exists() else REPO_ROOT).free
    need = sum(planned.values())
    detail = (
        ", ".join(f"{k} {_size(v)}" for k, v in planned.items())
        + f" (keep_target_models: {policy}: at the peak {models} of {counts.intermediate + counts.target} trained"
        + f" models: {how}); {_size(free)} free under {paths.RESULTS}/"
    )
    if unknown:
        detail += f"; not counted: {'; '.join(unknown)}"
    status = BLOCKER if need > free else WARNING if unknown else OK
    fixes = {
        BLOCKER: "free space, point results/ at a larger disk (a symlink), keep fewer target models "
        "(disk.keep_target_models) or run fewer jobs at once",
        WARNING: "for the full estimate, run the preflight where the Hub answers and give each backbone "
        "its parameters and architecture",
        OK: "",
    }
    return [Finding("disk", "results", status, detail, fixes[status])]


def jobs_at_once(profile: dict[str, Any] | None, asked: int | None) -> int:
    """How many jobs the grid runs at once: as asked (--jobs), else the profile's `jobs`,
    else one per local GPU (a workstation runs its GPU jobs one per GPU), else one."""
    if asked:
        return asked
    if profile and profile.get("jobs"):
        return int(profile["jobs"])
    return max(1, len(local_gpus()))


def _size(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= GB / 10 else f"{n / 1024**2:.1f} MB"


# ----- gpus and slurm ---------------------------------------------------------------------


def local_gpus() -> list[tuple[str, float]]:
    """(name, memory in GB) of this machine's CUDA devices."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    return [
        (torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory / GB)
        for i in range(torch.cuda.device_count())
    ]


def slurm_gpus(partitions: Iterable[str], gres_name: str = "gpu") -> dict[str, int]:
    """GPUs (or another generic resource: ``shard``) per node of each partition (its largest
    node), from sinfo's generic resources."""
    found = {}
    for partition in partitions:
        proc = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%G"], capture_output=True, text=True)
        found[partition] = gres_count(proc.stdout, gres_name)
    return found


def gres_count(sinfo_gres: str, gres_name: str) -> int:
    """The largest count of ``gres_name`` in sinfo's %G column (e.g. gpu:h100:8,shard:32)."""
    count = 0
    for gres in sinfo_gres.split():
        for item in gres.split(","):
            parts = item.split("(")[0].split(":")
            if parts[0] == gres_name and parts[-1].isdigit():
                count = max(count, int(parts[-1]))
    return count


def check_shards(config: dict[str, Any], partitions: list[str]) -> list[Finding]:
    """gpu_sharing.slurm_shards_per_gpu on a cluster whose partitions offer no shards: every
    shared job would stay pending."""
    from workflow_scripts.workflow import gpu_sharing

    settings = gpu_sharing.Settings.of(config)
    wanted = settings.slurm_shards_per_gpu
    if wanted <= 0 or settings.jobs_per_gpu <= 1 or not partitions or not shutil.which("sinfo"):
        return []
    offered = slurm_gpus(partitions, "shard")
    if max(offered.values(), default=0) > 0:
        return [Finding("gpus", "shared GPUs", OK, f"shards per node: {offered}")]
    return [
        Finding(
            "gpus",
            "shared GPUs",
            BLOCKER,
            f"gpu_sharing.slurm_shards_per_gpu is {wanted}, but no partition offers Slurm's shard GRES "
            f"({', '.join(partitions)})",
            "set gpu_sharing.slurm_shards_per_gpu: 0, or have the cluster configure shards (gres.conf)",
        )
    ]


def check_gpus(config: dict[str, Any], partitions: list[str]) -> list[Finding]:
    findings = check_shards(config, partitions)
    devices = local_gpus()
    offered = slurm_gpus(partitions) if partitions and shutil.which("sinfo") else {}
    for name in backbone_grid.names(config):
        asked = backbone_grid.gpus(config, name)
        per_node = max(1, asked["per_node"])
        if offered and max(offered.values()) < per_node:
            findings.append(
                Finding(
                    "gpus",
                    name,
                    BLOCKER,
                    f"asks for {per_node} GPUs per node; no partition offers as "
                    f"many ({', '.join(f'{p}: {g}' for p, g in offered.items())})",
                    f"set backbones.{name}.gpus.per_node to what a node has, or name a partition "
                    "with larger nodes in the profile",
                )
            )
    try:
        plans = memory_plan.plan_config(config)
    except memory_model.PlanError as err:
        return findings + [
            Finding("gpus", "memory plan", BLOCKER, str(err), "fix the backbone entry the message names")
        ]
    for plan in plans:
        subject = f"{plan.backbone} {plan.phase}"
        if plan.skipped or plan.estimate is None:
            findings.append(Finding("gpus", subject, SKIPPED, f"no memory plan: {plan.skipped or 'no estimate'}"))
            continue
        if not plan.fits:
            findings.append(
                Finding(
                    "gpus",
                    subject,
                    BLOCKER,
                    memory_plan.misfit_message(plan),
                    "ask for more or larger GPUs, or switch the method",
                )
            )
            continue
        detail = f"{plan.estimate.total / GB:.1f} GB per GPU on {plan.gpus_asked} x {plan.memory_gb:g} GB asked"
        problems = []
        if devices:
            smallest = min(memory for _, memory in devices)
            if memory_model.usable_bytes(smallest) < plan.estimate.total:
                problems.append(f"this machine's GPUs have {smallest:.0f} GB")
            if len(devices) < plan.gpus_asked and not partitions:
                problems.append(f"this machine has {len(devices)} GPUs")
        findings.append(
            Finding(
                "gpus",
                subject,
                BLOCKER if problems else OK,
                detail + ("; " + "; ".join(problems) if problems else ""),
                f"set backbones.{plan.backbone}.gpus to what the machine has" if problems else "",
            )
        )
    if not devices:
        findings.append(
            Finding(
                "gpus",
                "this machine",
                SKIPPED if partitions else WARNING,
                "no CUDA device here" + ("; training runs on the cluster" if partitions else ""),
                "" if partitions else "run the grid where GPUs are, or on Slurm (--profile)",
            )
        )
    return findings


def profile_settings(profile: Path) -> dict[str, Any]:
    import yaml

    file = profile / "config.yaml"
    if not file.is_file():
        raise InputError(f"Snakemake profile {profile}: no config.yaml")
    return yaml.safe_load(file.read_text(encoding="utf-8")) or {}


def profile_partitions_and_accounts(profile: dict[str, Any], config: dict[str, Any]) -> tuple[set[str], set[str]]:
    """Every slurm_partition and slurm_account the profile and the config's resources name."""
    groups = [
        profile.get("default-resources") or {},
        *(profile.get("set-resources") or {}).values(),
        *(config.get("resources") or {}).values(),
    ]
    partitions = {str(g["slurm_partition"]) for g in groups if isinstance(g, dict) and g.get("slurm_partition")}
    accounts = {str(g["slurm_account"]) for g in groups if isinstance(g, dict) and g.get("slurm_account")}
    return partitions, accounts


def check_slurm(partitions: set[str], accounts: set[str]) -> list[Finding]:
    if not shutil.which("sinfo"):
        return [
            Finding(
                "slurm",
                "sinfo",
                BLOCKER,
                "the Slurm client commands are not on PATH",
                "run the preflight on the cluster's submit host",
            )
        ]
    findings = []
    known = set(subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True).stdout.split())
    for partition in sorted(partitions):
        findings.append(
            Finding(
                "slurm",
                f"partition {partition}",
                OK if partition in known else BLOCKER,
                "exists" if partition in known else f"not a partition (known: {', '.join(sorted(known))})",
                "" if partition in known else "set slurm_partition in the profile to one of them",
            )
        )
    if not partitions:
        findings.append(
            Finding(
                "slurm",
                "partition",
                WARNING,
                "the profile names no partition: the default one is used",
                "set default-resources.slurm_partition in the profile",
            )
        )
    for account in sorted(accounts):
        proc = subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "account", account, "format=account"], capture_output=True, text=True
        )
        if proc.returncode != 0:
            findings.append(
                Finding("slurm", f"account {account}", WARNING, f"sacctmgr cannot tell: {proc.stderr.strip()}")
            )
        elif account in proc.stdout.split():
            findings.append(Finding("slurm", f"account {account}", OK, "exists"))
        else:
            findings.append(
                Finding(
                    "slurm",
                    f"account {account}",
                    BLOCKER,
                    "no such account",
                    "set slurm_account in the profile to one of `sacctmgr show account`",
                )
            )
    return findings


# ----- translation ------------------------------------------------------------------------


def check_translation(config: dict[str, Any]) -> list[Finding]:
    """CTranslate2 on a GPU needs the CUDA 12 cuBLAS, which torch's CUDA 13 wheels do not
    bring (translators.ensure_cublas12): checked where the grid translates with that backend
    and this machine has a CUDA GPU, since the translation jobs run where the GPUs are."""
    from workflow_scripts.translation.translators import CUBLAS_12_PACKAGE, ensure_cublas12
    from workflow_scripts.workflow import transfer

    backend = translation_of(config).backend
    translates = bool(grid.translation_jobs(config) or transfer.test_translations(config))
    if not translates:
        return [Finding("translation", "ctranslate2", SKIPPED, "the grid translates nothing")]
    if backend != "ctranslate2":
        return [Finding("translation", backend, SKIPPED, f"translation.backend {backend}: runs on torch's own CUDA")]
    if not local_gpus():
        return [
            Finding(
                "translation",
                "ctranslate2",
                SKIPPED,
                "no CUDA device here: on the CPU CTranslate2 needs no CUDA library; rerun the preflight on a "
                "GPU node to check its CUDA 12 cuBLAS",
            )
        ]
    try:
        where = ensure_cublas12()
    except InputError as err:
        # the jobs translate all the same, with the transformers backend (translators._engine)
        return [
            Finding(
                "translation",
                "ctranslate2",
                WARNING,
                f"{err} Without it the translation jobs fall back to the transformers backend.",
                f"pip install -r requirements-gpu.txt ({CUBLAS_12_PACKAGE}); or LD_LIBRARY_PATH=<a CUDA 12 "
                "toolkit>/lib64; or translation.backend: transformers",
            )
        ]
    return [Finding("translation", "ctranslate2", OK, where)]


# ----- a few optimizer steps ---------------------------------------------------------------


def smoke_steps(
    model_dir: Path, family: str, method_settings: MethodSettings, device: str, steps: int = SMOKE_STEPS
) -> list[float]:
    """Losses of a few optimizer steps of a classification head on the backbone's real
    weights, taken as training takes them: the model built by training's runtime (load dtypes,
    adapters, heads), the forward under the precision policy's autocast, the backward and
    step of training/step.py (fp16's loss scaling included). Raises if a loss is not finite."""
    import torch
    from transformers import AutoConfig

    from workflow_scripts.models.adapters import Method
    from workflow_scripts.models.heads import forward, load_tokenizer, make_head
    from workflow_scripts.precision import Precision
    from workflow_scripts.training import step
    from workflow_scripts.training.runtime import build_on

    torch.manual_seed(0)
    dev, method = torch.device(device), Method.from_settings(method_settings)
    precision = Precision(method.precision)
    tokenizer = load_tokenizer(model_dir)
    heads = {"nli": make_head("classification", AutoConfig.from_pretrained(model_dir).hidden_size, 3, 0.0, 0.02)}
    model = build_on(dev, model_dir, family, method, heads, {"nli": ("classification", 3)})
    batch = tokenizer(
        ["A man plays a guitar on stage.", "Two dogs run in the snow."],
        ["Someone makes music.", "The animals are asleep."],
        return_tensors="pt",
        padding=True,
    )
    batch = {k: v.to(dev) for k, v in batch.items()} | {"labels": torch.tensor([0, 2], device=dev)}
    optimizer, scaler = step.make_optimizer(model, 1e-5, 0.0), precision.grad_scaler(dev)
    losses = []
    model.train()
    for index in range(steps):
        with precision.autocast(dev):
            _, loss = forward(model, "classification", "nli", batch)
        if not torch.isfinite(loss):
            raise RuntimeError(f"{model_dir}: loss {loss.item()} at step {index}")
        losses.append(float(loss.detach()))
        step.backward(loss, scaler)
        step.optimizer_step(model, optimizer, scaler, 1.0)
        optimizer.zero_grad(set_to_none=True)
    return losses


def check_steps(config: dict[str, Any]) -> list[Finding]:
    if not local_gpus():
        return [Finding("steps", "every backbone", SKIPPED, "no CUDA device here: the steps run where a GPU is")]
    findings = []
    for name in backbone_grid.names(config):
        model_dir = repo_path(backbone_grid.base_dir(config, name))
        if not model_dir.is_dir():
            findings.append(
                Finding(
                    "steps",
                    name,
                    SKIPPED,
                    f"{model_dir} not prepared yet",
                    "snakemake --until prepare_backbone --configfile ... (then rerun the preflight)",
                )
            )
            continue
        try:
            losses = smoke_steps(
                model_dir, entry_of(config, name).family, backbone_grid.method_settings(config, name), "cuda"
            )
        except Exception as err:  # any failure here is what the preflight exists to show
            findings.append(
                Finding(
                    "steps",
                    name,
                    BLOCKER,
                    f"{type(err).__name__}: {err}",
                    "see the error; the training jobs would fail the same way",
                )
            )
            continue
        findings.append(
            Finding("steps", name, OK, f"{len(losses)} steps, losses {', '.join(f'{l:.3f}' for l in losses)}")
        )
    return findings


# ----- the report -------------------------------------------------------------------------


def report_markdown(findings: list[Finding], title: str) -> str:
    lines = [f"# Preflight: {title}", "", "| check | subject | status | detail | fix |", "|---|---|---|---|---|"]
    for f in findings:
        cells = (f.check, f.subject, MARKS[f.status], f.detail, f.fix)
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    blockers = sum(f.status == BLOCKER for f in findings)
    lines += ["", f"{blockers} blocker(s), {sum(f.status == WARNING for f in findings)} warning(s)."]
    return "\n".join(lines) + "\n"


def run(configfiles: list[str], profile: Path | None, jobs: int | None = None) -> list[Finding]:
    try:
        config = load_config(configfiles)
    except Exception as err:  # the config check's own errors name the key (and snakemake's the file)
        return [
            Finding(
                "config", ", ".join(configfiles) or "config.yaml", BLOCKER, str(err), "fix the key the message names"
            )
        ]
    lock = Path(config_check.hub_lock())
    findings = [
        Finding("config", ", ".join(configfiles) or "config.yaml", OK, f"experiment {paths.experiment()}, lock {lock}")
    ]
    hub, resolved = check_hub(config, lock)
    findings += hub
    findings += check_local_data(config)
    profile_config = profile_settings(profile) if profile is not None else None
    findings += check_disk(config, configfiles, resolved, jobs_at_once(profile_config, jobs))
    partitions: set[str] = set()
    if profile_config is not None:
        partitions, accounts = profile_partitions_and_accounts(profile_config, config)
        findings += check_slurm(partitions, accounts)
    findings += check_gpus(config, sorted(partitions))
    findings += check_translation(config)
    findings += check_precision(config)
    findings += check_steps(config)
    return findings


def check_precision(config: dict[str, Any]) -> list[Finding]:
    """Each backbone's precision against this machine's GPUs: bf16 needs native bf16
    (precision.Precision.check_device), which cards before compute capability 8.0 lack."""
    if not local_gpus():
        return [Finding("precision", "every backbone", SKIPPED, "no CUDA device here: checked where a GPU is")]
    import torch

    from workflow_scripts.precision import Precision

    findings = []
    for name in backbone_grid.names(config):
        precision = Precision(backbone_grid.method_settings(config, name).precision)
        try:
            for index in range(torch.cuda.device_count()):
                precision.check_device(torch.device("cuda", index), f"backbones.{name}")
        except InputError as err:
            findings.append(
                Finding("precision", name, BLOCKER, str(err), "set the backbone's precision to fp16 or fp32")
            )
            continue
        findings.append(Finding("precision", name, OK, f"{precision.name} runs natively on every GPU here"))
    return findings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configfile", nargs="*", default=[], help="the config files, as given to snakemake")
    ap.add_argument("--profile", type=Path, help="the Snakemake profile the grid runs with (e.g. slurm)")
    ap.add_argument("--output", type=Path, help="also write the report (Markdown) here")
    ap.add_argument(
        "--jobs",
        type=int,
        help="jobs the grid runs at once, for the disk plan (default: the profile's jobs, else 1 per GPU)",
    )
    args = ap.parse_args(argv)
    findings = run(args.configfile, args.profile, args.jobs)
    text = report_markdown(findings, " ".join(args.configfile) or "config.yaml")
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return 1 if any(f.status == BLOCKER for f in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
