"""How a job's forwards run: eager, or compiled by ``torch.compile`` over a bounded set of shapes.

A GPU step of a large encoder is host-bound in eager mode: Python and the dispatcher launch
~2,900 small kernels a step, and the GPU waits (docs/benchmarks.md). Compiled, the forward
and its backward become a few fused kernels per layer, and autocast's casts are folded into
them. ``resources.<rule>.compile`` chooses (an operational setting: switching it reruns
nothing, and the train log records which ran):

- ``auto`` (default): compiled on a GPU for a model of at least ``AUTO_MIN_PARAMETERS``
  (100M: XLM-R base and up), eager otherwise: on a CPU, where two runs must give identical
  tables, and for the demo's tiny models, which would spend longer compiling (tens of
  seconds a shape) than training;
- ``always``: compiled on any device; ``never``: eager everywhere;
- ``graphs``: compiled, and on a GPU each compiled forward and its backward replayed as a
  CUDA graph (inductor's CUDA-graph trees): one launch per bucket's graph instead of one per
  kernel, so that a small step (XNLI's batch of 4) is no longer paced by the host. Elsewhere
  it compiles without graphs. Opt-in while no GPU measurement of it stands in
  docs/benchmarks.md (docs/limits.md).

A compiled forward is specialised to its input shapes (``dynamic=False``: static shapes are
what the kernels and CUDA graphs are tuned for), so batches are padded up to a **length
bucket** (``bucket_width``): widths 32, 64, 96, 128, then multiples of 64 up to 512, then of
128. A task of ``max_length`` 384 therefore meets at most 8 widths, and a job compiles at
most (widths x micro-batch sizes x tasks x train/eval) graphs, a bound ``RECOMPILE_LIMIT``
leaves room for. Padded positions are masked as before: the buckets change the work, not
the numbers beyond float rounding. Eager runs keep dynamic padding to the batch's longest
sequence.

A sharded run (FSDP2) stays eager: its hooks gather each block's shards around the block,
which the compiler would trace as graph breaks.

The engine is process-wide, like torch's own flags: a job's entry point calls
``configure`` once, after ``common.configure_torch``, and every forward (training steps, dev
evaluations, predictions) reads it through ``forward`` and ``pad_width``.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Literal

from workflow_scripts.models.packing import STREAM_MULTIPLE, Packing, pack_fields

# (not on/off: YAML reads those as booleans)
CompileMode = Literal["auto", "always", "graphs", "never"]
COMPILE_MODES: tuple[str, ...] = ("auto", "always", "graphs", "never")
DEFAULT_COMPILE: CompileMode = "auto"

# The compiler's backend: inductor generates fused kernels (Triton on GPUs, C++ on CPUs).
# The tests swap in aot_eager, which traces the same graphs (forward and backward) and runs
# them op by op: the same graph breaks and numbers, without minutes of code generation.
BACKEND = "inductor"

# auto compiles models of at least this many parameters (on a GPU)
AUTO_MIN_PARAMETERS = 100_000_000

# Graphs a compiled forward may keep: tasks x widths x micro-batch sizes x train/eval stay
# well below this for every preset (a 3-task phase at max_length 512: 3 x 10 x 2 x 2 = 120).
RECOMPILE_LIMIT = 256


def bucket_width(longest: int) -> int:
    """The padded width of a batch whose longest sequence has ``longest`` tokens: the next
    multiple of 32 up to 128, of 64 up to 512, of 128 beyond."""
    if longest < 1:
        raise ValueError(f"a batch's longest sequence must have at least one token, got {longest}")
    step = 32 if longest <= 128 else 64 if longest <= 512 else 128
    return -(-longest // step) * step


def widths_up_to(max_length: int) -> list[int]:
    """Every width a task of ``max_length`` can be padded to (its buckets)."""
    return sorted({bucket_width(n) for n in range(1, max_length + 1)})


@dataclasses.dataclass(frozen=True)
class Engine:
    """How this process runs its forwards, and why."""

    compiled: bool = False
    reason: str = "eager (not configured)"
    backend: str = BACKEND
    # each compiled graph replayed as a CUDA graph (compile: graphs on a GPU)
    cuda_graphs: bool = False
    # padded to length buckets: what compiled forwards need (an eager engine with buckets
    # runs the compiled one's batches, which the tests compare it on)
    bucketed: bool = False
    # padding-free encoder batches (packing.py), and why or why not
    packing: Packing = dataclasses.field(default_factory=Packing)

    def pad_width(self, longest: int) -> int | None:
        """The width to pad a batch to (None: its own longest sequence, dynamic padding)."""
        return bucket_width(longest) if self.bucketed else None

    def pack(self, attention_mask) -> dict[str, Any] | None:
        """A batch's packed fields (packing.pack_fields), or None when batches stay padded;
        a compiled forward's stream is padded to a multiple of packing.STREAM_MULTIPLE."""
        if not self.packing.enabled:
            return None
        return pack_fields(attention_mask, STREAM_MULTIPLE if self.bucketed else None)

    def record(self) -> dict[str, Any]:
        """What ran, for the train log and metric files."""
        return {
            "compiled": self.compiled,
            "backend": self.backend if self.compiled else None,
            "cuda_graphs": self.cuda_graphs,
            "reason": self.reason,
            **(compiler_counts() if self.compiled else {"graphs": 0, "graph_breaks": 0, "cuda_graph_skips": 0}),
            "padding_free": self.packing.enabled,
            "padding_free_reason": self.packing.reason,
        }


