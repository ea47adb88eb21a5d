"""Public name from the study brief: ``structattn_lite.attention.build_attention``
(the attention kinds live in ``models.attention``)."""

from structattn_lite.models.attention import ATTENTION_KINDS, Attention, build_attention

__all__ = ["ATTENTION_KINDS", "Attention", "build_attention"]
