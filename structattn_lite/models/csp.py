"""The Complex State Propagator: rotate, recur, skip, normalize; then a phase decoder.

Every point where the paper's text and the authors' code disagree is a field of
``CSPConfig`` (see STUDY_BRIEF section 3): the preset ``"paper"`` is the text's reading,
``"code_switches"`` the text's block with the code's cumulative angle and decay gates (the
ablations vary it). The authors' own model, revision by revision, is ``csp_authors``.
Tokens [B, T] in, logits [B, T, C] out (one per prefix).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.config import check_choice, check_int

ROTATIONS = ("step", "cumulative", "pairwise", "none")
ANGLE_DIMS = ("scalar", "per_dim")
GATES = ("softplus", "decay")
SILU = ("boundary", "step", "none")
NORMS = ("complex", "layernorm", "none")
SCANS = ("loop", "parallel")


@dataclass(frozen=True)
class CSPConfig:
    vocab_size: int = 2
    n_classes: int = 2
    d_model: int = 64
    n_layers: int = 3
    # "step": each input rotated by its own angle (text, eqs. 9-10); "cumulative": by the
    # running sum of angles (authors' code), i.e. a data-dependent rotation of the state
    # frame; "pairwise": the step's angle as a real 2D rotation of each pair of complex dims
    # (2k, 2k+1), RoPE's block-diagonal form, which section 2.3 argues against; "none": no
    # rotation (Table 4's left half).
    rotation: str = "step"
    angle_dims: str = "scalar"  # one angle per step (eq. 9) or one per complex dim (sec. 2.3)
    # "softplus": alpha = gamma = softplus(delta_t) (text; alpha may exceed 1);
    # "decay": alpha = exp(-softplus(.)) in (0, 1), gamma = (1 + sin(.)) / 2 (code).
    gates: str = "softplus"
    silu: str = "boundary"  # at the block boundary (text), inside every step, or none
    skip: bool = True  # SiLU(h) + sigmoid(g) z
    norm: str = "complex"  # h / |h| elementwise, LayerNorm over (Re, Im), or none
    scan: str = "loop"  # the loop is the reference; "parallel" for long sequences

    def __post_init__(self):
        check_int("vocab_size", self.vocab_size, minimum=1)
        check_int("n_classes", self.n_classes, minimum=2)
        check_int("d_model", self.d_model, minimum=1)
        check_int("n_layers", self.n_layers, minimum=1)
        check_choice("rotation", self.rotation, ROTATIONS)
        check_choice("angle_dims", self.angle_dims, ANGLE_DIMS)
        check_choice("gates", self.gates, GATES)
        check_choice("silu", self.silu, SILU)
        check_choice("norm", self.norm, NORMS)
        check_choice("scan", self.scan, SCANS)
        if not isinstance(self.skip, bool):
            raise ValueError(f"skip must be True or False, got {self.skip!r}")
        if self.silu == "step" and self.scan == "parallel":
            raise ValueError(
                "silu='step' makes the recurrence nonlinear, so it has no parallel scan; "
                "use scan='loop' or silu in ('boundary', 'none')"
            )
        if self.rotation in ("none", "pairwise") and self.angle_dims != "scalar":
            raise ValueError("angle_dims only applies with rotation in ('step', 'cumulative')")
        if self.rotation == "pairwise" and self.d_model % 2:
            raise ValueError(f"rotation='pairwise' rotates pairs of dims, so d_model must be "
                             f"even, got {self.d_model}")  # fmt: skip


CSP_PRESETS = {
    "paper": CSPConfig(),
    "code_switches": CSPConfig(rotation="cumulative", gates="decay"),
}


def csp_config(preset: str = "paper", **overrides) -> CSPConfig:
    """A preset with some fields replaced; unknown fields raise a clear error."""
    base = CSP_PRESETS[check_choice("preset", preset, CSP_PRESETS)]
    fields = {f.name for f in dataclasses.fields(CSPConfig)}
    for name in overrides:
        check_choice("CSP option", name, sorted(fields))
    return dataclasses.replace(base, **overrides)


def complex_silu(h: torch.Tensor) -> torch.Tensor:
    return torch.complex(F.silu(h.real), F.silu(h.imag))


class ComplexLinear(nn.Module):
    """W u for complex u, with W = W_re + i W_im held as two real matrices."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.re = nn.Linear(d_in, d_out, bias=False)
        self.im = nn.Linear(d_in, d_out, bias=False)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return torch.complex(self.re(u.real) - self.im(u.imag), self.re(u.imag) + self.im(u.real))


