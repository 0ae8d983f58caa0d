"""The multi-task sampler and the learning-rate schedule."""

import math
from collections import Counter

import pytest

from workflow_scripts.training.sampling import TaskSampler, linear_schedule

pytestmark = pytest.mark.unit


def test_sampler_matches_capped_proportions():
    cap = 2**17
    sizes = {"big": 400_000, "mid": 60_000, "small": 9_000}  # "big" is above K
    sampler = TaskSampler(sizes, cap, seed=3)
    capped = {n: min(e, cap) for n, e in sizes.items()}
    expected = {n: c / sum(capped.values()) for n, c in capped.items()}
    assert sampler.probabilities == pytest.approx(expected)
    draws = 20_000
    counts = Counter(sampler.next() for _ in range(draws))
    for name, p in expected.items():
        sigma = math.sqrt(draws * p * (1 - p))
        assert abs(counts[name] - draws * p) < 4 * sigma, (name, counts[name], draws * p)


def test_sampler_sequence_is_a_function_of_the_seed():
    sizes = {"a": 10, "b": 20, "c": 30}
    first = [TaskSampler(sizes, 2**17, seed=7).next() for _ in range(1)]
    s1, s2, s3 = (TaskSampler(sizes, 2**17, seed=s) for s in (7, 7, 8))
    seq1 = [s1.next() for _ in range(200)]
    assert seq1 == [s2.next() for _ in range(200)]
    assert seq1 != [s3.next() for _ in range(200)]
    assert first[0] == seq1[0]


def test_warmup_then_linear_decay():
    total, warmup = 100, 10
    assert linear_schedule(0, total, warmup) == 0
    assert linear_schedule(5, total, warmup) == pytest.approx(0.5)
    assert linear_schedule(10, total, warmup) == pytest.approx(1.0)
    assert linear_schedule(55, total, warmup) == pytest.approx(0.5)
    assert linear_schedule(100, total, warmup) == 0
    values = [linear_schedule(s, total, warmup) for s in range(total + 1)]
    assert values.index(max(values)) == warmup


def test_configure_torch_turns_on_deterministic_kernels_without_importing_the_compiler():
    """...and switches SDPA's cuDNN backend off (a graph built per sequence length: host-bound
    steps on GPUs, benchmarks/engine_host_overhead.py), and deterministic mode's NaN fill of new
    memory (most of that mode's cost on a GPU, docs/benchmarks.md)."""
    import subprocess
    import sys

    probe = (
        "import sys, torch; from workflow_scripts.common import configure_torch; configure_torch(1); "
        "print(torch.are_deterministic_algorithms_enabled(), "
        "torch.is_deterministic_algorithms_warn_only_enabled(), torch.get_num_threads(), "
        "'torch._inductor' in sys.modules, torch.backends.cuda.cudnn_sdp_enabled(), "
        "torch._C._get_deterministic_fill_uninitialized_memory())"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "1", "False", "False", "False"]


def test_clipping_on_one_device_is_torchs_clip_grad_norm_bit_for_bit():
    """step.clip_local_gradients skips clip_grad_norm_'s per-tensor device moves, not its
    arithmetic: the same norm and the same clipped gradients, clipped or not, mixed dtypes too."""
    import torch

    from workflow_scripts.training.step import clip_local_gradients

    torch.manual_seed(0)
    for scale, dtypes in (
        (3.0, [torch.float32] * 3),
        (0.01, [torch.float32] * 3),
        (3.0, [torch.float32, torch.bfloat16, torch.float32]),
    ):
        grads = [torch.randn(shape, dtype=dtype) * scale for shape, dtype in zip([(3, 4), (5,), (7, 2)], dtypes)]
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        expected_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        expected = [p.grad for p in params]
        copies = [g.clone() for g in grads]
        norm = clip_local_gradients(copies, 1.0)
        assert torch.equal(norm, expected_norm)
        assert all(torch.equal(a, b) for a, b in zip(copies, expected))
