"""The CSP of models/csp.py with S seeds stacked: one module, one batched pass, real arithmetic.

Every parameter carries a leading seed dimension S (S = 1 is one plain model), so S seeds
train with batched matmuls instead of a Python loop over models. It computes what
``CSP`` computes (``StackedCSP.stack`` copies S reference models in, ``.unstack`` copies
seed s out; the tests check outputs and gradients), changing only the form:

- a complex vector is its two real halves on one axis, [re | im] (the reference's own
  layout for the embedding and the decoder), and the complex input projection is one
  real 2d x 2d matmul, [re | im] @ [[Wr^T, Wi^T], [-Wi^T, Wr^T]];
- the angle, delta and gamma projections are one matmul on Re z;
- the first block only ever sees the V embedding rows, so its projections run on those
  V rows and are gathered per token (a token's row is the same at every position);
- everything between the projections and the next block (angles, gates, rotation, the
  recurrence, SiLU, skip, normalisation) is one autograd node with a hand-written
  backward (``_BlockCore``), and the token gather and the decoder's phase are one node
  each: at these sizes a step pays per-op overhead more than arithmetic. The recurrence
  is a loop of in-place steps whatever ``cfg.scan`` says (the scan computes the same
  recurrence; at T = 16 the loop is 15 small ops, the scan more and larger ones).

Activations are time-major inside ([S, T, B, 2d]); tokens [S, B, T] (or [B, T], shared
by every seed) in, logits [S, B, T, C] out, or [S, B, C] with ``last=True`` (the
last position only, all a sequence-labelled loss reads: it saves the last block's tail).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.models.csp import CSP, CSPConfig

# --- autograd nodes; a complex vector is [re | im], viewed as [..., 2, d] by ``_pair`` ---

EPS = 1e-6  # of the reference's h / (|h| + 1e-6)


def _pair(t: torch.Tensor, d: int) -> torch.Tensor:
    """[..., 2d] as [..., 2, d]: index -2 picks the real (0) or imaginary (1) half."""
    return t.view(*t.shape[:-1], 2, d)


def _dot(a5: torch.Tensor, b5: torch.Tensor) -> torch.Tensor:
    """Re a Re b + Im a Im b per component: [..., 2, d] pairs -> [..., d]."""
    return torch.addcmul(a5[..., 0, :] * b5[..., 0, :], a5[..., 1, :], b5[..., 1, :])


def _rotate(x5: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, back: bool = False):
    """x e^{i theta} per component of x [..., 2, d]; ``back``: e^{-i theta}, the way a
    gradient goes back through the rotation."""
    xr, xi = x5[..., 0, :], x5[..., 1, :]
    if back:  # each half as a b + v c d
        terms = ((xr, cos, xi, sin, 1.0), (xi, cos, xr, sin, -1.0))
    else:
        terms = ((xr, cos, xi, sin, -1.0), (xr, sin, xi, cos, 1.0))
    if torch.compiler.is_compiling():  # out of place: torch.compile cannot trace out= views
        return torch.stack([torch.addcmul(a * b, c, d, value=v) for a, b, c, d, v in terms], -2)
    # eagerly into the halves of one buffer, as the committed runs computed it (an
    # elementwise kernel's float32 rounding can depend on the geometry it sees)
    out = torch.empty_like(x5)
    for half, (a, b, c, d, v) in enumerate(terms):
        torch.mul(a, b, out=out[..., half, :]).addcmul_(c, d, value=v)
    return out


def _unit_forward(y5: torch.Tensor):
    """y / (|y| + eps) per complex component, y as [..., 2, d]; returns out, |y|, |y| + eps."""
    n = torch.hypot(y5[..., 0, :], y5[..., 1, :])  # |y| without overflow, as torch.abs
    den = n + EPS
    return y5 / den.unsqueeze(-2), n, den


def _unit_backward(g5: torch.Tensor, y5: torch.Tensor, n: torch.Tensor, den: torch.Tensor):
    # d(y/den) = g/den - <g, y> y / (den^2 |y|); at y = 0 the second term is 0 (torch: sgn(0) = 0)
    p = _dot(g5, y5)
    coef = torch.where(n > 0, p / den / n.clamp_min(torch.finfo(n.dtype).tiny), 0.0)
    return (g5 - coef.unsqueeze(-2) * y5) / den.unsqueeze(-2)


class _Unit(torch.autograd.Function):
    """The decoder's phase, h / (|h| + 1e-6) per component, on [..., 2d]."""

    @staticmethod
    def forward(ctx, y):
        y5 = _pair(y, y.shape[-1] // 2)
        out, n, den = _unit_forward(y5)
        ctx.save_for_backward(y5, n, den)
        return out.view(y.shape)

    @staticmethod
    def backward(ctx, g):
        y5, n, den = ctx.saved_tensors
        return _unit_backward(_pair(g.contiguous(), y5.shape[-1]), y5, n, den).view(g.shape)


class _TokenRows(torch.autograd.Function):
    """table [S, V, k] -> table[s, token] at every position, rows = token + s V [S, T, B].

    The backward sums each row's gradient over all its positions in float64 (as fast as
    embedding's float32 running sum here, and 10x closer to the exact sum on 1,024 rows).
    """

    @staticmethod
    def forward(ctx, table, rows):
        ctx.save_for_backward(rows)
        ctx.table_shape = table.shape
        return F.embedding(rows, table.reshape(-1, table.shape[-1]))

    @staticmethod
    def backward(ctx, g):
        (rows,) = ctx.saved_tensors
        shape = ctx.table_shape
        total = g.new_zeros(shape[0] * shape[1], shape[2], dtype=torch.float64)
        total.index_add_(0, rows.reshape(-1), g.reshape(-1, shape[2]).double())
        return total.to(g.dtype).view(shape), None


class _BlockCore(torch.autograd.Function):
    """z [S,T,B,2d], pre [S,T,B,k] = (delta | gamma | angle) -> the block's output.

    ``last`` keeps only the last time step of the output (the recurrence still runs over
    all of them).
    """

    @staticmethod
    def forward(ctx, z, pre, skip_logit, cfg: CSPConfig, last: bool):
        d, decay = cfg.d_model, cfg.gates == "decay"
        z5 = _pair(z, d)
        delta = pre[..., :d]
        if cfg.rotation != "none":  # rotate the input: r = z e^{i theta}
            tanh_a = torch.tanh(pre[..., (2 if decay else 1) * d :])  # after delta (and gamma)
            theta = tanh_a * math.pi
            if cfg.rotation == "cumulative":
                theta = theta.cumsum(1)
            cos, sin = theta.cos(), theta.sin()
            r5 = _rotate(z5, cos, sin)
        else:
            tanh_a = cos = sin = None
            r5 = z5
        if decay:  # alpha = exp(-softplus(delta)) = sigmoid(-delta); gamma = (1 + sin g) / 2
            alpha = torch.sigmoid(-delta)
            gamma = pre[..., d : 2 * d].sin().add_(1.0).mul_(0.5)
        else:
            alpha = gamma = F.softplus(delta)
        a5 = alpha.unsqueeze(-2)
        h5 = r5 * gamma.unsqueeze(-2)  # the drive, turned into the states in place
        a_t = a5.unbind(1)  # one view per step: cheaper than indexing inside the loop
        if cfg.silu == "step":  # h_t = SiLU(alpha_t h_{t-1} + drive_t): keep pre-activations
            p5 = h5
            h5 = torch.empty_like(p5)
            p_t, h_t = p5.unbind(1), h5.unbind(1)
            h_t[0].copy_(F.silu(p_t[0]))
            for t in range(1, len(h_t)):
                h_t[t].copy_(F.silu(p_t[t].addcmul_(a_t[t], h_t[t - 1])))
        else:
            p5 = None
            h_t = h5.unbind(1)
            for t in range(1, len(h_t)):
                h_t[t].addcmul_(a_t[t], h_t[t - 1])
        hs5, zs5 = (h5[:, -1:], z5[:, -1:]) if last else (h5, z5)
        y5 = F.silu(hs5) if cfg.silu == "boundary" else hs5
        sg = None
        if cfg.skip:
            sg = torch.sigmoid(skip_logit)[:, None, None, None, :]
            y5 = torch.addcmul(y5, zs5, sg)
        n = den = None
        if cfg.norm == "complex":  # (a LayerNorm comes after the node)
            out5, n, den = _unit_forward(y5)
        else:
            out5 = y5.clone() if y5 is hs5 else y5  # never hand out the saved states
        ctx.cfg, ctx.last = cfg, last
        ctx.save_for_backward(z5, pre, tanh_a, cos, sin, r5, alpha, gamma, h5, p5, y5, sg, n, den)
        return out5.contiguous().view(*out5.shape[:-2], 2 * d)

    @staticmethod
    def backward(ctx, g_out):
        cfg, last = ctx.cfg, ctx.last
        z5, pre, tanh_a, cos, sin, r5, alpha, gamma, h5, p5, y5, sg, n, den = ctx.saved_tensors
        d, decay = cfg.d_model, cfg.gates == "decay"
        g5 = _pair(g_out.contiguous(), d)
        fresh = cfg.norm == "complex" or cfg.silu == "boundary"  # g5 is ours to overwrite
        if cfg.norm == "complex":
            g5 = _unit_backward(g5, y5, n, den)
        g_skip = gz_skip = None
        if cfg.skip:
            zs5 = z5[:, -1:] if last else z5
            gz_skip = g5 * sg
            g_sg = (g5 * zs5).sum((1, 2, 3))
            g_skip = g_sg * sg[:, 0, 0, 0] * (1 - sg[:, 0, 0, 0])
        hs5 = h5[:, -1:] if last else h5
        if cfg.silu == "boundary":
            g5 = torch.ops.aten.silu_backward(g5, hs5)
        if last:  # only the last step had an output
            gh5 = torch.zeros_like(h5)
            gh5[:, -1:] = g5
        else:
            gh5 = g5 if fresh else g5.clone()
        a_t, g_t = alpha.unsqueeze(-2).unbind(1), gh5.unbind(1)
        # reverse recurrence: g_drive_t = g_h_t + alpha_{t+1} g_drive_{t+1} (through SiLU)
        if cfg.silu == "step":
            p_t = p5.unbind(1)
            for t in range(len(g_t) - 1, -1, -1):
                g_t[t].copy_(torch.ops.aten.silu_backward(g_t[t], p_t[t]))
                if t:
                    g_t[t - 1].addcmul_(a_t[t], g_t[t])
        else:
            for t in range(len(g_t) - 1, 0, -1):
                g_t[t - 1].addcmul_(a_t[t], g_t[t])
        g_alpha = torch.zeros_like(alpha)
        g_alpha[:, 1:] = _dot(gh5[:, 1:], h5[:, :-1])
        g_gamma = _dot(gh5, r5)
        g_r5 = gh5.mul_(gamma.unsqueeze(-2))
        parts, delta = [], pre[..., :d]
        if decay:
            # d sigmoid(-x) / dx = -a (1 - a), with 1 - a = sigmoid(x) (no cancellation)
            parts.append(g_alpha.mul_(alpha).mul_(torch.sigmoid(delta)).neg_())
            parts.append(g_gamma.mul_(pre[..., d : 2 * d].cos()).mul_(0.5))
        else:
            parts.append(g_alpha.add_(g_gamma).mul_(torch.sigmoid(delta)))
        if cfg.rotation != "none":
            gr, gi = g_r5[..., 0, :], g_r5[..., 1, :]
            rr, ri = r5[..., 0, :], r5[..., 1, :]
            g_theta = gi * rr - gr * ri
            if cfg.angle_dims == "scalar":
                g_theta = g_theta.sum(-1, keepdim=True)
            gz5 = _rotate(g_r5, cos, sin, back=True)
            if cfg.rotation == "cumulative":
                g_theta = g_theta.flip(1).cumsum(1).flip(1)
            parts.append(g_theta.mul_(1 - tanh_a.square()).mul_(math.pi))
        else:
            gz5 = g_r5
        if cfg.skip:
            (gz5[:, -1:] if last else gz5).add_(gz_skip)
        g_pre = torch.cat(parts, -1)
        return gz5.view(*gz5.shape[:-2], 2 * d), g_pre, g_skip, None, None


# --- the modules -----------------------------------------------------------------------


class StackedBlock(nn.Module):
    """One CSP block for S seeds; weights stored transposed ([S, in, out]) for the matmuls."""

    def __init__(self, cfg: CSPConfig, n_seeds: int):
        super().__init__()
        d, s, self.cfg = cfg.d_model, n_seeds, cfg
        self.in_re = nn.Parameter(torch.empty(s, d, d))
        self.in_im = nn.Parameter(torch.empty(s, d, d))
        self.delta_w = nn.Parameter(torch.empty(s, d, d))
        self.delta_b = nn.Parameter(torch.empty(s, 1, d))
        if cfg.gates == "decay":
            self.gamma_w = nn.Parameter(torch.empty(s, d, d))
            self.gamma_b = nn.Parameter(torch.empty(s, 1, d))
        a = d if cfg.angle_dims == "per_dim" else 1
        angle_w, angle_b = torch.empty(s, d, a), torch.empty(s, 1, a)
        if cfg.rotation != "none":
            self.angle_w, self.angle_b = nn.Parameter(angle_w), nn.Parameter(angle_b)
        else:  # unused by the reference too (its grad is None): kept only to copy back
            self.register_buffer("angle_w", angle_w)
            self.register_buffer("angle_b", angle_b)
        if cfg.skip:
            self.skip_gate = nn.Parameter(torch.empty(s, d))
        if cfg.norm == "layernorm":
            self.ln_w = nn.Parameter(torch.empty(s, 2 * d))
            self.ln_b = nn.Parameter(torch.empty(s, 2 * d))

    def project(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z = in_proj(u) and the gate/angle pre-activations on Re z, for u [S, N, 2d]."""
        top = torch.cat([self.in_re, self.in_im], -1)
        bottom = torch.cat([-self.in_im, self.in_re], -1)
        z = torch.bmm(u, torch.cat([top, bottom], 1))
        w, b = [self.delta_w], [self.delta_b]
        if self.cfg.gates == "decay":
            w.append(self.gamma_w)
            b.append(self.gamma_b)
        if self.cfg.rotation != "none":
            w.append(self.angle_w)
            b.append(self.angle_b)
        pre = torch.baddbmm(torch.cat(b, -1), z[..., : self.cfg.d_model], torch.cat(w, -1))
        return z, pre

    def core(self, z: torch.Tensor, pre: torch.Tensor, last: bool = False) -> torch.Tensor:
        """The block's output [S, T, B, 2d] (T = 1 with ``last``) from z and pre [S, T, B, .]."""
        out = _BlockCore.apply(z, pre, getattr(self, "skip_gate", None), self.cfg, last)
        if hasattr(self, "ln_w"):  # LayerNorm over (Re, Im) with each seed's affine
            out = F.layer_norm(out, out.shape[-1:])
            out = torch.addcmul(self.ln_b[:, None, None], out, self.ln_w[:, None, None])
        return out


def seed_token_rows(tokens: torch.Tensor, n_seeds: int, vocab: int):
    """Tokens as [S, B, T] (a shared [B, T] batch is broadcast to every seed), and each
    token's row in a table of S * V rows, laid out [S, T, B] for the time loop."""
    if tokens.dim() == 2:
        tokens = tokens.expand(n_seeds, *tokens.shape)
    if tokens.dim() != 3 or tokens.shape[0] != n_seeds or tokens.dtype.is_floating_point:
        raise ValueError(
            f"tokens must be integer [S={n_seeds}, B, T] or [B, T], got {tokens.dtype} "
            f"of shape {tuple(tokens.shape)}"
        )
    offsets = torch.arange(n_seeds, device=tokens.device)[:, None, None] * vocab
    return tokens, tokens.transpose(1, 2) + offsets


class SeedStack(nn.Module):
    """What every seed-stacked model shares: its seed count, copying reference models (of
    class ``reference``) in and out, and predictions in chunks of rows. A subclass defines
    ``_copy_in(i, model)`` and ``_seed_state(i, reference_state)``."""

    reference: type[nn.Module]

    @classmethod
    def has_form(cls, cfg) -> bool:
        """Whether a config of ``reference`` has a stacked form here (else: one seed at a time)."""
        return True

    def __init__(self, cfg, n_seeds: int):
        super().__init__()
        if isinstance(n_seeds, bool) or not isinstance(n_seeds, int) or n_seeds < 1:
            raise ValueError(f"n_seeds must be an integer >= 1, got {n_seeds!r}")
        self.cfg, self.n_seeds = cfg, n_seeds

    @torch.no_grad()
    def _fresh(self) -> None:
        """S fresh reference initialisations, one after another (the torch seed's S draws)."""
        for i in range(self.n_seeds):
            self._copy_in(i, self.reference(self.cfg))

    @classmethod
    def stack(cls, models: list[nn.Module]):
        """One stacked model holding copies of ``models`` (one config) as seeds 0..S-1."""
        ref = cls.reference
        if not models or any(not isinstance(m, ref) for m in models):
            raise ValueError(f"{cls.__name__}.stack needs a non-empty list of {ref.__name__}")
        if any(m.cfg != models[0].cfg for m in models):
            raise ValueError(f"{cls.__name__}.stack needs models of one config (cfgs differ)")
        p = next(iter(models[0].state_dict().values()))
        stacked = cls(models[0].cfg, len(models), init=False).to(device=p.device, dtype=p.dtype)
        with torch.no_grad():
            for i, m in enumerate(models):
                stacked._copy_in(i, m)
        return stacked

    def unstack(self, i: int) -> nn.Module:
        """Seed ``i`` as a reference model (a copy)."""
        if not 0 <= i < self.n_seeds:
            raise ValueError(f"seed index must be in [0, {self.n_seeds}), got {i}")
        p = next(iter(self.state_dict().values()))
        with torch.device("meta"):
            model = self.reference(self.cfg)
        model = model.to_empty(device=p.device).to(p.dtype)
        model.load_state_dict(self._seed_state(i, model.state_dict()))
        return model

    @torch.no_grad()
    def predict(self, tokens: torch.Tensor, chunk: int = 512, last: bool = False) -> torch.Tensor:
        """Class predictions [S, N, T] ([S, N] with ``last``) for tokens [S, N, T]."""
        out = [
            self(tokens[:, i : i + chunk], last=last).argmax(-1)
            for i in range(0, tokens.shape[1], chunk)
        ]
        return torch.cat(out, 1)


class StackedCSP(SeedStack):
    """S CSPs of one config as one module; see the module docstring."""

    reference = CSP

    @classmethod
    def has_form(cls, cfg: CSPConfig) -> bool:
        return cfg.rotation != "pairwise"  # the section 2.3 contrast trains as the reference

    def __init__(self, cfg: CSPConfig, n_seeds: int = 1, init: bool = True):
        if not isinstance(cfg, CSPConfig):
            raise ValueError(f"cfg must be a CSPConfig, got {type(cfg).__name__}")
        if not self.has_form(cfg):
            raise ValueError("rotation='pairwise' has no stacked form: train it as CSP, one "
                             "seed at a time")  # fmt: skip
        super().__init__(cfg, n_seeds)
        d, s = cfg.d_model, n_seeds
        self.embed = nn.Parameter(torch.empty(s, cfg.vocab_size, 2 * d))
        self.blocks = nn.ModuleList(StackedBlock(cfg, s) for _ in range(cfg.n_layers))
        self.dec_w = nn.Parameter(torch.empty(s, 2 * d, cfg.n_classes))
        self.dec_b = nn.Parameter(torch.empty(s, 1, cfg.n_classes))
        if init:
            self._fresh()

    def _copy_in(self, i: int, model: CSP) -> None:
        state = model.state_dict()
        for ref, tensor, transposed in _pairs(self):
            w = state[ref].t() if transposed else state[ref]
            tensor[i].copy_(w.reshape(tensor[i].shape))

    def _seed_state(self, i: int, ref_state: dict) -> dict:
        return {
            ref: (tensor[i].detach().t() if transposed else tensor[i].detach())
            .reshape(ref_state[ref].shape)
            .clone()
            for ref, tensor, transposed in _pairs(self)
        }

    def forward(self, tokens: torch.Tensor, last: bool = False) -> torch.Tensor:
        s, v = self.n_seeds, self.cfg.vocab_size
        tokens, rows = seed_token_rows(tokens, s, v)
        _, batch, steps = tokens.shape
        first = self.blocks[0]
        if v <= batch * steps:  # project the V embedding rows, then gather them per token
            z, pre = (_TokenRows.apply(t, rows) for t in first.project(self.embed))
        else:
            u = _TokenRows.apply(self.embed, rows).view(s, steps * batch, -1)
            z, pre = (t.view(s, steps, batch, -1) for t in first.project(u))
        h = first.core(z, pre, last and len(self.blocks) == 1)
        for i, block in enumerate(self.blocks[1:], start=2):
            z, pre = block.project(h.view(s, -1, h.shape[-1]))
            shape = (s, steps, batch)
            h = block.core(z.view(*shape, -1), pre.view(*shape, -1), last and i == len(self.blocks))
        phase = _Unit.apply(h)  # the decoder reads the phase of each component
        logits = torch.baddbmm(self.dec_b, phase.view(s, -1, phase.shape[-1]), self.dec_w)
        logits = logits.view(s, -1, batch, self.cfg.n_classes).transpose(1, 2)
        return logits[:, :, -1] if last else logits


# --- copying weights between S reference models and one stacked model ----------------

_BLOCK_MAP = (  # (reference name, stacked name, transposed)
    ("in_proj.re.weight", "in_re", True),
    ("in_proj.im.weight", "in_im", True),
    ("delta.weight", "delta_w", True),
    ("delta.bias", "delta_b", False),
    ("gamma.weight", "gamma_w", True),
    ("gamma.bias", "gamma_b", False),
    ("angle.weight", "angle_w", True),
    ("angle.bias", "angle_b", False),
    ("skip_gate", "skip_gate", False),
    ("norm.weight", "ln_w", False),
    ("norm.bias", "ln_b", False),
)


def _pairs(stacked: StackedCSP):
    """(reference name, stacked tensor, transposed) for every tensor of the model."""
    yield "embed.weight", stacked.embed, False
    yield "decoder.weight", stacked.dec_w, True
    yield "decoder.bias", stacked.dec_b, False
    for i, block in enumerate(stacked.blocks):
        for ref, name, transposed in _BLOCK_MAP:
            if hasattr(block, name):
                yield f"blocks.{i}.{ref}", getattr(block, name), transposed
