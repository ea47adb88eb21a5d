"""The authors' CSP (models/csp_authors.py) with S seeds stacked: one module, batched matmuls.

Every tensor of ``AuthorsCSP``'s state dict is held here with a leading seed axis S, under
its own name ("layers.0.B_proj.weight" as ``layers__0__B_proj__weight``), so
``StackedAuthorsCSP.stack`` copies S reference models in and ``.unstack`` copies seed s out.
Trainable tensors are parameters; the frozen embedding table (778a15c) and the inert head
and input-rotation projection (which the reference never calls, so they get no gradient)
are buffers, so an optimizer over ``parameters()`` moves exactly what the reference's does.

It computes what ``AuthorsCSP`` computes (the tests check outputs and gradients); the form:
- activations are time-major [S, T, B, 2, H] (real and imaginary halves);
- B_proj is applied before the rotation, not after: with one angle per step, rotating
  and a real linear map commute, B(e^{i phi} x) = e^{i phi} (B x) (its bias added after),
  so B_proj, theta_proj and (where they read the input) delta/gamma_proj run as matmuls
  over all steps at once, and in the first block over the V token rows only;
- delta_proj(h_{t-1} + x_t) = w.h_{t-1} + delta_proj(x_t): only w.h_{t-1} is left in the
  loop over time, which a state-dependent decay needs (``_StateRecurrence``, a
  hand-written backward); exp(-softplus(u)) is computed as sigmoid(-u).
Tokens [S, B, T] (or [B, T], shared) in, logits [S, B, T, C] out, [S, B, C] with ``last``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite.models.csp_authors import (
    AuthorsCSP,
    AuthorsCSPConfig,
    running_sum,
    step_angles,
)
from structattn_lite.models.csp_stacked import SeedStack, _rotate, _TokenRows, seed_token_rows


def _recur_out_of_place(drive, c, w):
    """``_StateRecurrence``'s forward with every step a new tensor: (h, alpha)."""
    a_t = list(torch.sigmoid(c.neg()).unbind(1))
    h_t = [drive[:, 0]]
    if w is not None:
        neg_c, neg_w = c.neg().unbind(1), w.neg()
    for t in range(1, drive.shape[1]):
        if w is not None:
            a_t[t] = torch.sigmoid(torch.baddbmm(neg_c[t], h_t[t - 1], neg_w))
        h_t.append(torch.addcmul(drive[:, t], a_t[t], h_t[t - 1]))
    return torch.stack(h_t, 1), torch.stack(a_t, 1)


def _recur_back_out_of_place(g, alpha, h, slope, w_row):
    """``_StateRecurrence``'s backward with every step a new tensor: (g_drive, g_c)."""
    gd_t, a_t, h_t, s_t = list(g.unbind(1)), alpha.unbind(1), h.unbind(1), slope.unbind(1)
    gc_t = [torch.zeros_like(a) for a in a_t]
    for t in range(len(gd_t) - 1, 0, -1):
        g_a = torch.linalg.vecdot(gd_t[t], h_t[t - 1]).unsqueeze(-1)
        gc_t[t] = g_a * s_t[t]
        gd_t[t - 1] = torch.addcmul(gd_t[t - 1], a_t[t], gd_t[t])
        if w_row is not None:
            gd_t[t - 1] = torch.addcmul(gd_t[t - 1], gc_t[t], w_row)
    return torch.stack(gd_t, 1), torch.stack(gc_t, 1)


