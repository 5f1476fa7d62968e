"""Experiment tracking: one ``Tracking.log(metrics, step)`` fans out to the configured backends.

Backends (``trainer.logger``): ``console`` (one compact line per step), ``jsonl`` (always on: ``metrics.jsonl`` in the
run directory, one JSON object per step — the input of ``verl.utils.plot_metrics``), ``tensorboard``
(``<run_dir>/tensorboard``), ``wandb`` (``WANDB_MODE=offline`` works without network).

``StepProgress`` is the driver's progress display: a tqdm bar over global steps on a TTY, a plain heartbeat log line
per step otherwise (CI logs, ``nohup``), both with seconds per step and the ETA.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from verl.utils.fs import atomic_path

logger = logging.getLogger(__name__)

BACKENDS = ("console", "jsonl", "tensorboard", "wandb")
# Metrics shown on the console line and the heartbeat, when present.
HEADLINE_KEYS = (
    "critic/score/mean",
    "critic/format_score/mean",
    "critic/correctness_score/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/ppo_kl",
    "response_length/mean",
    "timing_s/step",
)


def _to_builtin(value: Any) -> Any:
    """Plain Python number/str for JSON (tensors and numpy scalars via ``.item()``); NaN/Inf kept as strings."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def format_headline(metrics: dict, keys=HEADLINE_KEYS) -> str:
    """``key=value`` pairs (4 significant digits) for the headline metrics present in ``metrics``."""
    parts = []
    for key in keys:
        if key in metrics:
            value = _to_builtin(metrics[key])
            parts.append(f"{key}={value:.4g}" if isinstance(value, (int, float)) else f"{key}={value}")
    return " ".join(parts)


