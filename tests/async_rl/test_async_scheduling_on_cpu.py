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
    orch.__dict__.update({"_filter": Counter(), **attrs})
    return orch


@pytest.mark.parametrize(
    "buffered, coming, learner_busy, expected",
    [
        # limit 16, groups of 4: 4 buffered + 3 groups coming reach 16, the 4th actor waits
        (4, 0, True, ["rlla/0", "rlla/1", "rlla/2"]),
        # the same while the learner waits for a batch: the limit holds as long as a group is coming
        (4, 0, False, ["rlla/0", "rlla/1", "rlla/2"]),
        # a full buffer and a busy learner: nobody is asked
        (16, 0, True, []),
        # a full buffer, an idle learner and nothing coming: one group, so a batch the limit cannot fill still fills
        (16, 0, False, ["rlla/0"]),
        # ... but not while one of the env's groups is still coming
        (12, 1, False, []),
    ],
)
def test_generation_requests_under_the_buffer_limit(buffered, coming, learner_busy, expected):
    log = []
    inflight = {f"ref{i}": ("rlla", 3 - i, 0) for i in range(coming)}
    orch = _bare(
        env_actors={("rlla", i): _EnvActor(log, f"rlla/{i}") for i in range(4)},
        _inflight=dict(inflight),
        envs={"rlla": {"group_size": 4}},
        a=SimpleNamespace(max_buffer_rollouts=16),
        buffers={"rlla": [None] * buffered},
        _learner_ref=object() if learner_busy else None,
        _epoch=0,
    )
    orch._submit_envs()
    assert log == expected
    assert len(orch._inflight) == coming + len(expected)
    log.clear()
    orch._submit_envs()  # actors with a group in flight are not asked again, and the limit is now reached
    assert log == []


def test_the_limit_is_per_env():
    """Two envs: ``a`` is at its limit, ``b`` is not; only ``b``'s idle actor is asked."""
    log = []
    orch = _bare(
        env_actors={(env, i): _EnvActor(log, f"{env}/{i}") for env in "ab" for i in range(2)},
        _inflight={"ref": ("b", 0, 0)},
        envs={"a": {"group_size": 2}, "b": {"group_size": 2}},
        a=SimpleNamespace(max_buffer_rollouts=4),
        buffers={"a": [None] * 4, "b": [None] * 0},
        _learner_ref=object(),
        _epoch=0,
    )
    orch._submit_envs()
    assert log == ["b/1"]


def test_no_limit_asks_every_idle_actor():
    log = []
    orch = _bare(
        env_actors={("rlla", i): _EnvActor(log, f"rlla/{i}") for i in range(3)},
        _inflight={"ref": ("rlla", 1, 0)},
        envs={"rlla": {"group_size": 4}},
        a=SimpleNamespace(max_buffer_rollouts=None),
        buffers={"rlla": [None] * 100},
        _learner_ref=object(),
        _epoch=0,
    )
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
    learner = SimpleNamespace(
        weights=_Method(log, "weights", {"w": version}),
        save_checkpoint=_Method(log, "save_checkpoint", "ckpt"),
        step=_Method(log, "step", {"learner/policy_version": float(version + 1)}),
    )
    flags = dict(segment_groups=list, segment_valid=list, segment_truncated=list)
    batch = SimpleNamespace(metrics={"batches/tokens": 7.0}, layout=[1, 2, 3], example="example", **flags)
    sent = []

    def broadcast(servers, weights, v):
        log.append("broadcast")
        sent.append((weights.value, v))
        return {"metrics": {"weights/broadcast_latency_s": 0.0}, "failed": []}

    def validate():
        log.append("validate")
        return {"val/test_score/rlla": 1.0}

    orch = _bare(
        _learner_ref=_Ref({"learner/policy_version": float(version)}),
        _pending_batch={"batches/tokens": 5.0, "batches/rollouts": 2.0},
        learner=learner,
        buffers={"rlla": _Buffer()},
        version=version - 1,
        save_freq=save_freq,
        test_freq=test_freq,
        total_steps=total_steps,
        config=OmegaConf.create({}),
        batcher=SimpleNamespace(make_batch=lambda buffers: batch),
        broadcaster=SimpleNamespace(broadcast=broadcast),
        servers={0: "server"},
        restarts=Counter(),
        counts=Counter(),
        _validation_s=0.0,
    )
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


