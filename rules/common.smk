import functools
import os
import shlex
import sys

from snakemake.utils import min_version

min_version("9.0")

# The workflow_scripts package lives beside this Snakefile; every job imports it from here,
# wherever the working directory is.
sys.path.insert(0, workflow.basedir)

from workflow_scripts.spec import launch
from workflow_scripts.spec import trackers
from workflow_scripts.operations import logs
from workflow_scripts.planning import disk, job_estimates, slurm
from workflow_scripts.workflow import (
    backbone_grid,
    config_check,
    config_layers,
    gpu_binding,
    gpu_sharing,
    grid,
    grid_settings,
    local_data,
    releases,
    sweep,
    transfer,
)
from workflow_scripts.workflow import prompted as prompted_grid
from workflow_scripts.workflow import retention as retention_grid
from workflow_scripts.spec import availability, few_shot, paths
from workflow_scripts import revisions
from workflow_scripts.spec.codehash import module_digest, task_fingerprint
from workflow_scripts.operations.summary import run_summary
from workflow_scripts.spec.basics import canonical_json, repo_path
from workflow_scripts.spec.data_map import data_map_json
from workflow_scripts.spec.record import settings_json
from workflow_scripts.spec.report_settings import tables_of
from workflow_scripts.spec.source_entries import data_of, models_of, vision_of
from workflow_scripts.spec.translation_settings import translation_of
from workflow_scripts.spec.run_identity import EvaluationIdentity, ProbeIdentity, PromptedIdentity, TrainingIdentity
from workflow_scripts.spec import tasks as task_catalogue
from workflow_scripts.spec import task_entry
from workflow_scripts.spec.tasks import TASKS

# Under Slurm: cancelled and preempted jobs end in a retry, and SIGUSR1 is left to the
# training process (workflow_scripts/planning/slurm.py says why each is needed).
slurm.install()
slurm.ignore_usr1_in_job_step()


# Config errors stop the workflow before any job runs, naming the offending key
# (workflow_scripts/workflow/config_check.py; the preflight runs the same checks). Every
# output, log and benchmark record of this run then lives in the experiment's own folders
# (workflow_scripts/spec/paths.py), so two configs never overwrite each other.
try:
    # Config files layered on others (`extends:`) resolved, --config over everything: the
    # schema, the checks and every rule see the resolved config (config_layers.py).
    config_layers.resolve_in_place(config, workflow.configfiles, workflow.config_settings.config)
    # The user's own task entries: jobs read the same folders (exported below).
    TASK_CATALOGUES = [str(repo_path(d)) for d in config.get("task_catalogues", [])]
    EXPERIMENT = config_check.check(config, workflow.config_settings.configfiles, TASK_CATALOGUES)
except config_check.CONFIG_ERRORS as err:
    raise WorkflowError(str(err)) from None
# The Hub commits every job reads at (workflow_scripts/revisions.py).
HUB_LOCK = config_check.hub_lock()

config["experiment"] = EXPERIMENT  # named in the report
RESULTS = paths.results()
LOGS = paths.logs()
# Every job: the package, the user's task catalogues, and the log function. Rules write
# their log to $(fresh_log {log:q}): a new log, the previous attempt's (an interrupted or
# failed one) kept as <log>.1, .2, ... (workflow_scripts/operations/logs.py).
# A local run with `--resources gpu=G`: each GPU job takes devices of its own with
# `bind_gpus {resources.gpu}` (a rule whose jobs may share a GPU adds {resources.gpu_slots};
# workflow_scripts/workflow/gpu_binding.py, gpu_sharing.py).
try:
    RUN_GPUS = gpu_binding.run_devices(gpu_binding.granted_gpus(workflow))
except gpu_binding.GpuBindingError as err:
    raise WorkflowError(str(err)) from None
_unbound = gpu_binding.unbound_gpus_warning(
    gpu_binding.granted_gpus(workflow),
    any(r.get("gpu", 0) for r in config.get("resources", {}).values()),
)
if _unbound:
    print(f"warning: {_unbound}", file=sys.stderr)
