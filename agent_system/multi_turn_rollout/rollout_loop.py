"""The multi-turn rollout: play batched environments with the actor and turn every active step into a training row.

At each turn every still-active environment instance's prompt (instruction, history window, current observation;
see ``EnvironmentManager.prompt_text``) is chat-templated, tokenised and left-padded; one batched ``generate`` call
samples a response per instance; the decoded responses are projected to actions and the environments step. A row is
``(prompt ids, the sampled response ids)`` of one active step — token-in/token-out: the response ids are exactly the
ids the rollout sampled (never decoded and re-encoded) and environment text only ever appears in the prompt, which is
outside the loss mask. Finished instances produce no rows.

Row fields (``DataProto``): tensors ``prompts``/``responses``/``input_ids``/``attention_mask``/``position_ids``/
``response_mask`` as the single-turn rollout, ``token_level_scores`` ``[B, R]`` (the row's reward on its last response
token: the step reward r_t for ``reward_mode='step'``, the trajectory's undiscounted episode return for
``'episode'``); non-tensors ``uid`` (task group), ``traj_uid``, ``step_index`` (0-based turn), ``anchor_obs`` (the
raw observation the action was taken in), ``step_reward``, ``is_action_valid``, ``episode_return``, ``won``
(the episode's outcome), ``reward_valid`` (False for trajectories ended by an environment error) and
``data_source`` (the environment name). These are the fields ``verl.trainer.ppo.gigpo`` reads (GiGPO, arXiv 2505.10978).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from verl.protocol import DataProto
from verl.utils.prompt_batch import concat_prompt_batches, left_pad_prompts
from verl.utils.reward_score.tool_formats import format_tool_usage

logger = logging.getLogger(__name__)

REWARD_MODES = ("step", "episode")


def _chat_ids(tokenizer, text: str, use_chat_template: bool) -> List[int]:
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class TrajectoryCollector:
    """Collects multi-turn trajectories from an ``EnvironmentManager`` with a batched generate function.

    Args:
        tokenizer: the actor's tokenizer (chat template, pad/eos ids).
        max_steps: turn limit per episode (``env.max_steps``); episodes still running after it end (not won).
        max_prompt_length: prompts longer than this keep their last tokens (``env.max_prompt_length``; a
            ``env/prompt_truncated_frac`` metric counts how often).
        reward_mode: ``'step'`` (each row scores its own step reward; what GiGPO reads) or ``'episode'`` (each row
            scores its trajectory's episode return; for trajectory-level estimators such as GRPO).
        use_chat_template: wrap the prompt text in the tokenizer's chat template as a user message.
        rlvcr: the RLVCR phase (``rlvcr.rollout_phase.RLVCRPhase``) or None: with it, :meth:`multi_turn_loop` runs
            :meth:`rlvcr_multi_turn_loop` when given a ``log_prob_fn``.
        reward_scorer: ``agent_system.reward.trajectory.TrajectoryRewardScorer`` or None: with it, the rows' rewards
            are the reward-API function's instead of the environments' (``custom_reward_function`` in agent mode),
            rewritten at the end of :meth:`vanilla_multi_turn_loop` (before the RLVCR phase).

    Raises:
        ValueError: ``max_steps`` < 1, ``max_prompt_length`` < 1 or an unknown ``reward_mode``.
    """

    def __init__(
        self,
        tokenizer,
        max_steps: int,
        max_prompt_length: int,
        reward_mode: str = "step",
        use_chat_template: bool = True,
        rlvcr=None,
        reward_scorer=None,
    ):
        if int(max_steps) < 1 or int(max_prompt_length) < 1:
            raise ValueError(
                f"env.max_steps ({max_steps}) and env.max_prompt_length ({max_prompt_length}) must be >= 1"
            )
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        self.tokenizer, self.max_steps, self.max_prompt_length = tokenizer, int(max_steps), int(max_prompt_length)
        self.reward_mode, self.use_chat_template, self.rlvcr = reward_mode, use_chat_template, rlvcr
        self.reward_scorer = reward_scorer
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def multi_turn_loop(
        self,
        envs,
        generate_fn: Callable[[DataProto], DataProto],
        task_seeds: Sequence[int],
        meta_info: Optional[Dict[str, Any]] = None,
        log_prob_fn: Optional[Callable[[DataProto], DataProto]] = None,
        step: int = 0,
    ) -> Tuple[DataProto, Dict[str, float]]:
        """Entry point (verl-agent's name): :meth:`rlvcr_multi_turn_loop` with an RLVCR phase and a ``log_prob_fn``,
        else :meth:`vanilla_multi_turn_loop`. ``step``: the trainer's global step (for the reward scorer)."""
        if self.rlvcr is not None and log_prob_fn is not None:
            return self.rlvcr_multi_turn_loop(envs, generate_fn, task_seeds, log_prob_fn, meta_info, step=step)
        return self.vanilla_multi_turn_loop(envs, generate_fn, task_seeds, meta_info, step=step)

    def rlvcr_multi_turn_loop(
        self,
        envs,
        generate_fn: Callable[[DataProto], DataProto],
        task_seeds: Sequence[int],
        log_prob_fn: Callable[[DataProto], DataProto],
        meta_info: Optional[Dict[str, Any]] = None,
        step: int = 0,
    ) -> Tuple[DataProto, Dict[str, float]]:
        """:meth:`vanilla_multi_turn_loop`, then the RLVCR phase on its step rows (``rlvcr.rollout_phase``; spec
        ``rlvcr.md`` §Where it runs): per step, alternative thinks for the other levels from ``generate_fn`` (one
        batched call for the whole batch, after the episodes) and the original action's entropy under each level's
        context from ``log_prob_fn`` (the actor's ``compute_log_prob``). Adds the fields
        ``rlvcr.rollout_phase.PHASE_FIELDS`` to the rows and ``rlvcr/*`` and ``timing_s/rlvcr`` to the metrics; the
        rows themselves (what is trained) are the vanilla loop's."""
        batch, metrics = self.vanilla_multi_turn_loop(envs, generate_fn, task_seeds, meta_info, step=step)
        start = time.perf_counter()
        metrics.update(self.rlvcr(batch, generate_fn, log_prob_fn))
        metrics["timing_s/rlvcr"] = time.perf_counter() - start
        return batch, metrics

    def vanilla_multi_turn_loop(
        self,
        envs,
        generate_fn: Callable[[DataProto], DataProto],
        task_seeds: Sequence[int],
        meta_info: Optional[Dict[str, Any]] = None,
        step: int = 0,
    ) -> Tuple[DataProto, Dict[str, float]]:
        """Reset ``envs`` with ``task_seeds`` and step every active instance until done or ``max_steps`` turns.

        Args:
            envs: an ``EnvironmentManager`` (``n`` instances).
            generate_fn: ``DataProto`` with ``input_ids``/``attention_mask``/``position_ids`` ``[b, P]`` → the
                rollout output (``prompts``, ``responses`` ``[b, R]``, ``input_ids``, ``attention_mask``,
                ``position_ids``, ``response_mask``), one response per row.
            task_seeds: one seed per task group.
            meta_info: copied into every generate call (sampling switches).
            step: the trainer's global step, passed to the reward scorer and to every environment instance
                (``TextEnv.training_step``: scheduled rewards read it).
        Returns:
            The rows of all active steps (see the module docstring) and the episode metrics ``env/*``.
        Raises:
            RuntimeError: no instance was active after reset (every reset failed).
        """
        obs, infos = envs.reset(task_seeds, step=step)
        n = envs.n
        episode_return, won = np.zeros(n), np.zeros(n, dtype=bool)
        traj_valid, lengths = np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64)
        for i, info in enumerate(infos):
            traj_valid[i] = info.get("traj_valid", True)
        if not envs.active.any():
            raise RuntimeError(
                f"{envs.env_name}: no environment instance is active after reset "
                f"(errors: {[info.get('env_error') for info in infos][:3]})"
            )
        step_batches: List[DataProto] = []
        row_instance: List[np.ndarray] = []
        truncated = total_prompts = invalid = tool_calls = tool_turns = 0
        t_env = 0.0
        for turn in range(self.max_steps):
            active = np.flatnonzero(envs.active)
            if active.size == 0:
                break
            ids = []
            for i in active:
                row = _chat_ids(self.tokenizer, obs["text"][i], self.use_chat_template)
                if len(row) > self.max_prompt_length:
                    row, truncated = row[-self.max_prompt_length :], truncated + 1
                ids.append(row)
            total_prompts += len(ids)
            gen_in = DataProto.from_dict(left_pad_prompts(ids, self.pad_token_id), meta_info=dict(meta_info or {}))
            out = generate_fn(gen_in)
            responses = out.batch["responses"]
            texts = self.tokenizer.batch_decode(
                [r[m.bool()].tolist() for r, m in zip(responses, out.batch["response_mask"])], skip_special_tokens=True
            )
            usages = [format_tool_usage(text) for text in texts]  # ToolRL's <tool_call> blocks, as the reward reads
            tool_calls += sum(u.num_calls for u in usages)
            tool_turns += sum(u.num_calls > 0 for u in usages)
            actions: List[Optional[str]] = [None] * n
            for k, i in enumerate(active):
                actions[i] = texts[k]
            anchors = [obs["anchor"][i] for i in active]
            start = time.perf_counter()
            obs, rewards, _dones, step_infos = envs.step(actions)
            t_env += time.perf_counter() - start
            valid_action = np.array([bool(step_infos[i].get("is_action_valid", False)) for i in active])
            invalid += int((~valid_action).sum())
            for i in active:
                episode_return[i] += rewards[i]
                lengths[i] += 1
                won[i] |= bool(step_infos[i].get("won", False))
                if step_infos[i].get("traj_valid") is False:
                    traj_valid[i] = False
            out.non_tensor_batch.update(
                {
                    "uid": envs.uid[active],
                    "traj_uid": envs.traj_uid[active],
                    "step_index": np.full(active.size, turn, dtype=np.int64),
                    "anchor_obs": _object_array(anchors),
                    "step_reward": rewards[active].astype(np.float64),
                    "is_action_valid": valid_action,
                    "data_source": np.array([envs.env_name] * active.size, dtype=object),
                }
            )
            step_batches.append(out)
            row_instance.append(active)
        batch = concat_prompt_batches(step_batches, self.pad_token_id)
        rows = np.concatenate(row_instance)
        batch.non_tensor_batch["episode_return"] = episode_return[rows]
        batch.non_tensor_batch["won"] = won[rows]
        batch.non_tensor_batch["reward_valid"] = traj_valid[rows]
        batch.non_tensor_batch["instance"] = rows.astype(np.int64)
        reward = batch.non_tensor_batch["step_reward"] if self.reward_mode == "step" else episode_return[rows]
        batch.batch["token_level_scores"] = place_on_last_token(
            torch.as_tensor(np.asarray(reward, np.float64)), batch.batch["response_mask"]
        )
        metrics = episode_metrics(envs.env_name, episode_return, won, lengths, traj_valid, invalid, int(rows.size))
        metrics[f"env/{envs.env_name}/prompt_truncated_frac"] = truncated / max(total_prompts, 1)
        # tool calls per played turn, and the share of turns with at least one (total_prompts = turns played)
        metrics[f"env/{envs.env_name}/tool_calls_per_turn"] = tool_calls / max(total_prompts, 1)
        metrics[f"env/{envs.env_name}/tool_call_turn_rate"] = tool_turns / max(total_prompts, 1)
        metrics["timing_s/env_step"] = t_env
        if self.reward_scorer is not None:  # custom_reward_function: the user's rewards replace the environments'
            start = time.perf_counter()
            metrics.update(self.reward_scorer(batch, step))
            metrics["timing_s/reward"] = time.perf_counter() - start
        return batch, metrics


def _object_array(values: List[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def place_on_last_token(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B, R]`` float32 zeros with ``values[b]`` on row ``b``'s last response token (column 0 for an empty
    response, whose mask makes it inert)."""
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    last = (response_mask.sum(-1) - 1).clamp(min=0).long()
    scores[torch.arange(len(values)), last] = values.to(torch.float32)
    return scores


def episode_metrics(
    env_name: str,
    episode_return: np.ndarray,
    won: np.ndarray,
    lengths: np.ndarray,
    traj_valid: np.ndarray,
    invalid_actions: int,
    rows: int,
) -> Dict[str, float]:
    """Per-environment episode statistics: success rate, return, length (turns), invalid-action rate (over all
    played steps), invalid (errored) trajectories, rows produced."""
    prefix = f"env/{env_name}"
    return {
        f"{prefix}/success_rate": float(won.mean()),
        f"{prefix}/episode_return/mean": float(episode_return.mean()),
        f"{prefix}/episode_return/max": float(episode_return.max()),
        f"{prefix}/episode_return/min": float(episode_return.min()),
        f"{prefix}/episode_length/mean": float(lengths.mean()),
        f"{prefix}/invalid_action_rate": invalid_actions / max(int(lengths.sum()), 1),
        f"{prefix}/invalid_trajectories": float((~traj_valid).sum()),
        f"{prefix}/rows": float(rows),
    }
