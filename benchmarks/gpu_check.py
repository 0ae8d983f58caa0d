"""`make gpu-check`: what a GPU run of xstilts depends on, checked and measured on one GPU in
minutes, written to ``results/gpu_check/summary.md`` and ``summary.json``.

- **GPU tests**: the suite's tests that run on the GPU when there is one (the adapter chains,
  QLoRA among them, the stacked adapter, the preflight's steps, the GPU search), by pytest.
- **Training throughput**: real tokens/s and MFU of the training engine's own step (the model
  built by training's runtime with the precision policy's dtypes, autocast, training/step.py)
  for an XLM-R-large-shaped encoder trained in full at seq 128 and 384, and a decoder of 7B
  width (Llama-2-7B's layer, 4 layers deep: the time per layer is what scales) with LoRA, full
  fine-tuning and QLoRA. MFU is against the card's dense bf16 peak (vendor datasheet); FLOPs
  per token are 6 N (full) or 4 N (a frozen base computes no weight gradients) over the
  non-embedding parameters, plus attention's 12 L s d. Checkpoints are saved in bf16, so full
  fine-tuning also shows its fp32 master weights.
- **Eager against compiled** (workflow_scripts/models/compiled.py): XLM-R large in full and
  the 7B-width decoder with LoRA at seq 128 x batch 32, 384 x 16 and 128 x 4 (XNLI's target
  batch), each eager, compiled, and compiled with CUDA graphs (``compile: graphs``), with the
  aten ops one step dispatches and one profiled
  step's CPU time against its GPU kernel time. The batch-4 rows are the host's shortest
  micro-step by depth, which the cost model reads (``host_rows``).
- **Sharded runtime**: a world-size-1 torchrun (NCCL on a GPU) trains a small encoder with
  FSDP2 in bf16, is stopped by SIGTERM after a checkpoint, and resumes from it.
- **Retrieval**: the GPU exact search against faiss on the CPU (or, without faiss, an fp64
  reference): the same neighbours in the same order, scores to float rounding.
- **CTranslate2 on CUDA**: whether the CUDA 12 cuBLAS that ctranslate2 loads can be found.
- **Memory**: every measured peak beside the memory planner's estimate.
- **The demo grid on the GPU**: ``snakemake --cores 8 --resources gpu=1`` over the demo's
  config with one GPU for every GPU rule: every job must succeed and every training log name
  ``cuda`` (skipped, with the reason, where snakemake is not installed).

``--cpu-smoke`` runs every part at tiny shapes on the CPU (no GPU tests, no MFU, compiled
rows traced by aot_eager instead of inductor's minutes of C++ code generation, no demo grid),
so that the command cannot rot: ``make test`` runs it. On a GPU machine without network, the wheels it
needs beyond torch, transformers and peft come from ``bash benchmarks/gpu_wheels.sh``
(docs/benchmarks.md says how to carry them).

    python benchmarks/gpu_check.py [--cpu-smoke] [--out results/gpu_check]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # step_ops

from workflow_scripts.planning.job_cost import PEAK_TFLOPS  # noqa: E402 (after the path)

# Dense bf16 peak of each card, TFLOP/s: the cost model's table, declared there.
BF16_PEAK_TFLOPS = {kind: peaks["16-bit"] for kind, peaks in PEAK_TFLOPS.items()}
XLMR_LARGE = {"vocab_size": 250002, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
              "intermediate_size": 4096, "max_position_embeddings": 514}  # fmt: skip
DECODER_7B_WIDTH = {"vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 32,
                    "num_key_value_heads": 32, "intermediate_size": 11008, "max_position_embeddings": 4096}  # fmt: skip
# XLM-R XL's layer (2560 wide, MLP 10,240, 32 heads), four layers deep: the width of the
# encoders that the presets train with LoRA.
XLMR_XL_WIDTH = {**XLMR_LARGE, "hidden_size": 2560, "num_hidden_layers": 4, "num_attention_heads": 32,
                 "intermediate_size": 10240}  # fmt: skip
TINY_ENCODER = {**XLMR_LARGE, "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "intermediate_size": 128}  # fmt: skip
TINY_DECODER = {**DECODER_7B_WIDTH, "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128}  # fmt: skip
LORA = {"rank": 16, "alpha": 32, "dropout": 0.0}
# (seq, batch) of the eager-against-compiled rows; the last is XNLI's target step, where the
# host sets the pace (the cost model's host_rows).
COMPARED_SHAPES = ((128, 32), (384, 16), (128, 4))
# each engine's resources.<rule>.compile; graphs (CUDA graphs) on a GPU only: on a CPU it is
# the compiled row again
ENGINE_MODES = {"eager": "never", "compiled": "always", "graphs": "graphs"}


def throughput_cases(smoke: bool) -> list[dict[str, Any]]:
    """(label, family, shape, method, precision, mode, seq_len, micro_batch) of each throughput
    run: training steps, and evaluation's forwards (``inference``), which the cost model
    (planning/job_cost.py) reads as measured MFU per family, method, precision and mode."""
    enc, dec = (TINY_ENCODER, TINY_DECODER) if smoke else (XLMR_LARGE, DECODER_7B_WIDTH)
    wide = TINY_ENCODER if smoke else XLMR_XL_WIDTH
    scale = (lambda s, b: (32, 2)) if smoke else (lambda s, b: (s, b))
    compared = []
    for name, family, shape, method in (
        ("XLM-R large, full", "encoder", enc, "full"),
        ("decoder 7B width (4 layers), LoRA", "decoder", dec, "lora"),
    ):
        for seq, batch in COMPARED_SHAPES[:1] if smoke else COMPARED_SHAPES:  # (smoke: all shapes are tiny)
            for engine in ENGINE_MODES if not smoke else ("eager", "compiled"):
                label = f"{name}, {seq} x {batch}, {engine}"
                compared.append((label, family, shape, method, "bf16", "train", *scale(seq, batch), engine))
    cases = [
        ("XLM-R large, full, seq 128", "encoder", enc, "full", "bf16", "train", *scale(128, 32)),
        ("XLM-R large, full, seq 384", "encoder", enc, "full", "bf16", "train", *scale(384, 16)),
        ("XLM-R large, full, fp16, seq 128", "encoder", enc, "full", "fp16", "train", *scale(128, 32)),
        ("XLM-R XL width (4 layers), LoRA", "encoder", wide, "lora", "bf16", "train", *scale(256, 16)),
        ("decoder 7B width (4 layers), LoRA", "decoder", dec, "lora", "bf16", "train", *scale(512, 8)),
        ("decoder 7B width (4 layers), full", "decoder", dec, "full", "bf16", "train", *scale(512, 8)),
        ("decoder 7B width (4 layers), QLoRA", "decoder", dec, "qlora", "bf16", "train", *scale(512, 8)),
        ("XLM-R large, evaluation, seq 128", "encoder", enc, "full", "bf16", "inference", *scale(128, 128)),
        ("XLM-R large, evaluation, seq 384", "encoder", enc, "full", "bf16", "inference", *scale(384, 64)),
        ("decoder 7B width (4 layers), evaluation", "decoder", dec, "lora", "bf16", "inference", *scale(512, 16)),
        ("decoder 7B width (4 layers), QLoRA evaluation", "decoder", dec, "qlora", "bf16", "inference",
         *scale(512, 16)),
    ]  # fmt: skip
    keys = ("label", "family", "shape", "method", "precision", "mode", "seq_len", "micro_batch", "engine")
    return [dict(zip(keys, case)) for case in [(*c, "eager") for c in cases] + compared]


# ----- the environment -----------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import torch

    versions = {}
    for name in ("torch", "transformers", "peft", "bitsandbytes", "ctranslate2", "faiss"):
        try:
            versions[name] = __import__(name).__version__
        except Exception as err:  # a missing package is a finding, not a crash
            versions[name] = f"missing ({type(err).__name__})"
    env = {"date": datetime.date.today().isoformat(), "host": platform.node(), "versions": versions}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        query = ["nvidia-smi", "--query-gpu=driver_version,memory.total", "--format=csv,noheader"]
        try:
            env["driver"], env["memory"] = (
                subprocess.run(query, capture_output=True, text=True).stdout.strip().split(", ")
            )
        except (OSError, ValueError):
            env["driver"] = env["memory"] = "unknown"
    else:
        env["gpu"] = None
    return env


def peak_tflops(gpu: str | None) -> float | None:
    return next((peak for name, peak in BF16_PEAK_TFLOPS.items() if gpu and name in gpu), None)


# ----- one training step, as training takes it ----------------------------------------------


def save_backbone(family: str, shape: dict[str, Any], out: Path, dev) -> int:
    """A random-init backbone of ``shape``, saved in bf16 (a 16-bit checkpoint, as Hub models
    are stored). Returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaModel, XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(0)
    config_class, model_class = (
        (XLMRobertaConfig, XLMRobertaModel) if family == "encoder" else (LlamaConfig, LlamaModel)
    )
    extra = {"add_pooling_layer": False} if family == "encoder" else {}
    with torch.device(dev):
        model = model_class(config_class(**shape), **extra).to(torch.bfloat16)
    model.save_pretrained(out)
    count = sum(p.numel() for p in model.parameters())
    del model
    return count


