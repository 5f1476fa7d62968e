"""The orchestrator's scheduling decisions (verl/async_rl/orchestrator.py), with fake actors and no Ray cluster:
which env actors get a generation request under ``async.max_buffer_rollouts``, and the order of the learner calls
around a finished step (weights and checkpoint of the finished version first, then the next step, before the
broadcast). The end-to-end behaviour with real actors is in test_async_orchestrator_on_cpu.py."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl.async_rl.orchestrator import Orchestrator


class _Ref:
    """Stands in for a Ray ObjectRef: ``ray.get`` (patched) returns ``value``."""

    def __init__(self, value):
        self.value = value


class _Method:
    def __init__(self, log, name, result):
        self.log, self.name, self.result = log, name, result

    def remote(self, *args):
        self.log.append(self.name)
        return _Ref(self.result(*args) if callable(self.result) else self.result)


class _EnvActor:
    def __init__(self, log, name):
        self.run_group = _Method(log, name, [])


def _bare(**attrs) -> Orchestrator:
    orch = object.__new__(Orchestrator)  # the scheduling methods only, without starting any component
    orch.__dict__.update(attrs)
    return orch


@pytest.mark.parametrize(
    "buffered, learner_busy, expected",
    [
        # limit 16, groups of 4: 4 buffered + 3 groups coming reach 16, the 4th actor waits
        (4, True, ["rlla/0", "rlla/1", "rlla/2"]),
        # the same while the learner waits for a batch: the limit holds as long as a group is coming
        (4, False, ["rlla/0", "rlla/1", "rlla/2"]),
        # a full buffer and a busy learner: nobody is asked
        (16, True, []),
        # a full buffer, an idle learner and nothing coming: one group, so a batch the limit cannot fill still fills
        (16, False, ["rlla/0"]),
    ],
)
def test_generation_requests_under_the_buffer_limit(buffered, learner_busy, expected):
    log = []
    orch = _bare(env_actors={("rlla", i): _EnvActor(log, f"rlla/{i}") for i in range(4)}, _inflight={},
                 envs={"rlla": {"group_size": 4}}, a=SimpleNamespace(max_buffer_rollouts=16),
                 buffers={"rlla": [None] * buffered}, _learner_ref=object() if learner_busy else None, _epoch=0)
    orch._submit_envs()
    assert log == expected
    assert sorted(env for env, _, _ in orch._inflight.values()) == ["rlla"] * len(expected)
    log.clear()
    orch._submit_envs()  # actors with a group in flight are not asked again
    assert log == []


def test_no_limit_asks_every_idle_actor():
    log = []
    orch = _bare(env_actors={("rlla", i): _EnvActor(log, f"rlla/{i}") for i in range(3)},
                 _inflight={"ref": ("rlla", 1, 0)}, envs={"rlla": {"group_size": 4}},
                 a=SimpleNamespace(max_buffer_rollouts=None), buffers={"rlla": [None] * 100}, _learner_ref=object(),
                 _epoch=0)
    orch._submit_envs()
    assert log == ["rlla/0", "rlla/2"]


class _Buffer(list):
    def __init__(self):
        super().__init__()
        self.versions = []

    def set_version(self, version):
        self.versions.append(version)


def _finished_step(monkeypatch, version, save_freq=-1, test_freq=-1, total_steps=10):
    """An orchestrator whose learner just finished the step that makes ``version``; returns it and the call log."""
    import ray

    monkeypatch.setattr(ray, "get", lambda ref, timeout=None: ref.value)
    log = []
    learner = SimpleNamespace(weights=_Method(log, "weights", {"w": version}),
                              save_checkpoint=_Method(log, "save_checkpoint", "ckpt"),
                              step=_Method(log, "step", {"learner/policy_version": float(version + 1)}))
    batch = SimpleNamespace(metrics={"batches/tokens": 7.0}, layout=[1, 2, 3], example="example")
    sent = []

    def broadcast(servers, weights, v):
        log.append("broadcast")
        sent.append((weights.value, v))
        return {"metrics": {"weights/broadcast_latency_s": 0.0}, "failed": []}

    def validate():
        log.append("validate")
        return {"val/test_score/rlla": 1.0}

    orch = _bare(_learner_ref=_Ref({"learner/policy_version": float(version)}),
                 _pending_batch={"batches/tokens": 5.0, "batches/rollouts": 2.0}, learner=learner,
                 buffers={"rlla": _Buffer()}, version=version - 1, save_freq=save_freq, test_freq=test_freq,
                 total_steps=total_steps, config=OmegaConf.create({}),
                 batcher=SimpleNamespace(make_batch=lambda buffers: batch),
                 broadcaster=SimpleNamespace(broadcast=broadcast), servers={0: "server"}, restarts=Counter(),
                 counts=Counter(), _validation_s=0.0)
    orch._validate = validate
    return orch, log, sent


def test_next_step_starts_before_the_broadcast_with_the_finished_weights(monkeypatch):
    orch, log, sent = _finished_step(monkeypatch, version=4, save_freq=2)
    metrics = orch._on_learner_result(0.0)
    # the learner actor runs calls in submission order: weights and checkpoint are version 4's, then step 5 trains
    # while the servers are updated
    assert log == ["weights", "save_checkpoint", "step", "broadcast"]
    assert sent == [({"w": 4}, 4)] and orch.buffers["rlla"].versions == [4] and orch.version == 4
    assert metrics["batches/tokens"] == 5.0 and metrics["orchestrator/next_step_overlapped"] == 1.0  # step 4's batch
    assert orch._pending_batch == {"batches/tokens": 7.0, "batches/rollouts": 3.0}  # the next step's, kept for it
    assert orch._learner_ref is not None


@pytest.mark.parametrize("case", ["validation_due", "last_step_of_the_run"])
def test_no_next_step_while_validating_or_after_the_last_step(monkeypatch, case):
    orch, log, _ = _finished_step(monkeypatch, version=6, test_freq=3 if case == "validation_due" else -1)
    metrics = orch._on_learner_result(0.0, start_next=case != "last_step_of_the_run")
    expected = ["weights", "broadcast", "validate"] if case == "validation_due" else ["weights", "broadcast"]
    assert log == expected
    assert orch._learner_ref is None and metrics["orchestrator/next_step_overlapped"] == 0.0