class _StateRecurrence(torch.autograd.Function):
    """h_t = a_t h_{t-1} + drive_t, a_t = sigmoid(-(w . h_{t-1} + c_t)), h_{-1} = 0.

    drive [S, T, B, F], c [S, T, B, 1], w [S, F, 1] (None: a_t = sigmoid(-c_t), a decay
    that does not read the state) -> h [S, T, B, F].
    """

    # Eagerly, each step updates a view of one buffer in place: a step's float32 numbers
    # depend on the geometry its elementwise kernels see, and the committed runs trained
    # this way. Under torch.compile (which cannot trace writes into views) each step is a
    # new tensor, stacked at the end.
    @staticmethod
    def forward(ctx, drive, c, w):
        if torch.compiler.is_compiling():
            h, alpha = _recur_out_of_place(drive, c, w)
        else:
            h = drive.clone()
            alpha = torch.sigmoid(c.neg())  # the state's share is added step by step below
            h_t, a_t = h.unbind(1), alpha.unbind(1)
            if w is not None:  # sigmoid(-(w.h + c)) = sigmoid((-w).h + (-c)): negation is exact
                neg_c, neg_w = c.neg().unbind(1), w.neg()
            for t in range(1, len(h_t)):
                if w is not None:
                    torch.sigmoid(torch.baddbmm(neg_c[t], h_t[t - 1], neg_w), out=a_t[t])
                h_t[t].addcmul_(a_t[t], h_t[t - 1])
        ctx.save_for_backward(h, alpha, w)
        return h

    @staticmethod
    def backward(ctx, g):
        h, alpha, w = ctx.saved_tensors
        slope = alpha * (alpha - 1)  # d sigmoid(-u)/du = -a (1 - a)
        w_row = None if w is None else w.transpose(1, 2)  # [S, 1, F]
        if torch.compiler.is_compiling():
            g_drive, g_c = _recur_back_out_of_place(g, alpha, h, slope, w_row)
        else:
            g_drive = g.clone()
            g_c = torch.zeros_like(alpha)
            gd_t, gc_t, a_t, h_t, s_t = (t.unbind(1) for t in (g_drive, g_c, alpha, h, slope))
            for t in range(len(gd_t) - 1, 0, -1):
                # h_t = a_t h_{t-1} + drive_t: the gradient reaching h_t is g_drive_t
                g_a = torch.linalg.vecdot(gd_t[t], h_t[t - 1]).unsqueeze(-1)
                torch.mul(g_a, s_t[t], out=gc_t[t])
                gd_t[t - 1].addcmul_(a_t[t], gd_t[t])
                if w is not None:  # through u_t = w . h_{t-1} + c_t
                    gd_t[t - 1].addcmul_(gc_t[t], w_row)
        g_w = None
        if w is not None:  # sum over steps and batch of h_{t-1} g_u_t
            hs = h[:, :-1].reshape(h.shape[0], -1, h.shape[-1])
            g_w = torch.bmm(hs.transpose(1, 2), g_c[:, 1:].reshape(h.shape[0], -1, 1))
        return g_drive, g_c, g_w


class _RotateDrive(torch.autograd.Function):
    """b = e^{i phi} wx + bias (the bias on both halves), drive = gamma b.

    wx [S, T, B, 2, H]; cos, sin, gamma [S, T, B, 1]; bias [S, H] or None -> b, drive
    (both [S, T, B, 2, H]).
    """

    @staticmethod
    def forward(ctx, wx, cos, sin, bias, gamma):
        b = _rotate(wx, cos, sin)
        if bias is not None:
            b.add_(bias[:, None, None, None, :])
        ctx.save_for_backward(wx, cos, sin, b, gamma)
        ctx.has_bias = bias is not None
        return b, b * gamma.unsqueeze(-1)

    @staticmethod
    def backward(ctx, g_b, g_drive):
        wx, cos, sin, b, gamma = ctx.saved_tensors
        g_gamma = (g_drive * b).sum((-2, -1)).unsqueeze(-1)
        g = g_drive * gamma.unsqueeze(-1)
        if g_b is not None:
            g.add_(g_b)
        gr, gi, wr, wi = g[..., 0, :], g[..., 1, :], wx[..., 0, :], wx[..., 1, :]
        g_wx = _rotate(g, cos, sin, back=True)
        g_cos = torch.addcmul(gr * wr, gi, wi).sum(-1, keepdim=True)
        g_sin = torch.addcmul(gi * wr, gr, wi, value=-1.0).sum(-1, keepdim=True)
        g_bias = g.sum((1, 2, 3)) if ctx.has_bias else None
        return g_wx, g_cos, g_sin, g_bias, g_gamma


