"""Build an SFT model preset: ``tiny-sft`` or ``smollm2-135m-sft`` (the SFT warm start on RLLA rows, so that RL starts
from a policy that already writes ``<think>...</think>`` + ``<tool_call>`` / ``<response>``; a random-init model never
would).

    python -m verl.trainer.sft_presets                        # tiny-sft; skipped when built (SFT_FORCE=1 rebuilds)
    SFT_PRESET=smollm2-135m-sft python -m verl.trainer.sft_presets    # ~40 min on 2 CPU cores
    python -m verl.trainer.sft_presets trainer.total_epochs=1         # key=value arguments go to the SFT trainer

The trainer builds a preset itself on first use when ``trainer.build_sft_preset`` is true (every recipe sets it):
:func:`build_sft_preset` then reads only the training knobs below, never ``SFT_BASE_MODEL`` / ``SFT_DATA`` /
``SFT_TARGET`` (the preset fixes its base, data and folder, where :func:`verl.utils.model_presets.prepare_model`
looks). ``scripts/prepare_sft_model.sh`` runs this module.

Variables (all optional; every name starts with ``SFT_`` so that a run's BASE_MODEL, LR, ... never leak in):

- ``SFT_PRESET``: ``tiny-sft`` (default) or ``smollm2-135m-sft``: the base model, target folder and recipe defaults
  (:data:`PRESET_RECIPES`).
- ``SFT_DATA``: ``train`` (default: RL-style rows, placeholder think, ~70-token targets), ``sft_full`` (full
  reasoning, ~400-token targets) or a parquet path; ``SFT_DATA_DIR``: the RLLA folder (default: the data search
  without ``DATA_DIR``: the preset is one cache shared by every run).
- ``SFT_BASE_MODEL``, ``SFT_TARGET``: start model and output folder (defaults: the preset's).
- ``SFT_EPOCHS``, ``SFT_LR``, ``SFT_MAX_LENGTH``, ``SFT_BATCH_SIZE``, ``SFT_MICRO_BATCH``: training knobs (defaults:
  the preset's, then the data's, :data:`DATA_RECIPES`); ``SFT_MAX_STEPS``: stop after that many optimizer steps;
  ``SFT_NPROC`` > 1: ``torchrun`` with that many processes (FSDP2); ``SFT_FORCE=1``: rebuild.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

# preset -> its base model and the knobs it fixes before the data's defaults apply
PRESET_RECIPES: dict[str, dict] = {
    "tiny-sft": {"base": "tiny"},
    # a pretrained 135M instruct model: a small lr, one epoch (49 steps of 8 rows, ~47 s each on 2 CPU cores)
    "smollm2-135m-sft": {"base": "smollm2-135m", "lr": "1e-4", "epochs": "1", "micro_batch": "2"},
}
# SFT_DATA -> the knobs' defaults. train: the loss is on ~70 tokens a row, the cost is the prompt; 1,024 tokens keeps
# ~80% of the prompts whole (longer ones lose the start of their tool list, which the model needs to copy tool names);
# a random-init 7M model needs a high lr and many small steps (8-row batches: 49 steps an epoch).
DATA_RECIPES: dict[str, dict] = {
    "train": {"epochs": "5", "lr": "3e-3", "max_length": "1024", "batch_size": "8", "micro_batch": "4"},
    "sft_full": {"epochs": "4", "lr": "3e-3", "max_length": "1536", "batch_size": "8", "micro_batch": "2"},
    "path": {"epochs": "5", "lr": "3e-3", "max_length": "1024", "batch_size": "8", "micro_batch": "4"},
}
KNOBS = ("epochs", "lr", "max_length", "batch_size", "micro_batch")
PRESET_FIXES = ("SFT_BASE_MODEL", "SFT_DATA", "SFT_TARGET")  # ignored when the trainer builds a preset on first use


def sft_target(preset: str, environ: Mapping[str, str]) -> Path:
    """Where ``preset`` is built: ``SFT_TARGET``, else the preset's folder (where ``prepare_model`` looks).

    Raises:
        ValueError: an unknown preset.
    """
    from verl.utils.model_presets import preset_dir

    if preset not in PRESET_RECIPES:
        raise ValueError(f"SFT_PRESET={preset}: expected {' or '.join(PRESET_RECIPES)}")
    return Path(environ.get("SFT_TARGET") or preset_dir(preset))


def sft_command(preset: str, environ: Mapping[str, str], overrides: Sequence[str] = ()) -> tuple[list[str], Path]:
    """The SFT trainer's command line for ``preset`` under ``environ``'s ``SFT_*`` variables, and its target folder.

    Raises:
        ValueError: an unknown preset, or an ``SFT_NPROC`` that is not a whole number.
        FileNotFoundError: the RLLA files cannot be found (every place looked at is named).
    """
    from verl.utils.dataset.rlla_data import resolve_rlla_file

    target = sft_target(preset, environ)
    recipe = PRESET_RECIPES[preset]
    data = environ.get("SFT_DATA") or "train"
    knobs = {
        **DATA_RECIPES[data if data in DATA_RECIPES else "path"],
        **{k: v for k, v in recipe.items() if k in KNOBS},
        **{k: environ[f"SFT_{k.upper()}"] for k in KNOBS if environ.get(f"SFT_{k.upper()}")},
    }
    data_dir = environ.get("SFT_DATA_DIR") or None
    saved_data_dir = os.environ.pop("DATA_DIR", None)  # never the run's DATA_DIR: the preset is shared by every run
    try:
        train_file = data if data not in ("train", "sft_full") else str(resolve_rlla_file(data, data_dir))
        val_file = str(resolve_rlla_file("test", data_dir))
    finally:
        if saved_data_dir is not None:
            os.environ["DATA_DIR"] = saved_data_dir
    nproc = environ.get("SFT_NPROC") or "1"
    if not nproc.isdigit():
        raise ValueError(f"SFT_NPROC={nproc}: expected a whole number of processes")
    launch = [sys.executable, "-m", "verl.trainer.fsdp_sft_trainer"]
    if int(nproc) > 1:
        launch = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "verl.trainer.fsdp_sft_trainer",
        ]
    steps = [f"trainer.total_training_steps={environ['SFT_MAX_STEPS']}"] if environ.get("SFT_MAX_STEPS") else []
    command = [
        *launch,
        f"data.train_files={train_file}",
        f"data.val_files={val_file}",
        f"data.max_length={knobs['max_length']}",
        "data.truncation=left",
        f"data.train_batch_size={knobs['batch_size']}",
        f"data.micro_batch_size_per_gpu={knobs['micro_batch']}",
        f"model.partial_pretrain={environ.get('SFT_BASE_MODEL') or recipe['base']}",
        f"optim.lr={knobs['lr']}",
        "optim.warmup_steps_ratio=0.05",
        "optim.lr_scheduler=cosine",
        f"trainer.total_epochs={knobs['epochs']}",
        f"trainer.default_local_dir={target}",
        "trainer.overwrite=true",
        f"trainer.experiment_name={preset}-{Path(data).stem if data not in DATA_RECIPES else data}",
        *steps,
        *overrides,
    ]
    return command, target


def run_sft(preset: str, environ: Mapping[str, str], overrides: Sequence[str] = ()) -> Path:
    """Build ``preset`` (skipped when its ``config.json`` exists, unless ``SFT_FORCE=1``), then plot its loss curve
    beside it. Returns the folder.

    Raises:
        RuntimeError: the SFT trainer exited non-zero (its output went to this process's stdout / stderr).
    """
    built = sft_target(preset, environ)
    if (built / "config.json").is_file() and environ.get("SFT_FORCE", "0") != "1":  # before any data search
        logger.info("SFT model already at %s (SFT_FORCE=1 to rebuild)", built)
        return built
    command, target = sft_command(preset, environ, overrides)
    logger.info(
        "SFT of %s -> %s: %s", preset, target, " ".join(command[command.index("verl.trainer.fsdp_sft_trainer") + 1 :])
    )
    proc = subprocess.run(command)  # a process of its own: its memory is freed before the RL run builds its models
    if proc.returncode != 0:
        raise RuntimeError(
            f"the SFT build of preset {preset!r} exited with status {proc.returncode} (its output is "
            f"above); nothing was written to {target}"
        )
    try:
        from verl.utils.plot_metrics import plot

        plot(target / "metrics.jsonl", target / "plots")
    except Exception as err:  # noqa: BLE001 - the model is built; a plotting failure must not lose it
        logger.warning("plotting the SFT loss failed (the model is fine): %s", err)
    return target


def build_sft_preset(preset: str, environ: Mapping[str, str] | None = None) -> Path:
    """The trainer's first-use build (``trainer.build_sft_preset``): :func:`run_sft` with the preset's own base, data
    and folder (``SFT_BASE_MODEL`` / ``SFT_DATA`` / ``SFT_TARGET`` are not read); the training knobs still apply."""
    environ = dict(os.environ if environ is None else environ)
    for name in PRESET_FIXES:
        environ.pop(name, None)
    return run_sft(preset, environ)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI (module docstring): ``SFT_PRESET`` and the ``SFT_*`` variables, ``key=value`` arguments to the trainer."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        run_sft(os.environ.get("SFT_PRESET") or "tiny-sft", os.environ, args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
