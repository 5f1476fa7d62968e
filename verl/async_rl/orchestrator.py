"""Orchestrator of the asynchronous mode: starts and supervises every component, moves data between them, logs.

Design: ``docs/async.md``, sections "Orchestrator" and "Checkpoints and resume" (start the components with the
replicas of each env, coordinate training and rollout generation, log every metric; a killed env or inference actor is
restarted and training continues; a killed learner resumes from the last checkpoint and the replay buffers' logs are
reloaded).

Layout (one Ray actor per component, started with ``num_cpus=0`` so a small local cluster hosts them all):

* ``async.inference.num_servers`` :class:`~verl.async_rl.inference_server.InferenceServer` actors;
* one :class:`~verl.async_rl.learner.Learner` actor;
* ``replicas`` :class:`~agent_system.environments.env_actor.EnvActor` actors per env of ``async.envs``; replica
  ``i`` of all envs talks to server ``i mod num_servers``;
* on the driver: one :class:`~verl.async_rl.replay_buffer.ReplayBuffer` per env (logs under ``async.replay.log_dir``),
  the :class:`~verl.async_rl.batcher.Batcher`, the :class:`~verl.async_rl.learner.WeightBroadcaster`, the tracker.

Loop (:meth:`Orchestrator.run`): every env actor has one ``run_group`` call in flight (paused while the env's buffered
and in-flight rollouts reach ``async.max_buffer_rollouts``, when that is set; :meth:`_submit_envs`); finished groups
go into their buffer (``add_many`` with the learner's version). While the learner is idle the batcher tries to make a
batch (``BatchNotReady``: wait for more rollouts) and hands it to the learner; the learner trains while the envs keep
generating with the previous weights (that is the asynchrony, bounded by ``max_age``). When a step finishes: the
buffers move to the new version, the learner is asked for its weights (and a checkpoint every ``trainer.save_freq``
versions), the next batch goes to the learner when one is ready (not when a validation is due), the broadcaster pushes
the weights to every server while that step trains, the validation set is scored every ``trainer.test_freq`` versions
(``verl/async_rl/validation.py``), and one record of metrics is logged.

Failures: an env call that fails because its actor died restarts that actor; one that fails otherwise (the server did
not answer) pings the server and restarts it when dead (the new server gets the learner's current weights and
version before any env uses it); a failed broadcast restarts the failing servers. A dead learner is replaced by a new
one resumed from the newest checkpoint (version ``c``); every buffer reloads its log at ``c``, the servers are
restarted with the checkpoint's weights, and groups still in flight from before the restart are dropped (their
version numbers would clash with the versions the new learner reuses). Each kind of restart is counted in
``orchestrator/restarts/{env_actor,inference_server,learner}``; at most ``async.max_restarts`` in all.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from verl.async_rl.batcher import Batcher, BatchNotReady
from verl.async_rl.config import typed_async_config
from verl.async_rl.inference_server import check_backend, start_inference_server
from verl.async_rl.learner import WeightBroadcaster, make_learner_actor
from verl.async_rl.replay_buffer import ReplayBuffer
from verl.async_rl.types import Rollout

logger = logging.getLogger(__name__)

__all__ = ["Orchestrator"]


def _checkpoint_result(ref) -> str:
    """``ray.get`` of a learner save; a ``CheckpointError`` raised in the learner's process (a full or read-only disk)
    comes back as that error with its own message, not wrapped in the remote traceback, so ``main_async`` prints it as
    one line. Raises CheckpointError; other errors as ``ray.get`` raises them."""
    import ray
    from ray.exceptions import RayTaskError

    from verl.utils.checkpoint_manifest import CheckpointError

    try:
        return ray.get(ref)
    except RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, CheckpointError):
            raise CheckpointError(str(cause)) from None
        raise


class Orchestrator:
    """Starts the components described by ``config`` (the trainer config tree with its ``async`` section) and trains.

    Args: ``config``; ``tracker``: an object with ``log(dict, step)`` (e.g. ``verl.utils.tracking.Tracking``), or
    None (metrics are only returned by :meth:`run`); ``make_env_actor``: starts one environment actor,
    ``make_env_actor(name, spec, server_url, model_path, group_size=, max_tokens=, temperature=, max_turns=, seed=,
    seed_stride=, reward_manager=)`` -> a Ray actor handle whose ``run_group()`` returns a group as ``Rollout.to_dict()``
    dicts (the composition layer passes ``agent_system.environments.env_actor.make_env_actor``: the async core does not
    import the environments); ``make_reward_manager``: ``make_reward_manager(tokenizer, validation=False)`` builds the
    synchronous trainer's reward manager (training, or validation with ``reward_model.num_examine``), handed to the
    ``rlla`` env actors and the validator (the composition layer passes ``verl.trainer.main_async.make_reward_manager``
    bound to the config; it must pickle). Requires ``ray.init`` to have been called.

    Raises TypeError: no ``make_env_actor``, or no ``make_reward_manager`` while an ``rlla`` env or validation needs
    one. KeyError: no ``async`` section or no env in ``async.envs``. ValueError:
    an unknown ``async.inference.backend``, ``async.max_buffer_rollouts`` < 1, bad batcher / buffer settings (from
    :class:`Batcher` / :class:`ReplayBuffer`).
    """

    def __init__(
        self,
        config: DictConfig,
        tracker: Any = None,
        make_env_actor: Optional[Callable[..., Any]] = None,
        make_reward_manager: Optional[Callable[..., Any]] = None,
    ):
        if make_env_actor is None:
            raise TypeError("Orchestrator needs make_env_actor (agent_system.environments.env_actor.make_env_actor)")
        self.make_env_actor, self.make_reward_manager = make_env_actor, make_reward_manager
        config = typed_async_config(config)  # verl/async_rl/config.py: every value checked, attributes from here on
        a = config["async"]
        if not a.envs:
            raise KeyError("async.envs is empty: configure at least one env")
        check_backend(str(a.inference.backend))
        if a.max_buffer_rollouts is not None and int(a.max_buffer_rollouts) < 1:
            raise ValueError(f"async.max_buffer_rollouts must be null (no limit) or >= 1, got {a.max_buffer_rollouts}")
        self.config, self.a, self.tracker = config, a, tracker
        self.model_path = str(config.actor_rollout_ref.model.path)
        self.ckpt_dir = str(config.trainer.default_local_dir)
        self.save_freq = int(config.trainer.save_freq or -1)
        self.envs = {str(name): OmegaConf.to_container(spec, resolve=True) for name, spec in a.envs.items()}
        fractions = {n: float(s["fraction"]) for n, s in self.envs.items()}
        self.batcher = Batcher(
            int(a.batcher.total_token_budget),
            fractions,
            int(a.batcher.max_seq_len),
            str(a.batcher.spillover),
            order=str(a.batcher.order),
            max_groups=a.batcher.max_groups,
        )
        for name, groups in (self.batcher.group_quotas() or {}).items():
            need = groups * int(self.envs[name]["group_size"])
            if a.max_buffer_rollouts is not None and need > int(a.max_buffer_rollouts):
                logger.warning(
                    "async.max_buffer_rollouts (%d) is below the %d rollouts env %r brings to a batch under "
                    "async.batcher.max_groups (%d groups of %d): the last ones are generated one group at a time",
                    int(a.max_buffer_rollouts),
                    need,
                    name,
                    groups,
                    int(self.envs[name]["group_size"]),
                )
        self.broadcaster = WeightBroadcaster(float(a.broadcast_timeout_s))
        self.restarts: Counter = Counter()
        self.counts: Counter = Counter()
        self._filter: Counter = Counter()  # dynamic sampling since the last batch: groups generated, kept, filled
        self._first_reward_error: Optional[str] = None  # why the first unscorable rollout was not scored
        self._epoch = 0  # bumped by a learner restart; in-flight groups of an older epoch are dropped
        self._inflight: Dict[Any, Tuple[str, int, int]] = {}  # ref -> (env, replica, epoch)
        self._learner_ref = None
        self._pending_batch: Optional[Dict[str, float]] = None
        self._weights_ref = None  # the finished version's weights, asked for before the next step was submitted
        trainer = config.trainer
        self.test_freq, self.val_before_train = int(trainer.test_freq), bool(trainer.val_before_train)
        scored = [n for n, spec in self.envs.items() if spec["kind"] == "rlla"]
        if make_reward_manager is None and (scored or self.test_freq > 0 or self.val_before_train):
            raise TypeError(
                f"Orchestrator needs make_reward_manager (verl.trainer.main_async.make_reward_manager) to score "
                f"{'env(s) ' + str(scored) if scored else 'validation'}"
            )
        self.total_steps = trainer.total_training_steps
        self.validator = None  # the synchronous trainer's validation keys, on the servers (verl/async_rl/validation.py)
        self._validation_s = 0.0
        if self.test_freq > 0 or self.val_before_train:
            from transformers import AutoTokenizer

            from verl.async_rl.validation import AsyncValidator

            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            reward = make_reward_manager(tokenizer, validation=True)
            self.validator = AsyncValidator.from_config(config, tokenizer, reward)
        self._rows = self._load_rows(scored)  # {env: ObjectRef of its prompt rows}, loaded once
        self._start_learner()
        log_dir = Path(a.replay.log_dir or Path(self.ckpt_dir) / "replay")
        self.buffers: Dict[str, ReplayBuffer] = {}
        for name in self.envs:
            buffer = ReplayBuffer(
                name,
                log_dir,
                int(a.replay.max_age),
                int(a.replay.min_group_size),
                version=self.version,
            )
            if buffer.log_path.stat().st_size > 0:
                self.counts[f"reloaded/{name}"] = buffer.reload(self.version).restored
            self.buffers[name] = buffer
        self.servers: Dict[int, Any] = {}
        self.urls: Dict[int, str] = {}
        for index in range(int(a.inference.num_servers)):
            self._start_server(index)
        self.env_actors: Dict[Tuple[str, int], Any] = {}
        for name, spec in self.envs.items():
            for replica in range(int(spec["replicas"])):
                self._start_env_actor(name, replica)

    # ------------------------------------------------------------------------------------------ components
    def _load_rows(self, names: List[str]) -> Dict[str, Any]:
        """The prompt rows of each ``rlla`` env (``verl.async_rl.prompts``: its ``data_file`` or ``data.train_files``,
        its ``max_rows`` or ``data.max_samples``), in the object store. Raises what ``load_prompt_rows`` raises."""
        if not names:
            return {}
        import ray
        from transformers import AutoTokenizer

        from verl.async_rl.prompts import load_prompt_rows, train_files

        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        rows = {}
        for name in names:
            spec = self.envs[name]
            key = f"async.envs.{name}.data_file" if spec["data_file"] else "data.train_files"
            limit = spec["max_rows"] if spec["max_rows"] is not None else self.config.data.max_samples
            loaded = load_prompt_rows(self.config, train_files(self.config, spec["data_file"]), tokenizer, key, limit)
            logger.info("env %s: %d prompt rows (%s)", name, len(loaded), key)
            rows[name] = ray.put(loaded)
        return rows

    def _start_learner(self) -> None:
        # the synchronous trainer's actor worker (verl/async_rl/learner.py), on the trainer's device
        self.learner = make_learner_actor(
            OmegaConf.to_container(self.config, resolve=True),
            self.ckpt_dir,
            num_threads=self.a.learner_threads,
            num_gpus=1 if self.config.trainer.device == "cuda" else 0,
        )
        import ray

        self.version = int(ray.get(self.learner.resume.remote()))

    def _start_server(self, index: int) -> None:
        import ray

        old = self.servers.get(index)
        if old is not None:
            ray.kill(old, no_restart=True)
        server = start_inference_server(self.model_path, **self._server_options())
        self.urls[index] = ray.get(server.url.remote())
        if self.version > 0:
            # the weights of self.version: the learner may already train the next step, and a weights() call now
            # would wait for it and return newer weights under this version
            weights = self._weights_ref if self._weights_ref is not None else self.learner.weights.remote()
            ray.get(server.update_weights.remote(weights, self.version))
        self.servers[index] = server

    def _server_options(self) -> Dict[str, Any]:
        """Keyword arguments of ``start_inference_server`` from ``async.inference`` (backend, host, threads, GPUs, dtype
        and the vLLM engine options)."""
        inf = self.a.inference
        backend = str(inf.backend)
        options: Dict[str, Any] = dict(
            backend=backend, num_gpus=float(inf.num_gpus), dtype=inf.dtype, host=str(inf.host)
        )
        if backend == "hf":
            options["num_threads"] = inf.num_threads  # vLLM picks its own CPU threads
        else:
            import torch

            if torch.cuda.is_available() and options["num_gpus"] == 0:
                logger.warning(
                    "async.inference.backend=vllm with num_gpus=0 on a GPU machine: Ray hides the GPUs "
                    "from the server actor, so vLLM would need its CPU build; set "
                    "async.inference.num_gpus (a fraction shares a GPU with the learner)"
                )
            options.update(
                max_model_len=int(inf.vllm.max_model_len),
                engine_kwargs=OmegaConf.to_container(inf.vllm.engine_kwargs, resolve=True),
            )
        return options

    def _start_env_actor(self, name: str, replica: int) -> None:
        import ray

        old = self.env_actors.get((name, replica))
        if old is not None:
            ray.kill(old, no_restart=True)
        spec = self.envs[name]
        inf = self.a.inference
        # replica i of R draws problems seed + i, seed + i + R, ... (interleaved: with RLLA rows, the replicas' groups
        # are different rows; a restart skips 10,000 draws ahead, so it does not repeat its predecessor's problems)
        replicas = int(spec["replicas"])
        seed = int(spec["seed"]) + replica + replicas * 10_000 * self.restarts[f"env/{name}/{replica}"]
        self.env_actors[(name, replica)] = self.make_env_actor(
            name,
            spec,
            self.urls[replica % len(self.urls)],
            self.model_path,
            group_size=int(spec["group_size"]),
            max_tokens=int(inf.max_tokens),
            temperature=float(self.config.actor_rollout_ref.rollout.temperature),
            max_turns=int(spec["max_turns"]),
            seed=seed,
            seed_stride=replicas,
            **self._rlla_options(name),
        )

    def _rlla_options(self, name: str) -> Dict[str, Any]:
        """The keywords an ``rlla`` env actor takes (its rows, the reward manager, the row order of ``data.shuffle``
        and ``data.seed``, the format its tool calls are parsed with, ``data.tool_format``, and the longest sequence
        the batcher trains on, ``async.batcher.max_seq_len``, where its tool episodes stop); none for a
        ``text_env``."""
        if self.envs[name]["kind"] != "rlla":
            return {}
        data = self.config.data
        return {
            "rows": self._rows[name],
            "reward_manager": self.make_reward_manager,
            "shuffle_seed": int(data.seed) if data.shuffle else None,
            "tool_format": str(data.tool_format),
            "max_seq_len": int(self.a.batcher.max_seq_len),
        }

    def _restart(self, kind: str) -> None:
        self.restarts[kind] += 1
        total = sum(v for k, v in self.restarts.items() if "/" not in k)
        if total > int(self.a.max_restarts):
            raise RuntimeError(
                f"async: more than async.max_restarts={self.a.max_restarts} restarts ({dict(self.restarts)})"
            )

    def _restart_server(self, index: int) -> None:
        logger.warning("restarting inference server %d", index)
        self._restart("inference_server")
        self._start_server(index)
        for (name, replica), actor in self.env_actors.items():
            if replica % len(self.urls) == index:
                actor.set_url.remote(self.urls[index])  # queued before the actor's next run_group

    def _server_alive(self, index: int) -> bool:
        import ray

        try:
            return bool(ray.get(self.servers[index].ping.remote(), timeout=30))
        except Exception:  # noqa: BLE001 - dead or stuck
            return False

    def _recover_learner(self) -> None:
        logger.warning("learner died: resuming from the newest checkpoint under %s", self.ckpt_dir)
        self._restart("learner")
        import ray

        ray.kill(self.learner, no_restart=True)
        self._learner_ref, self._pending_batch, self._weights_ref = None, None, None
        self._start_learner()
        for name, buffer in self.buffers.items():
            self.counts[f"reloaded/{name}"] = buffer.reload(self.version).restored
        self._epoch += 1
        for index in list(self.servers):
            self._start_server(index)
        for key, actor in self.env_actors.items():
            actor.set_url.remote(self.urls[key[1] % len(self.urls)])

    # ----------------------------------------------------------------------------------------------- loop
    def _submit_envs(self) -> None:
        """One ``run_group`` in flight per idle env actor, while the env's buffered rollouts plus the rollouts its
        groups in flight will add stay below ``async.max_buffer_rollouts`` (back-pressure: rollouts beyond what the
        next batches take would only be evicted as stale, and their generation competes with the learner for CPU).
        An idle learner never starves: when it waits for a batch and none of the env's groups is in flight, one more
        group is requested whatever the buffer holds (a batch whose token share needs more rollouts than the limit
        still fills, one group at a time)."""
        busy, coming = set(), Counter()  # actors with a group in flight; rollouts in flight per env
        for env, replica, _ in self._inflight.values():
            busy.add((env, replica))
            coming[env] += int(self.envs[env]["group_size"])
        limit = self.a.max_buffer_rollouts
        for (name, replica), actor in self.env_actors.items():
            if (name, replica) in busy:
                continue
            full = limit is not None and len(self.buffers[name]) + coming[name] >= int(limit)
            starving = self._learner_ref is None and coming[name] == 0
            if full and not starving:
                continue
            self._inflight[actor.run_group.remote()] = (name, replica, self._epoch)
            coming[name] += int(self.envs[name]["group_size"])

    def _on_env_result(self, ref) -> None:
        import ray
        from ray.exceptions import RayActorError

        name, replica, epoch = self._inflight.pop(ref)
        try:
            dicts = ray.get(ref)
        except RayActorError:
            logger.warning("env actor %s/%d died: restarting it", name, replica)
            self._restart("env_actor")
            self.restarts[f"env/{name}/{replica}"] += 1
            self._start_env_actor(name, replica)
            return
        except Exception as exc:  # noqa: BLE001 - the env's inference call failed
            index = replica % len(self.urls)
            logger.warning("env %s/%d failed (%s); checking inference server %d", name, replica, exc, index)
            if not self._server_alive(index):
                self._restart_server(index)
            return
        if epoch != self._epoch:
            self.counts["dropped_after_learner_restart"] += len(dicts)
            return
        rollouts = [Rollout.from_dict(d) for d in dicts]
        self.counts["rollouts_generated"] += len(dicts)
        for rollout in rollouts:
            if not rollout.reward_valid:
                self.counts["rollouts_unscored"] += 1
                if self._first_reward_error is None:
                    self._first_reward_error = rollout.metadata.get("reward_error") or "no reason recorded"
        if not self._keep_group(rollouts):
            return
        results = self.buffers[name].add_many(rollouts, self.version)
        self.counts["rollouts_accepted"] += sum(bool(r) for r in results)

    def _keep_group(self, rollouts: List[Rollout]) -> bool:
        """DAPO's dynamic sampling (``algorithm.filter_groups``, ``verl/trainer/ppo/dynamic_sampling.py``) on one
        arriving group: one whose valid rollouts all have the same ``metric`` (the reward, or a named component) is
        dropped, unless ``max_num_gen_batches × max_groups`` groups already arrived since the last batch (then it is
        kept, as ``main_ppo`` fills a batch with zero-variance groups once its bound is reached). Counts go to the next
        batch's ``filter_groups/*`` metrics."""
        fg = self.config.algorithm.filter_groups
        if not fg.enable:
            return True
        import numpy as np

        from verl.trainer.ppo.dynamic_sampling import varied_groups

        metric = fg.metric or "score"
        values = [r.reward if metric in ("score", "seq_reward") else r.rewards.get(metric, 0.0) for r in rollouts]
        valid = [r.reward_valid for r in rollouts]
        self._filter["generated"] += 1
        if varied_groups(np.zeros(len(values)), np.asarray(values), np.asarray(valid)):
            self._filter["kept"] += 1
            return True
        bound = int(fg.max_num_gen_batches) * int(self.a.batcher.max_groups or 0)
        if bound and self._filter["generated"] > bound:
            self._filter["filled"] += 1
            return True
        return False

    def _try_batch(self) -> None:
        try:
            batch = self.batcher.make_batch(self.buffers)
        except BatchNotReady:
            return
        self._pending_batch = dict(batch.metrics)
        if self._filter:  # dynamic sampling: the groups that arrived since the previous batch
            seen = max(self._filter["generated"], 1)
            self._pending_batch.update(
                {
                    "filter_groups/kept_group_frac": self._filter["kept"] / seen,
                    "filter_groups/filled_groups": float(self._filter["filled"]),
                    "filter_groups/generated_groups": float(self._filter["generated"]),
                }
            )
            self._filter.clear()
        self._pending_batch["batches/rollouts"] = float(len(batch.layout))
        self._learner_ref = self.learner.step.remote(
            batch.example, batch.segment_groups(), batch.segment_valid(), batch.segment_truncated()
        )

    def _on_learner_result(self, t0: float, start_next: bool = True) -> Optional[Dict[str, float]]:
        """Finish one learner step: move the buffers to the new version, ask the learner for its weights (and a
        checkpoint when one is due), then, with ``start_next`` and no validation due at this version, hand the
        learner its next batch before the weights are broadcast. The learner actor runs calls in the order they were
        submitted, so the weights and the checkpoint are those of the finished step while the next step trains
        during the broadcast (which waits for the servers' generation in flight). A batch made here is one version
        behind the servers once they are updated: the usual one-step-off pipeline, within ``max_age`` >= 1.

        Returns the step's metrics record (``orchestrator/next_step_overlapped``: whether the next step was started
        here), or None when the learner died (it is replaced by :meth:`_recover_learner`)."""
        import ray
        from ray.exceptions import RayActorError

        ref, self._learner_ref = self._learner_ref, None
        batch_metrics, self._pending_batch = self._pending_batch or {}, None
        try:
            stats = ray.get(ref)
        except RayActorError:
            self._recover_learner()
            return None
        self.version = int(stats["learner/policy_version"])
        for buffer in self.buffers.values():
            buffer.set_version(self.version)
        weights = self._weights_ref = self.learner.weights.remote()
        save = (
            self.learner.save_checkpoint.remote(OmegaConf.to_container(self.config, resolve=True))
            if self.save_freq > 0 and self.version % self.save_freq == 0
            else None
        )
        last = self.total_steps is not None and self.version == int(self.total_steps)
        validate = self.test_freq > 0 and (last or self.version % self.test_freq == 0)
        if start_next and not validate:
            self._try_batch()
        sent = self.broadcaster.broadcast(self.servers, weights, self.version)
        for index in sent["failed"]:
            self._restart_server(index)
        if save is not None:
            _checkpoint_result(save)
        val = self._validate() if validate else {}
        elapsed = time.perf_counter() - t0
        metrics = {
            **batch_metrics,
            **stats,
            **sent["metrics"],
            **val,
            "policy_version": float(self.version),
            "orchestrator/next_step_overlapped": float(self._learner_ref is not None),
        }
        metrics.update({f"orchestrator/restarts/{k}": float(v) for k, v in self.restarts.items() if "/" not in k})
        metrics.update({f"orchestrator/{k}": float(v) for k, v in self.counts.items()})
        metrics["orchestrator/elapsed_s"] = elapsed
        metrics["orchestrator/validation_s"] = self._validation_s  # of elapsed_s: the learner waits meanwhile
        metrics["orchestrator/rollouts_per_s"] = self.counts["rollouts_generated"] / max(elapsed, 1e-9)
        return metrics

    def _validate(self) -> Dict[str, float]:
        """One validation pass at the current version on every server (``AsyncValidator.run``). A failed pass (a
        server died or answered with an error) is logged, restarts the dead servers and gives ``val/failed = 1``;
        training goes on."""
        start = time.perf_counter()
        try:
            return self.validator.run([self.urls[i] for i in sorted(self.urls)], self.version)
        except Exception as exc:  # noqa: BLE001 - a lost validation must not stop training
            logger.warning("validation at version %d failed: %r", self.version, exc)
            for index in list(self.servers):
                if not self._server_alive(index):
                    self._restart_server(index)
            return {"val/failed": 1.0}
        finally:
            self._validation_s += time.perf_counter() - start

    def run(self, num_steps: int, poll_s: float = 0.05, timeout_s: Optional[float] = None) -> List[Dict[str, float]]:
        """Train until ``num_steps`` more learner steps have finished; returns their metric records (also logged to
        the tracker with ``step = policy_version``). With ``trainer.save_freq > 0`` the learner checkpoints every
        ``save_freq`` versions and after the last step of the run. Validation (``docs/async.md`` "Validation"): with
        ``trainer.val_before_train`` at version 0 before any generation (logged at step 0, not returned), and with
        ``trainer.test_freq > 0`` after every ``test_freq``-th version and the run's last
        (``trainer.total_training_steps``), in that step's record.

        Raises TimeoutError: ``timeout_s`` passed first. RuntimeError: too many restarts. RunStopped: the reward
        scored none of the launch's rollouts (after the save).
        """
        import ray

        t0 = time.perf_counter()
        records: List[Dict[str, float]] = []
        if self.validator is not None and self.val_before_train and self.version == 0:
            before = self._validate()
            if self.tracker is not None:
                self.tracker.log(before, step=0)
        while len(records) < int(num_steps):
            if timeout_s is not None and time.perf_counter() - t0 > timeout_s:
                raise TimeoutError(f"async run: {len(records)}/{num_steps} steps after {timeout_s} s")
            self._submit_envs()
            if self._learner_ref is None:
                self._try_batch()
            refs = list(self._inflight) + ([self._learner_ref] if self._learner_ref is not None else [])
            ready, _ = ray.wait(refs, num_returns=1, timeout=poll_s)
            for ref in ready:
                if ref in self._inflight:
                    self._on_env_result(ref)
                elif ref == self._learner_ref:
                    metrics = self._on_learner_result(t0, start_next=len(records) + 1 < int(num_steps))
                    if metrics is not None:
                        metrics["orchestrator/learner_steps_per_s"] = (len(records) + 1) / metrics[
                            "orchestrator/elapsed_s"
                        ]
                        records.append(metrics)
                        if self.tracker is not None:
                            self.tracker.log(metrics, step=self.version)
        if records and self.save_freq > 0 and self.version % self.save_freq != 0:  # the last step, as the sync trainer
            _checkpoint_result(self.learner.save_checkpoint.remote(OmegaConf.to_container(self.config, resolve=True)))
        self._check_something_scored(len(records))
        return records

    def _check_something_scored(self, steps: int) -> None:
        """After a launch's steps (saved first): stop as ``main_ppo`` does when the reward scored none of its rollouts.

        Raises RunStopped: every rollout generated by this launch was invalid (the first failure named)."""
        from verl.trainer.ppo.run_guard import RunStopped

        generated, unscored = self.counts["rollouts_generated"], self.counts["rollouts_unscored"]
        if steps and generated and unscored == generated:
            raise RunStopped(
                f"the reward could not score any of the {generated} rollouts of this run's {steps} step(s): nothing "
                f"was learned; first failure: {self._first_reward_error}"
            )

    def shutdown(self) -> None:
        """Kill every actor this orchestrator started (an env actor's tool sandbox workers exit with it: their stdin
        closes) and close the buffers' logs."""
        import ray

        for actor in [self.learner, *self.servers.values(), *self.env_actors.values()]:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for buffer in self.buffers.values():
            buffer.close()
