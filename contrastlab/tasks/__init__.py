"""Retrieval tasks in the field's own layout (BEIR/MTEB): the reader, and the held-out dev split."""

from contrastlab.tasks.beir import (
    RetrievalTask,
    beir_splits,
    holdout,
    is_beir_task,
    read_beir_task,
    task_folder,
    tasks_under,
)

__all__ = ["RetrievalTask", "read_beir_task", "beir_splits", "is_beir_task", "holdout", "task_folder", "tasks_under"]
