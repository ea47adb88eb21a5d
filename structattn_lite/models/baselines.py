"""Baselines for the state-tracking study, with CSP's interface: tokens [B, T] -> logits [B, T, C].

- ``lstm``, ``gru``: torch.nn recurrent nets (the Chomsky-hierarchy winners on parity).
- ``transformer``: a small causal Transformer encoder with sinusoidal positions, so it
  can be run at any length (learned positions would not exist beyond training).
- ``diag_rnn``: a diagonal linear RNN with input-dependent decay in [0, 1] (Mamba-like);
  ``diag_rnn_neg``: the same with decay in [-1, 1] (Grazzi et al.'s negative eigenvalues).
- ``complex_rnn``: a complex diagonal RNN whose input-dependent rotation acts on the
  state, h_t = r_t e^{i theta_t} h_{t-1} + b_t.

The linear RNNs stack pre-norm residual blocks (recurrence, then a small MLP) and run
their recurrence with the loop or the parallel scan (``scan="loop" | "parallel"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.config import check_choice, check_int
from structattn_lite.models.csp import linear_recurrence_loop
from structattn_lite.models.scan import linear_recurrence_scan

BASELINES = ("lstm", "gru", "transformer", "diag_rnn", "diag_rnn_neg", "complex_rnn")


@dataclass(frozen=True)
class BaselineConfig:
    kind: str = "lstm"
    vocab_size: int = 2
    n_classes: int = 2
    d_model: int = 64
    n_layers: int = 1
    n_heads: int = 4  # transformer only
    scan: str = "parallel"  # linear RNNs only; "loop" is the reference

    def __post_init__(self):
        check_choice("model", self.kind, BASELINES)
        for name in ("vocab_size", "d_model", "n_layers", "n_heads"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("n_classes", self.n_classes, minimum=2)
        check_choice("scan", self.scan, ("loop", "parallel"))
        if self.kind == "transformer" and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")


# Defaults that put each baseline near CSP's size (paper preset, d=64, 3 layers: ~38k).
DEFAULTS = {
    "lstm": {"d_model": 64, "n_layers": 1},
    "gru": {"d_model": 64, "n_layers": 1},
    "transformer": {"d_model": 48, "n_layers": 2},
    "diag_rnn": {"d_model": 48, "n_layers": 2},
    "diag_rnn_neg": {"d_model": 48, "n_layers": 2},
    "complex_rnn": {"d_model": 40, "n_layers": 2},
}


class TorchRNN(nn.Module):
    def __init__(self, cfg: BaselineConfig):
        super().__init__()
        cell = nn.LSTM if cfg.kind == "lstm" else nn.GRU
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.rnn = cell(cfg.d_model, cfg.d_model, cfg.n_layers, batch_first=True)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])


def sinusoidal_positions(length: int, d: int, device: torch.device | str = "cpu") -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32, device=device)[:, None]
    freq = torch.arange(0, d, 2, dtype=torch.float32, device=device)
    freq = torch.exp(-math.log(10000.0) * freq / d)
    table = torch.zeros(length, d, device=device)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: d // 2])
    return table


class CausalTransformer(nn.Module):
    def __init__(self, cfg: BaselineConfig):
        super().__init__()
        self.d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        layer = nn.TransformerEncoderLayer(
            cfg.d_model,
            cfg.n_heads,
            2 * cfg.d_model,
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    def forward(self, tokens):
        length = tokens.shape[1]
        x = self.embed(tokens) + sinusoidal_positions(length, self.d, tokens.device)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        return self.head(self.norm(self.encoder(x, mask=mask, is_causal=True)))


class LinearRNNBlock(nn.Module):
    """Pre-norm residual block: diagonal recurrence with input-dependent decay, then an MLP."""

    def __init__(self, cfg: BaselineConfig):
        super().__init__()
        d, self.cfg = cfg.d_model, cfg
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.decay = nn.Linear(d, d)
        self.drive = nn.Linear(d, 2 * d if cfg.kind == "complex_rnn" else d)
        self.angle = nn.Linear(d, d) if cfg.kind == "complex_rnn" else None
        self.out = nn.Linear(2 * d if cfg.kind == "complex_rnn" else d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        nn.init.constant_(self.decay.bias, 2.0)  # start with slow decay (sigmoid(2) ~ 0.88)

    def recurrence(self, u):
        kind, d = self.cfg.kind, self.cfg.d_model
        gate = torch.sigmoid(self.decay(u))  # in [0, 1]
        if kind == "diag_rnn":
            alpha, drive = gate, self.drive(u)
        elif kind == "diag_rnn_neg":
            alpha, drive = 2 * gate - 1, self.drive(u)  # eigenvalues in [-1, 1]
        else:
            theta = math.pi * torch.tanh(self.angle(u))  # rotation of the state
            alpha = torch.polar(gate, theta)
            b = self.drive(u)
            drive = torch.complex(b[..., :d], b[..., d:])
        if self.cfg.scan == "parallel":
            h = linear_recurrence_scan(alpha, drive)
        else:
            h = linear_recurrence_loop(alpha, drive)
        return torch.cat([h.real, h.imag], -1) if h.is_complex() else h

    def forward(self, x):
        x = x + self.out(self.recurrence(self.norm1(x)))
        return x + self.mlp(self.norm2(x))


class LinearRNN(nn.Module):
    def __init__(self, cfg: BaselineConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(LinearRNNBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(F.silu(self.norm(x)))


def baseline_config(kind: str, **options) -> BaselineConfig:
    """A baseline's config by name; unspecified sizes come from ``DEFAULTS`` (near CSP's size)."""
    check_choice("model", kind, BASELINES)
    fields = set(BaselineConfig.__dataclass_fields__) - {"kind"}
    for name in options:
        check_choice(f"option for model {kind!r}", name, sorted(fields))
    return BaselineConfig(kind=kind, **{**DEFAULTS[kind], **options})


def build_baseline(kind: str, **options) -> nn.Module:
    """A baseline by name; unspecified sizes come from ``DEFAULTS`` (near CSP's size)."""
    cfg = baseline_config(kind, **options)
    if kind in ("lstm", "gru"):
        return TorchRNN(cfg)
    return CausalTransformer(cfg) if kind == "transformer" else LinearRNN(cfg)
