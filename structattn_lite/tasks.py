"""Public name from the study brief: ``structattn_lite.tasks.make_dataset`` (lives in ``data.tasks``)."""

from structattn_lite.data.tasks import TASKS, make_dataset, make_task, paper_dataset

__all__ = ["TASKS", "make_dataset", "make_task", "paper_dataset"]
