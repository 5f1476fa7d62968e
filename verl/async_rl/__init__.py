"""Asynchronous RL mode, pure core (design: ``docs/async.md``).

* :mod:`verl.async_rl.types` -- ``Turn``, ``Rollout`` (JSON log form), ``Group``, ``RlExample`` (packed learner input).
* :mod:`verl.async_rl.rollout_log` -- the append-only crash-safe JSONL log and its replay-buffer records.
* :mod:`verl.async_rl.replay_buffer` -- per-env ``ReplayBuffer`` (crash-safe log, groups, versions, metrics).
* :mod:`verl.async_rl.batcher` -- ``Batcher`` v0 (deficit round-robin, packing), ``segment_attention_mask``.

Components (Ray actors; imported from their modules, not here, so the pure core stays light):

* :mod:`verl.async_rl.inference_server` -- OpenAI-compatible HF inference server with versioned weight updates.
* :mod:`verl.async_rl.learner` -- ``Learner`` (the synchronous trainer's actor worker and step), ``WeightBroadcaster``.
* env actors (registered text envs, single-turn RLLA) live with the environments,
  :mod:`agent_system.environments.env_actor`; the entry point hands ``make_env_actor`` to the orchestrator.
* :mod:`verl.async_rl.orchestrator` -- ``Orchestrator`` (starts, feeds and restarts the components).
"""

from verl.async_rl.batcher import Batch, Batcher, BatchNotReady, segment_attention_mask
from verl.async_rl.replay_buffer import AddResult, ReloadReport, ReplayBuffer
from verl.async_rl.types import GENERATED_ROLES, Group, RlExample, Rollout, Turn

__all__ = [
    "GENERATED_ROLES",
    "AddResult",
    "Batch",
    "BatchNotReady",
    "Batcher",
    "Group",
    "ReloadReport",
    "ReplayBuffer",
    "RlExample",
    "Rollout",
    "Turn",
    "segment_attention_mask",
]
