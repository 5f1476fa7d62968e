"""Asynchronous RL mode, pure core (design: ``docs/async.md``).

* :mod:`verl.async_rl.types` -- ``Turn``, ``Rollout`` (JSON log form), ``Group``, ``RlExample`` (packed learner input).
* :mod:`verl.async_rl.advantage` -- ``AdvantageFunction``, ``RLOO`` (default), ``GRPOZScore``, registry.
* :mod:`verl.async_rl.rollout_log` -- the append-only crash-safe JSONL log and its replay-buffer records.
* :mod:`verl.async_rl.replay_buffer` -- per-env ``ReplayBuffer`` (crash-safe log, groups, versions, metrics).
* :mod:`verl.async_rl.batcher` -- ``Batcher`` v0 (deficit round-robin, packing), ``segment_attention_mask``.

Components (Ray actors; imported from their modules, not here, so the pure core stays light):

* :mod:`verl.async_rl.inference_server` -- OpenAI-compatible HF inference server with versioned weight updates.
* :mod:`verl.async_rl.learner` -- ``Learner`` (one PPO step per packed batch, core_algos loss), ``WeightBroadcaster``.
* env actors (registered text envs, single-turn RLLA) live with the environments,
  :mod:`agent_system.environments.env_actor`; the entry point hands ``make_env_actor`` to the orchestrator.
* :mod:`verl.async_rl.orchestrator` -- ``Orchestrator`` (starts, feeds and restarts the components).
"""

from verl.async_rl.advantage import GRPOZScore, RLOO, AdvantageFunction, get_advantage_function
from verl.async_rl.batcher import Batch, Batcher, BatchNotReady, segment_attention_mask
from verl.async_rl.replay_buffer import AddResult, ReloadReport, ReplayBuffer
from verl.async_rl.types import GENERATED_ROLES, Group, RlExample, Rollout, Turn

__all__ = [
    "GENERATED_ROLES",
    "RLOO",
    "AddResult",
    "AdvantageFunction",
    "Batch",
    "BatchNotReady",
    "Batcher",
    "GRPOZScore",
    "Group",
    "ReloadReport",
    "ReplayBuffer",
    "RlExample",
    "Rollout",
    "Turn",
    "get_advantage_function",
    "segment_attention_mask",
]
