"""The workers that own models: ``ActorRolloutRefWorker`` (actor, rollout, reference policy) and ``CriticWorker``.

verl's ``verl/workers/fsdp_workers.py`` API. A worker is a plain object (rank 0 of 1 in a single process, as in the
tests) or one rank of a Ray worker group: the group calls the ``@register``-ed methods, splitting ``DataProto``
arguments across ranks for ``DP_COMPUTE_PROTO`` and broadcasting arguments for ``ONE_TO_ALL``.

Batch sizes (verl's convention, normalised once in ``__init__``): ``ppo_mini_batch_size`` is given in prompts, so the
worker multiplies it by ``rollout.n`` and divides it by the world size; ``*_micro_batch_size_per_gpu`` are per rank,
and a deprecated global ``*_micro_batch_size`` is divided by the world size (with a warning).

Checkpoint layout (upstream's): ``local_path/model_world_size_{W}_rank_{R}.pt`` (this rank's parameter shards),
``optim_world_size_{W}_rank_{R}.pt``, ``extra_state_world_size_{W}_rank_{R}.pt`` (LR scheduler and RNG states) and
``local_path/huggingface/`` (``save_pretrained`` weights, config and tokenizer, written by rank 0).
"""

from __future__ import annotations

import json
import logging
import os
import time

import torch
from omegaconf import DictConfig, open_dict

from verl.protocol import DataProto
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.utils.determinism import set_deterministic
from verl.utils.lora import adapters_disabled, is_lora
from verl.utils.memory import phase_peak_memory
from verl.utils.model_presets import prepare_model
from verl.utils.model_utils import (
    build_lr_scheduler,
    build_optimizer,
    full_state_dict,
    load_causal_lm,
    load_value_model,
    optimizer_on_device,
    wrap_with_fsdp2,
)
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.config import ActorRolloutRefConfig, CriticConfig, worker_section
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from verl.workers.fsdp_checkpoint import Checkpointer, rank_file, refuse_hdfs, seed_rngs

logger = logging.getLogger(__name__)

ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


# ----------------------------------------------------------------------------------------------------- config helpers
def _resolve_device(config: DictConfig) -> str:
    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return device


def _per_gpu(section: DictConfig, key: str, where: str, world_size: int) -> None:
    """Fill ``{key}_per_gpu`` from a deprecated global ``key`` (divided by the world size, with a warning)."""
    global_value = section.get(key)
    if global_value is None:
        return
    per_gpu = int(global_value) // world_size
    if per_gpu < 1:
        raise ValueError(f"{where}.{key}={global_value} is smaller than the world size {world_size}")
    logger.warning("%s.%s is deprecated: using %s.%s_per_gpu=%d", where, key, where, key, per_gpu)
    section[f"{key}_per_gpu"] = per_gpu
    section[key] = None


def _normalize_mini_batch(section: DictConfig, where: str, rollout_n: int, world_size: int) -> None:
    """``ppo_mini_batch_size`` (prompts) → rows per rank: × ``rollout_n`` / ``world_size``."""
    prompts = int(section.ppo_mini_batch_size)
    rows = prompts * int(rollout_n)
    if prompts < 1 or rows % world_size != 0:
        raise ValueError(
            f"{where}.ppo_mini_batch_size ({prompts}) × rollout.n ({rollout_n}) must be a positive "
            f"multiple of the world size ({world_size})"
        )
    section.ppo_mini_batch_size = rows // world_size


def _with_meta(data: DataProto, **meta) -> DataProto:
    """``data`` (same tensors) with extra ``meta_info`` keys, leaving the caller's object untouched."""
    return DataProto(batch=data.batch, non_tensor_batch=data.non_tensor_batch, meta_info={**data.meta_info, **meta})


def _moves_optimizer_state(fsdp_config) -> bool:
    """Whether the update moves AdamW's state to the device and back (``optimizer_offload``). With ``param_offload``
    the sharded parameters live in host memory (FSDP2's ``CPUOffloadPolicy``), the optimizer steps there, and its
    state stays there: nothing to move."""
    return bool(fsdp_config.optimizer_offload) and not bool(fsdp_config.param_offload)


