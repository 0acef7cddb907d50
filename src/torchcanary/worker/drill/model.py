"""The drill job's model and data: a tiny GPT on a deterministic synthetic corpus.

Worker side (standard library and torch only). Everything is a pure function of the seed
and the sample index, so a run with the same seed gives the same numbers whatever the
world size, and a run that lost steps and recomputed them can be compared exactly against
a run that never failed.
"""

from __future__ import annotations

import ctypes
import hashlib

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 256
SEQ = 32
D_MODEL = 64
N_LAYERS = 2
N_HEADS = 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.mlp = nn.Sequential(
            nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(), nn.Linear(4 * D_MODEL, D_MODEL)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D_MODEL, dim=2)
        shape = (batch, length, N_HEADS, D_MODEL // N_HEADS)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, D_MODEL))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Two causal self-attention blocks over byte tokens; small enough for 2 CPU cores."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Embedding(SEQ, D_MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYERS))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build_model(seed: int) -> TinyGPT:
    torch.manual_seed(seed)
    return TinyGPT()


class SyntheticCorpus:
    """Sequences drawn from a fixed random bigram chain, so there is something to learn.

    The whole corpus is generated up front from one seeded generator; sample ``i`` is the
    same tensor in every process and every run with the same seed and size.
    """

    def __init__(self, seed: int, n_samples: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        # Peaked transition rows (few likely successors per token) give a falling loss.
        logits = torch.randn(VOCAB, VOCAB, generator=generator) * 3.0
        transitions = torch.softmax(logits, dim=1)
        tokens = torch.empty(n_samples, SEQ + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, VOCAB, (n_samples,), generator=generator)
        for position in range(1, SEQ + 1):
            rows = transitions[tokens[:, position - 1]]
            tokens[:, position] = torch.multinomial(rows, 1, generator=generator).squeeze(1)
        self.tokens = tokens

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.tokens[indices]
        return rows[:, :-1], rows[:, 1:]


def shard_of_step(step: int, global_batch: int, rank: int, world: int) -> list[int]:
    """This rank's sample indices for ``step``: the global batch dealt round-robin."""
    return [step * global_batch + j for j in range(rank, global_batch, world)]


def local_loss(
    model: nn.Module, corpus: SyntheticCorpus, indices: list[int], global_batch: int, world: int
) -> torch.Tensor:
    """This rank's share of the global mean loss, scaled for an averaging all-reduce.

    Data-parallel wrappers average gradients over ranks; scaling the local sum by
    ``world / (global_batch * SEQ)`` makes that average the gradient of the global mean,
    so a shrunken group computes the same update as the full one.
    """
    inputs, targets = corpus.batch(indices)
    logits = model(inputs)
    summed = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1), reduction="sum")
    return summed * world / (global_batch * SEQ)


def eval_loss(model: nn.Module, corpus: SyntheticCorpus) -> float:
    """Mean loss on the corpus's last 16 samples (never trained on), without gradients."""
    with torch.no_grad():
        inputs, targets = corpus.batch(list(range(len(corpus) - 16, len(corpus))))
        logits = model(inputs)
        return float(F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1)))


def param_digest(tensors: list[torch.Tensor]) -> str:
    """A short hash of the exact parameter bytes: equal digests mean identical replicas."""
    digest = hashlib.sha256()
    for tensor in tensors:
        flat = tensor.detach().cpu().contiguous()
        digest.update(ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size()))
    return digest.hexdigest()[:16]
