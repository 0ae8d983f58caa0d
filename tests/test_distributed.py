"""Sharded training (workflow_scripts/training/distributed.py): the data split and loss weights, the
launch commands, each rank's device, and real torchrun runs of a tiny model on CPU (gloo, FSDP2, DCP).

The runs (tests/distributed_worker.py, ~6 s each on 2 cores) check that 2 processes train
like 1 on the same global batches, that a SIGTERM'd run resumes from its sharded checkpoint
to the uninterrupted result, and that a dead rank ends the job instead of hanging it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import pytest
import torch

from conftest import HIDDEN_GPUS, REPO
from workflow_scripts.spec import launch
from workflow_scripts.spec.basics import InputError
from workflow_scripts.training import distributed as D

WORKER = str(REPO / "tests" / "distributed_worker.py")
STEPS = 10
# 1 vs 2 processes in fp32: the same sums in another order. Observed max abs loss difference
# 1.9e-6 on losses of 9-15 (1.2e-7 on weights); bf16 on 2 processes vs fp32 on 1: 2.2e-2 (0.16 %).
FP32_LOSS_ATOL, FP32_WEIGHT_ATOL, BF16_LOSS_RTOL = 1e-5, 1e-5, 2e-2


def _env(gpus: bool = False) -> dict[str, str]:
    """This environment without a launcher's variables; without GPUs unless ``gpus``: the
    ranks run the gloo/CPU path also on a GPU workstation."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    # PYTHONFAULTHANDLER: a rank that aborts (SIGABRT from C++) prints every thread's Python
    # stack, which says whether it died mid-run or while the interpreter shut down.
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    if not gpus:
        env.update(HIDDEN_GPUS)
    return env


def run(tmp_path, name: str, *args: str, nproc: int = 2, check: bool = True, timeout: float = 120, gpus: bool = False):
    """Run the worker on ``nproc`` processes (1: plain python, no process group), on the CPU
    unless ``gpus``."""
    out = tmp_path / f"{name}.json"
    # the launch command a rule would run, with this interpreter for `python` and `torchrun`
    command = launch.launch_command([WORKER, "--out", str(out), "--steps", str(STEPS), *args], 1, nproc)
    command[:1] = [sys.executable] if command[0] == "python" else [sys.executable, "-m", "torch.distributed.run"]
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env(gpus), cwd=REPO)
    proc.seconds = time.monotonic() - started
    if check:
        assert proc.returncode == 0, proc.stderr[-12000:]
        return json.loads(out.read_text()), torch.load(out.with_suffix(".pt"))
    return proc


def _max_weight_diff(a: dict, b: dict) -> float:
    """Largest weight difference, without the attention key biases: softmax ignores them, so
    their true gradient is 0 and AdamW scales the rounding noise in it to full-size steps."""
    assert sorted(a) == sorted(b)
    worst = 0.0
    for name in a:
        x, y = a[name].float(), b[name].float()
        if name.endswith("in_proj_bias"):
            width = x.shape[0] // 3
            x, y = torch.cat([x[:width], x[2 * width :]]), torch.cat([y[:width], y[2 * width :]])
        worst = max(worst, (x - y).abs().max().item())
    return worst


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return run(tmp_path_factory.mktemp("single"), "single", nproc=1)


@pytest.fixture(scope="module")
def dropout_reference(tmp_path_factory):
    """An uninterrupted 2-process run with dropout: resumed runs must match it exactly."""
    return run(tmp_path_factory.mktemp("reference"), "reference", "--dropout", "0.1")


# --- pure functions ----------------------------------------------------------------------------


def ctx(rank: int, world: int) -> D.Context:
    return D.Context(rank, world, rank, torch.device("cpu"), "gloo" if world > 1 else None, rank == 0)


@pytest.mark.multiprocess
def test_rank_shares_are_contiguous_balanced_and_cover_the_batch_once():
    batch = list(range(7))
    assert [D.rank_share(batch, ctx(r, 2)) for r in range(2)] == [[0, 1, 2], [3, 4, 5, 6]]
    assert [D.rank_share(batch, ctx(r, 3)) for r in range(3)] == [[0, 1], [2, 3], [4, 5, 6]]
    assert D.rank_share(batch, ctx(0, 1)) == batch
    assert [D.rank_share([0, 1], ctx(r, 4)) for r in range(4)] == [[], [0], [], [1]]


