"""A small pre-LN Transformer with the attention kind as a parameter.

``CharLM``: causal character language model (learned positions), logits [B, T, V].
``PatchClassifier``: the same blocks, non-causal, over image patch tokens, mean-pooled.
Every kind uses the same d_model, value/output projections and MLP, so hidden size is
matched; ``parameter_report`` says how the counts still differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.config import check_int
from structattn_lite.models.attention import Attention, build_attention


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int = 50
    block_size: int = 128
    d_model: int = 128
    n_heads: int = 8
    n_layers: int = 2
    mlp_ratio: int = 4
    attention: str = "dot"
    attention_options: dict = field(default_factory=dict)  # passed to build_attention
    tie_weights: bool = False  # CharLM: the output layer reuses the token embedding


class Block(nn.Module):
    """Pre-LN: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: LMConfig, causal: bool):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = build_attention(
            cfg.attention, cfg.d_model, cfg.n_heads, causal=causal, **cfg.attention_options
        )
        self.ln2 = nn.LayerNorm(cfg.d_model)
        hidden = cfg.mlp_ratio * cfg.d_model
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, hidden), nn.GELU(), nn.Linear(hidden, cfg.d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _Stack(nn.Module):
    """Blocks plus the helpers the study uses on every model."""

    def _init_blocks(self, cfg: LMConfig, causal: bool) -> None:
        check_int("vocab_size", cfg.vocab_size, minimum=1)
        check_int("block_size", cfg.block_size, minimum=1)
        check_int("n_layers", cfg.n_layers, minimum=1)
        self.cfg = cfg
        self.pos = nn.Parameter(torch.zeros(1, cfg.block_size, cfg.d_model))
        nn.init.normal_(self.pos, std=0.02)
        self.blocks = nn.ModuleList([Block(cfg, causal) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def attention_modules(self) -> list[Attention]:
        return [b.attn for b in self.blocks]

    def set_path(self, path: str) -> None:
        """ "fast" (SDPA) or "reference" (explicit pairwise) in every layer."""
        for a in self.attention_modules():
            a.path = path

    def check_every(self, every: int) -> None:
        """Count fast-path failures on every ``every``-th forward call (0: never)."""
        for a in self.attention_modules():
            a.check_every = check_int("every", every, minimum=0)

    def fast_path_stats(self) -> dict[str, float]:
        """``FastPathStats`` summed over layers (max_abs_logit: the largest)."""
        rows = [a.stats.as_dict() for a in self.attention_modules()]
        out = {k: sum(r[k] for r in rows) for k in rows[0]}
        out["max_abs_logit"] = max(r["max_abs_logit"] for r in rows)
        return out

    def reset_stats(self) -> None:
        for a in self.attention_modules():
            a.stats = type(a.stats)()

    def keep_logits(self, flag: bool = True) -> None:
        for a in self.attention_modules():
            a.keep_logits = flag
            a.last_logits = None

    def trunk(self, h: torch.Tensor) -> torch.Tensor:
        T = h.shape[1]
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.cfg.block_size}")
        h = h + self.pos[:, :T]
        for block in self.blocks:
            h = block(h)
        return self.ln_f(h)


class CharLM(_Stack):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self._init_blocks(cfg, causal=True)
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)
        if cfg.tie_weights:  # small embeddings, or the first logits are ~sqrt(d) in size
            nn.init.normal_(self.tok.weight, std=0.02)
            self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(self.tok(idx)))

    def loss(self, idx: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean next-symbol cross-entropy in nats."""
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


class PatchClassifier(_Stack):
    """Patch tokens [B, P, patch_dim] -> class logits [B, n_classes] (non-causal)."""

    def __init__(self, cfg: LMConfig, patch_dim: int, n_classes: int = 10):
        super().__init__()
        self._init_blocks(cfg, causal=False)
        self.embed = nn.Linear(check_int("patch_dim", patch_dim, minimum=1), cfg.d_model)
        self.head = nn.Linear(cfg.d_model, check_int("n_classes", n_classes, minimum=2))

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(self.embed(patches)).mean(1))


def parameter_report(model: nn.Module) -> dict[str, int]:
    """total (a tied weight counted once), attention (q/k/z/v/o and metric), metric-only.

    Metric-only is what defines the similarity beyond the projections: 0 for dot,
    H d(d+1)/2 for dense, H m for matroidal (the support A is a fixed buffer).
    """
    attn = [mod for mod in model.modules() if isinstance(mod, Attention)]
    return {
        "params_total": sum(p.numel() for p in model.parameters()),
        "params_attention": sum(p.numel() for a in attn for p in a.parameters()),
        "params_metric": sum(p.numel() for a in attn for p in a.metric_parameters()),
    }