# Small jobs sharing a GPU (workflow_scripts/workflow/gpu_sharing.py): locally under
# --resources gpu=G, each GPU has gpu_sharing.jobs_per_gpu slots, which Snakemake counts;
# under Slurm, the cluster's shards.
# (Snakemake reads the Snakefile before it picks the executor: a run without bound GPUs
# that names shards shares through them, which a local run without --resources ignores.)
GPU_SHARING = gpu_sharing.Settings.of(config)
SLURM_SHARDS = 0 if RUN_GPUS else GPU_SHARING.slurm_shards_per_gpu
SHARING = GPU_SHARING.jobs_per_gpu > 1 and (bool(RUN_GPUS) or SLURM_SHARDS > 0)
if RUN_GPUS:
    workflow.register_resource("gpu_slots", len(RUN_GPUS) * GPU_SHARING.jobs_per_gpu)
shell.prefix(
    f"export PYTHONPATH={shlex.quote(workflow.basedir)};"
    f" export {task_catalogue.CATALOGUE_ENV}={shlex.quote(os.pathsep.join(TASK_CATALOGUES))};"
    f" export {revisions.LOCK_ENV}={shlex.quote(HUB_LOCK)};"
    f" {logs.SHELL_FUNCTION}{gpu_binding.shell_prefix(RUN_GPUS, GPU_SHARING.jobs_per_gpu)} "
)


# The experiment trackers (workflow_scripts/spec/trackers.py): a resource token ("off",
# "tensorboard+mlflow", ...), not a param, so switching them reruns nothing. Every record
# lands in the experiment's own folder.
TRACKING = trackers.token(config.get("tracking"))
TRACKING_DIR = f"{RESULTS}/tracking"


BACKBONES = backbone_grid.names(config)
# The benchmark the targets belong to (benchmark.py): names the leaderboard submission folder.
BENCHMARK = config["benchmark"]
# The tables' reference row and rounding (spec/report_settings.py TablesEntry).
TABLES = tables_of(config)
INTERMEDIATE = list(config["intermediate"])
TARGETS = list(config["targets"])
SEEDS = [str(s) for s in config["seeds"]]


# Transfer settings as path components (source:de -> source-de); target-model recipes name
# their training and selection data (mt-de.dev-de: translated into de, selected on de dev).
SETTING_TOKENS = [transfer.path_token(s) for s in transfer.configured(config)]


def other_setting_tokens():
    """Path tokens of the transfer settings besides the baseline setting (one figure each)."""
    baseline = transfer.baseline_setting(config)
    return [transfer.path_token(s) for s in transfer.configured(config) if s != baseline]


wildcard_constraints:
    backbone="|".join(BACKBONES),
    intermediate="|".join(INTERMEDIATE),
    setting="|".join(SETTING_TOKENS),
    recipe=r"[a-z]+(-[a-z]+)?\.dev-[a-z]+",
    point=r"[a-z]{2}[0-9a-z.+-]+(_[a-z]{2}[0-9a-z.+-]+)*",
    target="|".join(TARGETS),
    seed=r"\d+",
    task="|".join(TASKS),
    stage="|".join(TASKS),
    split="train|dev|test",
    lang="[a-z]{2,3}",
    translator="translator|translator_to_en",


@functools.lru_cache(maxsize=None)
def _task_fingerprint(names):
    return canonical_json(task_fingerprint(names))


def job_tasks(names_of):
    """A params function: what the job reads of the task catalogue (codehash.task_fingerprint)
    for the tasks names_of(wildcards) returns."""
    return lambda wildcards: _task_fingerprint(tuple(sorted(names_of(wildcards))))


def settings(fn, *keys):
    """A params function: the canonical JSON of the settings record fn resolves for the
    rule's wildcards."""
    return lambda wildcards: settings_json(fn(config, *(getattr(wildcards, k) for k in keys)))


def data_map(fn, *keys):
    """A params function: the JSON of the training phase's data map fn resolves for the
    rule's wildcards (spec/data_map.py)."""
    return lambda wildcards: data_map_json(fn(config, *(getattr(wildcards, k) for k in keys)))


def target_model_output(path):
    """A target model (or a stage's) as an output: temp() unless the config keeps target
    models (disk.py), so Snakemake deletes it once every job reading it has run."""
    return temp(directory(path)) if disk.discards_target_models(config) else directory(path)