def rotate_pairs(z: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """RoPE's block-diagonal rotation on complex z [..., d] (d even): each pair of dims
    (z_2k, z_2k+1) turned by the real 2D rotation of angle theta [..., 1]. Element-wise
    rotation (``z * e^{i theta}``) instead turns each dim's phase on its own."""
    cos, sin = torch.cos(theta), torch.sin(theta)
    a, b = z[..., 0::2], z[..., 1::2]
    return torch.stack([cos * a - sin * b, sin * a + cos * b], -1).flatten(-2)


def linear_recurrence_loop(alpha: torch.Tensor, drive: torch.Tensor, step_silu: bool = False):
    """Reference: h_t = alpha_t h_{t-1} + drive_t, h_0 = 0, over dim 1 ([B, T, d])."""
    h = torch.zeros_like(drive[:, 0])
    out = []
    for t in range(drive.shape[1]):
        h = alpha[:, t] * h + drive[:, t]
        if step_silu:
            h = complex_silu(h)
        out.append(h)
    return torch.stack(out, 1)


class CSPBlock(nn.Module):
    def __init__(self, cfg: CSPConfig):
        super().__init__()
        d = cfg.d_model
        self.cfg = cfg
        self.in_proj = ComplexLinear(d, d)
        self.angle = nn.Linear(d, d if cfg.angle_dims == "per_dim" else 1)
        self.delta = nn.Linear(d, d)  # alpha (and gamma, for the text's gates)
        self.gamma = nn.Linear(d, d) if cfg.gates == "decay" else None
        self.skip_gate = nn.Parameter(torch.zeros(d)) if cfg.skip else None
        self.norm = nn.LayerNorm(2 * d) if cfg.norm == "layernorm" else None

    def gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cfg.gates == "softplus":
            alpha = F.softplus(self.delta(x))
            return alpha, alpha
        return torch.exp(-F.softplus(self.delta(x))), (1 + torch.sin(self.gamma(x))) / 2

    def recur(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate and recur: the projected input z_t and the state h_t of every step (h_t
        before the boundary SiLU, the skip and the norm; after the step SiLU if there is one)."""
        cfg = self.cfg
        z = self.in_proj(u)
        drive = z
        if cfg.rotation != "none":
            theta = math.pi * torch.tanh(self.angle(z.real))
            if cfg.rotation == "cumulative":
                theta = theta.cumsum(1)
            if cfg.rotation == "pairwise":
                drive = rotate_pairs(z, theta)
            else:
                drive = z * torch.polar(torch.ones_like(theta), theta)
        alpha, gamma = self.gates(z.real)
        drive = gamma * drive
        if cfg.scan == "parallel":
            from structattn_lite.models.scan import linear_recurrence_scan

            h = linear_recurrence_scan(alpha, drive)
        else:
            h = linear_recurrence_loop(alpha, drive, step_silu=cfg.silu == "step")
        return z, h

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        z, h = self.recur(u)
        if cfg.silu == "boundary":
            h = complex_silu(h)
        if self.skip_gate is not None:
            h = h + torch.sigmoid(self.skip_gate) * z
        if cfg.norm == "complex":
            h = h / (h.abs() + 1e-6)
        elif cfg.norm == "layernorm":
            d = cfg.d_model
            flat = self.norm(torch.cat([h.real, h.imag], -1))
            h = torch.complex(flat[..., :d], flat[..., d:])
        return h


class CSP(nn.Module):
    """Embedding -> CSP blocks (only states pass between them) -> phase decoder."""

    def __init__(self, cfg: CSPConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, 2 * cfg.d_model)
        self.blocks = nn.ModuleList(CSPBlock(cfg) for _ in range(cfg.n_layers))
        self.decoder = nn.Linear(2 * cfg.d_model, cfg.n_classes)

    def embed_complex(self, tokens: torch.Tensor) -> torch.Tensor:
        """The first block's input: each token's embedding read as d complex numbers."""
        e = self.embed(tokens)
        return torch.complex(e[..., : self.cfg.d_model], e[..., self.cfg.d_model :])

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed_complex(tokens)
        for block in self.blocks:
            h = block(h)
        phase = h / (h.abs() + 1e-6)  # the decoder reads the phase of each component
        return self.decoder(torch.cat([phase.real, phase.imag], -1))
