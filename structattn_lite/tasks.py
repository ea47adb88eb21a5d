"""Public name from the study brief: ``structattn_lite.tasks.make_dataset`` (the tasks
live in ``data.tasks``, their splits in ``data.splits``)."""

from structattn_lite.data.splits import make_dataset

__all__ = ["make_dataset"]