class _ModelWorkerMixin:
    """Device, distributed init and timing shared by both workers."""

    def _setup_device(self) -> None:
        """The worker's device, the deterministic kernels when ``<role>.deterministic`` (``trainer.deterministic``,
        :func:`verl.utils.determinism.set_deterministic`) and the process group."""
        if self.config.get("deterministic", False):
            logger.info("deterministic kernels: %s", json.dumps(set_deterministic(True)))
        self.device = _resolve_device(self.config)
        if self.device == "cuda":
            torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
        self.init_distributed(self.device)

    def _peak_memory(self, phase: str):
        """Context: this phase's peak memory (``verl.utils.memory``, ``perf/peak_rss_gb/{phase}``) goes into the
        pending metrics (the maximum when a phase runs several times); the step's update call sends them to the trainer
        with its own metrics (:meth:`_with_memory_metrics`), so calls that return only tensors stay metric-free."""
        if not hasattr(self, "_memory_metrics"):
            self._memory_metrics = {}
        return phase_peak_memory(phase, self._memory_metrics, getattr(self, "device", "cpu"))

    def _with_memory_metrics(self, metrics: dict) -> dict:
        """``metrics`` plus the pending per-phase peaks (``perf/peak_rss_gb/*``), which are then cleared."""
        metrics.update(getattr(self, "_memory_metrics", {}))
        self._memory_metrics = {}
        return metrics

    def _place(self, module: torch.nn.Module, fsdp_config, key: str) -> torch.nn.Module:
        """Move ``module`` to the worker's device; FSDP2 over several ranks, or on one rank when
        ``fsdp_config.mixed_precision`` gives a bf16 policy (the default on CUDA; ``verl/utils/mixed_precision.py``)
        or ``fsdp_config.param_offload`` is on with CUDA (``model_utils.wrap_with_fsdp2``).

        Args:
            key: the config path of ``fsdp_config`` (for error messages).

        Raises:
            ValueError: a trainable model with FlexAttention on CPU (torch has no FlexAttention backward on CPU); a
                bad ``mixed_precision`` (see ``mixed_precision_policy``).
        """
        attention = getattr(getattr(module, "config", None), "_attn_implementation", None)
        if self.device == "cpu" and attention == "flex_attention" and any(p.requires_grad for p in module.parameters()):
            raise ValueError(
                f"{type(module).__name__}: model.override_config.attn_implementation=flex_attention "
                "trains only on CUDA (torch has no FlexAttention backward pass on CPU): use sdpa on CPU"
            )
        module.to(self.device)
        return wrap_with_fsdp2(
            module,
            self.device,
            self.world_size,
            fsdp_config.mixed_precision if fsdp_config is not None else None,
            f"{key}.mixed_precision",
            fsdp_config,
        )


