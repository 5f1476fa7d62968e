"""Rollout engines (verl's ``verl.workers.rollout``): ``HFRollout`` always; ``vLLMRollout`` from
``verl.workers.rollout.vllm_rollout`` when vLLM is installed."""

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout

__all__ = ["BaseRollout", "HFRollout"]
