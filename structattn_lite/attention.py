"""Public name from the study brief: ``structattn_lite.attention.build_attention``
(the attention kinds live in ``models.attention``)."""

from structattn_lite.models.attention import build_attention

__all__ = ["build_attention"]
