"""Learner and weight broadcaster of the asynchronous mode.

Design: ``docs/async.md``, sections "Learner", "Weight broadcast", "Checkpoints and resume" and "Metrics" (takes
packed batches of RlExamples, updates the model with a PPO-style loss, and hands the new weights with a new policy
version to the broadcaster).

One :meth:`Learner.step` is one optimizer step on one packed :class:`~verl.async_rl.types.RlExample` with the
synchronous trainer's loss code: the registered policy loss (``actor.policy_loss.loss_mode``,
PPO's clipped surrogate by default), ``core_algos.agg_loss`` for the entropy term, ``dp_actor.MiniBatchScale`` for
micro-batch weights and ``dp_actor.clipped_optimizer_step``. The PPO "old" log-probs are the inference server's
(``RlExample.policy_logprobs``): the behaviour policy that sampled the tokens, whatever its age.

The forward: when every segment is one prompt then one response (single-turn envs), the segments are unpacked into
verl's padded actor rows and go through the synchronous actor's own forward (``DataParallelPPOActor``, with the
model's ``use_shared_prompt`` / ``use_remove_padding`` / ``use_fused_kernels``: with the shared-prompt layout the
``n`` rollouts of a prompt compute it once). Otherwise (multi-turn segments) the packed rows get a block-diagonal causal
mask ``[B, 1, L, L]`` (:func:`~verl.async_rl.batcher.segment_attention_mask`) and per-segment ``position_ids``, so a
segment attends only to itself. Both give the log-prob of token ``t`` from the logits at ``t - 1`` at its packed
position; the first token of a segment has none and is left out of the loss (it is a prompt token in every env here).

Checkpoints (``{dir}/global_step_{version}``): ``learner.pt`` (model + optimizer state, policy version) published
with the manifest utilities of ``verl.utils.checkpoint_manifest`` (atomic; a killed save is ignored on resume).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from verl.async_rl.batcher import segment_attention_mask
from verl.async_rl.types import RlExample
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.rollout_corr import check_correction_settings, compute_rollout_correction
from verl.utils import checkpoint_manifest as manifest
from verl.utils.model_utils import build_optimizer
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from verl.workers.actor.dp_actor import DataParallelPPOActor, MiniBatchScale, clipped_optimizer_step
from verl.workers.config import ActorConfig, worker_section

logger = logging.getLogger(__name__)

__all__ = [
    "Learner",
    "WeightBroadcaster",
    "make_learner_actor",
    "packed_logprobs",
    "scatter_response_values",
    "single_turn_rows",
]

_CKPT_FILE = "learner.pt"


def packed_logprobs(
    model: torch.nn.Module,
    example: RlExample,
    temperature: float = 1.0,
    calculate_entropy: bool = False,
    needed: Optional[torch.Tensor] = None,
):
    """Per-token log-probs of packed rows, aligned like ``RlExample.policy_logprobs``.

    Args: ``model`` an HF causal LM; ``example`` (only ``input_ids``, ``segment_ids``, ``position_ids`` are read);
        ``temperature``: logits are divided by it (as the inference server samples); ``needed`` ([B, L] bool or
        None = every position): the tokens whose log-prob is wanted, e.g. the loss mask. The vocabulary projection is
        computed only at the positions that predict a needed token in some row (``logits_to_keep``: with a 49k
        vocabulary and ~700-token RLLA prompts it is most of a full-logits forward's cost and memory).
    Returns: ``(log_probs [B, L] float32, entropy [B, L] float32 or None)``; position ``t`` holds
        ``log p(input_ids[b, t] | its segment's tokens before t)`` (the entropy of that distribution) where computed,
        0 at ``t = 0`` and at positions no row needs; differentiable.
    """
    input_ids = example.input_ids.long()
    batch, length = input_ids.shape
    mask = segment_attention_mask(example.segment_ids)[:, None]  # [B, 1, L, L] bool, True = attend
    if needed is None:
        keep = torch.arange(length - 1, device=input_ids.device)
    else:
        keep = torch.nonzero(needed[:, 1:].any(dim=0)).flatten()  # predictor positions t-1 of needed tokens t
    output = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=example.position_ids.long(),
        use_cache=False,
        logits_to_keep=keep,
    )
    logits = output.logits.float() / float(temperature)  # [B, K, V]; position keep[k] predicts token keep[k] + 1
    log_probs = torch.zeros(batch, length, dtype=torch.float32, device=input_ids.device)
    log_probs = log_probs.index_copy(1, keep + 1, logprobs_from_logits(logits, input_ids[:, keep + 1]))
    entropy = None
    if calculate_entropy:
        entropy = torch.zeros(batch, length, dtype=torch.float32, device=input_ids.device)
        entropy = entropy.index_copy(1, keep + 1, entropy_from_logits(logits))
    return log_probs, entropy


def single_turn_rows(example: RlExample):
    """The segments of ``example`` as verl's padded actor rows, when every segment is one prompt then one response
    (no loss token before the first generated one, all generated tokens contiguous to the segment's end), else None.

    Returns ``(rows, where)``: ``rows`` a dict of ``[S, P + R]`` int64 ``input_ids``/``attention_mask``/
    ``position_ids`` (prompts left-padded to the longest, responses right-padded) and ``responses`` ``[S, R]``, one row
    per segment in packing order; ``where`` ``(row, first response position, response length)`` per segment, to put
    per-response-token values back at their packed positions (:func:`scatter_response_values`). On these rows the
    synchronous actor's forward applies unchanged (``DataParallelPPOActor._forward_micro_batch``), its shared-prompt
    layout included: the ``n`` rollouts of a prompt then compute the prompt once.
    """
    prompts, responses, where = [], [], []
    loss = example.loss_mask
    for b in range(example.batch_size):
        segments = example.segment_ids[b]
        for k in torch.unique(segments[segments > 0]).tolist():
            positions = torch.nonzero(segments == k).flatten()
            start, end = int(positions[0]), int(positions[-1]) + 1
            generated = torch.nonzero(loss[b, start:end]).flatten()
            if generated.numel() == 0:
                continue  # nothing to train on in this segment
            first = start + int(generated[0])
            if first == start or not bool(loss[b, first:end].all()):
                return None  # a multi-turn segment (or one without a prompt): the packed path handles it
            prompts.append(example.input_ids[b, start:first].long())
            responses.append(example.input_ids[b, first:end].long())
            where.append((b, first, end - first))
    if not where:
        return None
    size, width_p, width_r = len(where), max(map(len, prompts)), max(map(len, responses))
    input_ids = torch.zeros(size, width_p + width_r, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        input_ids[i, width_p - len(prompt) : width_p] = prompt
        input_ids[i, width_p : width_p + len(response)] = response
        attention_mask[i, width_p - len(prompt) : width_p + len(response)] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    rows = dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        responses=input_ids[:, width_p:].clone(),
    )
    return {k: v.to(example.input_ids.device) for k, v in rows.items()}, where


def scatter_response_values(values: torch.Tensor, where, shape) -> torch.Tensor:
    """``[S, R]`` per-response-token values (:func:`single_turn_rows`' rows) at their packed positions of a ``shape``
    ``[B, L]`` tensor (zeros elsewhere); differentiable."""
    out = values.new_zeros(shape)
    rows = torch.cat([torch.full((n,), b, dtype=torch.long) for b, _, n in where])
    cols = torch.cat([torch.arange(first, first + n) for _, first, n in where])
    segs = torch.cat([torch.full((n,), s, dtype=torch.long) for s, (_, _, n) in enumerate(where)])
    index = torch.cat([torch.arange(n) for _, _, n in where])
    return out.index_put(
        (rows.to(out.device), cols.to(out.device)), values[segs.to(values.device), index.to(values.device)]
    )


def _loss_mask(example: RlExample) -> torch.Tensor:
    """Generated tokens that have a predictor inside their segment (``position_ids > 0``)."""
    return example.loss_mask & (example.position_ids > 0)


def _rows(example: RlExample, rows: slice) -> RlExample:
    return RlExample(**{k: (None if v is None else v[rows]) for k, v in example.as_dict().items()})


class Learner:
    """The policy under training (module docstring).

    Args:
        model_path: preset name, HF directory or hub id (``actor_rollout_ref.model.path``).
        actor_config: the ``actor_rollout_ref.actor`` config (dict or DictConfig): ``optim.{lr, betas,
            weight_decay}``, ``policy_loss``, ``clip_ratio*``, ``loss_agg_mode``, ``entropy_coeff``, ``grad_clip``,
            ``ppo_micro_batch_size_per_gpu`` (rows per micro-batch; None = the whole batch). ``use_kl_loss`` must be
            False (no reference policy in the async learner yet).
        temperature: the sampling temperature of the inference servers.
        checkpoint_dir: where :meth:`save_checkpoint` publishes; :meth:`resume` reads it.
        num_threads: ``torch.set_num_threads`` (None: unchanged). seed: ``torch.manual_seed``.
        rollout_correction: ``algorithm.rollout_correction`` settings (see :meth:`step`).
        layout: ``actor_rollout_ref.model``'s ``use_shared_prompt`` / ``use_remove_padding`` / ``use_fused_kernels``
            for the forward of single-turn segments (the synchronous actor's forward, :meth:`_log_probs`).

    Raises ValueError: ``use_kl_loss`` is set.
    """

    def __init__(
        self,
        model_path: str,
        actor_config: Mapping[str, Any] | DictConfig,
        temperature: float = 1.0,
        checkpoint_dir: Optional[str] = None,
        num_threads: Optional[int] = None,
        seed: int = 0,
        rollout_correction: Optional[Mapping[str, Any]] = None,
        layout: Optional[Mapping[str, Any]] = None,
    ):
        from transformers import AutoModelForCausalLM

        from verl.utils.model_presets import prepare_model

        if num_threads:
            torch.set_num_threads(int(num_threads))
        torch.manual_seed(int(seed))
        cfg = worker_section(
            actor_config if isinstance(actor_config, DictConfig) else OmegaConf.create(dict(actor_config)), ActorConfig
        )  # typed: a key the section leaves out is an error when read
        if cfg.use_kl_loss:
            raise ValueError("actor.use_kl_loss=True is not supported by the async learner (no reference policy)")
        self.config = cfg
        self.temperature = float(temperature)
        self.model = AutoModelForCausalLM.from_pretrained(prepare_model(model_path), dtype=torch.float32)
        self.optimizer = build_optimizer(self.model.parameters(), cfg.optim)
        self.policy_loss_fn = core_algos.get_policy_loss_fn(core_algos.policy_loss_mode(cfg))
        # the synchronous actor's forward for single-turn segments, with the model's layout switches
        # (``actor_rollout_ref.model.{use_shared_prompt, use_remove_padding, use_fused_kernels}``)
        for key in ("use_shared_prompt", "use_remove_padding", "use_fused_kernels"):
            setattr(cfg, key, bool((layout or {}).get(key, False)))
        self.forward_actor = DataParallelPPOActor(cfg, self.model)
        self.version = 0
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        # decoupled objective with rollout correction (``algorithm.rollout_correction``): see :meth:`step`
        corr = dict(rollout_correction or {})
        self.rollout_correction = corr if corr.get("rollout_is") or corr.get("rollout_rs") else None
        if self.rollout_correction is not None:
            check_correction_settings(**self.rollout_correction)

    # ------------------------------------------------------------------------------------------------ step
    def step(self, example: RlExample) -> Dict[str, float]:
        """One PPO optimizer step on ``example``; bumps :attr:`version` by one.

        The PPO "old" log-probs are the inference server's (the behaviour policy, whatever its age), unless
        ``rollout_correction`` is set: then the ratio is taken against the learner's own policy before the step
        (decoupled from the behaviour policy, as in the synchronous trainer where the old log-probs are recomputed) and
        the gap to the server's log-probs goes through :func:`verl.trainer.ppo.rollout_corr.compute_rollout_correction`
        (truncated importance weights and / or rejection masks; rejected tokens add nothing, the token normaliser
        keeps them), which is what keeps stale rollouts (``async.replay.max_age > 1``) usable; ``rollout_corr/*``
        metrics are added.

        Returns metrics: ``actor/pg_loss``, ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``,
        ``actor/entropy``, ``actor/grad_norm``, ``actor/skipped_steps``, ``actor/lr``; ``learner/logprob_gap``
        (mean of inference − learner log-prob over the loss tokens, before the update), ``learner/logprob_abs_gap``
        (mean absolute difference), ``learner/tokens``, ``learner/loss_tokens``, ``learner/step_time_s``,
        ``learner/policy_version`` (the new version).
        Raises ValueError: the example has no loss token.
        """
        start = time.perf_counter()
        cfg = self.config
        loss_agg_mode = cfg.loss_agg_mode
        entropy_coeff = float(cfg.entropy_coeff)
        full_mask = _loss_mask(example)
        n_loss = int(full_mask.sum())
        if n_loss == 0:
            raise ValueError("RlExample has no generated token to train on (loss_mask is empty after segment starts)")
        scale = MiniBatchScale(full_mask, loss_agg_mode)
        micro = int(cfg.ppo_micro_batch_size_per_gpu or example.batch_size)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        stats: Dict[str, float] = {}
        gap = abs_gap = 0.0
        for first in range(0, example.batch_size, micro):
            part = _rows(example, slice(first, first + micro))
            mask = _loss_mask(part)
            if not bool(mask.any()):
                continue
            log_prob, entropy = self._log_probs(part, mask)
            old = part.policy_logprobs
            weights, corr_metrics = None, {}
            if self.rollout_correction is not None:  # ratio against the learner's policy, IS weights for staleness
                rollout_lp, old = old, log_prob.detach()
                weights, keep, corr_metrics = compute_rollout_correction(
                    old, rollout_lp, mask.to(old.dtype), **self.rollout_correction
                )
                mask = keep.bool()
                if not bool(mask.any()):
                    continue
            pg_loss, pg_metrics = self.policy_loss_fn(
                old, log_prob, part.advantages, mask, loss_agg_mode, cfg, rollout_is_weights=weights
            )
            if entropy_coeff == 0:
                entropy = entropy.detach()
            entropy_loss = core_algos.agg_loss(entropy, mask, loss_agg_mode)
            loss = pg_loss - entropy_coeff * entropy_loss if entropy_coeff != 0 else pg_loss
            weight = scale.grad_scale(mask)
            (loss * weight).backward()
            diff = (part.policy_logprobs - log_prob.detach())[mask]  # the server's vs the learner's, before the step
            gap += float(diff.sum())
            abs_gap += float(diff.abs().sum())
            for key, value in {
                "actor/pg_loss": pg_loss.detach(),
                "actor/entropy": entropy_loss.detach(),
                **pg_metrics,
                **corr_metrics,
            }.items():
                stats[key] = stats.get(key, 0.0) + float(value) * weight
        stats.update(clipped_optimizer_step(self.model, self.optimizer, cfg.grad_clip, "actor"))
        stats["actor/lr"] = float(self.optimizer.param_groups[0]["lr"])
        self.version += 1
        stats.update(
            {
                "learner/logprob_gap": gap / n_loss,
                "learner/logprob_abs_gap": abs_gap / n_loss,
                "learner/tokens": float(example.num_tokens),
                "learner/loss_tokens": float(n_loss),
                "learner/step_time_s": time.perf_counter() - start,
                "learner/policy_version": float(self.version),
            }
        )
        return stats

    def _log_probs(self, part: RlExample, needed: torch.Tensor):
        """``(log_probs, entropy)`` ``[B, L]`` of ``part`` as :func:`packed_logprobs` aligns them: single-turn segments
        go through the synchronous actor's forward (:func:`single_turn_rows`; its shared-prompt layout computes a
        group's prompt once), other segments through the packed block-diagonal forward."""
        converted = single_turn_rows(part)
        if converted is None:
            return packed_logprobs(self.model, part, self.temperature, calculate_entropy=True, needed=needed)
        from tensordict import TensorDict

        rows, where = converted
        micro = TensorDict(rows, batch_size=[len(where)])
        entropy, log_probs = self.forward_actor._forward_micro_batch(micro, self.temperature, calculate_entropy=True)
        shape = tuple(part.input_ids.shape)
        return scatter_response_values(log_probs, where, shape), scatter_response_values(entropy, where, shape)

    # --------------------------------------------------------------------------------------------- weights
    def policy_version(self) -> int:
        return self.version

    def weights(self) -> Dict[str, torch.Tensor]:
        """A detached CPU copy of the model's state dict (what the broadcaster ships)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    # ------------------------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, config: Optional[Mapping[str, Any]] = None) -> str:
        """Publish ``global_step_{version}`` under ``checkpoint_dir`` (model, optimizer, version; manifest last).

        Returns the directory. Raises ValueError: no ``checkpoint_dir``.
        """
        if self.checkpoint_dir is None:
            raise ValueError("Learner.save_checkpoint needs checkpoint_dir (trainer.default_local_dir)")
        tmp = manifest.new_temp_dir(self.checkpoint_dir, self.version)
        torch.save(
            {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "version": self.version},
            tmp / _CKPT_FILE,
        )
        manifest.write_manifest(
            tmp, step=self.version, epoch=0, config=dict(config or {}), world_size=1, version="async"
        )
        return str(manifest.publish_checkpoint(tmp, self.checkpoint_dir, self.version))

    def resume(self) -> int:
        """Load the newest valid checkpoint under ``checkpoint_dir`` (if any) and return the policy version (0 when
        there is none)."""
        if self.checkpoint_dir is None:
            return self.version
        latest = manifest.latest_valid_checkpoint(self.checkpoint_dir)
        if latest is None:
            return self.version
        state = torch.load(latest / _CKPT_FILE, map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        logger.info("learner resumed from %s at policy version %d", latest, self.version)
        return self.version


class WeightBroadcaster:
    """Pushes weights + version to every inference server through the Ray object store (one ``ray.put``, every
    server reads the same object).

    Args: ``timeout_s``: how long to wait for the servers' acknowledgements.
    """

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = float(timeout_s)

    def broadcast(self, servers: Mapping[str, Any], weights: Any, version: int) -> Dict[str, Any]:
        """Send ``weights`` (a state dict or an ``ObjectRef`` to one, e.g. ``learner.weights.remote()``) as
        ``version`` to ``servers`` (``{name: InferenceServer actor handle}``).

        Returns ``{"metrics": {"weights/broadcast_latency_s", "weights/servers_updated", "weights/policy_version"},
        "failed": [names of servers that died or did not answer]}``; a server answering
        ``StaleWeightsError`` (it already has a newer version) counts as failed too.
        """
        import ray

        start = time.perf_counter()
        ref = weights if isinstance(weights, ray.ObjectRef) else ray.put(weights)
        calls = {name: handle.update_weights.remote(ref, int(version)) for name, handle in servers.items()}
        failed = []
        for name, call in calls.items():
            try:
                ray.get(call, timeout=self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - a dead or stuck server is reported, the caller restarts it
                logger.warning("weight broadcast to %s failed: %r", name, exc)
                failed.append(name)
        return {
            "metrics": {
                "weights/broadcast_latency_s": time.perf_counter() - start,
                "weights/servers_updated": float(len(calls) - len(failed)),
                "weights/policy_version": float(version),
            },
            "failed": failed,
        }


def make_learner_actor(*args, num_cpus: float = 0, **kwargs):
    """Start :class:`Learner` as a Ray actor (``num_cpus`` reserved, 0 by default). One call at a time, in the order
    the calls were submitted: the orchestrator asks for a finished step's weights and checkpoint before it submits the
    next step (``Orchestrator._on_learner_result``) and relies on that order."""
    import ray

    return ray.remote(num_cpus=num_cpus, max_restarts=0, max_concurrency=1)(Learner).remote(*args, **kwargs)
