"""Backend-independent single-controller pieces: the ``Worker`` base, ``@register`` and the worker-group base."""

from verl.single_controller.base.decorator import Dispatch, Execute, register
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup, WorkerGroupError

__all__ = [
    "ClassWithInitArgs",
    "Dispatch",
    "Execute",
    "ResourcePool",
    "Worker",
    "WorkerGroup",
    "WorkerGroupError",
    "register",
]
