"""run_guard: the fault-injection spec is parsed strictly, the phase an exception left is the innermost one, a TERM
fault is recorded by ExitRequest (save_on_exit) instead of killing the process, and a WORKER fault calls the killer."""

import signal

import pytest

from verl.trainer.ppo.run_guard import FAULT_ENV, ExitRequest, PhaseTracker, parse_faults


def test_parse_faults():
    assert parse_faults(None) == [] and parse_faults("") == []
    assert parse_faults("KILL@save_partial:2, TERM@gen:3") == [("KILL", "save_partial", 2), ("TERM", "gen", 3)]
    for bad in ("KILL@gen", "BOOM@gen:1", "KILL@:1", "KILL@gen:x", "gen:1"):
        with pytest.raises(ValueError, match=FAULT_ENV):
            parse_faults(bad)


def test_failed_phase_is_innermost_and_timed(monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    tracker, timing = PhaseTracker(), {}
    with pytest.raises(RuntimeError), tracker.phase("step", timing, 1):
        with tracker.phase("gen", timing, 1):
            pass
        with tracker.phase("update_actor", timing, 1):
            raise RuntimeError("worker died")
    assert tracker.failed_phase == "update_actor" and tracker.stack == []
    assert set(timing) == {"step", "gen", "update_actor"}
    with tracker.phase("step", timing, 2):  # a new outermost phase forgets the old failure
        assert tracker.failed_phase is None


def test_long_phases_log_a_heartbeat_and_the_step_is_left_to_the_step_heartbeat(monkeypatch, caplog):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    clock = iter([0.0, 0.0, 45.0, 45.0, 50.0, 60.0])  # perf_counter: step starts, gen 0→45, ref 45→50, step ends
    monkeypatch.setattr("verl.trainer.ppo.metric_utils.time.perf_counter", lambda: next(clock))
    tracker, timing = PhaseTracker(heartbeat_s=30.0), {}
    with caplog.at_level("INFO", logger="verl.trainer.ppo.run_guard"), tracker.phase("step", timing, 7):
        with tracker.phase("gen", timing, 7):
            pass
        with tracker.phase("ref", timing, 7):
            pass
    beats = [r.getMessage() for r in caplog.records if "[heartbeat]" in r.getMessage()]
    assert beats == ["[heartbeat] step 7: gen 45.0 s"] and timing == {"step": 60.0, "gen": 45.0, "ref": 5.0}


def test_term_fault_is_recorded_by_save_on_exit_and_worker_fault_kills(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "TERM@gen:3,WORKER@update_actor:3")
    killed = []
    tracker = PhaseTracker(kill_worker=lambda: killed.append(True))
    exit_request = ExitRequest(enabled=True)
    try:
        with tracker.phase("gen", {}, 2):  # other step: nothing
            pass
        assert exit_request.signum is None
        with tracker.phase("gen", {}, 3):
            pass
        assert exit_request.signum == signal.SIGTERM
        with tracker.phase("update_actor", {}, 3):
            pass
        assert killed == [True]
    finally:
        exit_request.restore()
    monkeypatch.setenv(FAULT_ENV, "WORKER@gen:1")
    with pytest.raises(RuntimeError, match="no worker to kill"):
        PhaseTracker().fault_point("gen", 1)


def test_check_weight_version_is_loud_when_a_sync_was_missed():
    from verl.trainer.ppo.run_guard import WeightSyncError, check_weight_version

    assert check_weight_version({}) is None  # a worker that reports nothing
    assert check_weight_version({"rollout_weight_version": 3, "actor_weight_version": 3}) == 3
    with pytest.raises(WeightSyncError, match="weights of update 2, but the actor is at update 3"):
        check_weight_version({"rollout_weight_version": 2, "actor_weight_version": 3})
