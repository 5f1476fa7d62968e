"""PPO actors (verl's ``verl.workers.actor``)."""

from verl.workers.actor.dp_actor import DataParallelPPOActor

__all__ = ["DataParallelPPOActor"]