class _SkipNorm(torch.autograd.Function):
    """out = s / sqrt(|s|^2 + 1e-8) per component, s = sigmoid(g) x + SiLU(h); [S, T, B, 2, H]."""

    @staticmethod
    def forward(ctx, x, h, skip_logit):
        sg = torch.sigmoid(skip_logit)[:, None, None, None, :]
        s = torch.addcmul(F.silu(h), x, sg)
        n2 = torch.addcmul(s[..., 0, :] * s[..., 0, :], s[..., 1, :], s[..., 1, :]).add_(1e-8)
        length = n2.sqrt().unsqueeze(-2)
        ctx.save_for_backward(x, h, sg, s, n2, length)
        return s / length

    @staticmethod
    def backward(ctx, g):
        x, h, sg, s, n2, length = ctx.saved_tensors
        p = torch.addcmul(g[..., 0, :] * s[..., 0, :], g[..., 1, :], s[..., 1, :])
        g_s = torch.addcmul(g, s, (p / n2).unsqueeze(-2), value=-1.0).div_(length)
        g_sg = (g_s * x).sum((1, 2, 3))
        sg1 = sg[:, 0, 0, 0]
        return g_s * sg, torch.ops.aten.silu_backward(g_s, h), g_sg * sg1 * (1 - sg1)


class _Phase(torch.autograd.Function):
    """[cos psi | sin psi], psi = atan2(Im, Re + eps) per component: [..., 2, H] -> same.

    cos psi = (Re + eps) / r and sin psi = Im / r, r = hypot(Re + eps, Im) (1 and 0 at r = 0,
    as atan2(0, 0) = 0), without the three transcendental functions.
    """

    @staticmethod
    def forward(ctx, x, eps: float):
        xe, y = x[..., 0, :] + eps, x[..., 1, :]
        r = torch.hypot(xe, y)
        safe = torch.where(r > 0, r, 1.0)
        if torch.compiler.is_compiling():  # out of place: torch.compile cannot trace out= views
            out = torch.stack((torch.where(r > 0, xe / safe, 1.0), y / safe), -2)
        else:  # as the committed runs computed it
            out = torch.empty_like(x)
            out[..., 0, :] = torch.where(r > 0, xe / safe, 1.0)
            torch.div(y, safe, out=out[..., 1, :])
        ctx.save_for_backward(xe, y, safe)
        return out

    @staticmethod
    def backward(ctx, g):
        xe, y, r = ctx.saved_tensors
        k = torch.addcmul(g[..., 0, :] * y, g[..., 1, :], xe, value=-1.0).div_(r * r * r)
        return torch.stack([y * k, -xe * k], -2), None