@pytest.mark.multiprocess
def test_accumulation_steps_keep_the_global_batch_whatever_the_world_size():
    assert D.accumulation_steps(32, 1, 8) == 4
    assert D.accumulation_steps(32, 4, 8) == 1
    assert D.accumulation_steps(32, 8, 8) == 1
    assert D.accumulation_steps(33, 4, 8) == 2  # the largest share (9) decides, on every rank
    assert D.accumulation_steps(7, 2, 2) == 2
    with pytest.raises(ValueError):
        D.accumulation_steps(0, 2, 2)


@pytest.mark.multiprocess
@pytest.mark.parametrize("size, world, micro", [(7, 2, 2), (32, 4, 8), (33, 4, 8), (5, 2, 1), (3, 4, 2), (10, 1, 3)])
def test_micro_batches_same_count_on_every_rank_and_weights_give_the_global_mean(size, world, micro):
    batch = list(range(size))
    per_rank = [D.micro_batches(batch, ctx(r, world), micro) for r in range(world)]
    steps = D.accumulation_steps(size, world, micro)
    assert all(len(m) == steps for m in per_rank)  # every rank takes part in every collective
    assert [x for m in per_rank for chunk, w in m if w for x in chunk] == batch  # each example once, in order
    assert all(len(chunk) <= micro for m in per_rank for chunk, _ in m)
    # FSDP averages over ranks: the weights of all micro-batches of all ranks sum to W, each
    # example counting 1/N of the gradient (W=1: train.py's len(chunk) / len(batch)).
    assert sum(w for m in per_rank for _, w in m) == pytest.approx(world)
    for m in per_rank:
        for chunk, w in m:
            assert w == pytest.approx(world * len(chunk) / size if w else 0.0)
    if size < world * steps:
        assert any(w == 0.0 for m in per_rank for _, w in m)  # stand-ins for ranks with nothing left


@pytest.mark.multiprocess
def test_single_process_helpers_are_no_ops():
    one = ctx(0, 1)
    assert D.any_rank(True, one) and not D.any_rank(False, one)
    assert D.from_rank0({"a": 1}, one) == {"a": 1}
    assert D.sum_over_ranks(torch.tensor(2.0), one).item() == 2.0


@pytest.mark.multiprocess
def test_launch_command_single_process_and_one_node():
    argv = ["-m", "workflow_scripts.training.train", "target", "--seed", "1"]
    assert launch.launch_command(argv, 1, 1) == ["python", *argv]
    cmd = launch.launch_command(argv, 1, 4, port=12345)
    assert cmd[:2] == ["torchrun", "--standalone"] and cmd[-len(argv) :] == argv
    flags = dict(zip(cmd[2 : -len(argv)][::2], cmd[2 : -len(argv)][1::2]))
    assert flags["--nnodes"] == "1" and flags["--nproc-per-node"] == "4" and flags["--max-restarts"] == "0"
    assert "SIGUSR1" in flags["--signals-to-handle"].split(",")
    with pytest.raises(ValueError):
        launch.launch_command(argv, 0, 1)


@pytest.mark.multiprocess
def test_launch_command_two_nodes_runs_one_torchrun_per_node_at_the_first_host(tmp_path):
    """The shell string, run by bash with stand-ins for scontrol and srun that print their arguments."""
    argv = ["-m", "workflow_scripts.training.train", "target", "--data", '{"xnli": "a b.parquet"}']
    cmd = launch.launch_command(argv, 2, 8, port=29411)
    assert isinstance(cmd, str)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "gpu017\\ngpu018\\n"\n')
    (bin_dir / "srun").write_text("#!/usr/bin/env python3\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {
        **_env(),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "gpu[017-018]",
        "SLURM_JOB_ID": "4242",
    }
    args = json.loads(subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, check=True).stdout)
    i = args.index("torchrun")
    assert args[:i] == [
        "--nodes",
        "2",
        "--ntasks",
        "2",
        "--ntasks-per-node",
        "1",
        "--cpus-per-task",
        "8",
        "--kill-on-bad-exit=1",
    ]
    assert args[-len(argv) :] == argv  # quoting survives the shell
    flags = dict(zip(args[i + 1 : -len(argv)][::2], args[i + 1 : -len(argv)][1::2]))
    assert flags == {
        "--nnodes": "2",
        "--nproc-per-node": "8",
        "--max-restarts": "0",
        "--signals-to-handle": launch.FORWARDED_SIGNALS,
        "--shutdown-timeout": "120",
        "--rdzv-backend": "c10d",
        "--rdzv-endpoint": "gpu017:29411",
        "--rdzv-id": "4242",
    }
    default_port = json.loads(
        subprocess.run(
            ["bash", "-c", launch.launch_command(argv, 2, 8)], capture_output=True, text=True, env=env, check=True
        ).stdout
    )
    assert "gpu017:33742" in default_port  # 29500 + 4242 % 10000