def intermediate_model_output(path):
    """An intermediate model as an output: temp() while the config discards intermediate
    models once their targets are trained (disk.py)."""
    return temp(directory(path)) if disk.discards_intermediate_models(config) else directory(path)


def sweep_inputs(wildcards):
    """The models of every sweep point of one recipe and seed."""
    return grid.sweep_candidates(
        config, wildcards.backbone, wildcards.intermediate, wildcards.target, wildcards.recipe, wildcards.seed
    )


def kept_model_inputs(wildcards):
    return grid.kept_model_inputs(
        config, wildcards.backbone, wildcards.intermediate, wildcards.target, wildcards.recipe
    )


def candidate_args(candidates_of):
    """A params function: --candidate=TOKEN=MODEL of each candidate candidates_of(wildcards)
    names, in its order (workflow.sweep selects among them)."""
    return lambda wildcards, input: " ".join(
        shlex.quote(f"--candidate={token}={input[token]}") for token in candidates_of(wildcards)
    )


# IGLUE's few-shot setting (spec/few_shot.py): its recipes' names (fs5-de.dev-de) are the only
# ones with a digit, so its rules and the other training rules never claim each other's paths.
FEW_SHOT_RECIPE = few_shot.RECIPE_PATTERN
ANY_RECIPE = rf"[a-z]+(-[a-z]+)?\.dev-[a-z]+|{FEW_SHOT_RECIPE}"


def few_shot_inputs(wildcards):
    """The zero-shot model a few-shot candidate goes on training, the shots and translated
    dev rows it reads, and for an image target the pool's image features."""
    data = grid_settings.few_shot_data(config, wildcards.target, wildcards.recipe)[wildcards.target]
    found = {
        "encoder": grid.zero_shot_model(wildcards.backbone, wildcards.intermediate, wildcards.target, wildcards.seed),
        "data": sorted({path for split in ("train", "dev") for path, _ in data.sources(split, None)}),
    }
    if data.images:
        found["images"] = data.images
    return found


def few_shot_data_map(wildcards):
    return data_map_json(grid_settings.few_shot_data(config, wildcards.target, wildcards.recipe))


def few_shot_candidate_inputs(wildcards):
    """The models of every learning rate of one few-shot recipe and seed."""
    return grid_settings.few_shot_candidates(
        config, wildcards.backbone, wildcards.intermediate, wildcards.target, wildcards.recipe, wildcards.seed
    )


# Each table the report shows is an HTML page rendered from its Markdown or CSV
# (reporting.html_page): the report draws HTML inline and offers other files only as downloads.


def table_pages(decimals=None, **pages):
    """A params function: html_page's arguments, PAGE=SOURCE from output names (page=source),
    and the decimal places of CSV sources where a page has one. Each rule that writes a table
    runs html_page after its own command, into the same log."""
    options = [] if decimals is None else ["--decimals", str(decimals)]
    return lambda wildcards, output: " ".join(
        options + [shlex.quote(f"{getattr(output, page)}={getattr(output, source)}") for page, source in pages.items()]
    )


def demo_text_inputs(wildcards):
    """The declared task data a demo model's vocabulary is learnt from; hub models need none."""
    return grid.demo_pretraining_text(config) if models_of(config).demo else []


def demo_encoder_corpora(wildcards):
    """The parallel corpora a demo backbone is pre-trained on; hub models need none."""
    if not models_of(config).demo:
        return []
    return [repo_input(corpus) for corpus in grid.demo_encoder_corpora(config)]


def demo_translator_corpus(wildcards):
    """The parallel corpus a demo translator is trained on; hub models need none."""
    return [repo_input(grid.demo_corpus(config, wildcards.lang))] if models_of(config).demo else []


def repo_input(path):
    """A configured input path (relative paths are relative to the repository) as Snakemake
    should record it: relative to the working directory when inside it (so
    `snakemake --directory` elsewhere finds the repository's files)."""
    return workdir_relative(repo_path(path))


def translator_inputs(translator):
    """A translation rule's model inputs: the MarianMT directory and, for the CTranslate2
    backend, its conversion (made once by convert_translator)."""

    def inputs(wildcards):
        found = {"model": f"{RESULTS}/models/{translator}/{wildcards.lang}"}
        if translation_of(config).backend == "ctranslate2":
            found["converted"] = f"{RESULTS}/models/ctranslate2/{translator}/{wildcards.lang}"
        return found

    return inputs


