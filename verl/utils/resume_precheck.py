"""Refuse, before an SFT preset is built, a launch whose resume the trainer would refuse for its model path.

The launch scripts (``run_router_training.sh``, ``train_grpo.sh``, ``train_ppo.sh``) build an SFT preset before the
trainer starts (``smollm2-135m-sft``: about 40 minutes on 2 CPU cores), and the trainer compares the resume keys
(:data:`verl.utils.checkpoint_manifest.RESUME_KEYS`) only after that. A run launched with another model into a folder
that holds a checkpoint (e.g. the default ``tiny-sft`` run's ``baseline_router`` folder) would build the preset and
then be refused. This check runs first and refuses in seconds::

    python -m verl.utils.resume_precheck --checkpoint_dir DIR --model MODEL -- [HYDRA OVERRIDES...]

It compares only ``actor_rollout_ref.model.path``, the key a preset build stands in front of; the trainer still
checks every resume key. It stands aside (exit 0, one line on stderr) when an override sets one of
:data:`STAND_ASIDE_KEYS`, any ``hydra.*`` key or the whole ``trainer`` group, or is a command-line flag (``--cfg``,
``--config-name``, ...): those can move the checkpoint folder, skip or relax resume, or set another model. It also
stands aside when ``MODEL`` is a value the trainer refuses by itself, with its own message: one that
:func:`verl.utils.model_presets.resolve_model_path` maps to None (a path to no folder) or a folder without a readable
``config.json``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl.utils import checkpoint_manifest as cm
from verl.utils.model_presets import PRESETS, ModelPathError, check_model_dir, resolve_model_path

MODEL_KEY = "actor_rollout_ref.model.path"
# an override of any of these can move the checkpoint folder, skip resume, allow the change or set another model
STAND_ASIDE_KEYS = (
    "trainer.resume_mode", "trainer.resume_from_path", "trainer.resume_allow_changes", "trainer.default_local_dir",
    "trainer.project_name", "trainer.experiment_name", MODEL_KEY,
)


def stands_aside(overrides: list[str]) -> str | None:
    """The first argument that could change what the trainer resumes, or None: a flag (``-...``), or an override
    (``key=value``, ``+key=value``, ``++key=value``, ``~key``) of a :data:`STAND_ASIDE_KEYS` key, of any ``hydra.*``
    key, or of the whole ``trainer`` group."""
    for item in overrides:
        if item.startswith("-"):
            return item
        key = item.lstrip("+~").partition("=")[0].strip()
        if key in STAND_ASIDE_KEYS or key == "trainer" or key.startswith("hydra."):
            return item
    return None


def _saved_model_path(step_dir: Path) -> object | None:
    """The model path recorded in ``step_dir``'s manifest, or None when it records none (a checkpoint written before
    the key existed, which the trainer does not compare either)."""
    saved = cm.verify_checkpoint(step_dir, check_hashes=False).get("resume_keys")
    return saved.get(MODEL_KEY) if isinstance(saved, dict) else None


def model_path_conflict(checkpoint_dir: str | Path, model: str) -> str | None:
    """A message when the checkpoint the trainer would resume from under ``checkpoint_dir`` (``resume_mode=auto``:
    the newest one that verifies) records another ``actor_rollout_ref.model.path`` than ``model`` resolves to
    (:func:`verl.utils.model_presets.resolve_model_path`); None when there is no checkpoint, it records no model
    path, the paths agree, or ``prepare_model`` would refuse ``model`` itself (a value ``resolve_model_path`` maps to
    None, or a folder other than a preset's without a readable ``config.json``).

    The newest checkpoint is found by sizes (cheap); a conflict is confirmed on the checkpoint that also verifies by
    SHA-256, as the trainer chooses it, so a damaged newest checkpoint never causes a refusal the trainer would not
    make.

    Raises:
        OSError: a checkpoint file cannot be read.
    """
    resolved = resolve_model_path(model)  # what prepare_model returns, and the trainer records
    if resolved is None:
        return None  # prepare_model refuses it by name
    if isinstance(resolved, Path) and model not in PRESETS:
        try:
            check_model_dir(resolved)
        except ModelPathError:
            return None  # prepare_model refuses the folder, and says why
    root = Path(checkpoint_dir)
    wanted = str(resolved)
    step_dir = cm.latest_valid_checkpoint(root, check_hashes=False)
    if step_dir is None or _saved_model_path(step_dir) in (None, wanted):
        return None
    step_dir = cm.latest_valid_checkpoint(root)  # the one the trainer resumes from
    saved = None if step_dir is None else _saved_model_path(step_dir)
    if saved in (None, wanted):
        return None
    return (f"{step_dir} was trained from {MODEL_KEY}={saved!r}, and this run's model {model!r} is {wanted!r}: "
            f"resuming from it would be refused (after any SFT preset build). Give the run a checkpoint folder of its "
            f"own (another EXPERIMENT_NAME), or use the checkpoint's model.")


def main(argv: list[str] | None = None) -> int:
    """CLI (module docstring). Returns 0 (no conflict, or standing aside: one line on stderr) or 2 (the conflict, on
    stderr; argparse's usage errors also exit 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint_dir", required=True, help="the run's trainer.default_local_dir")
    parser.add_argument("--model", required=True, help="the run's actor_rollout_ref.model.path (preset, folder, id)")
    parser.add_argument("overrides", nargs="*", help="the Hydra overrides the launch script passes on")
    args = parser.parse_args(argv)
    override = stands_aside(args.overrides)
    if override:
        print(f"resume pre-check: {override!r} can change what the trainer resumes; the trainer checks it",
              file=sys.stderr)
        return 0
    problem = model_path_conflict(args.checkpoint_dir, args.model)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