def test_run_leaves_no_step_in_flight_and_restarts_servers_with_the_finished_weights(monkeypatch):
    """``run(3)``: every step's batch is ready when the previous one ends, so steps 2 and 3 start before their
    predecessor's broadcast, and no 4th step is started (nothing is left in flight when ``run`` returns). A server
    restarted while step 3 trains gets version 2's weights, not a ``weights()`` call queued behind step 3."""
    import ray

    orch, log, sent = _finished_step(monkeypatch, version=1)
    versions = iter(range(1, 10))
    orch.learner.step = _Method(
        log, "step", lambda example, segments, *flags: {"learner/policy_version": float(next(versions))}
    )
    orch.learner.weights = _Method(log, "weights", lambda: {"w": orch.version})
    orch._learner_ref, orch._pending_batch, orch.version = None, None, 0
    orch.tracker, orch.validator, orch.val_before_train, orch._inflight, orch.env_actors = None, None, False, {}, {}
    orch._weights_ref, orch.envs, orch.urls = None, {}, {0: "http://old"}
    orch.a = SimpleNamespace(max_buffer_rollouts=None, max_restarts=5)
    restarted = []  # what the restarted server was given: (weights, version)
    given = _Method(log, "update_weights", lambda weights, version: restarted.append((weights.value, version)))
    new_server = SimpleNamespace(url=_Method(log, "url", "http://new"), update_weights=given)
    import verl.async_rl.orchestrator as module

    monkeypatch.setattr(module, "start_inference_server", lambda model_path, **options: new_server)
    monkeypatch.setattr(ray, "kill", lambda actor, no_restart=True: None)
    orch.model_path, orch._server_options = "tiny", dict

    def broadcast(servers, weights, version):
        log.append("broadcast")
        sent.append((ray.get(weights), version))
        return {"metrics": {}, "failed": [0] if version == 2 else []}

    orch.broadcaster = SimpleNamespace(broadcast=broadcast)
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns, timeout: (refs[-1:], refs[:-1]))
    records = orch.run(3)
    assert [r["policy_version"] for r in records] == [1.0, 2.0, 3.0]
    assert [r["orchestrator/next_step_overlapped"] for r in records] == [1.0, 1.0, 0.0]
    assert log == [
        "step",
        "weights",
        "step",
        "broadcast",
        "weights",
        "step",
        "broadcast",
        "url",
        "update_weights",
        "weights",
        "broadcast",
    ]
    assert sent == [({"w": 1}, 1), ({"w": 2}, 2), ({"w": 3}, 3)] and restarted == [({"w": 2}, 2)]
    assert orch.restarts["inference_server"] == 1 and orch.urls[0] == "http://new"
    assert orch._learner_ref is None


def test_a_buffer_limit_below_one_is_refused_at_start():
    import os

    from hydra import compose, initialize_config_dir

    import verl.trainer

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="async_trainer", overrides=["async.max_buffer_rollouts=0"])
    with pytest.raises(ValueError, match="async.max_buffer_rollouts=0: expected >= 1"):  # the key table's range
        Orchestrator(config, make_env_actor=lambda *args, **kwargs: None)  # refused before any actor starts


def test_replicas_draw_interleaved_problems(monkeypatch):
    """Replica i of R starts at seed + i with stride R: with 32 RLLA rows (a size dividing the old 1e6 replica offset,
    which put every replica on the same row) the first three draws of 4 replicas are 12 different rows; a restarted
    replica keeps its residue and skips 10,000 draws ahead."""
    import ray

    monkeypatch.setattr(ray, "kill", lambda *args, **kwargs: None)
    calls = []
    rewards = object()
    orch = _bare(
        envs={"rlla": {"kind": "rlla", "seed": 0, "replicas": 4, "group_size": 4, "max_turns": 1}},
        env_actors={},
        restarts=Counter(),
        urls={0: "http://server"},
        model_path="tiny",
        a=SimpleNamespace(inference=SimpleNamespace(max_tokens=8), batcher=SimpleNamespace(max_seq_len=512)),
        config=SimpleNamespace(
            actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(temperature=1.0)),
            data=SimpleNamespace(shuffle=True, seed=7, tool_format="hermes"),
        ),
        make_env_actor=lambda *args, **kwargs: calls.append(kwargs) or object(),
        make_reward_manager=rewards,
        _rows={"rlla": "rows-ref"},
    )
    for replica in range(4):
        orch._start_env_actor("rlla", replica)
    assert [(c["seed"], c["seed_stride"]) for c in calls] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    # every replica gets the env's rows, the reward manager, data.shuffle's order from data.seed, the format its tool
    # calls are parsed with and the batcher's longest sequence (where its tool episodes stop)
    assert all(c["rows"] == "rows-ref" and c["reward_manager"] is rewards and c["shuffle_seed"] == 7 for c in calls)
    assert all(c["tool_format"] == "hermes" and c["max_seq_len"] == 512 for c in calls)
    rows = [(c["seed"] + k * c["seed_stride"]) % 32 for c in calls for k in range(3)]
    assert len(set(rows)) == 12
    orch.restarts["env/rlla/1"] += 1
    orch._start_env_actor("rlla", 1)
    assert (calls[-1]["seed"], calls[-1]["seed_stride"]) == (1 + 4 * 10_000, 4)


def test_env_actor_walks_its_seeds_with_the_stride(monkeypatch):
    from agent_system.environments.env_actor import EnvActor

    spec = {"kind": "text_env", "env": "line_world", "env_kwargs": {}}
    actor = EnvActor("line_world", spec, "http://server/v1", "tiny", group_size=2, seed=1, seed_stride=4)
    seen = []
    monkeypatch.setattr(actor, "_episode", lambda seed: seen.append(seed) or SimpleNamespace(to_dict=dict))
    for _ in range(3):
        actor.run_group()
    assert seen == [1, 1, 5, 5, 9, 9]  # group_size episodes of one seed, then the next seed a stride on
    with pytest.raises(ValueError, match="seed_stride must be >= 1, got 0"):
        EnvActor("line_world", spec, "http://server/v1", "tiny", seed_stride=0)
