"""Task registry: name -> Task class. The CLI and the GUI list tasks from here.

To add a task, see docs/ARCHITECTURE.md ("Where to add things").
"""

from __future__ import annotations

from core.errors import ConfigError
from core.tasks.base import Task, TaskData, TaskOption
from core.tasks.ranking import RankingTask
from core.tasks.recommender import RecommenderTask
from core.tasks.sentiment import SentimentTask
from core.tasks.tiny import TinyClassifierTask

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (TinyClassifierTask, SentimentTask, RankingTask, RecommenderTask)}


def get_task_class(name: str) -> type[Task]:
    """The Task class called `name`; ConfigError naming the known tasks otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError("task", f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None


def create_task(name: str, options: dict | None = None) -> Task:
    """An instance of task `name` with validated options."""
    return get_task_class(name)(options)


__all__ = ["TASKS", "Task", "TaskData", "TaskOption", "create_task", "get_task_class"]