def _stand_ins(tmp_path) -> dict[str, str]:
    """An environment whose scontrol names two hosts and whose srun and torchrun print their
    arguments and the rendezvous variables as JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu[017-018]" ] && printf "gpu017\\ngpu018\\n"\n'
    )
    # the job step's environment has no SLURM_JOB_NODELIST: the nodes come from squeue
    (bin_dir / "squeue").write_text(
        '#!/bin/sh\n[ "$*" = "--noheader --jobs 4242 --format %N" ] && echo "gpu[017-018]"\n'
    )
    printer = (
        "#!/usr/bin/env python3\nimport json, os, sys\nprint(json.dumps({'name': os.path.basename(sys.argv[0]), "
        "'args': sys.argv[1:], 'env': {k: os.environ.get(k) for k in ('MASTER_ADDR', 'MASTER_PORT', "
        f"'{launch.RANKS_FROM}')}}}}))\n"
    )
    for name in ("srun", "torchrun"):
        (bin_dir / name).write_text(printer)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {**_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.multiprocess
def test_srun_launcher_starts_one_task_per_rank_inside_slurm_and_torchrun_outside(tmp_path):
    argv = ["-m", "workflow_scripts.training.train", "target", "--data", '{"xnli": "a b.parquet"}']
    env = _stand_ins(tmp_path)
    env.pop("SLURM_JOB_ID", None)
    slurm_env = {**env, "SLURM_JOB_ID": "4242"}
    slurm_env.pop("SLURM_JOB_NODELIST", None)

    def started(nodes, per_node, environ):
        command = launch.launch_prefix(nodes, per_node, "srun", 3) + " " + " ".join(shlex.quote(a) for a in argv)
        assert command == launch.launch_command(argv, nodes, per_node, launcher="srun", cpus_per_rank=3)
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=environ)

    inside = json.loads(started(2, 8, slurm_env).stdout)
    assert inside["name"] == "srun"
    assert inside["args"] == [
        "--nodes",
        "2",
        "--ntasks",
        "16",
        "--ntasks-per-node",
        "8",
        "--cpus-per-task",
        "3",
        "--kill-on-bad-exit=1",
        "python",
        *argv,
    ]  # quoting survives the shell
    assert inside["env"] == {"MASTER_ADDR": "gpu017", "MASTER_PORT": "33742", launch.RANKS_FROM: "slurm"}
    outside = json.loads(started(1, 2, env).stdout)  # a local `snakemake --cores N`
    assert outside["name"] == "torchrun" and outside["args"][:2] == ["--standalone", "--nnodes"]
    assert outside["args"][-len(argv) :] == argv and outside["env"][launch.RANKS_FROM] is None
    refused = started(2, 8, env)
    assert refused.returncode == 2 and "inside a Slurm allocation only" in refused.stderr
    with pytest.raises(ValueError, match="launcher 'mpirun'"):
        launch.launch_command(argv, 1, 2, launcher="mpirun")


@pytest.mark.multiprocess
def test_ranks_numbered_by_slurm_train_like_one_process(tmp_path, single):
    """Two processes given only what srun gives its tasks (SLURM_PROCID, SLURM_NTASKS,
    SLURM_LOCALID) plus the launcher's MASTER_ADDR/PORT and marker: the same process group,
    hence the single process's loss curve."""
    out = tmp_path / "srun.json"
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = {
            **_env(),
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            launch.RANKS_FROM: "slurm",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, "--out", str(out), "--steps", str(STEPS)],
                env=env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
    two, one = json.loads(out.read_text()), single[0]
    assert two["world_size"] == 2
    worst = max(abs(a - b) for a, b in zip(one["losses"], two["losses"]))
    assert worst <= FP32_LOSS_ATOL, (worst, one["losses"], two["losses"])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- each rank's device ------------------------------------------------------------------------


