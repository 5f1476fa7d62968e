"""The router on the driver: route and rewrite before generation, cost and advantages after the reward, dual ascent.

``RayPPOTrainer`` calls, per step (``docs/router.md``, from "Router head" to "Lagrangian budget")::

    logits = actor_rollout_wg.compute_router_logits(prompts)          # original prompts, [B, 3]
    controller.route(batch, logits, validate)                           # sample per copy, rewrite, re-tokenise
    ... generate, reward ...
    metrics = controller.score(batch, step, validate)                   # cost, r_router, router advantages, λ
    actor_rollout_wg.update_router(batch)                               # router GRPO step (worker)

Batch fields written (names as in ``docs/router.md``): ``router_action`` int64 [B], ``router_log_prob`` [B],
``router_logits`` [B, 3], ``router_input_ids/attention_mask/position_ids`` (the original prompt), ``router_cost`` [B],
``router_token_level_rewards`` [B, R], ``router_advantages`` [B], ``router_target_action_id`` [B] (−1 = no weak
label), ``router_route_advantages`` [B, 3] (stratified routes), ``router_value_target`` [B] (``router.loss_mode=value``;
NaN for unscored rows); non-tensor ``tool_families`` (per-row {tool name: family}). With ``router.loss_mode=value``
``router_logits`` are the policy's, ``(b + h − λ·c̄)/τ`` of the head's output ``h`` (:meth:`RouterController.policy_logits`).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from verl.router import RouterAction, parse_other_as, target_action_ids
from verl.router.cost import CostWeights, compute_costs
from verl.router.families import load_tool_family_file, row_tool_families
from verl.router.head import ROUTE_SAMPLING_MODES, sample_actions, stratified_actions
from verl.router.lagrangian import LagrangeMultiplier
from verl.utils.reward_score.tool_formats import resolve_tool_format
from verl.utils.torch_functional import zero_variance_group_fraction
from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS
from verl.router.loss import (
    ROUTE_ADV_NORMS,
    compute_route_advantages,
    compute_router_advantages,
    compute_router_rewards,
    policy_expected_value,
    router_batch_metrics,
    router_token_level_rewards,
)
from verl.router.rewrite import rewrite_batch, tokenize_prompts
from verl.router.value import (
    LOSS_MODES,
    VALUE_FITS,
    RouteValueBaseline,
    policy_baseline,
    value_policy_logits,
    value_targets,
)

logger = logging.getLogger(__name__)

PROMPT_KEYS = ("input_ids", "attention_mask", "position_ids")
UPDATE_KEYS = (
    "router_input_ids",
    "router_attention_mask",
    "router_position_ids",
    "router_action",
    "router_advantages",
    "router_route_advantages",
    "router_target_action_id",
    "router_value_target",
)  # what update_router reads


class RouterController:
    """Driver-side router state: the Lagrange multiplier, the tool-family overrides and the sampling generator.

    Args:
        router_cfg: the ``router`` config section.
        data_cfg: the ``data`` section (``max_prompt_length``, ``truncation``).
        tokenizer: the actor tokenizer (re-tokenising rewritten prompts, decoding responses for the cost).
        seed: seed of the route-sampling generator (reproducible routes; saved in checkpoints).
    """

    def __init__(self, router_cfg, data_cfg, tokenizer, seed: int = 1) -> None:
        self.cfg = router_cfg
        self.data_cfg = data_cfg
        self.tokenizer = tokenizer
        self.lagrange = LagrangeMultiplier.from_config(router_cfg)
        self.weights = CostWeights.from_config(router_cfg.cost_weights)
        self.other_as = parse_other_as(router_cfg.other_as)
        self.tool_format = resolve_tool_format(data_cfg.tool_format, tokenizer)  # the reward's reading of calls
        path = router_cfg.tool_family_file
        self.family_overrides = load_tool_family_file(path) if path else None
        self.generator = torch.Generator().manual_seed(int(seed))
        if router_cfg.actor_reward not in ("task", "router"):
            raise ValueError(f"router.actor_reward must be 'task' or 'router', got {router_cfg.actor_reward!r}")
        if router_cfg.route_sampling not in ROUTE_SAMPLING_MODES:
            raise ValueError(
                f"router.route_sampling must be one of {ROUTE_SAMPLING_MODES}, got {router_cfg.route_sampling!r}"
            )
        self.stratified = router_cfg.route_sampling == "stratified"
        if router_cfg.route_adv_norm not in ROUTE_ADV_NORMS:
            raise ValueError(
                f"router.route_adv_norm must be one of {ROUTE_ADV_NORMS}, got {router_cfg.route_adv_norm!r}"
            )
        if router_cfg.loss_mode not in LOSS_MODES:
            raise ValueError(f"router.loss_mode must be one of {LOSS_MODES}, got {router_cfg.loss_mode!r}")
        self.value_mode = router_cfg.loss_mode == "value"  # the head estimates route values (verl/router/value.py)
        if self.value_mode and not self.stratified:
            raise ValueError("router.loss_mode=value needs router.route_sampling=stratified")
        self.route_values = RouteValueBaseline(float(router_cfg.value_baseline_decay))
        if router_cfg.value_fit not in VALUE_FITS:
            raise ValueError(f"router.value_fit must be one of {VALUE_FITS}, got {router_cfg.value_fit!r}")

    def value_baseline(self) -> torch.Tensor:
        """``b`` [3] float64 of the policy and the head's targets: the running route means, or zeros with
        ``router.value_fit=ridge`` (the ridge head predicts the whole task reward, intercept included)."""
        return policy_baseline(self.route_values.reward, self.cfg.value_fit)

    def policy_logits(self, head_output: torch.Tensor) -> torch.Tensor:
        """The routing policy's logits from the head's output ``[B, 3]``: the output itself with
        ``router.loss_mode=pg``; with ``value``, ``(b + h − λ·c̄) / τ`` (:func:`verl.router.value.value_policy_logits`
        with the running route baselines and the current λ)."""
        if not self.value_mode:
            return head_output
        return value_policy_logits(
            head_output,
            self.value_baseline(),
            self.route_values.cost,
            self.lagrange.value,
            float(self.cfg.value_temperature),
        )

    def route(self, batch, router_logits: torch.Tensor, validate: bool, actions: torch.Tensor | None = None) -> None:
        """Sample a route per row (greedy when validating and ``greedy_eval``), rewrite and re-tokenise its prompt.
        ``actions`` (int64 ``[B]``, e.g. :func:`verl.router.head.stratified_actions`) replaces the sampled routes;
        ``router_log_prob`` is then the policy's log-probability of the given route.

        ``batch`` must hold ``raw_prompt`` (``data.return_raw_chat=true``); it is modified in place: the prompt
        tensors become the rewritten prompt, the originals move to ``router_*``.

        Raises:
            KeyError: ``raw_prompt`` missing from the batch.
        """
        if "raw_prompt" not in batch.non_tensor_batch:
            raise KeyError("router.enable needs raw prompts in the batch: set data.return_raw_chat=true")
        if "tools" in batch.non_tensor_batch:  # the rewrite edits the system prompt's tools block, not this column
            raise ValueError(
                "router.enable: the data has a 'tools' column (tools rendered by the chat template); the "
                "router rewrites the RLLA system prompt's tools block and would drop that column: use "
                "data whose tools are in the system prompt, or router.enable=false"
            )
        greedy = validate and bool(self.cfg.greedy_eval)
        if actions is None:
            actions, log_probs = sample_actions(router_logits.float(), greedy=greedy, generator=self.generator)
        else:
            actions = actions.long()
            log_probs = torch.log_softmax(router_logits.float(), -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        raw = batch.non_tensor_batch["raw_prompt"]
        extra = batch.non_tensor_batch.get("extra_info", [None] * len(batch))
        families = [row_tool_families(list(raw[i]), extra[i], self.family_overrides) for i in range(len(batch))]
        messages = rewrite_batch(
            [list(p) for p in raw], actions, families, filter_tools=bool(self.cfg.filter_tools), other_as=self.other_as
        )
        tokens = tokenize_prompts(
            self.tokenizer, messages, int(self.data_cfg.max_prompt_length), truncation=self.data_cfg.truncation
        )
        for key in PROMPT_KEYS:
            batch.batch[f"router_{key}"] = batch.batch[key]
            batch.batch[key] = tokens[key]
        batch.batch["router_action"] = actions
        if self.cfg.answer_forbids_tool_calls:  # the ANSWER route removes the tools and blocks a call at decoding
            batch.batch[FORBID_TOOL_CALLS] = actions == int(RouterAction.ANSWER)
        batch.batch["router_log_prob"] = log_probs
        batch.batch["router_logits"] = router_logits.float()
        families_arr = np.empty(len(families), dtype=object)
        families_arr[:] = families
        batch.non_tensor_batch["tool_families"] = families_arr
        if "router_target_action" in batch.non_tensor_batch:
            batch.batch["router_target_action_id"] = target_action_ids(batch.non_tensor_batch["router_target_action"])

    def score(self, batch, step: int, validate: bool = False) -> dict:
        """Tool cost, ``r_router = r_task − λ·cost``, router GRPO advantages (grouped by ``uid``); λ's dual step
        during training. Needs ``token_level_scores`` and ``response_mask``; returns the router metrics.

        Rows the reward could not score (``reward_valid`` false) get router advantage 0 and stay out of their group's
        statistics and of ``router/mean_task_reward`` (their task reward is a placeholder 0), as the LM's advantage
        does; their tool cost still counts towards λ (the calls were made). ``router/route_entropy`` and
        ``router/route_acc_vs_weak_label`` are taken at routing time (the update logs its own ``router/entropy`` and
        ``router/acc_vs_weak_label``, argmax-based, after the update's forward).

        ``router/policy_cost`` and ``router/policy_task_reward`` are what the router's policy spends and earns: the
        batch means when routes were sampled from it; with ``router.route_sampling=stratified`` the expectation
        ``mean_g Σ_a π_g(a)·mean cost (reward) of group g's route-a copies`` (:func:`policy_expected_value`), since the
        batch itself was routed uniformly. λ's dual step reads ``router/policy_cost``. Stratified batches also get
        ``router_route_advantages`` [B, 3] (:func:`compute_route_advantages`) for the head's update."""
        response_mask = batch.batch["response_mask"]
        texts = [
            self.tokenizer.decode(ids[mask.bool()], skip_special_tokens=True)
            for ids, mask in zip(batch.batch["responses"], response_mask)
        ]
        nt = batch.non_tensor_batch  # executed calls (multi-turn rollout): their observation tokens and seconds
        costs, usage = compute_costs(
            texts,
            list(nt["tool_families"]),
            self.weights,
            self.other_as,
            self.tool_format,
            obs_tokens=nt.get("tool_obs_tokens"),
            seconds=nt.get("tool_seconds"),
        )
        task = batch.batch["token_level_scores"].sum(-1).float()
        r_router = compute_router_rewards(task, costs, self.lagrange.value)
        tlr = router_token_level_rewards(r_router, response_mask)
        batch.batch["router_cost"] = costs
        batch.batch["router_token_level_rewards"] = tlr
        valid = np.asarray(batch.non_tensor_batch.get("reward_valid", np.ones(len(batch), dtype=bool)), dtype=bool)
        advantages = torch.zeros(len(batch), dtype=tlr.dtype)
        if valid.any():
            keep = torch.as_tensor(np.flatnonzero(valid))
            advantages[keep] = compute_router_advantages(
                tlr[keep], response_mask[keep], batch.non_tensor_batch["uid"][valid]
            ).to(tlr.dtype)
        batch.batch["router_advantages"] = advantages
        actions = batch.batch["router_action"]
        metrics = router_batch_metrics(actions, costs, task, r_router, usage["used_any_tool"])
        for key, name in (("obs_tokens", "mean_obs_tokens"), ("seconds", "mean_tool_seconds")):  # executed calls
            if key in usage:
                metrics[f"router/{name}"] = float(usage[key].mean())
        task_mean = float(task[torch.as_tensor(valid)].mean()) if valid.any() else 0.0
        metrics["router/mean_task_reward"] = task_mean
        # groups (a prompt's n > 1 scored copies) whose tool cost varies: only there can lambda move a
        # group-normalised advantage; where every copy pays the same cost, r_task - lambda * cost shifts the group by
        # a constant. Not logged when no group has two scored copies (n = 1, greedy validation).
        uids = batch.non_tensor_batch["uid"][valid]
        if len(set(uids.tolist())) < int(valid.sum()):
            metrics["router/mixed_cost_groups_frac"] = 1.0 - zero_variance_group_fraction(
                costs[torch.as_tensor(valid)].float(), uids
            )
        probs = torch.softmax(batch.batch["router_logits"], dim=-1)
        metrics["router/route_entropy"] = float(-(probs * probs.clamp_min(1e-12).log()).sum(-1).mean())
        for action in RouterAction:  # the policy's mean probability of each route (= frac_* in expectation)
            metrics[f"router/policy_prob_{action.name.lower()}"] = float(probs[:, int(action)].mean())
        if "router_target_action_id" in batch.batch.keys():
            target = batch.batch["router_target_action_id"]
            labelled = target >= 0
            if bool(labelled.any()):
                metrics["router/route_acc_vs_weak_label"] = (
                    (actions[labelled] == target[labelled]).float().mean().item()
                )
        if validate:
            return {f"val/{k}": v for k, v in metrics.items()}
        if self.value_mode:  # running route means first, then the head's targets relative to them
            valid_t = torch.as_tensor(valid)
            metrics.update(self.route_values.update(task, costs, actions, valid_t))
            # how much the head tells prompts apart: the spread over rows of its SEARCH − ANSWER value difference
            gap = (batch.batch["router_logits"][:, 1] - batch.batch["router_logits"][:, 0]).float()
            metrics["router/value_gap_std"] = (
                float(gap.std() * float(self.cfg.value_temperature)) if len(gap) > 1 else 0.0
            )
            batch.batch["router_value_target"] = value_targets(task, actions, self.value_baseline(), valid_t)
        policy_cost, policy_task = costs.float().mean().item(), task_mean
        if self.stratified:  # every route for every prompt: advantages of all routes; λ sees the policy's cost
            uid_all = batch.non_tensor_batch["uid"]
            valid_t = torch.as_tensor(valid)
            batch.batch["router_route_advantages"] = compute_route_advantages(
                r_router, actions, uid_all, valid_t, norm=self.cfg.route_adv_norm
            )
            policy_cost = policy_expected_value(costs.float(), actions, uid_all, probs)
            policy_task = policy_expected_value(task, actions, uid_all, probs, valid_t)
            policy_task = task_mean if np.isnan(policy_task) else policy_task
        metrics["router/policy_cost"] = policy_cost
        metrics["router/policy_task_reward"] = policy_task
        metrics["router/budget"] = self.lagrange.budget
        metrics.update(self.lagrange.update(policy_cost, step, policy_task))
        if self.cfg.actor_reward == "router":
            batch.batch["token_level_scores"] = tlr
        return metrics

    # ----------------------------------------------------------------------------- the trainer's step hooks
    def expand(self, batch, n: int, validate: bool, worker_group):
        """Before generation, in place of the plain ``n``-fold repeat: router logits once per prompt from the actor
        (``worker_group.compute_router_logits``), the repeat, then a route per copy and the prompt rewrite
        (:meth:`route`): sampled from the policy, or with ``router.route_sampling=stratified`` during training every
        route for every prompt (:func:`verl.router.head.stratified_actions`). Returns the repeated, routed batch."""
        prompts = batch.select(batch_keys=list(PROMPT_KEYS), non_tensor_batch_keys=[])
        logits = self.policy_logits(worker_group.compute_router_logits(prompts).batch["router_logits"])
        num_prompts = len(batch)
        batch = batch.repeat(repeat_times=n, interleave=True)
        actions = None
        if self.stratified and not validate:  # every route for every prompt (router.route_sampling=stratified)
            actions = stratified_actions(num_prompts, n, generator=self.generator)
        self.route(batch, logits.repeat_interleave(n, dim=0), validate=validate, actions=actions)
        return batch

    def update(self, batch, worker_group) -> dict:
        """After the actor update: the router head's own GRPO update on the worker (``update_router`` with the
        routed prompts, actions, advantages and weak labels); returns its metrics (means over micro-batches)."""
        keys = [k for k in UPDATE_KEYS if k in batch.batch.keys()]
        out = worker_group.update_router(batch.select(batch_keys=keys, non_tensor_batch_keys=[]))
        return {
            k: float(np.mean(v)) if isinstance(v, (list, tuple, np.ndarray)) else v
            for k, v in out.meta_info.get("metrics", {}).items()
        }

    def state_dict(self) -> dict:
        """λ trajectory state, the route-sampling RNG and the running route values (saved in ``data.pt``)."""
        return {
            "lagrange": self.lagrange.state_dict(),
            "generator": self.generator.get_state(),
            "route_values": self.route_values.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; a checkpoint from before ``route_values`` existed keeps them unobserved (a
        value-mode run cannot have written it).

        Raises: ValueError: ``router.loss_mode=value`` resuming from a checkpoint without route values."""
        self.lagrange.load_state_dict(state["lagrange"])
        self.generator.set_state(state["generator"])
        if "route_values" in state:
            self.route_values.load_state_dict(state["route_values"])
        elif self.value_mode:
            raise ValueError(
                "router.loss_mode=value: the checkpoint holds no route values (it was trained with "
                "router.loss_mode=pg, whose head is a policy, not a value estimate)"
            )


__all__ = ["RouterAction", "RouterController"]
