"""``RayPPOTrainer``: the single controller that drives PPO/GRPO training.

The driver owns the schedule and the data; workers own the models. One training step (upstream verl's order, without
ToolRL's off-by-one):

    gen → reward → old_log_prob → ref → values → adv (KL in reward or not) → update_critic → update_actor
        → validate (test_freq, last step) → save (save_freq, last step) → log

Every phase is timed into ``timing_s/<phase>`` and tracked (``run_guard.PhaseTracker``), so a worker that dies
surfaces as ``WorkerFailure`` naming the worker, the phase and the checkpoint to resume from. The advantage estimator
is looked up by name in ``core_algos``'s registry (``algorithm.adv_estimator``).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from rlvcr.rollout_phase import make_rlvcr_phase
from verl.protocol import DataProto
from verl.trainer.config_utils import require_device, run_record
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import apply_kl_penalty  # noqa: F401 (upstream's import path)
from verl.trainer.ppo.metric_utils import (
    REWARD_COMPONENTS,
    MfuMeter,
    compute_data_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.advantage import compute_advantage  # noqa: F401 (upstream's ray_trainer.compute_advantage)
from verl.trainer.ppo.batch_source import StepOps, make_batch_source
from verl.trainer.ppo.checkpointing import driver_state
from verl.trainer.ppo.dataloaders import build_rl_dataloaders, pass_horizon_to_workers
from verl.trainer.ppo.multi_turn import MultiTurnRollout
from verl.trainer.ppo.trainer_state import TrainerState
from verl.trainer.ppo.update_inputs import prepare_update
from verl.trainer.ppo.ray_resources import ResourcePoolManager, Role
from verl.trainer.ppo.run_guard import (
    ExitRequest,
    PhaseTracker,
    RunStopped,
    StepHealth,
    agent_action_problem,
    check_weight_version,
    invalid_reward_problem,
    non_finite_rows,
    warn_zero_variance,
    worker_failure,
)
from verl.utils.dataset.rl_dataset import collate_fn as default_collate_fn
from verl.utils.torch_functional import trim_left_padding
from verl.utils.tracking import StepProgress, Tracking
from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS

logger = logging.getLogger(__name__)

GEN_KEYS = ["input_ids", "attention_mask", "position_ids"]


def compute_response_mask(data: DataProto) -> torch.Tensor:
    """[B, R] mask of response tokens: the response part of ``attention_mask`` (first EOS included)."""
    response_length = data.batch["responses"].shape[-1]
    return data.batch["attention_mask"][:, -response_length:]


class RayPPOTrainer:
    """Single-controller PPO/GRPO trainer over Ray worker groups (or, with ``trainer.single_process``, over
    ``LocalWorkerGroup``s hosting the workers in this process).

    Args:
        config: the full resolved config (``ppo_trainer.yaml`` + overrides, normalised by ``config_utils``).
        tokenizer: the actor's tokenizer (decoding for rewards and logs; the driver's own code never loads model
            weights).
        role_worker_mapping: ``{Role: worker class}``; ``Role.ActorRolloutRef`` (or ``ActorRollout``) is required,
            ``Role.Critic`` when the critic is enabled.
        resource_pool_manager: where each role's workers run.
        ray_worker_group_cls: the worker-group class (``RayWorkerGroup``, or ``LocalWorkerGroup``).
        reward_fn, val_reward_fn: reward managers, ``fn(batch, step, return_dict=True)``. Agent mode (``env.env_name``):
            ``reward_fn`` is a reward-API ``RewardRunner`` scoring whole trajectories (``custom_reward_function``;
            ``agent_system.reward.trajectory``) or None (the environments' rewards).
        train_dataset, val_dataset: ``RLHFDataset`` instances.
    """

    def __init__(
        self,
        config: DictConfig,
        tokenizer,
        role_worker_mapping: dict,
        resource_pool_manager: ResourcePoolManager,
        ray_worker_group_cls=None,
        reward_fn=None,
        val_reward_fn=None,
        train_dataset=None,
        val_dataset=None,
        collate_fn=None,
    ) -> None:
        if ray_worker_group_cls is None:  # imported only here: a single-process run needs no Ray installed
            from verl.single_controller.ray import RayWorkerGroup

            ray_worker_group_cls = RayWorkerGroup
        self.config = config
        self.tokenizer = tokenizer
        self.role_worker_mapping = role_worker_mapping
        self.resource_pool_manager = resource_pool_manager
        self.ray_worker_group_cls = ray_worker_group_cls
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn or reward_fn
        self.use_critic = bool(config.critic.enable)
        actor = config.actor_rollout_ref.actor
        self.use_reference_policy = bool(actor.use_kl_loss or config.algorithm.use_kl_in_reward)
        self.kl_ctrl_in_reward = (
            core_algos.get_kl_controller(config.algorithm.kl_ctrl) if config.algorithm.use_kl_in_reward else None
        )
        if Role.ActorRolloutRef not in role_worker_mapping and Role.ActorRollout not in role_worker_mapping:
            raise ValueError("role_worker_mapping needs Role.ActorRolloutRef or Role.ActorRollout")
        if self.use_critic and Role.Critic not in role_worker_mapping:
            raise ValueError("critic.enable is true but role_worker_mapping has no Role.Critic")
        self.router = None
        self._old_log_prob_skip_logged = False
        if config.router.enable:
            from verl.router.controller import RouterController

            self.router = RouterController(config.router, config.data, tokenizer, seed=int(config.data.seed))
        self.agent = None  # multi-turn environments (env.env_name set): agent_system.multi_turn_rollout
        if config.env.env_name:
            from agent_system.multi_turn_rollout.agent_rollout import AgentRollout
            from rlvcr.rollout_phase import agent_level_setup

            rlvcr, suffix = agent_level_setup(config, tokenizer)  # adv_estimator=rlvcr: level prompts + phase
            self.agent = AgentRollout(config, tokenizer, rlvcr=rlvcr, prompt_suffix=suffix, reward_runner=reward_fn)
        self.rlvcr = None if self.agent else make_rlvcr_phase(config, tokenizer, rlla=True)  # RLVCR on RLLA rows
        self.multi_turn = MultiTurnRollout.from_trainer_config(config, tokenizer, self.run_dir())  # None: off
        self.batch_source = make_batch_source(self.step_ops())  # where a step's scored batch comes from
        self.mfu_meter = None  # perf/mfu_* (built with the workers: its CPU peak uses their thread count)
        self.state = TrainerState()  # counters and resume record (checkpointing loads and returns it)
        self.rollout_weight_version = None  # the actor update the last rollout generated with (run_guard)
        self._timing: dict = {}
        self.phases = PhaseTracker(kill_worker=self._kill_first_actor_worker)
        self.health = StepHealth(int(config.trainer.max_consecutive_bad_steps))
        self.updating = False  # inside a step's updates: the workers' state is between two steps
        self.step_problem: str | None = None  # why the current step is a bad one (StepHealth)
        self.reward_errors: list[str] = []  # the last training batch's reward failures (messages)
        self.reward_extra_info: dict = {}  # the last scoring's per-sample values (reward manager's reward_extra_info)
        self._create_dataloader(train_dataset, val_dataset, collate_fn or default_collate_fn)

    # ------------------------------------------------------------------ data
    def _create_dataloader(self, train_dataset, val_dataset, collate_fn) -> None:
        """The epoch-seeded train loader, the one-batch validation loader and the run's horizon (``dataloaders``)."""
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        loaders = build_rl_dataloaders(self.config, train_dataset, val_dataset, collate_fn)
        self.train_sampler, self.train_dataloader, self.val_dataloader = loaders.sampler, loaders.train, loaders.val
        self.steps_per_epoch, self.total_training_steps = loaders.steps_per_epoch, loaders.total_training_steps
        pass_horizon_to_workers(self.config, self.total_training_steps)

    # ------------------------------------------------------------------ workers
    def init_workers(self) -> None:
        """Create the resource pools and worker groups and load the models (on ``trainer.device``, which must be
        there: :func:`~verl.trainer.config_utils.require_device`)."""
        from verl.single_controller.local import LocalWorkerGroup

        require_device(self.config)
        if issubclass(self.ray_worker_group_cls, LocalWorkerGroup):  # workers in this process: no Ray imported
            from verl.single_controller.base import ClassWithInitArgs as RayClassWithInitArgs
        else:
            from verl.single_controller.ray import RayClassWithInitArgs

        self.resource_pool_manager.create_resource_pool()
        actor_role = Role.ActorRolloutRef if Role.ActorRolloutRef in self.role_worker_mapping else Role.ActorRollout
        worker_role = "actor_rollout_ref" if self.use_reference_policy else "actor_rollout"
        actor_cls = RayClassWithInitArgs(
            self.role_worker_mapping[actor_role], config=self.config.actor_rollout_ref, role=worker_role
        )
        critic_cls = (
            RayClassWithInitArgs(self.role_worker_mapping[Role.Critic], config=self.config.critic)
            if self.use_critic
            else None
        )
        # Ray gives actors with fractional CPUs OMP_NUM_THREADS=1; the phases run one after the other, so each CPU
        # worker may use its node's share of the cores.
        threads = self.config.trainer.cpu_threads or max(
            1, (os.cpu_count() or 1) // max(1, int(self.config.trainer.n_gpus_per_node))
        )
        if self.config.trainer.device == "cpu" and self.config.trainer.single_process:
            torch.set_num_threads(threads)  # the workers run in this process (LocalWorkerGroup)
        elif self.config.trainer.device == "cpu":
            for cls in (actor_cls, critic_cls):
                if cls is not None:
                    cls.update_options({"runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads)}}})
        self.actor_rollout_wg = self.ray_worker_group_cls(
            self.resource_pool_manager.get_resource_pool(actor_role), actor_cls, name_prefix="actor_rollout"
        )
        self.critic_wg = None
        if self.use_critic:
            self.critic_wg = self.ray_worker_group_cls(
                self.resource_pool_manager.get_resource_pool(Role.Critic), critic_cls, name_prefix="critic"
            )
            self.critic_wg.init_model()
        self.actor_rollout_wg.init_model()
        self.n_workers = self.actor_rollout_wg.world_size
        self.mfu_meter = MfuMeter.from_config(self.config, threads)

    def shutdown(self) -> None:
        """Stop the workers (Ray: the actors, and release their placement groups; the Ray session itself stays
        up)."""
        for wg in (getattr(self, "actor_rollout_wg", None), getattr(self, "critic_wg", None)):
            if wg is not None:
                wg.shutdown()
        for part in (getattr(self, "agent", None), getattr(self, "multi_turn", None)):  # environments, tool sandbox
            if part is not None:
                part.close()
        self.resource_pool_manager.release()

    # ------------------------------------------------------------------ steps
    def _balance_batch(self, batch: DataProto, metrics: dict) -> None:
        """Reorder rows in place so every data-parallel worker gets about the same number of tokens."""
        from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions

        if self.n_workers <= 1:
            return
        seqlens = batch.batch["attention_mask"].sum(-1).tolist()
        partitions = get_seqlen_balanced_partitions(seqlens, k_partitions=self.n_workers, equal_size=True)
        order = torch.tensor([i for part in partitions for i in sorted(part)])
        batch.reorder(order)
        sums = [sum(seqlens[i] for i in part) for part in partitions]
        metrics["perf/balance_max_over_mean_tokens"] = max(sums) / (sum(sums) / len(sums))

    def _score(self, batch: DataProto, reward_fn, step: int) -> dict:
        """Run the reward manager and store ``token_level_scores`` (+ components) and ``reward_valid`` in the batch;
        return the manager's ``reward_metrics`` (e.g. ``reward/invalid_frac``, ``reward/timeouts``)."""
        result = reward_fn(batch, step, return_dict=True)
        batch.batch["token_level_scores"] = result["reward_tensor"]
        for name in REWARD_COMPONENTS:
            key = f"token_level_scores_{name}"
            if key in result:
                batch.batch[key] = result[key]
        extra = result.get("reward_extra_info", {})
        if "reward_valid" in extra:
            batch.non_tensor_batch["reward_valid"] = np.asarray(extra["reward_valid"], dtype=bool)
        self.reward_errors = [e for e in extra.get("reward_error", []) if e]
        self.reward_extra_info = extra  # per-sample values of the last scoring (validation reads them)
        return dict(result.get("reward_metrics", {}))

    def _generate(self, batch: DataProto, validate: bool) -> DataProto:
        """Pop the prompt tensors, roll out, and union the result back; returns the full batch."""
        keys = GEN_KEYS + [key for key in (FORBID_TOOL_CALLS,) if key in batch.batch.keys()]  # the router's
        do_sample = not validate and self.config.actor_rollout_ref.rollout.do_sample
        return batch.union(self._responses(batch.pop(batch_keys=keys), batch, do_sample, validate))

    def _responses(self, gen_batch: DataProto, batch: DataProto, do_sample: bool, validate: bool) -> DataProto:
        """One generation per row, its ``response_mask`` its attention's; with ``rollout.multi_turn``, one episode of
        the tool loop per row (``verl.trainer.ppo.multi_turn``: each round one :meth:`_rollout` call, the mask the
        policy's tokens only, ``tool_loop/*`` / ``tool/*`` in ``meta_info["rollout_metrics"]``)."""
        if self.multi_turn is None:
            output = self._rollout(gen_batch, do_sample=do_sample, validate=validate)
            output.batch["response_mask"] = compute_response_mask(output)
            return output
        engine = lambda gen: self._rollout(gen, do_sample=do_sample, validate=validate)  # noqa: E731 - one round
        raw, routes = batch.non_tensor_batch.get("raw_prompt"), batch.batch.get("router_action", None)  # routes: router
        step = None if validate else self.global_steps
        return self.multi_turn.generate(gen_batch, engine, do_sample, validate, raw, routes=routes, step=step)

    def _rollout(self, gen_batch: DataProto, do_sample: bool, validate: bool) -> DataProto:
        """Generate for the prompt tensors ``GEN_KEYS`` of ``gen_batch`` ([B, P], left-padded).

        Prompts arrive padded to ``data.max_prompt_length``; they are cut to the batch's longest prompt first, so that
        neither the rollout nor any later log-prob / update pass computes on columns that are padding in every row.
        """
        tensors = trim_left_padding({k: gen_batch.batch[k] for k in GEN_KEYS})
        if FORBID_TOOL_CALLS in gen_batch.batch.keys():  # [B] per-row decoding constraint (hf_rollout)
            tensors[FORBID_TOOL_CALLS] = gen_batch.batch[FORBID_TOOL_CALLS]
        gen_batch = DataProto.from_dict(tensors, non_tensors=gen_batch.non_tensor_batch, meta_info=gen_batch.meta_info)
        gen_batch.meta_info.update(
            {
                "eos_token_id": self.tokenizer.eos_token_id,
                "pad_token_id": self.tokenizer.pad_token_id,
                "do_sample": do_sample,
                "validate": validate,
            }
        )
        out = self.actor_rollout_wg.generate_sequences(gen_batch)
        self.rollout_weight_version = check_weight_version(out.meta_info)  # loud when a weight sync was missed
        return out

    def fit(self) -> None:
        """Run the training loop (upstream's order), validating and checkpointing on schedule.

        An error inside the loop first goes through ``checkpointing.save_after_error`` (with ``trainer.save_on_exit``
        the last completed step is saved, unless the error came in the middle of the updates), then is raised with a
        note saying what was saved and that the same command resumes.

        Raises:
            WorkerFailure: a worker died or raised; the message names the worker group, rank and method, the phase
                and step, and the newest valid checkpoint (which a failed save never replaces).
            RunStopped: ``trainer.max_consecutive_bad_steps`` bad steps in a row (saved first).
        """
        from verl.single_controller.base.worker_group import WorkerGroupError
        from verl.trainer.ppo.checkpointing import save_after_error

        try:
            self._fit()
        except RunStopped:
            raise
        except Exception as exc:
            note = save_after_error(self)
            if isinstance(exc, WorkerGroupError):
                raise worker_failure(
                    exc, self.phases.failed_phase, self.global_steps, Path(self.config.trainer.default_local_dir)
                ) from exc
            exc.add_note(note)
            raise

    def step_ops(self) -> StepOps:
        """The trainer as a batch source sees it (:class:`~verl.trainer.ppo.batch_source.StepOps`): the timed phases,
        generation with the training settings, the training reward at the current step, balancing, the counters."""

        def next_batch():  # DAPO's dynamic sampling draws more batches within a step; a resume skips them
            batch_dict = next(self.epoch_batches, None)
            if batch_dict is not None:
                self.state.batches_consumed += 1
            return batch_dict

        return StepOps(
            config=self.config,
            tokenizer=self.tokenizer,
            router=self.router,
            rlvcr=self.rlvcr,
            agent=self.agent,
            phase=self._phase,
            generate=lambda batch: self._generate(batch, validate=False),
            rollout=lambda gen, do_sample: self._rollout(gen, do_sample=do_sample, validate=False),
            score=lambda batch: self._score(batch, self.reward_fn, self.global_steps),
            balance=self._balance_batch,
            greedy_baseline=self._greedy_baseline,
            compute_log_prob=lambda batch: self.actor_rollout_wg.compute_log_prob(batch),
            worker_group=lambda: self.actor_rollout_wg,
            step=lambda: self.global_steps,
            next_batch=next_batch,
        )

    def _phase(self, name: str):
        """Time phase ``name`` of the current step (``timing_s/<name>``) and track it for error messages."""
        return self.phases.phase(name, self._timing, self.global_steps)

    def _kill_first_actor_worker(self) -> None:
        """``VERL_TEST_FAULT=WORKER@...``: kill rank 0 of the actor group as a crash would (Ray groups only)."""
        from verl.trainer.ppo.run_guard import kill_ray_worker

        if self.config.trainer.single_process:
            raise RuntimeError(
                "VERL_TEST_FAULT=WORKER@... kills a Ray worker actor; with trainer.single_process=true "
                "the worker is this process (use KILL@... instead)"
            )
        kill_ray_worker(self.actor_rollout_wg.workers[0])

    def _fit(self) -> None:
        trainer_cfg = self.config.trainer
        with self._phase("load_checkpoint"):
            self._load_checkpoint()
        tracker = Tracking(
            trainer_cfg.project_name,
            trainer_cfg.experiment_name,
            list(trainer_cfg.logger),
            config=run_record(self.config),
            run_dir=self.run_dir(),
            resume_step=self.global_steps,
            resume_record=self.state.resume_record,
        )
        self.tracker = tracker
        if trainer_cfg.val_before_train and self.global_steps == 0:
            with self._phase("testing"):
                val_metrics = self._validate()
            tracker.log(val_metrics, step=self.global_steps)
            if trainer_cfg.val_only:
                tracker.finish()
                return
        progress = StepProgress(self.total_training_steps, initial=self.global_steps)
        self.state.completed_step = self.global_steps
        self.global_steps += 1
        n = int(self.config.actor_rollout_ref.rollout.n)
        exit_request = ExitRequest(enabled=bool(trainer_cfg.save_on_exit))
        try:
            while self.global_steps <= self.total_training_steps:
                self.train_sampler.set_epoch(self.epoch)
                self.epoch_batches = iter(self.train_dataloader)  # dynamic sampling may draw more within a step
                for batch_dict in self.epoch_batches:
                    self.state.step_start = driver_state(self)
                    metrics = self._train_step(batch_dict, n)
                    self.batches_consumed += 1
                    self.state.completed_step, self.updating = self.global_steps, False
                    is_last = self.global_steps >= self.total_training_steps
                    if trainer_cfg.test_freq > 0 and (is_last or self.global_steps % trainer_cfg.test_freq == 0):
                        with self._phase("testing"):
                            metrics.update(self._validate())
                    metrics["training/global_step"] = self.global_steps
                    metrics["training/epoch"] = self.epoch
                    self.state.step_record = (
                        self.global_steps,
                        metrics,
                    )  # saved with the checkpoint (data.pt "metrics")
                    if trainer_cfg.save_freq > 0 and (is_last or self.global_steps % trainer_cfg.save_freq == 0):
                        with self._phase("save_checkpoint"):
                            self._save_checkpoint()
                    metrics.update({f"timing_s/{k}": v for k, v in self._timing.items()})
                    tracker.log(metrics, step=self.global_steps)
                    progress.update(metrics)
                    self._check_step_health(metrics, is_last)
                    if exit_request.signum is not None and not is_last:
                        self._exit_after_signal(exit_request.signum, saved=self.state.saved_step == self.global_steps)
                    if is_last:
                        return
                    self.global_steps += 1
                self.epoch += 1
                self.batches_consumed = 0
        finally:
            exit_request.restore()
            progress.close()
            tracker.finish()

    def _check_step_health(self, metrics: dict | None = None, is_last: bool = False) -> None:
        """After a step: count it bad (``step_problem``) or good; after ``trainer.max_consecutive_bad_steps`` bad
        steps in a row, save (non-finite updates were skipped, so the weights are the last good ones) and stop. After
        the last step, a launch whose reward scored none of its samples stops too, whatever its length.

        Raises:
            RunStopped: the limit was reached, or nothing was scored (the message names the cause and the checkpoint).
        """
        self.health.scored(metrics or {})
        if is_last and self.health.nothing_scored():
            if self.state.saved_step != self.global_steps:
                self._save_checkpoint()
            first = self.reward_errors[0] if self.reward_errors else "no reason recorded"
            raise RunStopped(
                f"the reward could not score any sample of this run's {self.health.steps} step(s) "
                f"(reward/invalid_frac=1 at every step): nothing was learned; first failure: {first}"
            )
        if self.step_problem is None:
            self.health.good()
            return
        if self.health.bad(self.global_steps, self.step_problem):
            if self.state.saved_step != self.global_steps:
                self._save_checkpoint()
            raise RunStopped(
                f"stopping after {self.health.count} consecutive bad steps (last: {self.step_problem}); "
                f"the state is saved in {self.config.trainer.default_local_dir}/global_step_"
                f"{self.global_steps}"
            )

    def _exit_after_signal(self, signum: int, saved: bool) -> None:
        """``trainer.save_on_exit``: after the step in flight, save (unless this step just did) and exit non-zero."""
        if not saved:
            self._save_checkpoint()
        ckpt = Path(self.config.trainer.default_local_dir) / f"global_step_{self.global_steps}"
        logger.error(
            "stopped by %s after step %d; checkpoint %s. Run the same command again to resume "
            "(trainer.resume_mode=auto).",
            signal.Signals(signum).name,
            self.global_steps,
            ckpt,
        )
        raise SystemExit(128 + signum)

    def _actor_updates(self) -> bool:
        """Whether this step updates the actor: not before ``trainer.critic_warmup`` steps (verl's warm-up)."""
        return self.config.trainer.critic_warmup <= self.global_steps

    def _needs_old_log_probs(self, batch) -> bool:
        """Whether this step needs the current policy's log-probs (``old_log_probs``), which verl computes every step
        for the actor update, the KL penalty (against the reference) and the rollout correction. Before
        ``trainer.critic_warmup`` the actor is not updated; with no reference model and no rollout log-probs nothing
        else reads them, so the pass is skipped (logged once; no ``actor/entropy`` on those steps)."""
        if self._actor_updates() or self.use_reference_policy or "rollout_log_probs" in batch.batch.keys():
            return True
        if not self._old_log_prob_skip_logged:
            logger.info(
                "step %d: the actor is not updated before trainer.critic_warmup=%d and nothing else reads "
                "old log-probs: the old_log_prob pass is skipped until then",
                self.global_steps,
                self.config.trainer.critic_warmup,
            )
            self._old_log_prob_skip_logged = True
        return False

    def _train_step(self, batch_dict: dict, n: int) -> dict:
        """One PPO/GRPO step on one batch of prompts; returns its metrics."""
        config = self.config
        metrics: dict = {}
        timing: dict = {}
        self._timing = timing
        with self._phase("step"):
            # single-turn prompts or agent environments (ppo/batch_source.py): a scored batch either way
            batch = self.batch_source.collect(DataProto.from_single_dict(batch_dict), n, metrics)
            if self.rollout_weight_version is not None:  # checked against the actor's in _rollout
                metrics["rollout/weight_version"] = float(self.rollout_weight_version)
            batch = prepare_update(  # old_log_prob → ref → values → adv (ppo/update_inputs.py)
                batch,
                self.actor_rollout_wg,
                config.algorithm,
                metrics,
                needs_old_log_probs=self._needs_old_log_probs(batch),
                use_reference_policy=self.use_reference_policy,
                kl_ctrl_in_reward=self.kl_ctrl_in_reward,
                critic_wg=self.critic_wg if self.use_critic else None,
                phase=self._phase,
            )
            self.step_problem = None
            bad_inputs = non_finite_rows(batch)
            if bad_inputs:
                metrics["training/non_finite_inputs"] = 1.0
                self.step_problem = f"non-finite {bad_inputs}: updates skipped"
                return metrics
            self.updating = True
            if self.use_critic:
                with self._phase("update_critic"):
                    out = self.critic_wg.update_critic(batch)
                    metrics.update(reduce_metrics(out.meta_info.get("metrics", {})))
            if self._actor_updates():
                with self._phase("update_actor"):
                    out = self.actor_rollout_wg.update_actor(batch)
                    metrics.update(reduce_metrics(out.meta_info.get("metrics", {})))
            if self.router is not None:  # the router head's own update (verl/router/controller.py)
                with self._phase("update_router"):
                    metrics.update(self.router.update(batch, self.actor_rollout_wg))
        skipped = metrics.get("actor/skipped_steps", 0.0)
        if skipped or not np.isfinite(metrics.get("actor/pg_loss", 0.0)):
            self.step_problem = f"non-finite actor loss or gradient ({skipped:.0f} mini-batch updates skipped)"
        else:
            self.step_problem = invalid_reward_problem(
                metrics,
                float(config.trainer.max_invalid_frac),
                getattr(self.reward_fn, "name", type(self.reward_fn).__name__),
                self.reward_errors,
            ) or agent_action_problem(metrics)
        self.last_batch = batch
        if "is_pad" in batch.non_tensor_batch:  # agent mode: inert padding rows stay out of the data metrics
            batch = batch[~batch.non_tensor_batch["is_pad"]]
        metrics.update(compute_data_metrics(batch, use_critic=self.use_critic))
        warn_zero_variance(
            metrics, float(config.trainer.warn_zero_std_frac), self.global_steps, actor_updated=self._actor_updates()
        )
        metrics.update(compute_timing_metrics(batch, timing))
        metrics.update(compute_throughput_metrics(batch, timing, self.n_workers))
        if self.mfu_meter is not None:
            epochs = self.config.actor_rollout_ref.actor.ppo_epochs
            metrics.update(self.mfu_meter(batch, timing, self.n_workers, epochs))
        return metrics

    def _greedy_baseline(self, batch: DataProto) -> torch.Tensor:
        """ReMax baseline: the reward of one greedy rollout per prompt, [B_prompts] (Li et al. 2023, eq. 5)."""
        out = self._responses(batch.select(batch_keys=GEN_KEYS, deepcopy=True), batch, do_sample=False, validate=True)
        out.non_tensor_batch = {**dict(batch.non_tensor_batch), **out.non_tensor_batch}
        return self.reward_fn(out, self.global_steps, return_dict=True)["reward_tensor"].sum(-1)

    # ------------------------------------------------------------------ validation
    def _validate(self) -> dict:
        """Validation metrics (:func:`verl.trainer.ppo.validation.validate`)."""
        from verl.trainer.ppo.validation import validate

        return validate(self)

    # ------------------------------------------------------------------ checkpoints
    def run_dir(self) -> str:
        cfg = self.config.trainer
        return cfg.run_dir or os.path.join("outputs", cfg.project_name, cfg.experiment_name)

    def _save_checkpoint(self) -> None:
        """Atomic checkpoint of workers and driver state (:func:`verl.trainer.ppo.checkpointing.save_checkpoint`)."""
        from verl.trainer.ppo.checkpointing import save_checkpoint

        save_checkpoint(self)

    def _load_checkpoint(self) -> None:
        """Resume from the newest valid checkpoint or ``resume_from_path``
        (:func:`verl.trainer.ppo.checkpointing.load_checkpoint`, which returns the run's :class:`TrainerState`)."""
        from verl.trainer.ppo.checkpointing import load_checkpoint

        self.state = load_checkpoint(self)

    # upstream verl's names for the counters, read by user code: views of self.state
    global_steps = property(
        lambda self: self.state.global_steps,
        lambda self, v: setattr(self.state, "global_steps", v),
        doc="TrainerState.global_steps",
    )
    epoch = property(
        lambda self: self.state.epoch, lambda self, v: setattr(self.state, "epoch", v), doc="TrainerState.epoch"
    )
    batches_consumed = property(
        lambda self: self.state.batches_consumed,
        lambda self, v: setattr(self.state, "batches_consumed", v),
        doc="TrainerState.batches_consumed",
    )
    run_id = property(lambda self: self.state.run_id, doc="TrainerState.run_id")