def build_model(model_dir: Path, family: str, method_settings: dict[str, Any], dev):
    """The MultiHeadModel training's runtime builds: load dtypes, adapters, one NLI head."""
    from transformers import AutoConfig

    from workflow_scripts.models.adapters import Method
    from workflow_scripts.models.heads import make_head
    from workflow_scripts.training.runtime import build_on

    method = Method.from_settings(method_settings)
    heads = {"nli": make_head("classification", AutoConfig.from_pretrained(model_dir).hidden_size, 3, 0.0, 0.02)}
    return build_on(dev, model_dir, family, method, heads, {"nli": ("classification", 3)}), method


def synthetic_batch(vocab: int, seq_len: int, micro_batch: int, dev) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(5, vocab, (micro_batch, seq_len), generator=g),
        "attention_mask": torch.ones(micro_batch, seq_len, dtype=torch.long),
        "labels": torch.randint(0, 3, (micro_batch,), generator=g),
    }
    return {k: v.to(dev) for k, v in batch.items()}


def timed(run_once: Callable[[], Any], dev, warmup: int, steps: int) -> tuple[float, Any]:
    """Seconds of ``steps`` calls of ``run_once`` after ``warmup`` untimed ones (the GPU
    synchronised at both ends), and what the last call returned."""
    import torch

    started, last = 0.0, None
    for index in range(warmup + steps):
        if index == warmup:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        last = run_once()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, last


