"""structattn_lite: a notebook study of two structured sequence-model ideas.

Matroidal Mahalanobis attention (``theory``, ``attention``, ``lm``) and the Complex
State Propagator (``tasks``, ``models``, ``training``). See the README for the tour.
"""

__version__ = "0.1.0"
