"""Checkpoint manifests, atomic publication, discovery of the latest valid checkpoint, rotation, config checks.

A checkpoint directory ``global_step_N`` exists for resume only if its ``manifest.json`` is present and every file
it lists has the recorded size and SHA-256. The manifest is written last, inside a temporary directory that is then
renamed into place (``publish_checkpoint``), so a run killed at any moment leaves either a complete checkpoint or a
temporary directory that resume ignores (and the next save removes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
TRACKER = "latest_checkpointed_iteration.txt"
STEP_PREFIX = "global_step_"
TMP_PREFIX = ".tmp_global_step_"

# Config keys that must match between a checkpoint and the run resuming it (the state would not fit otherwise).
RESUME_KEYS = (
    "actor_rollout_ref.model.path",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "data.train_batch_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "algorithm.adv_estimator",
    "data.train_files",
    "data.seed",
    "data.shuffle",
    "critic.enable",
    "router.enable",
    "router.head",
    "router.route_sampling",
    "router.loss_mode",
    "router.value_fit",
    "actor_rollout_ref.model.lora_rank",
    "actor_rollout_ref.model.lora_alpha",
    "actor_rollout_ref.model.target_modules",
)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used for resume; the message says why."""


def _sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def git_commit() -> str | None:
    """The checkout's HEAD commit, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def flatten(config: dict, prefix: str = "", sep: str = ".") -> dict:
    """``{"a.b.c": value}`` for a nested dict (lists kept as values; ``sep`` joins the keys)."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + sep, sep))
        else:
            out[name] = value
    return out


