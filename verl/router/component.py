"""The router inside the actor worker: head, optimizer, logits and update (spec "Router head", "Router policy update").

``RouterComponent`` is owned by ``ActorRolloutRefWorker`` when ``router.enable``; the worker's ``compute_router_logits``
and ``update_router`` methods delegate here. The router reads the ORIGINAL prompt (before the route's rewrite), which
the driver keeps in the batch as ``router_input_ids`` / ``router_attention_mask`` / ``router_position_ids`` (falling
back to ``input_ids`` / ``attention_mask`` / ``position_ids`` for a prompt-only batch).

With several data-parallel workers the head is replicated (it is tiny): gradients are averaged over ranks before the
step, so every replica stays identical.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from verl.router.head import RouterHead, compute_router_features, compute_router_logits
from verl.router.loss import compute_router_loss
from verl.router.value import RidgeRouteValues, compute_router_value_loss

logger = logging.getLogger(__name__)

PROMPT_KEYS = ("input_ids", "attention_mask", "position_ids")


def router_prompt_tensors(batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The original-prompt tensors of a batch: ``router_*`` keys when present, else the plain prompt keys."""
    keys = batch.keys()
    if all(f"router_{k}" in keys for k in PROMPT_KEYS):
        return tuple(batch[f"router_{k}"] for k in PROMPT_KEYS)
    return tuple(batch[k] for k in PROMPT_KEYS)


