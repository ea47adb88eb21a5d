"""Public name from the study brief: ``structattn_lite.tasks.make_dataset`` (the tasks
live in ``data.tasks``, their splits in ``data.splits``)."""

from structattn_lite.data.splits import make_dataset, paper_dataset
from structattn_lite.data.tasks import TASKS, make_task

__all__ = ["TASKS", "make_dataset", "make_task", "paper_dataset"]