def timed_forwards(model, method, batch: dict[str, Any], dev, warmup: int, steps: int) -> float:
    """Seconds of ``steps`` forwards as evaluation runs them (evaluate.predict_logits: no_grad,
    the precision policy's autocast, logits copied back to the host) after ``warmup``."""
    import torch

    from workflow_scripts.models.heads import forward
    from workflow_scripts.precision import Precision

    precision = Precision(method.precision)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    model.eval()

    def one_forward():
        with torch.no_grad(), precision.autocast(dev):
            logits, _ = forward(model, "classification", "nli", inputs)
        return logits.float().cpu()

    seconds, logits = timed(one_forward, dev, warmup, steps)
    if not torch.isfinite(logits).all():
        raise RuntimeError("non-finite logits")
    return seconds


def flops_per_token(case: dict[str, Any], parameters: int) -> float:
    """The cost model's FLOPs per token (planning/job_cost.py), for this case's shape."""
    from workflow_scripts.planning.job_cost import flops_per_token as model_flops

    shape = case["shape"]
    embeddings = (
        shape["vocab_size"] + (shape["max_position_embeddings"] if case["family"] == "encoder" else 0)
    ) * shape["hidden_size"]
    return model_flops(
        parameters - embeddings,
        shape["num_hidden_layers"],
        shape["hidden_size"],
        case["seq_len"],
        case["method"],
        case["mode"],
    )