def converted_arg(wildcards, input):
    return f"--converted {input.converted}" if input.get("converted") else ""


def local_source_files(wildcards):
    """The local files a task reads (a mirror directory, local releases, or CCG's
    user-provided files), so editing them reruns its preparation."""
    task = task_entry.entry_of(config, wildcards.task)
    options = task.options
    found = []
    # local releases (UD v2.5, XTREME-R's UD v2.7 languages, XQuAD-R): their archives or files
    for release in releases.local_releases(options).values():
        if release.is_file():
            found.append(workdir_relative(release))
        else:
            found += [workdir_relative(os.path.join(d, f)) for d, _, files in os.walk(release) for f in files]
    # a task with local files of its own reads nothing else (own_data_file)
    if not releases.reads_hub_data(options) or task.data is not None:
        return sorted(found)
    if "path" in options:
        source_dir = options["path"]
    elif data_of(config).mirror is not None:
        source_dir = os.path.join(data_of(config).mirror, task.hub.path)
    else:
        return sorted(found)
    if not os.path.isabs(source_dir):
        source_dir = os.path.join(workflow.basedir, source_dir)
    return sorted(found + [workdir_relative(os.path.join(d, f)) for d, _, files in os.walk(source_dir) for f in files])


def own_data_file(wildcards):
    """The local file one split of a task reads (tasks.<name>.data), so editing it reruns that
    split's preparation and what is trained or scored on it; none for a task read from the Hub."""
    path = local_data.split_file(config, wildcards.task, wildcards.split)
    return [workdir_relative(path)] if path else []


def embed_inputs(wildcards):
    """An image task's data splits, and its images' checksum manifest when there is one (a
    re-downloaded or edited image changes it, so the features are made again)."""
    task = TASKS[wildcards.task]
    found = {"data": [grid.data_path(wildcards.task, split) for split in task.splits]}
    manifest = repo_path(os.path.join(grid.image_dir(config, wildcards.task), "SHA256SUMS"))
    if manifest.is_file():
        found["manifest"] = repo_input(manifest)
    return found


def _demo_vision_source():
    """The demo vision encoder's (image directory, caption rows): its pre-training pairs
    (vision.demo.captions; by default the demo's SNLI-VE training scenes and captions)."""
    captions = vision_of(config).demo["captions"]
    return tuple(
        p if os.path.isabs(p) else os.path.join(workflow.basedir, p) for p in (captions["images"], captions["rows"])
    )


def vision_encoder_inputs(wildcards):
    if not models_of(config).demo or not grid.visual_tasks(config):
        return {}
    images, rows = _demo_vision_source()
    return {"captions": workdir_relative(rows), "manifest": workdir_relative(os.path.join(images, "SHA256SUMS"))}


def demo_vision_args(wildcards, input):
    if not input.get("captions"):
        return ""
    images, _ = _demo_vision_source()
    return f"--images {shlex.quote(images)} --captions {shlex.quote(input.captions)}"


def workdir_relative(path):
    """A path inside the working directory, relative to it: Snakemake records input paths as
    given, and an absolute one would make a moved or re-mounted checkout rerun every step."""
    path = os.path.abspath(path)
    inside = os.path.commonpath([path, os.getcwd()]) == os.getcwd()
    return os.path.relpath(path) if inside else path


def intermediate_inputs(wildcards):
    data = grid.intermediate_data(config, wildcards.intermediate)
    return {
        "encoder": backbone_grid.base_dir(config, wildcards.backbone),
        **{f"{task}_{split}": path for task, files in data.items() for split, path in files.to_dict().items()},
    }


def target_inputs(wildcards):
    found = {
        # the intermediate phase's backbone, or the model of the target's last stage
        "encoder": grid.target_start(
            config, wildcards.backbone, wildcards.intermediate, wildcards.target, wildcards.seed
        ),
        "data": grid.target_data_files(config, wildcards.target, wildcards.recipe),
        # the checks between the config's tasks and a multimodal target: with
        # leakage.on_overlap refuse, a failed check keeps the model from training
        "leakage": grid.leakage_reports(config, wildcards.intermediate, wildcards.target),
    }
    images = grid.visual_target_images(config, wildcards.target)
    if images:  # an image target: the features of the image task it trains on
        found["images"] = images
    return found


