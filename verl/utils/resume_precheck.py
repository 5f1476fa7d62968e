"""Refuse, before an SFT preset is built, a launch whose resume the trainer would refuse for its model path.

The launch scripts (``run_router_training.sh``, ``train_grpo.sh``, ``train_ppo.sh``) build an SFT preset before the
trainer starts (``smollm2-135m-sft``: about 40 minutes on 2 CPU cores), and the trainer compares the resume keys
(:data:`verl.utils.checkpoint_manifest.RESUME_KEYS`) only after that. A run launched with another model into a folder
that holds a checkpoint (e.g. the default ``tiny-sft`` run's ``baseline_router`` folder) would build the preset and
then be refused. This check runs first and refuses in seconds::

    python -m verl.utils.resume_precheck --checkpoint_dir DIR --model MODEL -- [HYDRA OVERRIDES...]

It compares only ``actor_rollout_ref.model.path``, the key a preset build stands in front of; the trainer still
checks every resume key. It stands aside (exit 0, no check) whenever one of the overrides could change the trainer's
outcome: :data:`STAND_ASIDE_KEYS`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl.utils import checkpoint_manifest as cm
from verl.utils.model_presets import PRESETS, preset_dir

MODEL_KEY = "actor_rollout_ref.model.path"
# an override of any of these can move the checkpoint folder, skip resume, allow the change or set another model
STAND_ASIDE_KEYS = (
    "trainer.resume_mode", "trainer.resume_from_path", "trainer.resume_allow_changes", "trainer.default_local_dir",
    "trainer.project_name", "trainer.experiment_name", MODEL_KEY,
)


def expected_model_path(name_or_path: str) -> str:
    """The string ``verl.utils.model_presets.prepare_model`` returns for ``name_or_path`` (and the trainer records in
    a checkpoint's manifest), computed without building anything: a preset's folder, a folder with ``~`` expanded,
    anything else (a hub id) unchanged."""
    name = str(name_or_path)
    if name in PRESETS:
        return str(preset_dir(name))
    expanded = Path(name).expanduser()
    return str(expanded) if expanded.is_dir() else name


def stands_aside(overrides: list[str]) -> str | None:
    """The first override (``key=value``, ``+key=value`` or ``++key=value``) that sets a :data:`STAND_ASIDE_KEYS`
    key, or None."""
    for item in overrides:
        key = item.lstrip("+").partition("=")[0].strip()
        if key in STAND_ASIDE_KEYS:
            return item
    return None


def model_path_conflict(checkpoint_dir: str | Path, model: str) -> str | None:
    """A message when the newest valid checkpoint under ``checkpoint_dir`` (sizes checked, not hashes) records
    another ``actor_rollout_ref.model.path`` than ``model`` would resolve to; None when there is no checkpoint, the
    manifest has no such key (an older checkpoint, which the trainer does not compare either) or the paths agree."""
    root = Path(checkpoint_dir)
    step_dir = cm.latest_valid_checkpoint(root, check_hashes=False)
    if step_dir is None:
        return None
    saved = cm.verify_checkpoint(step_dir, check_hashes=False).get("resume_keys", {})
    if MODEL_KEY not in saved:
        return None
    wanted = expected_model_path(model)
    if saved[MODEL_KEY] == wanted:
        return None
    return (f"{step_dir} was trained from {MODEL_KEY}={saved[MODEL_KEY]!r}, and this run's model {model!r} is "
            f"{wanted!r}: resuming from it would be refused (after any SFT preset build). Give the run a folder of "
            f"its own (another EXPERIMENT_NAME), use the checkpoint's model, or start afresh in this folder with "
            f"trainer.resume_mode=disable.")


def main(argv: list[str] | None = None) -> int:
    """CLI (module docstring). Returns 0 (no conflict or standing aside) or 2 (the conflict, on stderr)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint_dir", required=True, help="the run's trainer.default_local_dir")
    parser.add_argument("--model", required=True, help="the run's actor_rollout_ref.model.path (preset, folder, id)")
    parser.add_argument("overrides", nargs="*", help="the Hydra overrides the launch script passes on")
    args = parser.parse_args(argv)
    if stands_aside(args.overrides):
        return 0
    problem = model_path_conflict(args.checkpoint_dir, args.model)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