def rewind_jsonl(path: Path, step: int) -> int:
    """Cut ``metrics.jsonl`` back to the records of steps ``<= step`` (see :class:`Tracking`'s ``resume_step``).

    Returns:
        The number of records dropped (a torn, unreadable line counts as one). ``step == 0`` moves a non-empty file
        aside instead and returns its record count.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if step <= 0:
        aside = path.with_name(f"metrics.{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        os.replace(path, aside)
        logger.warning(
            "fresh start in a run directory with metrics: the earlier %d records moved to %s", len(lines), aside
        )
        return len(lines)
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a kill
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(line)
    dropped = len(lines) - len(kept)
    if dropped:
        with atomic_path(path) as tmp:
            tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        logger.info(
            "resuming at step %d: dropped %d metrics records logged after it by the interrupted run", step, dropped
        )
    return dropped


def has_step(path: Path, step: int) -> bool:
    """Whether ``metrics.jsonl`` holds a metrics record (not a text record) of ``step``."""
    if not path.is_file():
        return False
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("step") == step and "text" not in record:
            return True
    return False


class Tracking:
    """Fan-out metric logger.

    Args:
        project_name, experiment_name: run identity (wandb project/name; also written to the jsonl records).
        default_backend: list of backend names from ``BACKENDS``; ``jsonl`` is added when missing.
        config: the run's config (dict) sent to wandb (``main_ppo`` and ``main_async`` write the same record to the
            run dir's ``config.yaml``: ``verl.trainer.config_utils.write_run_record``).
        run_dir: directory for metrics.jsonl, tensorboard and plots.
        resume_step: the global step the run starts from (its checkpoint's step; 0 for a fresh start), or None to
            append as is (runs without resume). Records an interrupted run logged after that step describe work that
            was lost and is about to be redone: they are cut from ``metrics.jsonl`` (with a torn last line), and
            TensorBoard purges them (``purge_step``), so every step appears once. A fresh start (0) in a run
            directory that already has metrics moves the old file aside (``metrics.<time>.jsonl``, logged).
        resume_record: the metrics of step ``resume_step`` as its checkpoint stored them. A kill between publishing
            a checkpoint and logging its step would otherwise lose that step's record for good: when the file has no
            record of ``resume_step``, this one is logged (its timing of the save itself is missing).

    Raises:
        ValueError: an unknown backend name.
    """

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend,
        config: dict | None = None,
        run_dir: str | os.PathLike = "outputs/run",
        resume_step: int | None = None,
        resume_record: dict | None = None,
    ) -> None:
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend or [])
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            raise ValueError(f"trainer.logger: unknown backend(s) {unknown}; choose from {list(BACKENDS)}")
        if "jsonl" not in backends:
            backends.append("jsonl")
        self.backends = backends
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.run_dir / "metrics.jsonl"
        if resume_step is not None:
            rewind_jsonl(self.jsonl_path, resume_step)
        self._jsonl = open(self.jsonl_path, "a", buffering=1)
        self._tb = None
        self._wandb = None
        if "tensorboard" in backends:
            from torch.utils.tensorboard import SummaryWriter

            tb_dir = self.run_dir / "tensorboard"
            resumed = resume_step is not None and tb_dir.is_dir() and any(tb_dir.iterdir())
            self._tb = SummaryWriter(log_dir=str(tb_dir), purge_step=resume_step + 1 if resumed else None)
        if "wandb" in backends:
            import wandb

            self._wandb = wandb.init(project=project_name, name=experiment_name, config=config, dir=str(self.run_dir))
        self.project_name = project_name
        self.experiment_name = experiment_name
        if resume_record and resume_step and not has_step(self.jsonl_path, resume_step):
            logger.warning(
                "metrics.jsonl has no record of step %d (killed between its save and its log): restoring "
                "the record stored in its checkpoint",
                resume_step,
            )
            self.log(resume_record, step=resume_step)

    def log(self, data: dict, step: int) -> None:
        """Write one step's metrics to every backend."""
        record = {k: _to_builtin(v) for k, v in data.items()}
        self._jsonl.write(json.dumps({"step": step, **record}) + "\n")
        if "console" in self.backends:
            logger.info(
                "step %d: %s",
                step,
                " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(record.items())),
            )
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(data, step=step)

    def log_text(self, key: str, text: str, step: int) -> None:
        """Log a text record (sample generations) to jsonl (as ``{"step", "text": {key: text}}``) and tensorboard."""
        self._jsonl.write(json.dumps({"step": step, "text": {key: text}}) + "\n")
        if self._tb is not None:
            self._tb.add_text(key, text, step)

    def finish(self) -> None:
        """Flush and close every backend."""
        self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


class StepProgress:
    """Progress over global steps: tqdm on a TTY, else one heartbeat log line per step.

    Args:
        total: total number of steps; ``initial``: steps already done (resume).
        use_tqdm: None decides from ``sys.stderr.isatty()``.
    """

    def __init__(self, total: int, initial: int = 0, use_tqdm: bool | None = None, desc: str = "train") -> None:
        self.total = total
        self.done = initial
        self.start = time.monotonic()
        self.start_done = initial
        self.use_tqdm = sys.stderr.isatty() if use_tqdm is None else use_tqdm
        self._bar = None
        if self.use_tqdm:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True)

    def seconds_per_step(self) -> float:
        steps = self.done - self.start_done
        return (time.monotonic() - self.start) / steps if steps else float("nan")

    def update(self, metrics: dict | None = None) -> None:
        """Advance one step and show the headline metrics."""
        self.done += 1
        headline = format_headline(metrics or {})
        if self._bar is not None:
            self._bar.set_postfix_str(headline[:120], refresh=False)
            self._bar.update(1)
            return
        sps = self.seconds_per_step()
        eta = sps * (self.total - self.done) if math.isfinite(sps) else float("nan")
        eta_txt = time.strftime("%H:%M:%S", time.gmtime(eta)) if math.isfinite(eta) else "?"
        logger.info("[heartbeat] step %d/%d | %.1f s/step | ETA %s | %s", self.done, self.total, sps, eta_txt, headline)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