def stage_inputs(wildcards):
    data = grid.stage_data(config, wildcards.stage)
    return {
        "encoder": grid.target_start(
            config, wildcards.backbone, wildcards.intermediate, wildcards.target, wildcards.seed, before=wildcards.stage
        ),
        **{f"{split}": path for split, path in data[wildcards.stage].to_dict().items()},
    }


def stage_data_map(wildcards):
    return data_map_json(grid.stage_data(config, wildcards.stage))


def stage_settings(wildcards):
    return settings_json(grid_settings.stage_settings(config, wildcards.backbone, wildcards.target, wildcards.stage))


def target_data_map(wildcards):
    return data_map_json(grid.target_data(config, wildcards.target, wildcards.recipe))


@functools.lru_cache(maxsize=None)  # the config is fixed for the run; three params ask per job
def _evaluation(backbone, setting, intermediate, target, seed):
    return grid.evaluation(config, backbone, setting, intermediate, target, seed)


def evaluation(wildcards):
    return _evaluation(wildcards.backbone, wildcards.setting, wildcards.intermediate, wildcards.target, wildcards.seed)


def evaluate_inputs(wildcards):
    run = evaluation(wildcards)
    found = {
        "models": sorted(set(run["models"].values())),
        "data": sorted({ref["path"] for refs in run["data"].values() for ref in refs}),
        "leakage": grid.leakage_reports(config, wildcards.intermediate, wildcards.target),
    }
    if run.get("images"):  # an image target: its test images' features
        found["images"] = run["images"]
    return found


def images_arg(wildcards, input):
    """--images DIR for an image target (its test images' feature bank), else nothing."""
    return f"--images {shlex.quote(input.images)}" if input.get("images") else ""


def model_args(wildcards):
    """One model directory, or LANG=DIR when languages have models of their own."""
    models = evaluation(wildcards)["models"]
    if len(set(models.values())) == 1:
        return shlex.quote(next(iter(models.values())))
    return " ".join(shlex.quote(f"{lang}={path}") for lang, path in sorted(models.items()))


def data_args(wildcards):
    """SPLIT:LANGS=FILE for every file a split is scored on."""
    data = evaluation(wildcards)["data"]
    return " ".join(
        shlex.quote(f"{split}:{','.join(ref['languages'])}={ref['path']}")
        for split, refs in data.items()
        for ref in refs
    )


def training_run_id(job):
    """A params function: the identity JSON of a training job's tracker run (its wildcards,
    so it never changes for an output)."""

    def identity(wildcards):
        return TrainingIdentity(
            job=job,
            backbone=wildcards.backbone,
            config=wildcards.intermediate,
            seed=int(wildcards.seed),
            **{key: wildcards.get(key) for key in ("target", "recipe", "stage", "point")},
        ).to_json()

    return identity


def run_id(wildcards):
    setting = next(s for s in transfer.configured(config) if transfer.path_token(s) == wildcards.setting)
    return EvaluationIdentity(
        backbone=wildcards.backbone,
        setting=setting,
        intermediate=wildcards.intermediate,
        target=wildcards.target,
        seed=int(wildcards.seed),
        # the run's checks between stages (metric_file records what they found); a target
        # without images has none, and no key
        leakage_reports=tuple(grid.leakage_reports(config, wildcards.intermediate, wildcards.target)) or None,
    ).to_json()


def probe_identity(stage):
    """A params function: which model a probe reads, as its output file records it."""

    def identity(wildcards):
        found = {"backbone": wildcards.backbone, "stage": stage}
        if stage != "before":
            found.update(config=wildcards.intermediate, seed=int(wildcards.seed))
        if stage == "target":
            found["target"] = wildcards.target
        return ProbeIdentity(**found).to_json()

    return identity


def probe_inputs(model_of):
    """A probe's inputs: the model, the pretrained backbone (whose LM head every stage is read
    with) and the held-out text."""

    def inputs(wildcards):
        return {
            "model": model_of(wildcards),
            "base": backbone_grid.base_dir(config, wildcards.backbone),
            "text": retention_grid.text_file(config),
        }

    return inputs