def config_sha256(config: dict) -> str:
    """SHA-256 of a resolved config (a plain nested dict) as canonical JSON: the manifest's ``config_sha256``."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def write_manifest(
    step_dir: Path, *, step: int, epoch: int, config: dict, world_size: int, version: str, run_id: str | None = None
) -> dict:
    """Hash every file under ``step_dir`` and write ``manifest.json`` (the last file of a checkpoint).

    ``run_id`` names the training run (a fresh start and all its resumes share it): publication and rotation only
    replace or delete checkpoints of the same run."""
    files = []
    for path in sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != MANIFEST):
        files.append({"path": str(path.relative_to(step_dir)), "size": path.stat().st_size, "sha256": _sha256(path)})
    manifest = {
        "step": step,
        "epoch": epoch,
        "world_size": world_size,
        "package_version": version,
        "git_commit": git_commit(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run_id": run_id,
        "config_sha256": config_sha256(config),
        "resume_keys": {k: flatten(config).get(k) for k in RESUME_KEYS},
        "files": files,
    }
    tmp = step_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, step_dir / MANIFEST)
    return manifest


def verify_checkpoint(step_dir: Path, check_hashes: bool = True) -> dict:
    """Return the manifest of a complete checkpoint.

    Raises:
        CheckpointError: no manifest, unreadable manifest, a listed file missing or with another size / SHA-256.
    """
    manifest_path = step_dir / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{step_dir}: no {MANIFEST} (incomplete save)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{manifest_path}: unreadable ({err})") from None
    if (
        not isinstance(manifest, dict)
        or not isinstance(manifest.get("files"), list)
        or not isinstance(manifest.get("step"), int)
    ):
        raise CheckpointError(f"{manifest_path}: not a checkpoint manifest (needs an int 'step' and a 'files' list)")
    name = step_dir.name
    if (
        name.startswith(STEP_PREFIX)
        and name[len(STEP_PREFIX) :].isdigit()
        and int(name[len(STEP_PREFIX) :]) != manifest["step"]
    ):
        raise CheckpointError(f"{manifest_path}: says step {manifest['step']} but the folder is {name}")
    for entry in manifest["files"]:
        path = step_dir / entry["path"]
        if not path.is_file():
            raise CheckpointError(f"{step_dir}: listed file {entry['path']} is missing")
        if path.stat().st_size != entry["size"]:
            raise CheckpointError(
                f"{step_dir}: {entry['path']} has {path.stat().st_size} bytes, manifest says {entry['size']}"
            )
        if check_hashes and _sha256(path) != entry["sha256"]:
            raise CheckpointError(f"{step_dir}: {entry['path']} does not match its SHA-256")
    return manifest


def step_dirs(root: Path) -> list[Path]:
    """``global_step_N`` directories under ``root``, newest step first."""
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(STEP_PREFIX) and p.name[len(STEP_PREFIX) :].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[len(STEP_PREFIX) :]), reverse=True)


def latest_valid_checkpoint(root: Path, check_hashes: bool = True) -> Path | None:
    """The newest checkpoint under ``root`` that verifies; invalid newer ones are reported and skipped.

    ``check_hashes=False`` checks presence and sizes only (cheap; for messages, not for choosing what to load)."""
    for step_dir in step_dirs(root):
        try:
            verify_checkpoint(step_dir, check_hashes=check_hashes)
            return step_dir
        except CheckpointError as err:
            logger.warning("skipping checkpoint: %s", err)
    return None


def new_temp_dir(root: Path, step: int) -> Path:
    """A fresh temporary directory for the checkpoint of ``step`` (leftovers of killed saves are removed first)."""
    root.mkdir(parents=True, exist_ok=True)
    for leftover in root.glob(TMP_PREFIX + "*"):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = root / f"{TMP_PREFIX}{step}.{os.getpid()}"
    tmp.mkdir()
    return tmp


def run_id_of(step_dir: Path) -> str | None:
    """The ``run_id`` recorded in ``step_dir``'s manifest; None when there is none or it cannot be read."""
    try:
        manifest = json.loads((step_dir / MANIFEST).read_text())
        return manifest.get("run_id") if isinstance(manifest, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _same_run(step_dir: Path, run_id: str | None) -> bool:
    """Whether ``step_dir`` was written by run ``run_id`` (a manifest that cannot be read belongs to no run; with
    ``run_id`` None, callers that do not track runs, any readable manifest without one matches)."""
    return (step_dir / MANIFEST).is_file() and run_id_of(step_dir) == run_id


def publish_checkpoint(tmp_dir: Path, root: Path, step: int, run_id: str | None = None) -> Path:
    """fsync ``tmp_dir`` (manifest already written), rename it to ``global_step_{step}``, then update the tracker.

    An existing directory of the same step is replaced only when the same run wrote it (a replayed step after a
    resume); one written by another run, or whose manifest cannot be read, is never overwritten: it is renamed to
    ``global_step_{step}.replaced-<time>`` (which resume ignores) with a warning naming both.
    """
    _fsync_tree(tmp_dir)
    target = root / f"{STEP_PREFIX}{step}"
    if target.exists() and not _same_run(target, run_id):
        aside = root / f"{target.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        os.replace(target, aside)
        logger.warning(
            "%s was not written by this run (run %s): kept as %s, not overwritten",
            target,
            run_id_of(aside) or "unknown",
            aside,
        )
    if target.exists():
        old = root / f"{TMP_PREFIX}{step}.old"
        os.replace(target, old)
        os.replace(tmp_dir, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp_dir, target)
    tracker_tmp = root / (TRACKER + ".tmp")
    tracker_tmp.write_text(str(step))
    with open(tracker_tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tracker_tmp, root / TRACKER)
    return target


def rotate_checkpoints(root: Path, keep: int | None, run_id: str | None = None) -> list[Path]:
    """Delete the oldest checkpoints beyond the ``keep`` newest VALID ones; never the newest valid checkpoint.

    Invalid directories older than the newest valid one are removed too. With ``run_id``, only directories written
    by that run are counted or removed (another run's checkpoints are never deleted). Returns what was removed.
    """
    if not keep or keep <= 0:
        return []
    kept_valid, removed = 0, []
    for step_dir in step_dirs(root):
        if run_id is not None and not _same_run(step_dir, run_id):
            continue
        try:
            verify_checkpoint(step_dir, check_hashes=False)
            valid = True
        except CheckpointError:
            valid = False
        if valid and kept_valid < keep:
            kept_valid += 1
            continue
        if kept_valid == 0:  # nothing valid kept yet: never delete what might be the only usable state
            continue
        shutil.rmtree(step_dir, ignore_errors=True)
        removed.append(step_dir)
    return removed


def config_differences(saved: dict, current: dict, allowed: list[str] | tuple = ()) -> list[str]:
    """``key: saved -> current`` for every resume key that differs and is not in ``allowed`` (a key the checkpoint
    was written without, by an older version, is not compared)."""
    diffs = []
    for key in RESUME_KEYS:
        if key in allowed or key not in saved:
            continue
        if saved.get(key) != current.get(key):
            diffs.append(f"{key}: checkpoint {saved.get(key)!r} -> now {current.get(key)!r}")
    return diffs
