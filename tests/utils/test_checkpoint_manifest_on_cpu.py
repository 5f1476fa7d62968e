"""Checkpoint manifests: a half-written or corrupted checkpoint never counts for resume, rotation never deletes the
newest valid checkpoint, and a config change on a resume key is reported by name."""

import logging

import pytest

from verl.utils import checkpoint_manifest as cm

CONFIG = {"data": {"train_batch_size": 8, "seed": 1}, "actor_rollout_ref": {"model": {"path": "m"}}}


def _save(root, step, payload=b"weights", run_id=None):
    tmp = cm.new_temp_dir(root, step)
    (tmp / "actor").mkdir()
    (tmp / "actor" / "model.pt").write_bytes(payload)
    (tmp / "data.pt").write_bytes(b"state")
    cm.write_manifest(tmp, step=step, epoch=0, config=CONFIG, world_size=1, version="t", run_id=run_id)
    return cm.publish_checkpoint(tmp, root, step, run_id=run_id)


def test_publish_and_verify(tmp_path):
    step_dir = _save(tmp_path, 3)
    assert step_dir.name == "global_step_3"
    assert (tmp_path / cm.TRACKER).read_text() == "3"
    manifest = cm.verify_checkpoint(step_dir)
    assert {f["path"] for f in manifest["files"]} == {"actor/model.pt", "data.pt"}
    assert manifest["resume_keys"]["data.train_batch_size"] == 8
    assert not list(tmp_path.glob(cm.TMP_PREFIX + "*"))


def test_half_written_and_corrupted_checkpoints_are_skipped(tmp_path, caplog):
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    # a save killed before its manifest: a renamed directory without manifest (or a leftover temp dir)
    (tmp_path / "global_step_3" / "actor").mkdir(parents=True)
    cm.new_temp_dir(tmp_path, 4)  # leftover temp dir: never a candidate
    # step 2 corrupted after the fact (same size, other bytes)
    (tmp_path / "global_step_2" / "actor" / "model.pt").write_bytes(b"WEIGHTS")
    with caplog.at_level(logging.WARNING):
        assert cm.latest_valid_checkpoint(tmp_path) == tmp_path / "global_step_1"
    assert "no manifest.json" in caplog.text and "does not match its SHA-256" in caplog.text
    with pytest.raises(cm.CheckpointError, match="model.pt is missing"):
        (tmp_path / "global_step_1" / "actor" / "model.pt").unlink()
        cm.verify_checkpoint(tmp_path / "global_step_1")
    assert cm.latest_valid_checkpoint(tmp_path) is None


def test_rotation_keeps_newest_valid(tmp_path):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step)
    (tmp_path / "global_step_4" / cm.MANIFEST).unlink()  # newest is invalid
    removed = cm.rotate_checkpoints(tmp_path, keep=1)
    left = sorted(p.name for p in cm.step_dirs(tmp_path))
    # step 4 (invalid, newer than every valid one) and step 3 (newest valid) survive
    assert left == ["global_step_3", "global_step_4"], left
    assert sorted(p.name for p in removed) == ["global_step_1", "global_step_2"]
    assert cm.rotate_checkpoints(tmp_path, keep=None) == []


def test_config_differences_name_keys():
    saved = cm.flatten(CONFIG)
    current = cm.flatten({"data": {"train_batch_size": 16, "seed": 1}, "actor_rollout_ref": {"model": {"path": "m"}}})
    diffs = cm.config_differences(saved, current)
    assert diffs == ["data.train_batch_size: checkpoint 8 -> now 16"]
    assert cm.config_differences(saved, current, allowed=["data.train_batch_size"]) == []


def test_router_mode_change_is_refused_on_resume():
    # a policy-mode head (e.g. the main job's option_a recipe) resumed under the value_ridge recipe: its state has
    # another meaning there, so resuming must be refused unless trainer.resume_allow_changes names the keys
    saved = cm.flatten({"router": {"route_sampling": "policy", "loss_mode": "pg", "value_fit": "sgd"}})
    current = cm.flatten({"router": {"route_sampling": "stratified", "loss_mode": "value", "value_fit": "ridge"}})
    assert cm.config_differences(saved, current) == [
        "router.route_sampling: checkpoint 'policy' -> now 'stratified'",
        "router.loss_mode: checkpoint 'pg' -> now 'value'",
        "router.value_fit: checkpoint 'sgd' -> now 'ridge'",
    ]


def test_other_training_data_is_refused_on_resume():
    # the sampler's saved position indexes the training file: a run begun on train_router.parquet and resumed on the
    # main job's irrelevance-row file (run_router_training.sh, IRRELEVANCE_FRACTION) would go on with other rows
    saved = cm.flatten({"data": {"train_files": "d/train_router.parquet"}})
    current = cm.flatten({"data": {"train_files": "d/train_router_irrelevance_f0.25_s1.parquet"}})
    assert cm.config_differences(saved, current) == [
        "data.train_files: checkpoint 'd/train_router.parquet' -> now 'd/train_router_irrelevance_f0.25_s1.parquet'"
    ]
    assert cm.config_differences(saved, current, allowed=["data.train_files"]) == []
    assert cm.config_differences({}, current) == []  # a checkpoint written before the key existed is not compared


def test_replayed_step_replaces_directory(tmp_path):
    _save(tmp_path, 5, b"old")
    _save(tmp_path, 5, b"new")
    assert (tmp_path / "global_step_5" / "actor" / "model.pt").read_bytes() == b"new"
    cm.verify_checkpoint(tmp_path / "global_step_5")


def test_another_runs_checkpoint_is_never_overwritten_or_rotated(tmp_path, caplog):
    """A fresh run (new run id) saving a step that an earlier run already holds moves the old folder aside instead
    of replacing it (its weights may be the only copy), and rotation only deletes the current run's checkpoints."""
    for step in (1, 2):
        _save(tmp_path, step, payload=b"old-run", run_id="old")
    (tmp_path / "global_step_2" / "data.pt").write_bytes(b"STATE")  # damaged: resume skips it, weights intact
    with caplog.at_level(logging.WARNING):
        _save(tmp_path, 2, payload=b"new-run", run_id="new")
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("global_step_2.replaced-")]
    assert len(aside) == 1 and (aside[0] / "actor" / "model.pt").read_bytes() == b"old-run"
    assert "was not written by this run" in caplog.text
    assert (tmp_path / "global_step_2" / "actor" / "model.pt").read_bytes() == b"new-run"
    _save(tmp_path, 3, run_id="new")
    removed = cm.rotate_checkpoints(tmp_path, keep=1, run_id="new")
    assert [p.name for p in removed] == ["global_step_2"]  # the new run's older one; the old run's step 1 stays
    assert sorted(p.name for p in cm.step_dirs(tmp_path)) == ["global_step_1", "global_step_3"]
    _save(tmp_path, 3, payload=b"replayed", run_id="new")  # the same run replays a step: replaced in place
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("global_step_3.replaced-")]


def test_manifest_step_must_match_its_folder(tmp_path):
    import json

    step_dir = _save(tmp_path, 5)
    manifest = json.loads((step_dir / cm.MANIFEST).read_text())
    manifest["step"] = 9
    (step_dir / cm.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(cm.CheckpointError, match="says step 9 but the folder is global_step_5"):
        cm.verify_checkpoint(step_dir)
    (step_dir / cm.MANIFEST).write_text(json.dumps({"step": 5}))
    with pytest.raises(cm.CheckpointError, match="not a checkpoint manifest"):
        cm.verify_checkpoint(step_dir)
