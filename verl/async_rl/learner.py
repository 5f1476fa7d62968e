"""Learner and weight broadcaster of the asynchronous mode: the synchronous trainer's actor worker, fed the batcher's
batches.

Design: ``docs/async.md``, sections "Learner", "Weight broadcast", "Checkpoints and resume" and "Metrics". One
schedule differs from ``main_ppo``'s (rollouts come from the replay buffers instead of a synchronous generation);
what a step does with them is the synchronous trainer's:

* the model is ``verl.workers.fsdp_workers.ActorRolloutRefWorker`` (role ``actor``, or ``actor_rollout_ref`` when a
  reference policy is needed), hosted in this process by ``verl.single_controller.local.LocalWorkerGroup``: FSDP2 and
  the mixed-precision policy on CUDA, LoRA, gradient checkpointing, the learning-rate schedule, PPO epochs,
  mini-batches, micro-batches and dynamic batch sizes, exactly as ``actor_rollout_ref.*`` configures them;
* the packed :class:`~verl.async_rl.types.RlExample` is unpacked into verl's rows (:func:`example_to_batch`: one row
  per rollout, the prompt left-padded, the response right-padded, the observation tokens of multi-turn episodes
  inside the response with ``response_mask`` 0), each group of the batcher one ``uid``;
* then :func:`verl.trainer.ppo.update_inputs.prepare_update` (old log-probs of the current policy, the rollout
  correction against the inference server's log-probs, the reference log-probs, the KL penalty in the reward, the
  registered estimator ``algorithm.adv_estimator``) and the worker's ``update_actor``.

The mini-batch of ``actor.ppo_mini_batch_size`` prompts is ``ppo_mini_batch_size × rollout.n`` rows, as in
``main_ppo``. A batch of fewer rows is one mini-batch (``main_ppo`` refuses a ``data.train_batch_size`` below the
mini-batch; here the batcher sizes a batch); a larger one whose row count is not a multiple of it is padded with inert
rows (no response token, a group of their own: they add nothing to any loss, gradient or group statistic).

Checkpoints (``{dir}/global_step_{version}``): ``actor/`` (the worker's checkpoint: weights, optimizer, LR scheduler
and RNG states) and ``learner_state.json`` (the KL controller), published with the manifest utilities of
``verl.utils.checkpoint_manifest`` (atomic; a killed save is ignored on resume).
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from verl.async_rl.types import RlExample
from verl.protocol import DataProto
from verl.trainer.ppo.metric_utils import reduce_metrics
from verl.trainer.ppo.overlong import apply_overlong_shaping
from verl.trainer.ppo.update_inputs import prepare_update
from verl.utils import checkpoint_manifest as manifest
from verl.utils.torch_functional import masked_mean

logger = logging.getLogger(__name__)

__all__ = ["Learner", "WeightBroadcaster", "example_to_batch", "make_learner_actor", "pad_to_multiple"]

_STATE_FILE = "learner_state.json"


def example_to_batch(
    example: RlExample,
    segments: Sequence[Tuple[int, int, str]],
    pad_token_id: int,
    valid: Optional[Sequence[bool]] = None,
    truncated: Optional[Sequence[bool]] = None,
) -> DataProto:
    """The packed segments of ``example`` as the synchronous trainer's rows.

    Args:
        example: the batcher's packed batch.
        segments: ``(row, segment_id, group uid)`` per rollout to train on (``Batch.segment_groups``), in row order
            of the result.
        pad_token_id: the tokenizer's padding id.
        valid: per segment, whether the reward scored it (``Batch.segment_valid``); None: all did.
        truncated: per segment, whether a completion stopped at the length limit (``Batch.segment_truncated``);
            None: none did.
    Returns: a ``DataProto`` of ``S`` rows (segments without a generated token are left out): ``prompts`` [S, P]
        (left-padded), ``responses`` [S, R] (right-padded), ``input_ids`` / ``attention_mask`` / ``position_ids``
        [S, P + R] int64, ``response_mask`` [S, R] int64 (1 on generated tokens: 0 on observation tokens and padding),
        ``rollout_log_probs`` [S, R] float32 (the inference server's), ``token_level_scores`` [S, R] float32 (the
        reward on the last generated token); non-tensor ``uid`` (the group), ``reward_valid`` (bool: rows the reward
        could not score are left out of the advantage, as in the synchronous trainer) and ``truncated`` (bool). The
        prompt of a segment is everything before its first generated token.
    Raises ValueError: no segment has a generated token; ``valid`` or ``truncated`` and ``segments`` differ in length.
    """
    for name, flags in (("validity", valid), ("truncation", truncated)):
        if flags is not None and len(flags) != len(segments):
            raise ValueError(f"example_to_batch: {len(flags)} {name} flags for {len(segments)} segments")
    prompts, responses, masks, logps, scores, uids, keep, cut = [], [], [], [], [], [], [], []
    for i_seg, (row, seg, uid) in enumerate(segments):
        where = torch.nonzero(example.segment_ids[row] == seg).flatten()
        start, end = int(where[0]), int(where[-1]) + 1
        generated = torch.nonzero(example.loss_mask[row, start:end]).flatten()
        if generated.numel() == 0:
            continue
        first = start + int(generated[0])
        prompts.append(example.input_ids[row, start:first].long())
        responses.append(example.input_ids[row, first:end].long())
        masks.append(example.loss_mask[row, first:end].long())
        logps.append(example.policy_logprobs[row, first:end])
        scores.append(example.scores[row, first:end])
        uids.append(uid)
        keep.append(True if valid is None else bool(valid[i_seg]))
        cut.append(False if truncated is None else bool(truncated[i_seg]))
    if not uids:
        raise ValueError("the batch has no generated token to train on")
    size, width_p, width_r = len(uids), max(map(len, prompts)), max(map(len, responses))
    prompt_ids = torch.full((size, width_p), int(pad_token_id), dtype=torch.long)
    response_ids = torch.full((size, width_r), int(pad_token_id), dtype=torch.long)
    attention = torch.zeros(size, width_p + width_r, dtype=torch.long)
    tensors = {"response_mask": torch.zeros(size, width_r, dtype=torch.long)}
    tensors.update({k: torch.zeros(size, width_r) for k in ("rollout_log_probs", "token_level_scores")})
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        p, r = len(prompt), len(response)
        prompt_ids[i, width_p - p :] = prompt
        response_ids[i, :r] = response
        attention[i, width_p - p : width_p + r] = 1
        tensors["response_mask"][i, :r] = masks[i]
        tensors["rollout_log_probs"][i, :r] = logps[i]
        tensors["token_level_scores"][i, :r] = scores[i]
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    tensors.update(
        prompts=prompt_ids,
        responses=response_ids,
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
    )
    non_tensors = {
        "uid": np.array(uids, dtype=object),
        "reward_valid": np.array(keep, dtype=bool),
        "truncated": np.array(cut, dtype=bool),
    }
    return DataProto.from_dict(tensors, non_tensors=non_tensors)


def pad_to_multiple(batch: DataProto, multiple: int) -> Tuple[DataProto, int]:
    """Append inert rows until ``len(batch) % multiple == 0``: copies of row 0 with an empty response
    (``attention_mask`` and ``response_mask`` 0 over it, scores and rollout log-probs 0), each its own ``uid``, with
    ``reward_valid`` True and ``truncated`` False (when the batch has those columns).

    Returns: ``(batch, rows added)``.
    """
    missing = (-len(batch)) % int(multiple)
    if missing == 0:
        return batch, 0
    pad = batch[[0] * missing]
    tensors = {k: v.clone() for k, v in pad.batch.items()}
    width_r = tensors["responses"].shape[1]
    tensors["attention_mask"][:, -width_r:] = 0
    for key in ("response_mask", "token_level_scores", "rollout_log_probs"):
        tensors[key].zero_()
    non_tensors = {"uid": np.array([f"pad-{i}" for i in range(missing)], dtype=object)}
    for key, value in (("reward_valid", True), ("truncated", False)):
        if key in batch.non_tensor_batch:
            non_tensors[key] = np.full(missing, value, dtype=bool)
    return DataProto.concat([batch, DataProto.from_dict(tensors, non_tensors=non_tensors)]), missing


class Learner:
    """The policy under training (module docstring).

    Args:
        config: the whole trainer config (DictConfig or dict, after ``config_utils.normalize_config``): the worker
            reads ``actor_rollout_ref``; the step reads ``algorithm``.
        checkpoint_dir: where :meth:`save_checkpoint` publishes; :meth:`resume` reads it.
        num_threads: ``torch.set_num_threads`` (None: unchanged).

    Raises: what the worker raises for a bad ``actor_rollout_ref`` (batch arithmetic, device).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | DictConfig,
        checkpoint_dir: Optional[str] = None,
        num_threads: Optional[int] = None,
    ):
        from verl.single_controller.base import ClassWithInitArgs
        from verl.single_controller.local import LocalWorkerGroup
        from verl.trainer.ppo import core_algos
        from verl.workers.fsdp_workers import ActorRolloutRefWorker

        if num_threads:
            torch.set_num_threads(int(num_threads))
        cfg = config if isinstance(config, DictConfig) else OmegaConf.create(dict(config))
        self.config = cfg
        algorithm = cfg.algorithm
        self.use_reference_policy = bool(cfg.actor_rollout_ref.actor.use_kl_loss or algorithm.use_kl_in_reward)
        self.kl_ctrl_in_reward = core_algos.get_kl_controller(algorithm.kl_ctrl) if algorithm.use_kl_in_reward else None
        role = "actor_rollout_ref" if self.use_reference_policy else "actor"
        self.worker_group = LocalWorkerGroup(
            ClassWithInitArgs(ActorRolloutRefWorker, config=cfg.actor_rollout_ref, role=role)
        )
        self.worker_group.init_model()
        worker = self.worker_group.worker
        self.pad_token_id = int(worker.tokenizer.pad_token_id or 0)
        self.eos_token_id = worker.tokenizer.eos_token_id
        self.max_tokens = int(cfg["async"].inference.max_tokens) if "async" in cfg else None  # L_max of a completion
        self.mini_batch_rows = int(worker.config.actor.ppo_mini_batch_size)  # prompts × rollout.n (the worker's)
        self.version = 0
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None

    # ------------------------------------------------------------------------------------------------ step
    def step(
        self,
        example: RlExample,
        segments: Sequence[Tuple[int, int, str]],
        valid: Optional[Sequence[bool]] = None,
        truncated: Optional[Sequence[bool]] = None,
    ) -> Dict[str, float]:
        """One synchronous-trainer update on the packed batch (module docstring); bumps :attr:`version` by one.

        Args: ``example``, ``segments``, ``valid`` and ``truncated`` as :func:`example_to_batch` takes them. Before
        the update, DAPO's overlong shaping (``reward_model.overlong_buffer``, with ``L_max`` =
        ``async.inference.max_tokens``) and ``actor.mask_truncated`` act on the rows as in ``main_ppo``
        (``verl.trainer.ppo.overlong``).
        Returns metrics: the synchronous trainer's (``actor/*``, ``rollout_corr/*``, the estimator's and the KL
        penalty's), ``learner/logprob_gap`` (mean of inference − learner log-prob over the response tokens, before the
        update), ``learner/logprob_abs_gap``, ``learner/rows``, ``learner/pad_rows``, ``learner/tokens``,
        ``learner/loss_tokens``, ``learner/step_time_s``, ``learner/policy_version`` (the new version), and
        ``timing_s/{old_log_prob, ref, adv, update_actor}``.
        Raises ValueError: the batch has no generated token, or non-finite inputs reach the update (named).
        """
        from verl.trainer.ppo.run_guard import non_finite_rows

        start = time.perf_counter()
        batch = example_to_batch(example, segments, self.pad_token_id, valid, truncated)
        metrics: Dict[str, float] = apply_overlong_shaping(  # DAPO's, when on: after the reward, as in main_ppo
            batch,
            self.config,
            self.eos_token_id,
            max_length=self.max_tokens,
            truncated=torch.as_tensor(batch.non_tensor_batch["truncated"]),
        )
        rows = len(batch)
        batch, pads = pad_to_multiple(batch, self.mini_batch_rows) if rows > self.mini_batch_rows else (batch, 0)
        batch.meta_info["ppo_mini_batch_size"] = min(rows, self.mini_batch_rows)
        timing: Dict[str, float] = {}

        @contextmanager
        def timed(name: str):
            t0 = time.perf_counter()
            yield
            timing[name] = timing.get(name, 0.0) + time.perf_counter() - t0

        batch = prepare_update(
            batch,
            self.worker_group,
            self.config.algorithm,
            metrics,
            use_reference_policy=self.use_reference_policy,
            kl_ctrl_in_reward=self.kl_ctrl_in_reward,
            phase=timed,
        )
        bad = non_finite_rows(batch)
        if bad:
            raise ValueError(f"async learner: non-finite {bad} in the update inputs")
        with timed("update_actor"):
            out = self.worker_group.update_actor(batch)
        metrics.update(reduce_metrics(out.meta_info.get("metrics", {})))
        mask = batch.batch["response_mask"].bool()
        diff = batch.batch["rollout_log_probs"] - batch.batch["old_log_probs"]
        self.version += 1
        metrics.update(
            {
                "learner/logprob_gap": float(masked_mean(diff, mask)),
                "learner/logprob_abs_gap": float(masked_mean(diff.abs(), mask)),
                "learner/rows": float(len(batch) - pads),
                "learner/pad_rows": float(pads),
                "learner/tokens": float(example.num_tokens),
                "learner/loss_tokens": float(mask.sum()),
                "learner/step_time_s": time.perf_counter() - start,
                "learner/policy_version": float(self.version),
                **{f"timing_s/{k}": v for k, v in timing.items()},
            }
        )
        return metrics

    # --------------------------------------------------------------------------------------------- weights
    def policy_version(self) -> int:
        return self.version

    def weights(self) -> Dict[str, torch.Tensor]:
        """The model's full float32 CPU state dict under the plain model's names (LoRA: merged weights), what the
        broadcaster ships (``ActorRolloutRefWorker.get_state_dict``). On CPU without LoRA these are the live parameters,
        not copies (a Ray call returns a copy)."""
        return self.worker_group.get_state_dict()[0]  # ONE_TO_ALL: one result per rank (one rank)

    # ------------------------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, config: Optional[Mapping[str, Any]] = None) -> str:
        """Publish ``global_step_{version}`` under ``checkpoint_dir`` (the worker's ``actor/`` checkpoint, the KL
        controller; manifest last), with ``main_ppo``'s free-space check and disk-fault handling. Returns the
        directory. Raises ValueError: no ``checkpoint_dir``. CheckpointError: too little space, or the disk refused
        the write (the partial folder removed, the previous checkpoint kept)."""
        from verl.utils.checkpoint_space import check_free_space, estimate_bytes, raise_if_disk_fault

        if self.checkpoint_dir is None:
            raise ValueError("Learner.save_checkpoint needs checkpoint_dir (trainer.default_local_dir)")
        root = self.checkpoint_dir
        root.mkdir(parents=True, exist_ok=True)
        previous = manifest.latest_valid_checkpoint(root, check_hashes=False)
        needed = estimate_bytes(previous, self.config.actor_rollout_ref.model.path)
        if previous is not None:  # main_ppo's disk checks (verl/utils/checkpoint_space.py): after the first save
            check_free_space(root, needed, self.version)
        tmp = manifest.new_temp_dir(root, self.version)
        try:
            self.worker_group.save_checkpoint(str(tmp / "actor"), global_step=self.version)
            kl = self.kl_ctrl_in_reward.state_dict() if self.kl_ctrl_in_reward is not None else None
            (tmp / _STATE_FILE).write_text(json.dumps({"version": self.version, "kl_ctrl": kl}))
            manifest.write_manifest(
                tmp, step=self.version, epoch=0, config=dict(config or {}), world_size=1, version="async"
            )
            return str(manifest.publish_checkpoint(tmp, root, self.version))
        except Exception as exc:
            raise_if_disk_fault(exc, tmp, root, needed, self.version, previous)
            raise

    def resume(self) -> int:
        """Load the newest valid checkpoint under ``checkpoint_dir`` (if any) and return the policy version (0 when
        there is none)."""
        if self.checkpoint_dir is None:
            return self.version
        latest = manifest.latest_valid_checkpoint(self.checkpoint_dir)
        if latest is None:
            return self.version
        self.worker_group.load_checkpoint(str(latest / "actor"))
        state = json.loads((latest / _STATE_FILE).read_text())
        if self.kl_ctrl_in_reward is not None and state.get("kl_ctrl"):
            self.kl_ctrl_in_reward.load_state_dict(state["kl_ctrl"])
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
        failed: List[str] = []
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


def make_learner_actor(*args, num_cpus: float = 0, num_gpus: float = 0, **kwargs):
    """Start :class:`Learner` as a Ray actor (``num_cpus`` / ``num_gpus`` reserved: one GPU when the trainer's device
    is CUDA). One call at a time, in the order the calls were submitted: the orchestrator asks for a finished step's
    weights and checkpoint before it submits the next step (``Orchestrator._on_learner_result``) and relies on that
    order."""
    import ray

    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0, max_concurrency=1)(Learner).remote(
        *args, **kwargs
    )
