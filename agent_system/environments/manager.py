"""Batched environments: ``num_tasks`` task groups × ``group_n`` copies, stepped by Ray env workers.

``EnvironmentManager.reset(task_seeds)`` starts ``len(task_seeds) * group_n`` episodes: the ``group_n`` copies of one
task share its seed and its ``uid`` (the group of GRPO/GiGPO), every instance has its own ``traj_uid``.
``step(text_actions)`` projects each model output to an action (``<action>…</action>``), steps the active instances
and returns ``(obs, rewards, dones, infos)`` with ``obs = {"text": [...], "anchor": [...], "image": None}``.

The instances live in ``num_workers`` Ray actors (``EnvWorker``) so that slow environments run beside each other and
outside the driver; ``use_ray=False`` keeps them in-process (same code). A crashing instance is rebuilt by its worker
and its episode ends with ``info['env_error']`` set and ``info['traj_valid']=False``; a worker process that dies is
restarted and all its episodes are ended the same way. Nothing is dropped: the caller keeps the rows of such
trajectories and excludes them from the advantage estimate (``reward_valid=False``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from agent_system.environments.base import StepResult, make_env, project_action, split_step
import itertools

logger = logging.getLogger(__name__)


class EnvWorker:
    """Hosts some environment instances; used directly (in-process) or as a Ray actor.

    Args:
        env_name: registered environment name (``env.env_name``).
        env_kwargs: keyword settings of every instance (``env.<env_name>`` in the config).
        count: how many instances this worker owns.
    """

    def __init__(self, env_name: str, env_kwargs: Dict[str, Any], count: int):
        self.env_name, self.env_kwargs = env_name, dict(env_kwargs)
        self.envs = [make_env(env_name, **self.env_kwargs) for _ in range(count)]

    def _rebuild(self, i: int) -> None:
        try:
            self.envs[i].close()
        except Exception:  # noqa: BLE001 - the instance is already broken; a new one replaces it
            pass
        self.envs[i] = make_env(self.env_name, **self.env_kwargs)

    def reset(self, seeds: Sequence[int], step: int = 0) -> List[Tuple]:
        """Reset instance ``i`` with ``seeds[i]`` at the trainer's global ``step`` (``TextEnv.training_step``);
        returns ``(text, anchor, reward, done, info)`` per instance."""
        out = []
        for i, seed in enumerate(seeds):
            try:
                self.envs[i].training_step = int(step)
                out.append(split_step(self.envs[i].reset(int(seed))))
            except Exception as exc:  # noqa: BLE001 - one bad instance must not kill the batch
                logger.error(
                    "%s instance %d: reset(seed=%s) failed: %r; rebuilt, episode marked invalid",
                    self.env_name,
                    i,
                    seed,
                    exc,
                )
                self._rebuild(i)
                out.append(_failed_step(f"reset failed: {exc!r}"))
        return out

    def step(self, actions: Sequence[Optional[str]], active: Sequence[bool]) -> List[Optional[Tuple]]:
        """Play ``actions[i]`` on every instance with ``active[i]``; inactive instances return None."""
        out: List[Optional[Tuple]] = []
        for i, (action, on) in enumerate(zip(actions, active)):
            if not on:
                out.append(None)
                continue
            try:
                out.append(split_step(self.envs[i].step(action)))
            except Exception as exc:  # noqa: BLE001 - restart the instance, end its episode as invalid
                logger.error(
                    "%s instance %d: step(%r) failed: %r; rebuilt, episode marked invalid",
                    self.env_name,
                    i,
                    action,
                    exc,
                )
                self._rebuild(i)
                out.append(_failed_step(f"step failed: {exc!r}"))
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _failed_step(reason: str) -> Tuple:
    return split_step(
        StepResult(
            f"[environment error: {reason}]",
            None,
            0.0,
            True,
            {"env_error": reason, "traj_valid": False, "is_action_valid": False},
        )
    )


class EnvironmentManager:
    """``num_tasks × group_n`` environment instances behind one batched ``reset``/``step``.

    Args:
        env_name: registered environment name; env_kwargs: its settings.
        num_tasks: task groups per batch; group_n: copies per task (``env.rollout.n``).
        history_length: how many past (action, observation) pairs the prompt text repeats (0 = none).
        num_workers: Ray env workers (instances are split evenly); use_ray: False = in-process workers.
        action_tag: the tag :func:`project_action` parses.
        prompt_suffix: text ending every prompt (e.g. RLVCR's thinking-level guide, ``rlvcr.prompts.level_guide``).

    Raises:
        ValueError: ``num_tasks``/``group_n``/``num_workers`` < 1 or ``history_length`` < 0.
    """

    def __init__(
        self,
        env_name: str,
        env_kwargs: Optional[Dict[str, Any]] = None,
        num_tasks: int = 1,
        group_n: int = 1,
        history_length: int = 2,
        num_workers: int = 1,
        use_ray: bool = True,
        action_tag: str = "action",
        prompt_suffix: str = "",
    ):
        for key, value, low in (
            ("num_tasks", num_tasks, 1),
            ("group_n (env.rollout.n)", group_n, 1),
            ("num_workers", num_workers, 1),
            ("history_length", history_length, 0),
        ):
            if int(value) < low:
                raise ValueError(f"env manager: {key} must be >= {low}, got {value}")
        self.env_name, self.env_kwargs = env_name, dict(env_kwargs or {})
        self.num_tasks, self.group_n = int(num_tasks), int(group_n)
        self.n = self.num_tasks * self.group_n
        self.history_length, self.action_tag, self.use_ray = int(history_length), action_tag, bool(use_ray)
        self.prompt_suffix = prompt_suffix
        workers = min(int(num_workers), self.n)
        bounds = np.linspace(0, self.n, workers + 1).astype(int)
        self.slices = [slice(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        self.workers = [self._start_worker(s.stop - s.start) for s in self.slices]
        probe = make_env(env_name, **self.env_kwargs)
        self.instruction = probe.instruction  # an environment may give a per-task one in reset's info['instruction']
        self.raw_text_actions = bool(getattr(probe, "raw_text_actions", False))  # the whole output is the action
        probe.close()
        self.instructions: List[str] = [self.instruction] * self.n
        self.uid = np.array([], dtype=object)
        self.traj_uid = np.array([], dtype=object)
        self.active = np.zeros(self.n, dtype=bool)
        self.history: List[List[Tuple[str, str]]] = [[] for _ in range(self.n)]
        self.last_text: List[str] = [""] * self.n
        self.step_count = 0
        self.restarts = 0

    # ---- workers -------------------------------------------------------------------------------------------------
    def _start_worker(self, count: int):
        if not self.use_ray:
            return EnvWorker(self.env_name, self.env_kwargs, count)
        import ray

        return ray.remote(num_cpus=0)(EnvWorker).remote(self.env_name, self.env_kwargs, count)

    def _call(self, method: str, per_worker_args: List[tuple]) -> List[List]:
        """Call ``method`` on every worker (in parallel with Ray); a dead worker is restarted and its instances'
        results are replaced by failed steps."""
        if not self.use_ray:
            return [getattr(w, method)(*args) for w, args in zip(self.workers, per_worker_args)]
        import ray

        refs = [getattr(w, method).remote(*args) for w, args in zip(self.workers, per_worker_args)]
        results = []
        for k, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:  # the worker process died: restart it
                logger.error(
                    "env worker %d died during %s: %s; restarted, its %d episodes marked invalid",
                    k,
                    method,
                    exc,
                    self.slices[k].stop - self.slices[k].start,
                )
                self.restarts += 1
                self.workers[k] = self._start_worker(self.slices[k].stop - self.slices[k].start)
                results.append(
                    [
                        _failed_step(f"env worker died: {type(exc).__name__}")
                        for _ in range(self.slices[k].stop - self.slices[k].start)
                    ]
                )
        return results

    def _gather(self, per_worker: List[List]) -> List:
        return [item for chunk in per_worker for item in chunk]

    # ---- batched API -------------------------------------------------------------------------------------------
    def reset(self, task_seeds: Sequence[int], step: int = 0) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
        """Start one episode per instance: copy ``j`` of task ``i`` (row ``i * group_n + j``) gets ``task_seeds[i]``;
        ``step`` (the trainer's global step) reaches every instance as ``TextEnv.training_step``.

        Returns:
            ``obs`` (``text``: prompt strings with the instruction; ``anchor``: raw observations; ``image``: None)
            and ``infos`` (one dict per instance, with ``uid`` and ``traj_uid``).
        Raises:
            ValueError: ``len(task_seeds) != num_tasks``.
        """
        if len(task_seeds) != self.num_tasks:
            raise ValueError(f"reset got {len(task_seeds)} task seeds, the manager has num_tasks={self.num_tasks}")
        seeds = np.repeat(np.asarray(task_seeds, dtype=np.int64), self.group_n)
        task_uids = [str(uuid.uuid4()) for _ in range(self.num_tasks)]
        self.uid = np.array([task_uids[i // self.group_n] for i in range(self.n)], dtype=object)
        self.traj_uid = np.array([str(uuid.uuid4()) for _ in range(self.n)], dtype=object)
        results = self._gather(self._call("reset", [(seeds[s].tolist(), int(step)) for s in self.slices]))
        self.active = np.array([not r[3] for r in results], dtype=bool)
        self.history = [[] for _ in range(self.n)]
        self.step_count = 0
        infos = []
        for i, (text, _anchor, _r, _d, info) in enumerate(results):
            self.last_text[i] = text
            self.instructions[i] = info.pop("instruction", self.instruction)
            infos.append({**info, "uid": self.uid[i], "traj_uid": self.traj_uid[i], "seed": int(seeds[i])})
        return self._obs(results), infos

    def step(self, text_actions: Sequence[Optional[str]]) -> Tuple[Dict[str, Any], np.ndarray, np.ndarray, List]:
        """Project and play one model output per instance (outputs of inactive instances are ignored).

        Args:
            text_actions: ``n`` decoded responses (None or anything for instances already done).
        Returns:
            ``obs``, ``rewards`` float64 ``[n]`` (0 for inactive), ``dones`` bool ``[n]`` (True stays True), ``infos``
            (``is_action_valid``, ``won``, ``action`` (the projected string or None), ``traj_valid``, env keys;
            ``{}`` for instances that were already done).
        Raises:
            ValueError: ``len(text_actions) != n``.
        """
        if len(text_actions) != self.n:
            raise ValueError(f"step got {len(text_actions)} actions for {self.n} environment instances")
        actions = [
            None if not on or t is None else t if self.raw_text_actions else project_action(t, self.action_tag)
            for t, on in zip(text_actions, self.active)
        ]
        active = self.active.copy()
        results = self._gather(self._call("step", [(actions[s], active[s].tolist()) for s in self.slices]))
        rewards, dones, infos = np.zeros(self.n), ~active, []
        for i, result in enumerate(results):
            if result is None:
                infos.append({})
                continue
            text, _anchor, reward, done, info = result
            if actions[i] is None:
                info["is_action_valid"] = False
            info["action"] = actions[i]
            rewards[i], dones[i] = reward, done
            if self.history_length:
                self.history[i] = (self.history[i] + [(actions[i] or "(no valid action)", self.last_text[i])])[
                    -self.history_length :
                ]
            self.last_text[i] = text
            infos.append(info)
        self.active = active & ~dones
        self.step_count += 1
        return self._obs(results), rewards, dones.copy(), infos

    def _obs(self, results: List[Optional[Tuple]]) -> Dict[str, Any]:
        texts, anchors = [], []
        for i, result in enumerate(results):
            anchors.append(None if result is None else result[1])
            texts.append(self.prompt_text(i))
        return {"text": texts, "anchor": anchors, "image": None}

    def prompt_text(self, i: int) -> str:
        """The user message for instance ``i``: the instruction, the last ``history_length`` (observation, action)
        pairs, the current observation, and ``prompt_suffix`` when set."""
        parts = [self.instructions[i]] if self.instructions[i] else []
        if self.history[i]:
            lines = [f"Observation: {obs}\nYour action: {act}" for act, obs in self.history[i]]
            parts.append(f"Your last {len(lines)} turn(s):\n" + "\n".join(lines))
        answer = (
            ""
            if self.raw_text_actions
            else f"\nAnswer with your next action inside <{self.action_tag}></{self.action_tag}>."
        )
        parts.append(f"Current observation (turn {self.step_count + 1}):\n{self.last_text[i]}{answer}")
        if self.prompt_suffix:
            parts.append(self.prompt_suffix)
        return "\n\n".join(parts)

    def close(self) -> None:
        if self.use_ray:
            import ray

            for w in self.workers:
                ray.kill(w)
        else:
            for w in self.workers:
                w.close()