@pytest.mark.unit
def test_torchrun_with_every_gpu_visible_gives_each_rank_the_gpu_of_its_local_rank():
    for local in range(4):
        env = {"LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "4", "RANK": str(4 + local), "WORLD_SIZE": "8"}
        assert D.local_device(local, 4, env) == torch.device("cuda", local)
    # more GPUs than ranks (a node shared with another job step): still one each
    assert D.local_device(1, 8, {"LOCAL_WORLD_SIZE": "2"}) == torch.device("cuda", 1)


@pytest.mark.unit
def test_srun_with_gpus_per_node_gives_each_task_the_gpu_of_its_local_id():
    env = {"SLURM_LOCALID": "3", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_STEP_GPUS": "0,1,2,3"}
    assert D.local_device(3, 4, env) == torch.device("cuda", 3)


@pytest.mark.unit
def test_slurm_gpus_per_task_gives_every_task_its_only_gpu():
    """srun --gpus-per-task=1: task 3 sees one GPU (physical 3) as device 0, not cuda:3."""
    for local in range(4):
        env = {
            "SLURM_LOCALID": str(local),
            "SLURM_NTASKS_PER_NODE": "4",
            "SLURM_GPUS_PER_TASK": "1",
            "SLURM_STEP_GPUS": "0,1,2,3",
            "CUDA_VISIBLE_DEVICES": str(local),
        }
        assert D.local_device(local, 1, env) == torch.device("cuda", 0)


@pytest.mark.unit
def test_cuda_visible_devices_alone_naming_one_gpu_gives_cuda_0():
    assert D.local_device(0, 1, {"CUDA_VISIBLE_DEVICES": "3"}) == torch.device("cuda", 0)
    assert D.local_device(1, 1, {"CUDA_VISIBLE_DEVICES": "3", "LOCAL_RANK": "1"}) == torch.device("cuda", 0)


@pytest.mark.unit
def test_no_visible_gpu_gives_the_cpu():
    assert D.local_device(1, 0, {"LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": ""}) == torch.device("cpu")


@pytest.mark.unit
def test_fewer_gpus_than_local_ranks_is_an_error_naming_counts_variables_and_fixes():
    env = {"SLURM_LOCALID": "3", "SLURM_NTASKS_PER_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(InputError) as error:
        D.local_device(3, 2, env)
    message = str(error.value)
    for part in ("local rank 3", "2 GPU(s)", "4 ranks", "SLURM_NTASKS_PER_NODE='4'", "CUDA_VISIBLE_DEVICES='0,1'"):
        assert part in message, message
    assert "--gpus-per-task=1" in message and "--gpus-per-node=N" in message


@pytest.mark.unit
def test_torchrun_workers_sharing_one_visible_gpu_is_an_error():
    """torchrun's workers inherit one environment: one visible GPU is the same GPU for all."""
    with pytest.raises(InputError, match="LOCAL_WORLD_SIZE='2'"):
        D.local_device(0, 1, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "0"})


@pytest.mark.unit
def test_a_second_srun_task_seeing_one_gpu_joins_the_group_on_cuda_0(monkeypatch):
    """init_from_env's choice where the launcher is srun with --gpus-per-task=1: Slurm's
    variables only, one visible GPU (simulated), the process group's start stubbed."""
    import torch.distributed as dist

    slurm = {
        launch.RANKS_FROM: "slurm",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_GPUS_PER_TASK": "1",
        "CUDA_VISIBLE_DEVICES": "1",
    }
    # a process environment of these alone (init_from_env adds RANK, WORLD_SIZE, LOCAL_RANK to it)
    monkeypatch.setattr(os, "environ", slurm)
    chosen, started = [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: started.append((backend, kwargs)))
    context = D.init_from_env()
    assert (context.rank, context.world_size, context.local_rank) == (1, 2, 1)
    assert context.device == torch.device("cuda", 0) and chosen == [torch.device("cuda", 0)]
    assert started[0][0] == "cpu:gloo,cuda:nccl" and started[0][1]["device_id"] == torch.device("cuda", 0)


# --- torchrun runs -----------------------------------------------------------------------------


@pytest.mark.multiprocess
def test_two_processes_fsdp2_give_the_single_process_loss_curve(tmp_path, single):
    """FSDP2 per block + activation checkpointing on 2 gloo ranks vs 1 plain process, fp32,
    global batches of 7 (shares 3 + 4) in micro-batches of 2, tied LM head, clipping, AdamW."""
    two, two_weights = run(tmp_path, "two", "--activation-checkpointing")
    one, one_weights = single
    assert (one["world_size"], two["world_size"]) == (1, 2)
    assert len(two["losses"]) == STEPS and two["losses"][-1] < two["losses"][0]
    worst = max(abs(a - b) for a, b in zip(one["losses"], two["losses"]))
    assert worst <= FP32_LOSS_ATOL, (worst, one["losses"], two["losses"])
    assert _max_weight_diff(one_weights, two_weights) <= FP32_WEIGHT_ATOL
    assert abs(one["eval_loss"] - two["eval_loss"]) <= FP32_LOSS_ATOL  # an eval-mode forward on every rank
    assert two["tied"] and torch.equal(two_weights["lm.weight"], two_weights["embeddings.weight"])


@pytest.mark.multiprocess
def test_sigterm_to_torchrun_checkpoints_and_the_rerun_ends_as_the_uninterrupted_run(tmp_path, dropout_reference):
    """Rank 0 sends SIGTERM to torchrun after step 3; torchrun forwards it to both workers,
    which agree on a step boundary, write a sharded checkpoint and exit. With dropout, so
    the per-rank RNG states must be restored too."""
    ckpt = tmp_path / "ckpt"
    stopped = run(
        tmp_path,
        "stopped",
        "--dropout",
        "0.1",
        "--checkpoint",
        str(ckpt),
        "--signal-parent-at",
        "3",
        "--sleep",
        "0.2",
        check=False,
    )
    assert stopped.returncode != 0 and "got signal: 15" in stopped.stderr, stopped.stderr[-3000:]
    assert not (tmp_path / "stopped.json").exists()
    assert D.read_extra(ckpt)["step"] in range(3, STEPS)
    resumed, weights = run(tmp_path, "resumed", "--dropout", "0.1", "--checkpoint", str(ckpt))
    reference, reference_weights = dropout_reference
    assert resumed["resumed_at"] in range(3, STEPS)
    assert resumed["losses"] == reference["losses"]
    assert _max_weight_diff(weights, reference_weights) <= 1e-6


@pytest.mark.multiprocess
def test_a_dead_rank_ends_the_job_and_a_single_process_resumes_its_last_checkpoint(tmp_path, single):
    """Rank 1 exits with code 3 at step 5: torchrun must stop rank 0 (blocked in a collective)
    and fail, not hang. The periodic checkpoint of step 3 (2 shards) then loads into one
    process (DCP reshards) and the run ends as the single-process run."""
    ckpt = tmp_path / "ckpt"
    died = run(
        tmp_path, "died", "--checkpoint", str(ckpt), "--checkpoint-every", "3", "--die-at", "5", check=False, timeout=90
    )
    assert died.returncode != 0 and "exitcode  : 3" in died.stderr, died.stderr[-3000:]
    assert died.seconds < 60
    assert D.read_extra(ckpt)["step"] == 3
    resumed, weights = run(tmp_path, "resumed", "--checkpoint", str(ckpt), nproc=1)
    one, one_weights = single
    assert resumed["resumed_at"] == 3
    assert max(abs(a - b) for a, b in zip(one["losses"], resumed["losses"])) <= FP32_LOSS_ATOL
    assert _max_weight_diff(one_weights, weights) <= FP32_WEIGHT_ATOL


@pytest.mark.multiprocess
def test_an_interrupted_save_never_looks_complete(tmp_path):
    """A version directory still under its temporary name, or without its extra state, is ignored."""
    model = torch.nn.Linear(2, 2)
    one = ctx(0, 1)
    assert D.load_checkpoint(tmp_path / "none", model, None, one) is None
    D.save_checkpoint(tmp_path / "c", model, None, {"step": 1}, one)
    (tmp_path / "c" / ".v000002.tmp").mkdir()  # a save killed half-way
    assert D.read_extra(tmp_path / "c") == {"step": 1}
    with torch.no_grad():
        model.weight.add_(1.0)
    saved = model.weight.clone()
    D.save_checkpoint(tmp_path / "c", model, None, {"step": 2}, one)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["LATEST", "v000002"]
    with torch.no_grad():
        model.weight.zero_()
    assert D.load_checkpoint(tmp_path / "c", model, None, one) == {"step": 2}
    assert torch.equal(model.weight, saved)
    (tmp_path / "c" / "v000002" / D.EXTRA).unlink()
    assert D.read_extra(tmp_path / "c") is None


@pytest.mark.multiprocess
@pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason="needs 2 GPUs: FSDP2 with NCCL and bf16 on CUDA (the CPU tests above cover FSDP2 with gloo)",
)
def test_two_gpus_bf16_fsdp2_match_one_gpu(tmp_path):
    one, _ = run(tmp_path, "gpu1", nproc=1, gpus=True)  # one process on cuda:0: unsharded fp32
    two, _ = run(tmp_path, "gpu2", "--bf16", "--activation-checkpointing", gpus=True)
    assert max(abs(a - b) / abs(a) for a, b in zip(one["losses"], two["losses"])) <= BF16_LOSS_RTOL
