"""The reference workload's model, shared by both backends: the backend supplies the
tensor-parallel linears (`parallel.column`, `parallel.row`) and the TP group's size and rank."""

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256  # byte-level tokens


class Block(nn.Module):
    """Pre-norm transformer block; attention heads and MLP columns are split across the TP group."""

    def __init__(self, dim: int, heads: int, parallel):
        super().__init__()
        self.local_heads = heads // parallel.tp_size
        self.head_dim = dim // heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = parallel.column(dim, 3 * dim)  # local output: this rank's q, k and v heads
        self.out = parallel.row(dim, dim)  # all-reduce across the TP group inside
        self.norm2 = nn.LayerNorm(dim)
        self.up = parallel.column(dim, 4 * dim)
        self.down = parallel.row(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = (
            part.view(batch, seq, self.local_heads, self.head_dim).transpose(1, 2)
            for part in self.qkv(self.norm1(x)).chunk(3, dim=-1)
        )
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, -1))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyGPT(nn.Module):
    """Byte-level GPT; embeddings, norms and the LM head are replicated across the TP group."""

    def __init__(self, dim: int, layers: int, heads: int, seq_len: int, parallel):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB, dim)
        self.position_embedding = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, parallel) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def parameter_count(dim: int, layers: int, seq_len: int) -> int:
    """Parameters of the whole (unsharded) TinyGPT."""
    per_block = 12 * dim * dim + 4 * dim  # qkv 3d², out d², up 4d², down 4d², two LayerNorms
    return VOCAB * dim + seq_len * dim + layers * per_block + 2 * dim + dim * VOCAB
