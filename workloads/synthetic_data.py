"""The reference workload's data: deterministic synthetic byte sequences, learnable so the loss falls."""

import torch

from trnwatch.workloads.tiny_gpt import VOCAB

PATTERN_PERIOD = 8  # synthetic sequences repeat every 8 tokens


def synthetic_batch(
    seed: int, step: int, dp_rank: int, micro_batch: int, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic batch for (step, DP replica), so a resumed run sees the data it would have."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) * 1_009 + dp_rank)
    pattern = torch.randint(VOCAB, (micro_batch, PATTERN_PERIOD), generator=generator)
    tokens = pattern.repeat(1, seq_len // PATTERN_PERIOD + 2)[:, : seq_len + 1]
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