class RouterComponent:
    """Router head + optimizer living next to the actor module.

    Args:
        router_cfg: the ``router`` config section (head, pooling, detach_backbone, entropy_coeff, sup_coeff,
            optim.{lr, shared}, micro_batch_size).
        hidden_size: the actor LM's hidden size.
        device: where the actor module lives.
        actor_optimizer: the actor's optimizer, used when ``router.optim.shared`` (the head becomes one more param
            group of it); otherwise the head gets its own AdamW.
    """

    def __init__(self, router_cfg, hidden_size: int, device: str, actor_optimizer=None) -> None:
        self.cfg = router_cfg
        self.device = device
        self.head = RouterHead(
            hidden_size,
            head=router_cfg.head,
            pooling=router_cfg.pooling,
            detach_backbone=bool(router_cfg.detach_backbone),
            input_norm=router_cfg.input_norm,
        ).to(device)
        optim_cfg = router_cfg.optim
        lr = float(optim_cfg.lr)
        self.shared = bool(optim_cfg.shared)
        if self.shared:
            if actor_optimizer is None:
                raise ValueError("router.optim.shared=true needs the actor's optimizer (this worker has no actor)")
            actor_optimizer.add_param_group({"params": list(self.head.parameters()), "lr": lr, "weight_decay": 0.0})
            self.optimizer = actor_optimizer
        else:
            self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=lr, weight_decay=0.0)
        self.micro_batch_size = int(router_cfg.micro_batch_size)
        # router.value_fit=ridge: the head's output layer is the closed-form ridge fit of every observation so far
        self.ridge = (
            RidgeRouteValues(hidden_size, float(router_cfg.value_ridge_alpha))
            if router_cfg.loss_mode == "value" and router_cfg.value_fit == "ridge"
            else None
        )

    def _per_prompt(self, batch, fn) -> torch.Tensor:
        """``fn(input_ids, attention_mask, position_ids)`` over the distinct original prompts of ``batch`` in
        micro-batches, its rows spread back to every row of the batch: a group's ``rollout.n`` copies of a prompt go
        through the backbone once (with gradients, their sums over the copies, as if each row had its own forward)."""
        input_ids, attention_mask, position_ids = router_prompt_tensors(batch)
        rows = torch.cat([input_ids, attention_mask.to(input_ids.dtype), position_ids.to(input_ids.dtype)], dim=-1)
        unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
        if unique.shape[0] < rows.shape[0]:
            first = torch.full((unique.shape[0],), rows.shape[0], dtype=torch.long)
            first = first.scatter_reduce(0, inverse, torch.arange(rows.shape[0]), reduce="amin")
            input_ids, attention_mask, position_ids = input_ids[first], attention_mask[first], position_ids[first]
        out = []
        for start in range(0, input_ids.shape[0], self.micro_batch_size):
            sl = slice(start, start + self.micro_batch_size)
            out.append(
                fn(input_ids[sl].to(self.device), attention_mask[sl].to(self.device), position_ids[sl].to(self.device))
            )
        values = torch.cat(out, dim=0)
        return values[inverse.to(values.device)] if unique.shape[0] < rows.shape[0] else values

    def logits(self, module: torch.nn.Module, batch, grad: bool = False) -> torch.Tensor:
        """``router_logits`` [B, 3] float32 for the original prompts of ``batch`` (a TensorDict), once per distinct
        prompt (:meth:`_per_prompt`). With ``grad`` (the update) each distinct prompt's features also enter the head's
        running input statistics (``router.input_norm=running``) before its micro-batch is normalised."""
        with torch.set_grad_enabled(grad):
            return self._per_prompt(
                batch, lambda ids, mask, pos: compute_router_logits(module, self.head, ids, mask, pos, observe=grad)
            )

    def update(self, module: torch.nn.Module, batch) -> dict:
        """One router step: ``L = −mean(log π(a)·A) − c_H·H + c_sup·CE`` over the whole batch (spec eq. in
        "Router policy update"); reads ``router_action`` [B], ``router_advantages`` [B] and, when present,
        ``router_target_action_id`` [B] (−1 = no label) and ``router_route_advantages`` [B, 3] (stratified routes:
        the policy term becomes ``−mean Σ_a π(a)·A(a)``). With ``router.loss_mode=value`` the loss is instead the
        squared error of the head's value of each copy's route against ``router_value_target`` [B]
        (:func:`verl.router.value.compute_router_value_loss`). Returns router metrics (loss terms, grad norm)."""
        self.head.train()
        if self.ridge is not None:
            return self._ridge_update(module, batch)
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.logits(module, batch, grad=True)
        if self.cfg.loss_mode == "value":  # the head regresses each copy's task reward (verl/router/value.py)
            if "router_value_target" not in batch.keys():
                raise KeyError(
                    "router.loss_mode=value: the batch has no router_value_target (written by "
                    "RouterController.score on training steps)"
                )
            loss, metrics = compute_router_value_loss(
                logits, batch["router_action"].to(self.device), batch["router_value_target"].to(self.device)
            )
            return self._step(loss, metrics)
        target = batch["router_target_action_id"].to(self.device) if "router_target_action_id" in batch.keys() else None
        route_adv = (
            batch["router_route_advantages"].to(self.device) if "router_route_advantages" in batch.keys() else None
        )  # router.route_sampling=stratified: the expectation over routes replaces log π(a)·A
        loss, metrics = compute_router_loss(
            logits,
            batch["router_action"].to(self.device),
            batch["router_advantages"].to(self.device).float(),
            target_actions=target,
            entropy_coeff=float(self.cfg.entropy_coeff),
            sup_coeff=float(self.cfg.sup_coeff),
            route_advantages=route_adv,
            route_pg=self.cfg.route_pg,
        )
        return self._step(loss, metrics)

    def _ridge_update(self, module: torch.nn.Module, batch) -> dict:
        """``router.value_fit=ridge``: every scored copy of the batch (its pooled features, route and
        ``router_value_target``; NaN targets skipped) joins the ridge sums, summed over data-parallel ranks; the head's
        input statistics are then set from those sums (:meth:`RidgeRouteValues.feature_stats`) and its output layer
        to the closed-form fit (:class:`verl.router.value.RidgeRouteValues`) — so every replica holds the same head,
        and the fit depends only on the observations so far. The ``router/value_*`` metrics are those of the head that
        routed this batch, before the refit (out of sample for prompts not seen before). The trainer's batch checks
        make ``train_batch_size × rollout.n`` divide the world size, so no dispatcher padding row enters the sums."""
        if "router_value_target" not in batch.keys():
            raise KeyError(
                "router.loss_mode=value: the batch has no router_value_target (written by "
                "RouterController.score on training steps)"
            )
        features = self._per_prompt(
            batch, lambda ids, mask, pos: compute_router_features(module, self.head, ids, mask, pos)
        )
        actions = batch["router_action"].long()
        targets = batch["router_value_target"].float()
        with torch.no_grad():
            before = self.head.head_of_pooled(features)
            _, metrics = compute_router_value_loss(before.cpu(), actions.cpu(), targets.cpu())
        inc = RidgeRouteValues.increments(features, actions, targets)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            for key, value in inc.items():  # on the module's device: NCCL reduces CUDA tensors only
                value = value.to(self.device)
                dist.all_reduce(value, op=dist.ReduceOp.SUM)
                inc[key] = value.cpu()
        self.ridge.add(inc)
        self.ridge.set_head(self.head)
        metrics = {k: float(v) for k, v in metrics.items()}
        metrics["router/value_ridge_rows"] = float(self.ridge.count.sum())
        return metrics

    def _step(self, loss: torch.Tensor, metrics: dict) -> dict:
        """Backward, average gradients over data-parallel ranks, clip at ``router.grad_clip``, step (skipped on a
        non-finite gradient norm); returns ``metrics`` as floats with ``router/grad_norm``."""
        loss.backward()
        params = [p for p in self.head.parameters() if p.grad is not None]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            for p in params:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm=float(self.cfg.grad_clip))
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        else:
            logger.warning("router update skipped: non-finite grad norm %s", grad_norm.item())
        self.optimizer.zero_grad(set_to_none=True)
        metrics = {k: float(v) for k, v in metrics.items()}
        metrics["router/grad_norm"] = float(grad_norm)
        return metrics

    def state_dict(self) -> dict:
        """Head weights and (own) optimizer state (a shared optimizer is saved with the actor's); with
        ``router.value_fit=ridge`` the ridge sums too."""
        state = {"head": self.head.state_dict()}
        if not self.shared:
            state["optimizer"] = self.optimizer.state_dict()
        if self.ridge is not None:
            state["ridge"] = self.ridge.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore the head and its own optimizer's state (moments, step). The learning rate is the config's
        ``router.optim.lr`` (AdamW's saved param groups would bring back the checkpoint's: a changed lr is applied on
        resume, and logged). With ``router.value_fit=ridge`` also the ridge sums (their absence is refused).

        Raises: ValueError: a ridge run resuming from a checkpoint without ridge sums."""
        self.head.load_state_dict(state["head"])
        if self.ridge is not None:
            if "ridge" not in state:
                raise ValueError(
                    "router.value_fit=ridge: the checkpoint holds no ridge statistics (it was trained "
                    "with router.value_fit=sgd or loss_mode=pg)"
                )
            self.ridge.load_state_dict(state["ridge"])
        if not self.shared and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
            lr = float(self.cfg.optim.lr)
            for group in self.optimizer.param_groups:
                if group["lr"] != lr:
                    logger.info("router.optim.lr=%g replaces the checkpoint's %g", lr, group["lr"])
                    group["lr"] = lr
