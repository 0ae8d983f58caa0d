"""The cost model of one job: the FLOPs it computes, from what the grid knows, and the GPU time
they take at a measured or a default model-FLOPs utilisation (MFU).

FLOPs per token (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1, and
Chinchilla's appendix F for the attention term), over the N non-embedding parameters of a
backbone with L layers of width d at sequence length s:

- training every weight: 6 N + 12 L s d (forward 2 N; backward 4 N: gradients of the
  activations and of the weights);
- training adapters on a frozen base (LoRA, QLoRA): 4 N + 12 L s d (forward, and the
  gradients of the activations through every layer; a frozen base computes no weight
  gradients);
- inference (evaluation): 2 N + 4 L s d.
"""

from __future__ import annotations

# Multipliers of N per token, by what the job computes.
FULL_TRAINING = 6
ADAPTER_TRAINING = 4
INFERENCE = 2


def flops_per_token(non_embedding: float, layers: int, width: int, seq_len: int, method: str, mode: str) -> float:
    """FLOPs per token of one job: ``mode`` "train" or "inference", ``method`` "full", "lora"
    or "qlora" (a frozen base for the last two)."""
    if mode == "inference":
        return INFERENCE * non_embedding + 4 * layers * seq_len * width
    if mode != "train":
        raise ValueError(f"mode {mode!r}: expected 'train' or 'inference'")
    weights = FULL_TRAINING if method == "full" else ADAPTER_TRAINING
    return weights * non_embedding + 12 * layers * seq_len * width