def planned_bytes(case: dict[str, Any], parameters: int, precision: str) -> float:
    """The memory planner's estimate for this step, without its fixed reserve."""
    from workflow_scripts.planning import memory_model

    shape = case["shape"]
    entry = {
        "family": case["family"],
        "method": case["method"],
        "precision": precision,
        "parameters": parameters,
        "architecture": {
            "hidden_size": shape["hidden_size"],
            "num_layers": shape["num_hidden_layers"],
            "num_attention_heads": shape["num_attention_heads"],
            "vocab_size": shape["vocab_size"],
            "intermediate_size": shape["intermediate_size"],
        },
    }
    plan = memory_model.estimate(entry, case["seq_len"], case["micro_batch"], 1)
    return plan.total - plan.reserve


def peak_bytes(dev) -> float:
    import resource

    import torch

    if dev.type == "cuda":
        return float(torch.cuda.max_memory_allocated(dev))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def run_throughput(case: dict[str, Any], workdir: Path, dev, smoke: bool, peak: float | None) -> dict[str, Any]:
    import torch

    model_dir = workdir / "".join(c if c.isalnum() else "_" for c in case["label"])
    parameters = save_backbone(case["family"], case["shape"], model_dir, dev)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    method_settings = {
        "name": case["method"],
        "precision": case["precision"],
        **(LORA if case["method"] != "full" else {}),
    }
    from step_ops import engine_step, profile_step

    from workflow_scripts.models import compiled

    compiled.configure(ENGINE_MODES[case["engine"]], dev.type)
    model, method = build_model(model_dir, case["family"], method_settings, dev)
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.requires_grad})
    batch = synthetic_batch(case["shape"]["vocab_size"], case["seq_len"], case["micro_batch"], dev)
    steps, warmup = (2, 1) if smoke else (10, 3)
    ops = {}
    if case["mode"] == "train":
        one_step = engine_step(model, method, batch, dev)
        seconds, loss = timed(one_step, dev, warmup, steps)
        if not torch.isfinite(loss):
            raise RuntimeError(f"loss {loss.item()}")
        ops = profile_step(one_step, dev)
    else:
        seconds = timed_forwards(model, method, batch, dev, warmup=warmup, steps=steps)
    tokens_per_s = case["seq_len"] * case["micro_batch"] * steps / seconds
    flops = flops_per_token(case, parameters)
    measured = peak_bytes(dev)
    planned = planned_bytes(case, parameters, case["precision"]) if case["mode"] == "train" else None
    del model, batch
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "label": case["label"],
        "family": case["family"],
        "method": case["method"],
        "precision": case["precision"],
        "mode": case["mode"],
        "engine": case["engine"],
        "layers": case["shape"]["num_hidden_layers"],
        "step_seconds": seconds / steps,
        **ops,
        "hidden_size": case["shape"]["hidden_size"],
        "seq_len": case["seq_len"],
        "micro_batch": case["micro_batch"],
        "parameters": parameters,
        "trained_dtypes": dtypes,
        "tokens_per_s": tokens_per_s,
        "flops_per_token": flops,
        "tflops": tokens_per_s * flops / 1e12,
        "mfu": tokens_per_s * flops / (peak * 1e12) if peak else None,
        "peak_gib": measured / 2**30,
        "planned_gib": planned / 2**30 if planned else None,
        "measured_over_planned": measured / planned if planned else None,
    }


# ----- the sharded runtime: torchrun, FSDP2, a stop and a resume ------------------------------