# -------------------------------------------------------------------------------------------- ActorRolloutRefWorker
class ActorRolloutRefWorker(_ModelWorkerMixin, Worker):
    """Actor (PPO update), rollout (generation) and reference policy in one process (verl's hybrid engine).

    Args:
        config: the ``actor_rollout_ref`` subtree (``model``, ``actor``, ``ref``, ``rollout``, ``device``); copied,
            so the caller's config is never modified.
        role: one of ``actor``, ``rollout``, ``ref``, ``actor_rollout``, ``actor_rollout_ref``.

    Raises:
        ValueError: unknown role; batch sizes not divisible as required (the message names the keys);
            ``rollout.temperature <= 0``.
    """

    def __init__(self, config: DictConfig, role: str):
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; one of {ROLES}")
        self.config = worker_section(config, ActorRolloutRefConfig)
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        for mesh, held in (("actor", self._is_actor), ("rollout", self._is_rollout), ("ref", self._is_ref)):
            if held:  # data parallel only: every rank is its own data-parallel rank and is collected
                self._register_dispatch_collect_info(mesh, dp_rank=self.rank, is_collect=True)
        cfg = self.config
        with open_dict(cfg):
            rollout_n = int(cfg.rollout.n or 1)
            if float(cfg.rollout.temperature) <= 0:
                raise ValueError(
                    "actor_rollout_ref.rollout.temperature must be > 0 (it also scales the log-probs); "
                    "use rollout.do_sample=false or val_kwargs for greedy decoding"
                )
            if self._is_actor:
                _normalize_mini_batch(cfg.actor, "actor_rollout_ref.actor", rollout_n, self.world_size)
                _per_gpu(cfg.actor, "ppo_micro_batch_size", "actor_rollout_ref.actor", self.world_size)
            # the actor's forward settings also serve the reference policy and the log-probs of a rollout-only role
            cfg.actor.use_remove_padding = bool(cfg.model.use_remove_padding)
            cfg.actor.use_shared_prompt = bool(cfg.model.use_shared_prompt)
            cfg.actor.use_fused_kernels = bool(cfg.model.use_fused_kernels)
            cfg.rollout.shared_prefill = cfg.actor.use_shared_prompt  # the HF rollout prefills each prompt once
            if cfg.rollout.shared_prefill and cfg.rollout.cache_implementation == "static":
                logger.warning(
                    "actor_rollout_ref.rollout.cache_implementation=static: the HF rollout prefills every "
                    "row (the shared prefill of model.use_shared_prompt needs a dynamic cache); the "
                    "log-prob and update passes still share prompts"
                )
            if self._is_rollout:
                _per_gpu(cfg.rollout, "log_prob_micro_batch_size", "actor_rollout_ref.rollout", self.world_size)
            if self._is_ref:
                _per_gpu(cfg.ref, "log_prob_micro_batch_size", "actor_rollout_ref.ref", self.world_size)
        self.actor_module = self.actor = self.actor_optimizer = self.actor_lr_scheduler = None
        self.rollout = self.ref_policy = self.tokenizer = self.checkpointer = self.router = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the model(s): actor (+ AdamW and LR scheduler), rollout engine on the actor's module, frozen ref."""
        from transformers import AutoTokenizer

        cfg = self.config
        self._setup_device()
        seed_rngs(cfg.seed, self.rank)
        self.tokenizer = AutoTokenizer.from_pretrained(
            prepare_model(cfg.model.path), trust_remote_code=cfg.model.trust_remote_code
        )
        if self._is_actor or self._is_rollout:
            module = load_causal_lm(cfg.model, trainable=self._is_actor)
            self.actor_module = self._place(module, cfg.actor.fsdp_config, "actor_rollout_ref.actor.fsdp_config")
            if self._is_actor:
                trainable = [p for p in self.actor_module.parameters() if p.requires_grad]  # LoRA: the adapters
                self.actor_optimizer = build_optimizer(trainable, cfg.actor.optim)
                self.actor_lr_scheduler = build_lr_scheduler(self.actor_optimizer, cfg.actor.optim)
                self.checkpointer = Checkpointer(
                    self,
                    self.actor_module,
                    self.actor_optimizer,
                    self.actor_lr_scheduler,
                    self.tokenizer,
                    cfg.actor.checkpoint.save_contents,
                )
            self.actor = DataParallelPPOActor(cfg.actor, self.actor_module, self.actor_optimizer)
            if self._is_actor and cfg.router is not None and cfg.router.enable:  # set by normalize_config
                from verl.router.component import RouterComponent

                self.router = RouterComponent(
                    cfg.router, self.actor_module.config.hidden_size, self.device, self.actor_optimizer
                )
        if self._is_rollout:
            self.rollout = self._build_rollout()
        if self._is_ref and self._is_actor and is_lora(self.actor_module):
            # LoRA: the reference policy is the actor's module with its adapters disabled (no second copy)
            self.ref_policy = DataParallelPPOActor(cfg.actor, self.actor_module)
        elif self._is_ref:
            ref_module = self._place(
                load_causal_lm(cfg.model, trainable=False), cfg.ref.fsdp_config, "actor_rollout_ref.ref.fsdp_config"
            )
            self.ref_policy = DataParallelPPOActor(cfg.actor, ref_module)
        logger.info(
            "ActorRolloutRefWorker rank %d/%d: role=%s device=%s", self.rank, self.world_size, self.role, self.device
        )

    def _build_rollout(self):
        name = self.config.rollout.name
        if name == "hf":
            from verl.workers.rollout.hf_rollout import HFRollout

            return HFRollout(self.actor_module, self.config.rollout, self.tokenizer)
        if name == "vllm":
            from verl.workers.rollout.vllm_rollout import vLLMRollout

            return vLLMRollout(self.actor_module, self.config.rollout, self.tokenizer, self.config.model)
        raise ValueError(f"actor_rollout_ref.rollout.name must be 'hf' or 'vllm', got {name!r}")

    def _log_prob_meta(self, section: DictConfig) -> dict:
        return {
            "micro_batch_size": section.log_prob_micro_batch_size_per_gpu,
            "use_dynamic_bsz": bool(section.log_prob_use_dynamic_bsz),
            "max_token_len": section.log_prob_max_token_len_per_gpu,
            "temperature": float(self.config.rollout.temperature),
        }

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Rollout (see ``BaseRollout``); with ``meta_info['recompute_log_prob']`` also ``old_log_probs`` (ToolRL).

        ``eos_token_id``/``pad_token_id`` default to the tokenizer's. Timing is the caller's (``timing_s/gen``).
        """
        # the actor's weight version (its updates so far: the LR scheduler's step count, saved with checkpoints)
        version = int(self.actor_lr_scheduler.last_epoch) if self.actor_lr_scheduler is not None else 0
        meta = {
            "eos_token_id": self.tokenizer.eos_token_id,
            "pad_token_id": self.tokenizer.pad_token_id,
            **prompts.meta_info,
            "actor_weight_version": version,
        }
        with self._peak_memory("gen_val" if meta.get("validate", False) else "gen"):
            output = self.rollout.generate_sequences(_with_meta(prompts.to(self.device), **meta))
        if meta.get("recompute_log_prob", False) and self.actor is not None:
            output = output.union(self.compute_log_prob(output))
        # the HF rollout generates with the actor's own module; vLLM reports the version its engine was synced to
        output.meta_info.setdefault("rollout_weight_version", version)
        output.meta_info["actor_weight_version"] = version
        return output.to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """Current-policy log-probs: batch ``old_log_probs`` and ``entropys`` [B, R] (the caller reduces the entropy
        over ``response_mask`` into ``actor/entropy``, as upstream); meta_info ``temperature``."""
        data = _with_meta(data.to(self.device), **self._log_prob_meta(self.config.rollout))
        with self._peak_memory("old_log_prob"):
            log_probs, entropys = self.actor.compute_log_prob(data, calculate_entropy=True)
        return DataProto.from_dict(
            tensors={"old_log_probs": log_probs, "entropys": entropys},
            meta_info={"temperature": data.meta_info["temperature"]},
        ).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """Reference-policy log-probs: batch ``ref_log_prob`` [B, R]."""
        if self.ref_policy is None:
            raise RuntimeError(f"compute_ref_log_prob needs a role with ref, this worker is {self.role!r}")
        data = _with_meta(data.to(self.device), **self._log_prob_meta(self.config.ref))
        with self._peak_memory("ref"), adapters_disabled(self.ref_policy.actor_module):  # no-op without LoRA
            log_probs, _ = self.ref_policy.compute_log_prob(data, calculate_entropy=False)
        return DataProto.from_dict(tensors={"ref_log_prob": log_probs}).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update of the actor, then one LR-scheduler step; returns ``meta_info['metrics']``."""
        if self.actor_optimizer is None:
            raise RuntimeError(f"update_actor needs a role with actor, this worker is {self.role!r}")
        data = _with_meta(data.to(self.device), temperature=float(self.config.rollout.temperature))
        start = time.perf_counter()
        offload = _moves_optimizer_state(self.config.actor.fsdp_config)
        with self._peak_memory("update_actor"), optimizer_on_device(self.actor_optimizer, self.device, offload):
            metrics = self.actor.update_policy(data)
        elapsed = time.perf_counter() - start
        self.actor_lr_scheduler.step()
        tokens = float(data.batch["attention_mask"].sum()) * int(self.config.actor.ppo_epochs)
        metrics["perf/actor_tokens_per_s"] = tokens / max(elapsed, 1e-9)
        return DataProto(meta_info={"metrics": self._with_memory_metrics(metrics)})

    def _require_router(self, method: str):
        if self.router is None:
            raise RuntimeError(f"{method} needs router.enable=true on an actor worker (role {self.role!r})")
        return self.router

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_router_logits(self, data: DataProto) -> DataProto:
        """``router_logits`` [B, 3] float32 of the router head on the original prompts (``router_*`` prompt keys, or
        ``input_ids``/``attention_mask``/``position_ids``); see ``verl.router.component``."""
        logits = self._require_router("compute_router_logits").logits(self.actor_module, data.batch)
        return DataProto.from_dict(tensors={"router_logits": logits.detach().cpu()})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_router(self, data: DataProto) -> DataProto:
        """One router GRPO step (``router_action``, ``router_advantages``, optional ``router_target_action_id``);
        returns ``meta_info['metrics']`` (router/pg_loss, router/sup_loss, router/grad_norm, …)."""
        metrics = self._require_router("update_router").update(self.actor_module, data.batch)
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        *,
        hdfs_path: str | None = None,
    ) -> None:
        """Write the actor checkpoint to ``local_path`` (upstream layout; see the module docstring), plus the router
        head and its optimizer (``router_world_size_W_rank_R.pt``) when the router is on.

        ``max_ckpt_to_keep`` removes the oldest directories this worker saved beyond that many. ``hdfs_path`` is
        upstream's argument: only None is accepted (:func:`refuse_hdfs`).
        """
        refuse_hdfs(hdfs_path)
        if self.checkpointer is None:
            raise RuntimeError(f"save_checkpoint needs a role with actor, this worker is {self.role!r}")
        if self.router is not None:
            os.makedirs(local_path, exist_ok=True)
            torch.save(self.router.state_dict(), rank_file(local_path, "router", self.world_size, self.rank))
        self.checkpointer.save(local_path, global_step, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False):
        """Restore weights, optimizer, LR scheduler and RNG saved by ``save_checkpoint`` (same world size).

        Returns:
            The saved extra state (``global_step``, ``lr_scheduler``, ``rng``).
        """
        refuse_hdfs(hdfs_path)
        if self.checkpointer is None:
            raise RuntimeError(f"load_checkpoint needs a role with actor, this worker is {self.role!r}")
        if self.router is not None:
            router_file = rank_file(local_path, "router", self.world_size, self.rank)
            if not os.path.isfile(router_file):
                raise FileNotFoundError(f"router.enable=true but the checkpoint has no {router_file}")
            self.router.load_state_dict(torch.load(router_file, map_location="cpu", weights_only=False))
        return self.checkpointer.load(local_path, del_local_after_load)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The actor's full (unsharded) float32 CPU state dict on rank 0, None on other ranks (collective)."""
        state = full_state_dict(self.actor_module)
        return state if self.rank == 0 else None


