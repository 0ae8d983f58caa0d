# What each job asks of the machine or the cluster, read from `resources.<rule>` (grid.resources),
# the cost model's time estimates (workflow_scripts/planning/job_estimates.py), GPU sharing
# (gpu_sharing.py) and a backbone's GPUs (backbone_grid.gpus): resources, not params, so a
# change reruns nothing. Included after rules/common.smk, before the rules that ask.


def res(rule_name, key):
    return grid.resources(config, rule_name)[key]


def training_slurm_extra(rule_name):
    """sbatch options of a training job: SIGUSR1 before the time limit (so it checkpoints and
    a retry resumes), then the config's own `slurm_extra`."""
    resources = grid.resources(config, rule_name)
    lead = resources.get("signal_lead", slurm.DEFAULT_SIGNAL_LEAD)
    return " ".join([slurm.signal_option(lead), resources.get("slurm_extra", "")]).strip()


def gpu_share(rule_name, wildcards):
    """Jobs like this one on one GPU (1: it takes whole GPUs): gpu_sharing.job_share, where
    this run shares GPUs at all; once per job (its resources read it several times)."""
    if not SHARING or rule_name not in gpu_sharing.SHAREABLE_RULES:
        return 1
    key = (rule_name, tuple(sorted(wildcards.items())))
    if key not in _SHARES:
        _SHARES[key] = gpu_sharing.job_share(config, rule_name, dict(key[1])).jobs
    return _SHARES[key]


_SHARES = {}


def gpu_resources(rule_name, whole=None, gres=None):
    """A GPU rule's `gpu` (whole GPUs: what Snakemake counts against --resources gpu=G and
    Slurm allocates; 0 for a shared job), `gpu_share` (jobs to one GPU), `gpu_slots` (its
    slots of a local run's GPUs, which bind_gpus locks) and, where Slurm may see shards or
    ``gres`` gives a job's own (training_gres), `gres`: a shared job's shards instead of a
    GPU. ``whole``: the GPUs a job takes unshared (default: the rule's `gpu` resource)."""
    whole = whole or (lambda wildcards: res(rule_name, "gpu"))
    found = {
        "gpu": lambda wildcards: 0 if gpu_share(rule_name, wildcards) > 1 else whole(wildcards),
        "gpu_share": lambda wildcards: gpu_share(rule_name, wildcards),
        "gpu_slots": lambda wildcards: gpu_sharing.slots(
            gpu_share(rule_name, wildcards), whole(wildcards), GPU_SHARING.jobs_per_gpu
        ),
    }
    if SLURM_SHARDS > 0 or gres is not None:

        def job_gres(wildcards):
            share = gpu_share(rule_name, wildcards)
            if SLURM_SHARDS > 0 and share > 1:
                return f"shard:{gpu_sharing.shards(share, SLURM_SHARDS)}"
            return gres(wildcards) if gres is not None else ""

        found["gres"] = job_gres
    return found


def training_retries(rule_name):
    """Retries of a training rule: one per extra allocation its longest job needs
    (expected_runtime, else the cost model's estimates), plus those for failures."""
    return slurm.training_retries(grid.resources(config, rule_name), job_estimates.max_allocations(config, rule_name))


def job_runtime(rule_name):
    """A job's time limit (minutes): its cost estimate x cost.safety_factor +
    cost.floor_minutes, at most resources.<rule>.runtime; that runtime where the job has no
    estimate (job_estimates.py). Variants of a rule (`use rule`) read the same resources."""

    def runtime(wildcards):
        return job_estimates.job_time(
            config, rule_name, dict(wildcards), job_estimates.resources_rule(rule_name)
        ).runtime

    return runtime


def rule_resources():
    """GPUs and threads each rule's jobs request, as the rules resolved them (some rules
    share another rule's resource settings). Training jobs ask per backbone: the most any
    backbone's jobs hold (GPUs per node times nodes)."""

    def gpus(rule):
        if rule.name in ("train_intermediate", *slurm.TARGET_TRAINING_RULES):
            asked = [backbone_grid.gpus(config, b) for b in BACKBONES]
            return max(a["per_node"] * a["nodes"] if a["per_node"] else res(rule.name, "gpu") for a in asked)
        if rule.name == "evaluate_prompted":
            default = res(rule.name, "gpu")
            return max(
                (prompted_grid.gpus(config, b, default) for b in prompted_grid.backbones(config)), default=default
            )
        # every GPU rule's `gpu` is a function of the job (gpu_resources): its rule's setting
        return res(job_estimates.resources_rule(rule.name), "gpu") if "gpu_slots" in rule.resources else 0

    return {r.name: {"gpu": gpus(r), "threads": r.resources.get("_cores").value or 1} for r in workflow.rules}


# A backbone whose `gpus` ask for more than one GPU trains as one process per GPU: torchrun
# on one node, one torchrun per node through srun on several, or (launcher srun) one Slurm
# task per rank (distributed.py). Resources, not params: the GPU count changes how a job
# runs, not what it computes.
OWN_JOB_STEPS = any(slurm.steps_its_own_ranks(backbone_grid.gpus(config, b)) for b in BACKBONES)


def training_launcher(wildcards, threads):
    asked = backbone_grid.gpus(config, wildcards.backbone)
    # each rank has the rule's threads (sbatch asks for them per GPU)
    prefix = launch.launch_prefix(asked["nodes"], max(1, asked["per_node"]), asked["launcher"], threads)
    if OWN_JOB_STEPS and not slurm.steps_its_own_ranks(asked):
        # With such backbones in the config every training job declares `mpi` (below), so the
        # Slurm jobstep plugin runs it without its own `srun -n1`: a job that does not start
        # its ranks with srun then starts that job step itself (only inside a Slurm job),
        # where sbatch --signal reaches it, with every CPU of the job (a step gets one CPU per
        # task unless told; the job asked for `threads` per GPU).
        cpus = threads * max(1, asked["per_node"])
        prefix = prefix.replace(
            "exec ", f"exec ${{SLURM_JOB_ID:+srun --ntasks=1 --nodes=1 --cpus-per-task={cpus}}} ", 1
        )
    return prefix


def training_gpus(rule_name):
    def gpus(wildcards):
        return slurm.training_gpu_total(backbone_grid.gpus(config, wildcards.backbone), res(rule_name, "gpu"))

    return gpus


def training_geometry():
    """The Slurm task geometry of training jobs (slurm.training_geometry), declared only when
    some backbone's jobs start their own ranks: the jobstep plugin runs any job that has an
    `mpi` resource, even an empty one, without its srun wrapper (which would otherwise
    deliver Slurm's signals)."""
    if not OWN_JOB_STEPS:
        return {}

    def geometry(key):
        return lambda wildcards: slurm.training_geometry(backbone_grid.gpus(config, wildcards.backbone))[key]

    # (its `gres` joins a shared job's shards in gpu_resources: training_gres)
    return {key: geometry(key) for key in ("nodes", "tasks", "tasks_per_node", "tasks_per_gpu", "mpi")}


def training_gres():
    """A training job's own `gres` (GPUs per node of a job that starts its own ranks), or
    None where no job does (the resource is then not declared: training_geometry)."""
    if not OWN_JOB_STEPS:
        return None
    return lambda wildcards: slurm.training_geometry(backbone_grid.gpus(config, wildcards.backbone))["gres"]