def small_encoder(workdir: Path, smoke: bool) -> tuple[Path, dict[str, Any]]:
    """A small demo encoder (tokenizer included) and NLI-shaped pairs cut from the XQuAD sample."""
    import pyarrow.parquet as pq

    from benchmarks.training_efficiency import build_inputs
    from workflow_scripts.models.demo_models import build_demo_encoder
    from workflow_scripts.spec.model_settings import DemoEncoder

    workdir.mkdir(parents=True, exist_ok=True)
    build_inputs(workdir, 400, build_encoder=False)
    size = {"hidden_size": 64, "num_hidden_layers": 2} if smoke else {"hidden_size": 512, "num_hidden_layers": 8}
    settings = DemoEncoder.defaults().replace(
        vocab_size=2000,
        num_attention_heads=8,
        intermediate_size=4 * size["hidden_size"],
        max_position_embeddings=258,
        seed=0,
        **size,
    )
    build_demo_encoder(settings, [str(workdir / "train.parquet")], workdir / "encoder")
    assert pq.read_metadata(workdir / "train.parquet").num_rows == 400
    data = {"mnli": {"train": str(workdir / "train.parquet"), "dev": str(workdir / "dev.parquet")}}
    return workdir / "encoder", data


def run_padding_free(dev, smoke: bool) -> dict[str, Any]:
    """Packed against padded batches of XLM-R large in bf16 (benchmarks/padding_free.py): 64
    long-tailed sequences up to 256 tokens, evaluation forwards and training steps."""
    import padding_free

    shape, rows, longest, precision = (TINY_ENCODER, 8, 32, "fp32") if smoke else (XLMR_LARGE, 64, 256, "bf16")
    table = padding_free.run(shape, rows, longest, precision, dev, steps=1 if smoke else 5)
    ratios = {row["mode"]: row for row in table if row["way"] == "packed / padded"}
    difference = ratios["inference"]["max_logit_difference"]
    if difference > (1e-4 if precision == "fp32" else 5e-2):
        raise RuntimeError(f"packed and padded logits differ by {difference:g}")
    padded = next(row for row in table if row["way"] == "padded")
    return {
        "padding share": f"{padded['padding_share']:.2f}",
        "evaluation packed / padded tokens/s": f"{ratios['inference']['tokens_per_s']:.2f}",
        "training packed / padded tokens/s": f"{ratios['train']['tokens_per_s']:.2f}",
        "largest logit difference": f"{difference:.2g}",
        "attention": next(row["attention"] for row in table if row["way"] == "packed"),
    }


