"""The contract every attention kind keeps, and the dot-product baseline.

An ``Attention`` maps [B, N, d_model] -> [B, N, d_model] by one of two exact paths:
``path="reference"`` forms the logits explicitly (for inspection, audits and small N),
``path="fast"`` runs the fused kernel that trains. Both share the value and output
projections, the head split and the causal mask; training-mode fast calls count what
the kernel saw into ``stats`` (``FastPathStats``).

The forward keeps no Python-side state, so ``torch.compile`` traces it once and
``torch.func`` (``functional_call``, ``vmap``, ``grad``) transforms it: the counts live
in a tensor buffer, ``fast_counts`` (int64, not in the state dict), updated in place.
Only the every-k-th gate of ``check_every > 0`` keeps a Python count, in a function
``torch.compile`` leaves out of its graph (``check``: a graph break, not a recompile).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from structattn_lite import names
from structattn_lite.config import check_choice, check_int

PATHS = ("fast", "reference")


@dataclass
class FastPathStats:
    """What the training path saw: counts over training-mode forward calls only.

    calls: training forward calls; checked_calls / rows: forward calls inspected and the softmax rows in them (rows with
    a single visible key are left out); nonfinite: NaN/Inf entries among the kernel's
    inputs (q~, k~) and its output; saturated_rows: rows whose largest probability is 1
    to the working precision (every other weight below its epsilon), so no gradient
    flows through their scores; max_abs_logit: the largest |logit| the kernel formed;
    fallbacks: calls the metric kinds folded in float64 (see logit_bound).
    """

    calls: int = 0
    checked_calls: int = 0
    rows: int = 0
    nonfinite: int = 0
    saturated_rows: int = 0
    max_abs_logit: float = 0.0
    fallbacks: int = 0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


# The counts' places in ``Attention.fast_counts``: FastPathStats' fields in order. The
# buffer is int64 so that ``module.to(dtype)`` never rounds it; max_abs_logit is held as
# the bits of its float64 value (for non-negative floats the bits order as the values,
# so a max over bits is the max over values).
COUNT_FIELDS = tuple(f.name for f in fields(FastPathStats))
CALLS, CHECKED, ROWS, NONFINITE, SATURATED, MAX_ABS, FALLBACKS = range(len(COUNT_FIELDS))
assert COUNT_FIELDS[MAX_ABS] == "max_abs_logit" and COUNT_FIELDS[FALLBACKS] == "fallbacks"


def _float_bits(x: torch.Tensor) -> torch.Tensor:
    """A 0-d float tensor as the int64 bits of its float64 value."""
    return x.to(torch.float64).reshape(()).view(torch.int64)


class Attention(nn.Module):
    """Shared parts: value/output projections, head split, causal mask, the two paths.

    ``keep_logits = True`` stores the last reference logits ([B, H, N, N], masked
    entries -inf) in ``last_logits`` for plots. ``check_every = k`` (0: never) makes
    every k-th fast forward call count failures into ``stats`` from the q, k it uses.
    """

    kind = "base"
    # What a registered variant declares (``register``): the options its constructor
    # takes, and, for a kind names.py does not list, its display name and colour.
    options: tuple[str, ...] = ("causal",)
    display_name: str | None = None
    color: str | None = None

    @classmethod
    def analytic_flops(
        cls, batch: int, n_tokens: int, d_model: int, n_heads: int, *,
        m: int | None = None, shared_qk: bool = True, path: str = "fast", width: int | None = None,
    ) -> int:  # fmt: skip
        """Forward matmul FLOPs of one module, term by term (2 per multiply-add): what
        ``attention_flops`` measures must equal it. A variant that does not say cannot
        be registered."""
        raise NotImplementedError

    @classmethod
    def pairwise_flops(
        cls, batch: int, n_tokens: int, d_model: int, n_heads: int, m: int | None = None
    ) -> int:
        """Elementwise FLOPs of the reference path's pairwise tensor, which torch's counter
        does not see; 0 for a kind that forms none."""
        return 0

    def __init__(self, d_model: int, n_heads: int, causal: bool = True):
        super().__init__()
        d_model = check_int("d_model", d_model, minimum=1)
        n_heads = check_int("n_heads", n_heads, minimum=1)
        if d_model % n_heads:
            divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
            raise ValueError(
                f"d_model={d_model} must be divisible by n_heads={n_heads}; "
                f"n_heads that divide it: {divisors}"
            )
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.causal = bool(causal)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)
        self.path = "fast"
        self.keep_logits = False
        self.last_logits: torch.Tensor | None = None
        self.register_buffer(
            "fast_counts", torch.zeros(len(COUNT_FIELDS), dtype=torch.int64), persistent=False
        )
        self._every, self._seen = 0, 0  # check_every and the calls its gate has counted

    @property
    def stats(self) -> FastPathStats:
        """The counts so far, as Python numbers (one read of ``fast_counts``)."""
        counts = self.fast_counts.detach().cpu()
        values = dict(zip(COUNT_FIELDS, counts.tolist(), strict=True))
        values["max_abs_logit"] = float(counts[MAX_ABS].view(torch.float64))
        return FastPathStats(**values)

    @stats.setter
    def stats(self, value: FastPathStats) -> None:
        """Set the counts (a checkpoint's, or zeros to reset them)."""
        counts = [getattr(value, name) for name in COUNT_FIELDS]
        counts[MAX_ABS] = 0
        new = torch.tensor(counts, dtype=torch.int64)
        new[MAX_ABS] = _float_bits(torch.tensor(float(value.max_abs_logit)))
        with torch.no_grad():
            self.fast_counts.copy_(new)
        self._seen = int(value.calls)

    @property
    def check_every(self) -> int:
        return self._every

    @check_every.setter
    def check_every(self, every: int) -> None:
        self._every = check_int("check_every", every, minimum=0)
        self._seen = int(self.fast_counts[CALLS])  # the gate starts from the counted calls

    def split(self, t: torch.Tensor) -> torch.Tensor:
        B, N, _ = t.shape
        return t.view(B, N, self.n_heads, self.d_head).transpose(1, 2)

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """Causal -inf above the diagonal (a no-op when not causal)."""
        if not self.causal:
            return logits
        n_q, n_k = logits.shape[-2:]
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=logits.device).tril()
        return logits.masked_fill(~keep, float("-inf"))

    def reference_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Unmasked logits [B, H, N, N] by the explicit (reference) formula."""
        raise NotImplementedError

    def fast(self, x: torch.Tensor) -> torch.Tensor:
        """The module's output by the fused kernel, [B, N, d_model]."""
        raise NotImplementedError

    def merge(self, y: torch.Tensor) -> torch.Tensor:
        """[B, H, N, d] -> [B, N, H d]."""
        B, _, N, _ = y.shape
        return y.transpose(1, 2).reshape(B, N, self.d_model)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.mask(self.reference_logits(x))
        if self.keep_logits:
            self.last_logits = logits.detach()
        v = self.split(self.w_v(x))
        return self.merge(logits.softmax(-1).to(v.dtype) @ v)

    def forward(self, x: torch.Tensor, path: str | None = None) -> torch.Tensor:
        path = check_choice("path", path or self.path, PATHS)
        if path == "fast":
            if self.training:
                self.fast_counts[CALLS].add_(1)
            return self.fast(x)
        return self.w_o(self.reference(x))

    def metric_parameters(self) -> list[nn.Parameter]:
        """Parameters that define the similarity beyond the projections."""
        return []

    def check(self, q: torch.Tensor, k: torch.Tensor, scale: float, y: torch.Tensor) -> None:
        """Count failures from this call's q, k and output if it is a checked one: every
        check_every-th training call. With check_every = 0 nothing runs, so the forward
        stays one traceable graph."""
        if self.training and self._every > 0:
            self._checked(q, k, scale, y)

    @torch.compiler.disable
    def _checked(self, q: torch.Tensor, k: torch.Tensor, scale: float, y: torch.Tensor) -> None:
        """The gate and the count, left out of a compiled graph (a graph break that returns
        nothing, so no guard and no recompile): calls 1, k + 1, 2k + 1, ... are counted,
        by a Python count of calls that never reads ``fast_counts`` (no device sync)."""
        self._seen += 1
        if (self._seen - 1) % self._every == 0:
            self.count(q, k, scale, y)

    @torch.no_grad()
    def count(self, q: torch.Tensor, k: torch.Tensor, scale: float, y: torch.Tensor) -> None:
        """Failure counts from the q, k the kernel used (same dtype, e.g. under autocast),
        added into ``fast_counts`` by tensor operations only (no host sync)."""
        logits = self.mask((q @ k.transpose(-1, -2)) * scale)
        visible = torch.isfinite(self.mask(torch.zeros_like(logits[0, 0]))).sum(-1) > 1
        row_max = logits.amax(-1, keepdim=True)
        rest = torch.exp((logits - row_max).float()).sum(-1) - 1  # mass beside the maximum
        eps = torch.finfo(q.dtype).eps
        finite = torch.isfinite(logits)
        zero = torch.zeros((), dtype=torch.int64, device=q.device)
        step = torch.stack([
            zero,  # calls: counted by forward
            zero + 1,  # checked_calls
            visible.sum() * (logits.shape[0] * logits.shape[1]),  # rows
            (~torch.isfinite(q)).sum() + (~torch.isfinite(k)).sum() + (~torch.isfinite(y)).sum(),
            ((rest < eps) & visible).sum(),  # saturated_rows
            zero,  # max_abs_logit: below
            zero,  # fallbacks: counted by the metric kinds
        ])  # fmt: skip
        self.fast_counts.add_(step)
        largest = _float_bits(logits.abs().masked_fill(~finite, 0).amax())  # finite entries
        self.fast_counts[MAX_ABS].copy_(torch.maximum(self.fast_counts[MAX_ABS], largest))


