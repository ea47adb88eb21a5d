"""The authors' own CSP (github.com/hilhert/CSP, MIT), one module for four of its revisions.

Written from a reading of their code, not copied. ``AuthorsCSPConfig.revision`` picks the
commit; everything that differs between commits follows from it (``REVISION_TRAITS``).
Parameter and module names follow theirs (``embed``, ``embed_proj``, ``layers.i.B_proj``,
...) so a state dict saved by their code loads here.

One block, all revisions (x_t = the block input at step t, a complex vector held as its real
and imaginary parts; u_t = [Re x_t; Im x_t]; h_0 = 0):

    rotate   x~_t = e^{i phi_t} x_t                    (one angle per step, shared by all dims)
    drive    b_t = B_proj(Re x~_t) + i B_proj(Im x~_t)  (one real matrix for both parts)
    recur    h_t = alpha_t h_{t-1} + gamma_t b_t,  alpha_t = exp(-softplus(delta_t)) in (0, 1),
             gamma_t = (1 + sin(g_t)) / 2 in [0, 1]    (alpha_t, gamma_t scalars per step)
    skip     s_t = sigmoid(skip_gate) * x_t + SiLU(Re h_t) + i SiLU(Im h_t)
    norm     out_t = s_t / sqrt(|s_t|^2 + 1e-8), elementwise (each component on the unit circle)

and after the last block a phase decoder: logits_t = Linear([cos psi_t; sin psi_t]) with
psi_t = atan2(Im, Re + eps) per component. The revisions:

- ``befce39`` (paper era, csp/model.py): input ``tanh(Linear(1, H)(token value))`` (the token
  fed as a number, imaginary part 0); phi_t = pi tanh(theta_proj(u_t)), a fresh angle per step
  (no running sum), theta_proj Linear(2H, 1) initialised to zero; delta_t =
  delta_proj(u_{t-1}^h + u_t) where u_{t-1}^h = [Re h_{t-1}; Im h_{t-1}] (the decay reads the
  previous *state*, so the recurrence is nonlinear in h); g_t = gamma_proj(u_t); B_proj with
  bias; eps = 1e-8. Their model returns the last position only (``readout="last"``); this
  module returns every position, and position t is exactly what theirs returns for the
  prefix x_0..x_t (every stage is causal), so ``logits[:, -1]`` is their output. Hidden 32,
  3 layers, 2 classes: 4,043 parameters.
- ``3bb9f71`` (csp/model.py ``CSP_Hidden_Vanilla``, mode "vanilla"; the README parity row of
  7d6c56a3 is this model's): input ``tanh(embed_proj(embed(token)))``, Embedding(vocab, 16);
  phi_t = sum_{s<=t} pi tanh(theta_proj(u_s)) (cumulative), theta_proj Linear(2H, 1) zero-
  initialised; decay from the previous state as above; B_proj with bias; eps = 1e-8; one
  logit vector per prefix. Their base class (csp/model_classical.py ``BaseSeqModel``) also
  builds an output head Linear(H, C) that the CSP never calls, and the CSP builds a
  zero-initialised Linear(2H, 1) for an input rotation that is off ("rope_input=False"):
  both are kept here as ``head`` and ``theta_proj``, unused, so counts and the order in
  which parameters are drawn at initialisation match. Hidden 32, 3 layers, vocab 2,
  2 classes: 4,686 parameters.
- ``7d6c56a`` (commit 7d6c56a3, CHANGELOG v0.3-atan; the code behind that README's mod-3 and
  Dyck-1 rows): as 3bb9f71 but phi_t = sum_{s<=t} atan2(c_2, c_1 + sign(c_1) 1e-9) with
  c = theta_proj(u_s), theta_proj Linear(2H, 2, bias=False) with PyTorch's default
  initialisation; B_proj without bias. Decay still from the previous state. Trained with a
  cosine schedule (utils/train.py). Hidden 32, 3 layers: 4,893 parameters at vocab 3,
  3 classes (their mod-3 script passes vocab_size=3), 4,795 at vocab 3, 2 classes (Dyck-1),
  4,779 at vocab 2, 2 classes.
- ``778a15c`` (commit 778a15c1, CHANGELOG v0.4-frozen): c = tanh(theta_proj(u_s)) divided by
  its (detached) length before the atan2; B_proj without bias; delta_t and g_t both read
  the drive [Re b_t; Im b_t] instead of the state, so the recurrence is linear in h again;
  no tanh after embed_proj; the embedding table is orthogonally initialised and frozen
  (``requires_grad=False``; the authors' parameter counts include it); eps = 0 in the
  decoder. Same counts as 7d6c56a (4,893 / 4,795 / 4,779); 48 of the 4,893 are frozen.

Padding (the authors' Dyck-1, vocabulary 3): the pad is an ordinary token; it only trails the
string, so it cannot change the logits of earlier positions, and its labels are ignored by
the loss (-100). Tokens [B, T] in, logits [B, T, C] out.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.config import check_choice, check_int


def running_sum(x: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """The running sum over ``dim``, added step by step in ``x``'s own dtype as their loop
    does (``theta_cum = theta_cum + theta_t``): ``torch.cumsum`` on the CPU accumulates
    float32 in double, which moves a float32 angle by ~1e-5 rad at L = 64."""
    steps = x.unbind(dim)
    out = [steps[0]]
    for step in steps[1:]:
        out.append(out[-1] + step)
    return torch.stack(out, dim)


def step_angles(c: torch.Tensor, kind: str) -> torch.Tensor:
    """Each step's angle before any running sum, from theta_proj's output c [..., 1 | 2]:
    pi tanh(c), or the angle of the point c (after tanh and a unit length, for 778a15c)."""
    if kind in ("step_tanh", "cumulative_tanh"):
        return math.pi * torch.tanh(c)
    if kind == "cumulative_atan2_tanh":
        c = torch.tanh(c)
        c = c / torch.sqrt(c.square().sum(-1, keepdim=True) + 1e-8).detach()
    x, y = c[..., :1], c[..., 1:]
    return torch.atan2(y, x + torch.sign(x) * 1e-9)


@dataclass(frozen=True)
class RevisionTraits:
    commit: str  # the full sha it was read from
    embedding: str  # "scalar_tanh" | "table_tanh" | "frozen_table"
    angle: str  # "step_tanh" | "cumulative_tanh" | "cumulative_atan2" | "cumulative_atan2_tanh"
    gates_read: str  # "state": delta from [h_{t-1}] + [x_t], gamma from x_t; "drive": both from b_t
    drive_bias: bool  # B_proj has a bias
    zero_angle_init: bool  # theta_proj starts at zero (angle 0 everywhere)
    decoder_eps: float  # added to Re before the decoder's atan2
    readout: str  # "last": trained on the last position only; "prefix": every position
    inert_params: bool  # the unused head and input-rotation projection of their base class


REVISION_TRAITS = {
    "befce39": RevisionTraits(
        "befce39a5f96b1e2f905bd50b39e2631b6fd5419",
        "scalar_tanh", "step_tanh", "state", True, True, 1e-8, "last", False,
    ),
    "3bb9f71": RevisionTraits(
        "3bb9f71bbcab9a1b9b127e82dee372eaf2395a2d",
        "table_tanh", "cumulative_tanh", "state", True, True, 1e-8, "prefix", True,
    ),
    "7d6c56a": RevisionTraits(
        "7d6c56a3a6257720244dedba2b524bc806efb64a",
        "table_tanh", "cumulative_atan2", "state", False, False, 1e-8, "prefix", True,
    ),
    "778a15c": RevisionTraits(
        "778a15c1f7b495e4c3233d0db1dc18c7b598a47d",
        "frozen_table", "cumulative_atan2_tanh", "drive", False, False, 0.0, "prefix", True,
    ),
}  # fmt: skip
REVISIONS = tuple(REVISION_TRAITS)


@dataclass(frozen=True)
class AuthorsCSPConfig:
    revision: str = "3bb9f71"
    vocab_size: int = 2
    n_classes: int = 2
    d_model: int = 32  # their hidden_dim
    n_layers: int = 3
    embed_dim: int = 16  # the Embedding width (unused by befce39, which has no table)

    def __post_init__(self):
        check_choice("revision", self.revision, REVISIONS)
        check_int("vocab_size", self.vocab_size, minimum=1)
        check_int("n_classes", self.n_classes, minimum=2)
        check_int("d_model", self.d_model, minimum=1)
        check_int("n_layers", self.n_layers, minimum=1)
        check_int("embed_dim", self.embed_dim, minimum=1)

    @property
    def traits(self) -> RevisionTraits:
        return REVISION_TRAITS[self.revision]


AUTHORS_PRESETS = {f"authors_{r}": AuthorsCSPConfig(revision=r) for r in REVISIONS}


def authors_config(preset: str, **overrides) -> AuthorsCSPConfig:
    """An ``authors_<revision>`` preset with some fields replaced (``revision`` is fixed)."""
    base = AUTHORS_PRESETS[check_choice("preset", preset, AUTHORS_PRESETS)]
    fields = [f.name for f in dataclasses.fields(AuthorsCSPConfig) if f.name != "revision"]
    for name in overrides:
        if name not in fields:
            raise ValueError(
                f"CSP option={name!r} is not allowed for preset {preset!r} (the authors' "
                f"model); choose one of {fields}"
            )
    return dataclasses.replace(base, **overrides)


class AuthorsBlock(nn.Module):
    """One CSP block of the chosen revision on (real, imaginary) pairs of [B, T, H]."""

    def __init__(self, d: int, traits: RevisionTraits):
        super().__init__()
        self.traits = traits
        two_d = traits.angle.startswith("cumulative_atan2")  # a 2-d point whose angle is used
        self.theta_proj = nn.Linear(2 * d, 2 if two_d else 1, bias=not two_d)
        self.B_proj = nn.Linear(d, d, bias=traits.drive_bias)
        self.delta_proj = nn.Linear(2 * d, 1)
        self.gamma_proj = nn.Linear(2 * d, 1)
        self.skip_gate = nn.Parameter(torch.full((d,), 0.5))
        if traits.zero_angle_init:
            nn.init.zeros_(self.theta_proj.weight)
            nn.init.zeros_(self.theta_proj.bias)

    def angles(self, x_re: torch.Tensor, x_im: torch.Tensor) -> torch.Tensor:
        """phi_t of every step, [B, T, 1]; it reads the block input only, never the state."""
        phi = step_angles(self.theta_proj(torch.cat([x_re, x_im], -1)), self.traits.angle)
        return phi if self.traits.angle == "step_tanh" else running_sum(phi)

    def recur(self, x_re: torch.Tensor, x_im: torch.Tensor):
        """Rotate, drive, recur: h (real, imaginary), and the decays alpha [B, T, 1]."""
        phi = self.angles(x_re, x_im)
        cos, sin = torch.cos(phi), torch.sin(phi)
        b_re = self.B_proj(cos * x_re - sin * x_im)
        b_im = self.B_proj(sin * x_re + cos * x_im)
        current = torch.cat([x_re, x_im], -1)
        if self.traits.gates_read == "drive":
            drive = torch.cat([b_re, b_im], -1)
            alpha_all = torch.exp(-F.softplus(self.delta_proj(drive)))
            gamma = (1 + torch.sin(self.gamma_proj(drive))) / 2
        else:
            gamma = (1 + torch.sin(self.gamma_proj(current))) / 2
        h_re, h_im = torch.zeros_like(x_re[:, 0]), torch.zeros_like(x_im[:, 0])
        outs_re, outs_im, alphas = [], [], []
        for t in range(x_re.shape[1]):
            if self.traits.gates_read == "drive":
                alpha = alpha_all[:, t]
            else:  # the decay reads the previous state: a nonlinear recurrence, hence the loop
                state = torch.cat([h_re, h_im], -1)
                alpha = torch.exp(-F.softplus(self.delta_proj(state + current[:, t])))
            h_re = alpha * h_re + gamma[:, t] * b_re[:, t]
            h_im = alpha * h_im + gamma[:, t] * b_im[:, t]
            outs_re.append(h_re)
            outs_im.append(h_im)
            alphas.append(alpha)
        return torch.stack(outs_re, 1), torch.stack(outs_im, 1), torch.stack(alphas, 1)

    def forward(self, x_re: torch.Tensor, x_im: torch.Tensor):
        h_re, h_im, _ = self.recur(x_re, x_im)
        gate = torch.sigmoid(self.skip_gate)
        s_re = gate * x_re + F.silu(h_re)
        s_im = gate * x_im + F.silu(h_im)
        length = torch.sqrt(s_re.square() + s_im.square() + 1e-8)
        return s_re / length, s_im / length


class AuthorsCSP(nn.Module):
    """Tokens [B, T] -> logits [B, T, C]; see the module docstring for the revisions."""

    def __init__(self, cfg: AuthorsCSPConfig):
        super().__init__()
        self.cfg = cfg
        traits, d = cfg.traits, cfg.d_model
        self.readout = traits.readout
        # Modules are created in the authors' order, so one torch seed draws the same weights.
        if traits.embedding == "scalar_tanh":
            self.encoder = nn.Linear(1, d)
        else:
            self.embed = nn.Embedding(cfg.vocab_size, cfg.embed_dim)
            if traits.embedding == "frozen_table":
                self.embed.weight.requires_grad_(False)
            self.embed_proj = nn.Linear(cfg.embed_dim, d)
            self.head = nn.Linear(d, cfg.n_classes)  # inert: their base class builds it
            if traits.embedding == "frozen_table":
                nn.init.orthogonal_(self.embed.weight)
            self.theta_proj = nn.Linear(2 * d, 1)  # inert: the unused input rotation
        self.layers = nn.ModuleList(AuthorsBlock(d, traits) for _ in range(cfg.n_layers))
        self.decoder = nn.Linear(2 * d, cfg.n_classes)
        if traits.inert_params:
            nn.init.zeros_(self.theta_proj.weight)
            nn.init.zeros_(self.theta_proj.bias)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        embedding = self.cfg.traits.embedding
        if embedding == "scalar_tanh":
            return torch.tanh(self.encoder(tokens.to(self.encoder.weight.dtype).unsqueeze(-1)))
        x = self.embed_proj(self.embed(tokens))
        return x if embedding == "frozen_table" else torch.tanh(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dtype.is_floating_point or tokens.dim() != 2:
            raise ValueError(f"tokens must be an integer tensor [B, T], got {tokens.dtype} "
                             f"of shape {tuple(tokens.shape)}")  # fmt: skip
        x_re = self.embed_tokens(tokens)
        x_im = torch.zeros_like(x_re)
        for layer in self.layers:
            x_re, x_im = layer(x_re, x_im)
        psi = torch.atan2(x_im, x_re + self.cfg.traits.decoder_eps)
        return self.decoder(torch.cat([torch.cos(psi), torch.sin(psi)], -1))