def run_sharded_resume(workdir: Path, dev, smoke: bool) -> dict[str, Any]:
    from benchmarks.training_efficiency import xstilts_settings
    from workflow_scripts.training.distributed import read_extra

    encoder, data = small_encoder(workdir, smoke)
    steps = 12 if smoke else 40
    args = argparse.Namespace(steps=steps, batch_size=8, max_length=64, lr=5e-5)
    settings = xstilts_settings(args).replace(eval_every=steps // 2, method={"name": "full", "precision": "bf16"})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
           "-m", "workflow_scripts.training.train", "intermediate", "--encoder", str(encoder),
           "--data", json.dumps(data), "--settings", settings.to_json(), "--seed", "1",
           "--output", str(workdir / "model"), "--checkpoint-dir", str(workdir / "ckpt"),
           "--checkpoint-every", "5"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 240
    while (read_extra(workdir / "ckpt" / "checkpoint") or {}).get("step", 0) < 5:
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"no checkpoint was written: {proc.stderr.read()[-3000:]}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=180)
    stopped_at = read_extra(workdir / "ckpt" / "checkpoint")["step"]
    if proc.returncode == 0 or (workdir / "model").exists():
        raise RuntimeError(f"SIGTERM did not stop the run: {stderr[-2000:]}")
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if again.returncode != 0:
        raise RuntimeError(f"the resumed run failed: {again.stderr[-3000:]}")
    log = json.loads((workdir / "model" / "train_log.json").read_text())
    if log["resumed_at_step"] != stopped_at:
        raise RuntimeError(f"resumed at {log['resumed_at_step']}, checkpointed at {stopped_at}")
    return {
        "processes": log["throughput"]["processes"],
        "backend": "nccl" if dev.type == "cuda" else "gloo",
        "stopped_at_step": stopped_at,
        "resumed_at_step": log["resumed_at_step"],
        "steps": log["total_steps"],
        "precision": log["backbone"]["precision"],
        "best_score": log["best"]["score"],
    }


# ----- retrieval and CTranslate2 -------------------------------------------------------------


def run_retrieval(dev, smoke: bool) -> dict[str, Any]:
    import numpy as np
    import torch

    from workflow_scripts.evaluation.neighbours import knn

    rng = np.random.default_rng(0)
    n_queries, n_keys, dim = (64, 200, 32) if smoke else (1024, 50_000, 1024)
    queries = rng.standard_normal((n_queries, dim)).astype(np.float32)
    keys = rng.standard_normal((n_keys, dim)).astype(np.float32)
    started = time.perf_counter()
    scores, found = knn(queries, keys, 10, dev=dev)
    seconds = time.perf_counter() - started
    try:
        import faiss

        index = faiss.IndexFlatIP(dim)
        index.add(keys)
        ref_scores, ref_found = index.search(queries, 10)
        reference = f"faiss {faiss.__version__} IndexFlatIP (CPU)"
    except ImportError:
        exact = torch.from_numpy(queries).double() @ torch.from_numpy(keys).double().T
        ref_scores, ref_found = (t.numpy() for t in exact.topk(10, dim=1))
        reference = "fp64 matrix product on the CPU (faiss not installed here)"
    return {
        "device": dev.type,
        "queries": n_queries,
        "keys": n_keys,
        "dim": dim,
        "seconds": seconds,
        "reference": reference,
        "same_neighbours": float(np.mean(np.all(found == ref_found, axis=1))),
        "max_score_difference": float(np.abs(scores - ref_scores).max()),
    }


def run_ctranslate2(dev) -> dict[str, Any]:
    import ctranslate2

    from workflow_scripts.translation.translators import ensure_cublas12

    if dev.type != "cuda":
        return {"cuda": False, "note": "no GPU: CTranslate2 runs on the CPU (the demo's translations)"}
    ensure_cublas12()  # raises InputError naming the package and the path that fix it
    return {"cuda": True, "devices": ctranslate2.get_cuda_device_count(), "cublas12": "found and loaded"}


def run_demo_grid(out: Path) -> dict[str, Any]:
    """The demo's config under Snakemake with one GPU for every GPU rule (its own experiment
    folder): every job must succeed and every training log name cuda."""
    import importlib.util

    if importlib.util.find_spec("snakemake") is None:
        return {"skipped": "snakemake is not installed here"}
    gpu_rules = ("train_intermediate", "train_target", "evaluate_target", "translate_task_data",
                 "translate_test_data", "probe_retention", "evaluate_prompted")  # fmt: skip
    overlay = out / "demo_on_gpu.yaml"
    layer = {"extends": str(REPO / "config.yaml"), "experiment": "gpu_check_demo"}
    overlay.write_text(json.dumps({**layer, "resources": {rule: {"gpu": 1} for rule in gpu_rules}}))
    cmd = [sys.executable, "-m", "snakemake", "--cores", "8", "--resources", "gpu=1", "--configfile", str(overlay)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=540)
    (out / "demo_grid.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake exited {proc.returncode} (demo_grid.log)")
    logs = sorted((REPO / "results" / "gpu_check_demo").rglob("train_log.json"))
    devices = [json.loads(p.read_text())["throughput"]["device"] for p in logs]
    if not logs or set(devices) != {"cuda"}:
        raise RuntimeError(f"{len(logs)} training logs; devices {sorted(set(devices))}, not all cuda")
    return {"training_logs": len(logs), "devices": "cuda", "log": "demo_grid.log"}


def run_gpu_tests(out: Path) -> dict[str, Any]:
    selection = [
        "tests/test_backbones.py",
        "tests/test_neighbours.py",
        "tests/test_preflight.py",
        "-k",
        "chain or stacked or optimizer or gpu or device",
    ]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-rs", *selection]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    (out / "gpu_tests.log").write_text(proc.stdout + proc.stderr)
    last = [line for line in proc.stdout.splitlines() if " passed" in line or " failed" in line or " error" in line]
    summary = last[-1] if last else proc.stdout[-300:]
    if proc.returncode != 0:
        raise RuntimeError(f"pytest: {summary} (gpu_tests.log)")
    return {"summary": summary, "log": "gpu_tests.log"}


# ----- the run and its report ----------------------------------------------------------------


def attempt(name: str, results: dict[str, Any], work: Callable[[], Any]) -> None:
    """Run one part; its failure is recorded and the others still run."""
    print(f"gpu-check: {name} ...", flush=True)
    started = time.perf_counter()
    try:
        results[name] = {"ok": True, "result": work()}
    except Exception as err:
        results[name] = {"ok": False, "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-4000:]}
    results[name]["seconds"] = round(time.perf_counter() - started, 1)
    print(f"gpu-check: {name}: {'ok' if results[name]['ok'] else results[name]['error'][:300]}", flush=True)


def summary_markdown(env: dict[str, Any], results: dict[str, Any], smoke: bool) -> str:
    gpu = env.get("gpu") or "no GPU (CPU)"
    lines = [
        "# gpu-check",
        "",
        f"- machine: {gpu}; driver {env.get('driver', '–')}; CUDA {env.get('cuda', '–')}; host {env['host']}",
        f"- date: {env['date']}; versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()),
        f"- mode: {'--cpu-smoke (tiny shapes)' if smoke else 'real shapes'}",
        "",
        "| part | status | seconds |",
        "|---|---|---:|",
    ]
    for name, part in results.items():
        status = "ok" if part["ok"] else f"FAILED: {part['error'][:200]}".replace("|", "/").replace("\n", " ")
        lines.append(f"| {name} | {status} | {part['seconds']} |")
    cases = [p["result"] for n, p in results.items() if n.startswith("throughput") and p["ok"]]
    if cases:
        lines += [
            "",
            "| run | mode | engine | precision | seq x batch | step ms | tokens/s | TFLOP/s | MFU | aten ops "
            "| CPU / GPU ms | peak GiB | planned GiB | measured / planned |",
            "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in cases:
            mfu = f"{100 * c['mfu']:.1f}%" if c["mfu"] is not None else "–"
            planned = f"{c['planned_gib']:.2f} | {c['measured_over_planned']:.2f}" if c["planned_gib"] else "– | –"
            ops = f"{c['aten_ops']:,}" if "aten_ops" in c else "–"
            host = f"{c['cpu_ms']:.1f} / {c['gpu_kernel_ms']:.1f}" if "cpu_ms" in c else "–"
            lines.append(
                f"| {c['label']} | {c['mode']} | {c['engine']} | {c['precision']} | {c['seq_len']} x {c['micro_batch']} "
                f"| {1000 * c['step_seconds']:.1f} | {c['tokens_per_s']:,.0f} | {c['tflops']:.1f} | {mfu} | {ops} "
                f"| {host} | {c['peak_gib']:.2f} | {planned} |"
            )
    for name in ("padding-free", "sharded resume", "retrieval", "ctranslate2", "gpu tests", "demo grid"):
        part = results.get(name)
        if part and part["ok"]:
            lines += ["", f"**{name}**: " + ", ".join(f"{k} {v}" for k, v in part["result"].items())]
    return "\n".join(lines) + "\n"


def measured_throughput(env: dict[str, Any], results: dict[str, Any], peak: float | None) -> dict[str, Any]:
    """The throughput rows in the form the cost model reads (planning/job_cost.py): copied to
    ``workflow_scripts/planning/measured_throughput/<gpu>.json``, they are this GPU's measured MFU."""
    keys = ("family", "method", "precision", "mode", "engine", "hidden_size", "seq_len", "micro_batch",
            "tokens_per_s", "mfu")  # fmt: skip
    rounding = {"tokens_per_s": 0, "mfu": 4}
    measured = [
        part["result"]
        for name, part in results.items()
        if name.startswith("throughput") and part["ok"] and part["result"]["mfu"] is not None
    ]
    rows = [{k: round(r[k], rounding[k]) if k in rounding else r[k] for k in keys} for r in measured]
    # The host's shortest micro-step by depth: the batch-4 training steps (COMPARED_SHAPES) of
    # the engines compile: auto runs (graphs is opt-in: the plan does not count on it).
    host_rows = [
        {"family": r["family"], "layers": r["layers"], "engine": r["engine"], "seconds": round(r["step_seconds"], 5)}
        for r in measured
        if r["mode"] == "train" and (r["seq_len"], r["micro_batch"]) == COMPARED_SHAPES[-1] and r["engine"] != "graphs"
    ]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items() if k in ("torch", "transformers", "peft"))
    return {
        "gpu": env.get("gpu"),
        "peak_bf16_tflops": peak,
        "source": f"make gpu-check, {env['date']}, driver {env.get('driver')}, {versions}",
        "rows": rows,
        "host_rows": host_rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (what make test runs)")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "gpu_check")
    ap.add_argument("--only", help="run only the parts whose name contains this")
    args = ap.parse_args(argv)
    import torch

    dev = torch.device("cuda" if torch.cuda.is_available() and not args.cpu_smoke else "cpu")
    if dev.type != "cuda" and not args.cpu_smoke:
        raise SystemExit("gpu-check: no CUDA GPU here; run `make gpu-check-smoke` (--cpu-smoke) on a CPU")
    args.out.mkdir(parents=True, exist_ok=True)
    from workflow_scripts.common import configure_torch
    from workflow_scripts.workflow.gpu_binding import CUBLAS_WORKSPACE

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # what every job's shell exports
    configure_torch(os.cpu_count() or 1)  # the kernels and flags that the jobs run with
    if args.cpu_smoke:  # compiled rows traced, not code-generated: seconds, not minutes, on a CPU
        from workflow_scripts.models import compiled

        compiled.BACKEND = "aot_eager"
    env, results = environment(), {}
    peak = peak_tflops(env.get("gpu"))
    parts: list[tuple[str, Callable[[], Any]]] = []
    with tempfile.TemporaryDirectory(prefix="xstilts-gpu-check-") as tmp:
        if not args.cpu_smoke:
            parts.append(("gpu tests", lambda: run_gpu_tests(args.out)))
        for case in throughput_cases(args.cpu_smoke):
            parts.append(
                (f"throughput: {case['label']}", lambda c=case: run_throughput(c, Path(tmp), dev, args.cpu_smoke, peak))
            )
        parts += [
            ("padding-free", lambda: run_padding_free(dev, args.cpu_smoke)),
            ("sharded resume", lambda: run_sharded_resume(Path(tmp) / "sharded", dev, args.cpu_smoke)),
            ("retrieval", lambda: run_retrieval(dev, args.cpu_smoke)),
            ("ctranslate2", lambda: run_ctranslate2(dev)),
        ]
        if not args.cpu_smoke:
            parts.append(("demo grid", lambda: run_demo_grid(args.out)))
        for name, work in parts:
            if args.only is None or args.only in name:
                attempt(name, results, work)
    (args.out / "summary.json").write_text(json.dumps({"environment": env, "results": results}, indent=2) + "\n")
    (args.out / "summary.md").write_text(summary_markdown(env, results, args.cpu_smoke))
    throughput = measured_throughput(env, results, peak)
    (args.out / "measured_throughput.json").write_text(json.dumps(throughput, indent=2) + "\n")
    print((args.out / "summary.md").read_text())
    return 0 if all(part["ok"] for part in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