# kind -> its class: every attention variant the study can build, configure, count and draw
KINDS: dict[str, type[Attention]] = {}


def register(cls: type[Attention]) -> type[Attention]:
    """Register an attention variant (a class decorator). The class is all the study needs
    of it: its ``kind`` (the config's and the records' key), the constructor ``options``
    it takes, its FLOP count (``analytic_flops``; ``pairwise_flops`` where its reference
    path forms a pairwise tensor) and, for a kind names.py does not list, its
    ``display_name`` and ``color``. ``build_attention``, the configs' checks, the FLOP
    audit and the figures read it from here."""
    kind = cls.kind
    if kind in KINDS and KINDS[kind].__qualname__ != cls.__qualname__:
        raise ValueError(f"kind={kind!r} is already registered, by {KINDS[kind].__name__}")
    if cls.analytic_flops.__func__ is Attention.analytic_flops.__func__:
        raise TypeError(
            f"{cls.__name__} must define analytic_flops (its FLOP count) to be registered"
        )
    key = names.variant_key(kind)  # its key with the default options
    if cls.display_name is not None:
        names.register_model(key, cls.display_name, cls.color)
    names.style(key)  # named and coloured, here or in names.py: else a one-line error
    KINDS[kind] = cls
    return cls


@register
class DotAttention(Attention):
    """Standard scaled dot-product attention with separate W_q, W_k."""

    kind = "dot"

    @classmethod
    def analytic_flops(cls, batch, n_tokens, d_model, n_heads, *, m=None, shared_qk=True,
                       path="fast", width=None) -> int:  # fmt: skip
        """q, k, v, o projections (2 B N D^2 each); scores and weighted values (2 B H N^2 d
        each), on either path (the math backend computes all N^2 scores even when causal)."""
        B, N, D, H = batch, n_tokens, d_model, n_heads
        return 2 * B * N * D * D * 4 + 2 * (2 * B * H * N * N * (D // H))

    def __init__(self, d_model: int, n_heads: int, causal: bool = True):
        super().__init__(d_model, n_heads, causal)
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)

    def reference_logits(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.split(self.w_q(x)), self.split(self.w_k(x))
        return q @ k.transpose(-1, -2) / math.sqrt(self.d_head)

    def fast(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (self.split(w(x)) for w in (self.w_q, self.w_k, self.w_v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        self.check(q, k, 1 / math.sqrt(self.d_head), y)
        return self.w_o(self.merge(y))