def _key(name: str) -> str:
    return name.replace(".", "__")


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """x [S, N, in] @ weight [S, out, in]^T (+ bias [S, out]) -> [S, N, out]."""
    if bias is None:
        return torch.bmm(x, weight.transpose(1, 2))
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class StackedAuthorsCSP(SeedStack):
    """S ``AuthorsCSP`` models of one config as one module; see the module docstring."""

    reference = AuthorsCSP

    def __init__(self, cfg: AuthorsCSPConfig, n_seeds: int = 1, init: bool = True):
        if not isinstance(cfg, AuthorsCSPConfig):
            raise ValueError(f"cfg must be an AuthorsCSPConfig, got {type(cfg).__name__}")
        super().__init__(cfg, n_seeds)
        self.traits = cfg.traits
        with torch.device("meta"):
            template = AuthorsCSP(cfg)
        trainable = {n for n, p in template.named_parameters() if p.requires_grad}
        inert = {"head.weight", "head.bias", "theta_proj.weight", "theta_proj.bias"}
        self.names = list(template.state_dict())
        for name, value in template.state_dict().items():
            tensor = torch.empty(n_seeds, *value.shape, device="cpu")
            if name in trainable and name not in inert:
                self.register_parameter(_key(name), nn.Parameter(tensor))
            else:
                self.register_buffer(_key(name), tensor)
        if init:
            self._fresh()

    def _copy_in(self, i: int, model: AuthorsCSP) -> None:
        for name, value in model.state_dict().items():
            self.w(name)[i].copy_(value)

    def _seed_state(self, i: int, ref_state: dict) -> dict:
        return {name: self.w(name)[i].detach().clone() for name in self.names}

    def w(self, name: str) -> torch.Tensor | None:
        """The stacked tensor of the reference's ``name`` (None where it has none: a bias)."""
        return getattr(self, _key(name), None)

    def _inputs(self) -> torch.Tensor:
        """The first block's input for each token value: [S, V, 2, H] (imaginary part 0)."""
        s, v, kind = self.n_seeds, self.cfg.vocab_size, self.traits.embedding
        if kind == "scalar_tanh":  # the token fed as a number
            w = self.w("encoder.weight")  # [S, H, 1]
            values = torch.arange(v, dtype=w.dtype, device=w.device)[None, :, None]
            x = torch.tanh(values * w[:, None, :, 0] + self.w("encoder.bias")[:, None])
        else:
            x = _linear(
                self.w("embed.weight"), self.w("embed_proj.weight"), self.w("embed_proj.bias")
            )
            x = x if kind == "frozen_table" else torch.tanh(x)
        return torch.stack([x, torch.zeros_like(x)], 2).view(s, v, 2, -1)

    def _projections(self, i: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Everything block i reads from its input rows x [S, N, 2, H] alone (no state)."""
        p, s = f"layers.{i}.", x.shape[0]
        flat = x.reshape(s, -1, x.shape[-1] * 2)
        out = {
            "c": _linear(flat, self.w(p + "theta_proj.weight"), self.w(p + "theta_proj.bias")),
            "wx": _linear(x.reshape(s, -1, x.shape[-1]), self.w(p + "B_proj.weight")).view(x.shape),
        }
        if self.traits.gates_read == "state":
            out["gates"] = self._gates(p, flat)
        return out

    def _gates(self, p: str, x: torch.Tensor) -> torch.Tensor:
        """delta_proj(x) and gamma_proj(x) of the block named ``p`` as one matmul: [S, N, 2]."""
        w = torch.cat([self.w(p + "delta_proj.weight"), self.w(p + "gamma_proj.weight")], 1)
        b = torch.cat([self.w(p + "delta_proj.bias"), self.w(p + "gamma_proj.bias")], 1)
        return _linear(x, w, b)

    def _block(self, i: int, x: torch.Tensor, proj: dict, last: bool) -> torch.Tensor:
        """Block i on x [S, T, B, 2, H] given its input projections (each [S, T, B, ...])."""
        p, traits = f"layers.{i}.", self.traits
        s, steps, batch, _, hidden = x.shape
        phi = step_angles(proj["c"], traits.angle)
        if traits.angle != "step_tanh":
            phi = running_sum(phi)  # float32 step by step, as theirs
        cos, sin = phi.cos(), phi.sin()  # [S, T, B, 1]
        bias = self.w(p + "B_proj.bias")
        if traits.gates_read == "drive":  # both gates read the drive; the decay no state
            b = _RotateDrive.apply(proj["wx"], cos, sin, bias, torch.ones_like(cos))[0]
            pre = self._gates(p, b.view(s, -1, 2 * hidden)).view(s, steps, batch, 2)
            drive = b * ((1 + torch.sin(pre[..., 1:])) / 2).unsqueeze(-1)
            w = None
        else:
            pre = proj["gates"]
            gamma = (1 + torch.sin(pre[..., 1:])) / 2
            drive = _RotateDrive.apply(proj["wx"], cos, sin, bias, gamma)[1]
            w = self.w(p + "delta_proj.weight").transpose(1, 2)  # [S, 2H, 1]
        flat = drive.view(s, steps, batch, 2 * hidden)
        h = _StateRecurrence.apply(flat, pre[..., :1].contiguous(), w).view(drive.shape)
        if last:
            h, x = h[:, -1:], x[:, -1:]
        return _SkipNorm.apply(x, h, self.w(p + "skip_gate"))

    def forward(self, tokens: torch.Tensor, last: bool = False) -> torch.Tensor:
        s, v = self.n_seeds, self.cfg.vocab_size
        tokens, rows = seed_token_rows(tokens, s, v)
        _, batch, steps = tokens.shape
        table = self._inputs()  # block 0: its projections on the V token rows, then gathered

        def gather(t):
            return _TokenRows.apply(t.reshape(s, v, -1), rows).view(s, steps, batch, *t.shape[2:])

        x = gather(table)
        proj = {k: gather(t) for k, t in self._projections(0, table).items()}
        n_layers = self.cfg.n_layers
        for i in range(n_layers):
            if i:
                proj = {
                    k: t.view(s, steps, batch, *t.shape[2:])
                    for k, t in self._projections(i, x.reshape(s, -1, *x.shape[-2:])).items()
                }
            x = self._block(i, x, proj, last and i == n_layers - 1)
        features = _Phase.apply(x, self.traits.decoder_eps)  # [cos psi | sin psi]
        flat = features.reshape(s, -1, 2 * features.shape[-1])
        logits = _linear(flat, self.w("decoder.weight"), self.w("decoder.bias"))
        logits = logits.view(s, -1, batch, self.cfg.n_classes).transpose(1, 2)
        return logits[:, :, -1] if last else logits