# ------------------------------------------------------------------------------------------------------ CriticWorker
class CriticWorker(_ModelWorkerMixin, Worker):
    """The value model for GAE.

    Args:
        config: the ``critic`` subtree (``model``, ``optim``, batch sizes, ``cliprange_value``, ``device``, and
            ``rollout_n`` = ``actor_rollout_ref.rollout.n``, which scales ``ppo_mini_batch_size`` as for the actor).

    Raises:
        ValueError: batch sizes not divisible as required (the message names the keys).
    """

    def __init__(self, config: DictConfig):
        super().__init__()
        self._register_dispatch_collect_info("critic", dp_rank=self.rank, is_collect=True)
        self.config = worker_section(config, CriticConfig)
        cfg = self.config
        if cfg.rollout_n is None:
            logger.warning("critic.rollout_n not set: assuming 1 response per prompt for critic.ppo_mini_batch_size")
        with open_dict(cfg):
            _normalize_mini_batch(cfg, "critic", int(cfg.rollout_n or 1), self.world_size)
            _per_gpu(cfg, "ppo_micro_batch_size", "critic", self.world_size)
            _per_gpu(cfg, "forward_micro_batch_size", "critic", self.world_size)
            cfg.use_remove_padding = bool(cfg.model.use_remove_padding)
        self.critic_module = self.critic = self.critic_optimizer = self.critic_lr_scheduler = None
        self.checkpointer = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        """Load the value model, AdamW and the LR scheduler."""
        from transformers import AutoTokenizer

        cfg = self.config
        self._setup_device()
        seed_rngs(cfg.seed, self.rank)
        tokenizer_path = cfg.model.tokenizer_path or cfg.model.path
        tokenizer = AutoTokenizer.from_pretrained(
            prepare_model(tokenizer_path), trust_remote_code=cfg.model.trust_remote_code
        )
        self.critic_module = self._place(load_value_model(cfg.model), cfg.model.fsdp_config, "critic.model.fsdp_config")
        self.critic_optimizer = build_optimizer(self.critic_module.parameters(), cfg.optim)
        self.critic_lr_scheduler = build_lr_scheduler(self.critic_optimizer, cfg.optim)
        self.critic = DataParallelPPOCritic(cfg, self.critic_module, self.critic_optimizer)
        self.checkpointer = Checkpointer(
            self,
            self.critic_module,
            self.critic_optimizer,
            self.critic_lr_scheduler,
            tokenizer,
            cfg.checkpoint.save_contents,
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto) -> DataProto:
        """Batch ``values`` [B, R] (zero outside ``response_mask``)."""
        cfg = self.config
        data = _with_meta(
            data.to(self.device),
            micro_batch_size=cfg.forward_micro_batch_size_per_gpu,
            use_dynamic_bsz=bool(cfg.use_dynamic_bsz),
            max_token_len=cfg.forward_max_token_len_per_gpu,
        )
        with self._peak_memory("values"):
            values = self.critic.compute_values(data)
        return DataProto.from_dict(tensors={"values": values}).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_critic(self, data: DataProto) -> DataProto:
        """One PPO value update, then one LR-scheduler step; returns ``meta_info['metrics']``."""
        offload = _moves_optimizer_state(self.config.model.fsdp_config)
        with self._peak_memory("update_critic"), optimizer_on_device(self.critic_optimizer, self.device, offload):
            metrics = self.critic.update_critic(data.to(self.device))
        self.critic_lr_scheduler.step()
        return DataProto(meta_info={"metrics": self._with_memory_metrics(metrics)})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(
        self,
        local_path: str,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
        *,
        hdfs_path: str | None = None,
    ) -> None:
        """Write the critic checkpoint to ``local_path`` (same layout as the actor's; ``hdfs_path`` only None)."""
        refuse_hdfs(hdfs_path)
        self.checkpointer.save(local_path, global_step, max_ckpt_to_keep)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False):
        """Restore what ``save_checkpoint`` wrote (same world size; ``hdfs_path`` only None); returns the extra
        state."""
        refuse_hdfs(hdfs_path)
        return self.checkpointer.load(local_path, del_local_after_load)


__all__ = ["ROLES", "ActorRolloutRefWorker", "CriticWorker"]