_ENGINE = Engine()
# Each model's compiled wrapper, made at its first forward; the model itself is never
# replaced (its state dict, checkpoints and adapters keep their names).
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def decide(mode: CompileMode, device_type: str, distributed: bool = False, parameters: int | None = None) -> Engine:
    """The engine ``resources.<rule>.compile`` asks for on this device, for a model of
    ``parameters`` (None: unknown, taken as large enough)."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile: expected one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    if mode == "never":
        return Engine(False, "eager (compile: never)")
    if distributed:
        return Engine(False, "eager (sharded runs are not compiled: FSDP2's hooks would break the graph)")
    if mode == "auto" and device_type != "cuda":
        return Engine(False, f"eager (compile: auto on {device_type})")
    if mode == "auto" and parameters is not None and parameters < AUTO_MIN_PARAMETERS:
        return Engine(False, f"eager (compile: auto, {parameters:,} parameters: compiling would outlast the gain)")
    if mode == "graphs" and device_type != "cuda":
        reason = f"compiled without CUDA graphs (compile: graphs on {device_type}: CUDA graphs need a GPU)"
        return Engine(True, reason, BACKEND, bucketed=True)
    if mode == "graphs":
        return Engine(
            True, "compiled with CUDA graphs (compile: graphs on cuda)", BACKEND, cuda_graphs=True, bucketed=True
        )
    return Engine(True, f"compiled (compile: {mode} on {device_type})", BACKEND, bucketed=True)


def configure(
    mode: CompileMode,
    device_type: str,
    distributed: bool = False,
    parameters: int | None = None,
    packing: Packing | None = None,
) -> Engine:
    """Set this process's engine (once per job, once the model's size is known, with the
    model's packing: packing.configure); returns it."""
    global _ENGINE
    _ENGINE = dataclasses.replace(decide(mode, device_type, distributed, parameters), packing=packing or Packing())
    _COMPILED.clear()
    if _ENGINE.compiled:
        _configure_compiler()
    return _ENGINE


def current() -> Engine:
    return _ENGINE


def forward(model, fmt: str, task: str, batch: dict[str, Any]):
    """(logits, loss or None) of one batch, through the model's compiled wrapper when the
    engine compiles, else through the model itself."""
    if not _ENGINE.compiled:
        return model(fmt, task, batch)
    wrapper = compiled_module(model)
    if _ENGINE.cuda_graphs:
        import torch

        # A new step: the previous replay's outputs may be overwritten. Every caller is done
        # with them by now (a training step has added its loss into the step's own tensor;
        # evaluation has copied its logits to the host).
        torch.compiler.cudagraph_mark_step_begin()
    return wrapper(fmt, task, batch)


def compiled_module(model):
    """The model's compiled wrapper (made once per model; it shares the model's parameters)."""
    wrapper = _COMPILED.get(model)
    if wrapper is None:
        import torch

        # CUDA graphs are inductor's: a test's aot_eager backend traces the same graphs without them
        graphs = _ENGINE.cuda_graphs and _ENGINE.backend == "inductor"
        options = {"options": {"triton.cudagraphs": True}} if graphs else {}
        wrapper = torch.compile(model, backend=_ENGINE.backend, dynamic=False, **options)
        _COMPILED[model] = wrapper
    return wrapper


def compiler_counts() -> dict[str, int]:
    """Graphs compiled in this process so far (each shape, task and grad mode is one), the
    graph breaks met (0 for every built-in family: a break splits a forward in two, with a
    trip through Python between them), and the graphs inductor ran without CUDA graphs
    although asked (compile: graphs; its log says why, e.g. an op it cannot capture)."""
    import torch._dynamo.utils as dynamo_utils

    counters = dynamo_utils.counters
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "cuda_graph_skips": int(counters["inductor"]["cudagraph_skips"]),
    }


def _configure_compiler() -> None:
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    dynamo_config.recompile_limit = RECOMPILE_LIMIT
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)
    # The jobs' kernels are deterministic (common.configure_torch): so are the compiler's
    # (no benchmarking of kernel choices between runs, deterministic reductions).
    inductor_config.deterministic = True
    # Dropout draws its masks from torch's own generator, as in eager mode: a seed gives the
    # same masks compiled or not (inductor's own random numbers would differ), which keeps
    # the two engines' losses comparable and a checkpoint's RNG state meaningful to both.
    inductor_config.fallback_random = True
