"""What the training curve and the trackers cost: one training phase three ways, side by side.

- ``minimal``: one curve row for the whole phase (``--log-every`` = the phase's steps), tracking off:
  the loop as close as it gets to measuring nothing;
- ``off``: the default, a curve row every 10 steps, tracking off (what every job does);
- ``on``: a curve row every 10 steps, and TensorBoard, MLflow (SQLite) and W&B (offline) on.

Same model (a random-init XLM-R-shaped encoder, 4 layers, 256 wide, built locally), same data
(NLI-shaped pairs cut from the real XQuAD sample under tests/real_data), seed and steps. Each
variant runs in its own process, ``--repeats`` times, interleaved (minimal, off, on, minimal,
...), so that a machine busy with other work slows all three alike. Prints, per variant, the
median training-steps time (``train_log.json``'s ``train_seconds``: steps only, evaluations
excluded) and the median wall time of the whole process (start-up, loading and trackers
included), then the ratios off/minimal and on/off.

    .venv/bin/python benchmarks/tracking_overhead.py [--steps 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

SMALL = {
    "vocab_size": 8000,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "max_position_embeddings": 514,
}
VARIANTS = ("minimal", "off", "on")


def settings(steps: int):
    """The phase's settings (spec/phase_settings.PhaseSettings): full fine-tuning at the
    schema's precision."""
    from workflow_scripts.spec.method import MethodSettings
    from workflow_scripts.spec.phase_settings import PhaseSettings

    return PhaseSettings.parse(
        {
            "dropout": 0.1,
            "dev_examples": 16,
            "eval_batch_size": 16,
            "eval_every": steps,
            "learning_rate": 1e-4,
            "max_grad_norm": 1.0,
            "max_micro_batch": 16,
            "multitask_cap": 131072,
            "multitask_epochs": 1,
            "patience": 30,
            "warmup_ratio": 0.1,
            "weight_decay": 0.0,
            "max_steps": steps,
            "tasks": {"mnli": {"batch_size": 16, "epochs": 100, "max_length": 64, "select_language": "en"}},
            "method": MethodSettings(),
        },
        "tracking_overhead",
    )


def run(variant: str, work: Path, steps: int, attempt: int) -> tuple[float, float]:
    out = work / f"{variant}-{attempt}"
    data = {"mnli": {"train": str(work / "train.parquet"), "dev": str(work / "dev.parquet")}}
    cmd = [
        sys.executable,
        "-m",
        "workflow_scripts.training.train",
        "intermediate",
        "--encoder",
        str(work / "encoder"),
        "--data",
        json.dumps(data),
        "--settings",
        settings(steps).to_json(),
        "--seed",
        "1",
        "--threads",
        "1",
        "--output",
        str(out),
        "--log-every",
        str(steps if variant == "minimal" else 10),
    ]
    if variant == "on":
        run_identity = {"backbone": "small", "intermediate": "mnli", "seed": 1, "grid": "benchmark"}
        cmd += ["--tracking", "tensorboard+mlflow+wandb", "--tracking-dir", str(work / "tracking")]
        cmd += ["--run-identity", json.dumps(run_identity)]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
    wall = time.perf_counter() - started
    log = json.loads((out / "train_log.json").read_text())
    return log["throughput"]["train_seconds"], wall


def main() -> None:
    import training_efficiency  # its inputs: the same NLI-shaped pairs and a locally built encoder

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    training_efficiency.BASE = SMALL  # the same inputs, a smaller encoder
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        training_efficiency.build_inputs(work, examples=16 * 50)
        times: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
        for attempt in range(args.repeats):
            for variant in VARIANTS:
                times[variant].append(run(variant, work, args.steps, attempt))
    steps_s = {v: statistics.median(t[0] for t in times[v]) for v in VARIANTS}
    wall_s = {v: statistics.median(t[1] for t in times[v]) for v in VARIANTS}
    print(f"{args.steps} steps, batch 16, {args.repeats} interleaved repeats per variant (medians)")
    print(f"{'variant':<10} {'steps s':>9} {'wall s':>9}")
    for v in VARIANTS:
        print(f"{v:<10} {steps_s[v]:>9.2f} {wall_s[v]:>9.2f}")
    print(
        f"ratio off/minimal: steps {steps_s['off'] / steps_s['minimal']:.3f}, wall {wall_s['off'] / wall_s['minimal']:.3f}"
    )
    print(f"ratio on/off:      steps {steps_s['on'] / steps_s['off']:.3f}, wall {wall_s['on'] / wall_s['off']:.3f}")


if __name__ == "__main__":
    main()
