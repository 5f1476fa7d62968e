"""The ``route_qa`` warm start, model preset ``tiny-route-qa``: ``tiny`` after the copy warm-up and SFT on the task's
traces (``docs/route_qa.md`` "The warm start").

    python -m verl.trainer.route_qa.warm_start [--output DIR] [--data_dir DIR]   # default: the preset's folder

A run with ``actor_rollout_ref.model.path=tiny-route-qa`` and ``trainer.build_sft_preset=true`` builds it on first use
(``verl.trainer.main_ppo.resolve_models``). The steps, in one temporary folder renamed onto the preset's when all are
done (``verl.utils.fs.publish_dir``: a crash leaves no half-built preset):

1. the task's files, generated once into the cache (``verl.utils.dataset.route_qa.ensure_task``, seed 0);
2. :func:`~verl.trainer.route_qa.copy_warmup.copy_warmup` of ``tiny`` (induction heads before the task's format);
3. the traces of the training split (:func:`~verl.trainer.route_qa.traces.write_traces`);
4. SFT on them (``verl.trainer.fsdp_sft_trainer``, a process of its own), from the warmed-up weights.

The folder keeps ``copy_warmup.jsonl`` (the warm-up's loss per step), the SFT's ``metrics.jsonl`` and
``warm_start.json`` (the settings, the data folder, each step's seconds).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

__all__ = ["PRESET", "WarmStart", "build_warm_start", "check_warm_start", "sft_command"]

logger = logging.getLogger(__name__)

PRESET = "tiny-route-qa"


@dataclass(frozen=True)
class WarmStart:
    """The warm start's settings: ``copy_steps`` of the copy warm-up with ``table_share`` of its sequences one-digit
    problems (its other settings are :class:`~verl.trainer.route_qa.copy_warmup.CopyWarmup`'s defaults), then
    ``sft_steps`` SFT steps of ``sft_batch_size`` trace rows at peak learning rate ``sft_lr`` (cosine after a 10%
    warm-up), sequences cut to ``sft_max_length`` tokens from the left, the traces weighed by
    :class:`~verl.trainer.route_qa.traces.TraceMix` (``answer_after_call``, ``direct_answer``, ``table``); ``seed``
    for the task's data and the warm-up; ``version`` of the build, raised when it changes in a way the settings do
    not show (2: the traces write an answer after a space; 1, unrecorded: run rq-03's), so that
    :func:`check_warm_start` refuses a preset an older version built."""

    copy_steps: int = 3000
    table_share: float = 0.0
    sft_steps: int = 600
    sft_batch_size: int = 16
    sft_lr: float = 1e-3
    sft_max_length: int = 512
    answer_after_call: int = 1
    direct_answer: int = 1
    table: int = 0
    seed: int = 0
    version: int = 2


def sft_command(train_file: Path, base: Path, target: Path, settings: WarmStart) -> list[str]:
    """The SFT trainer's command line: ``train_file``'s ``prompt`` / ``response`` rows, from ``base``, into
    ``target``."""
    return [
        sys.executable,
        "-m",
        "verl.trainer.fsdp_sft_trainer",
        f"data.train_files={train_file}",
        "data.val_files=[]",
        "data.response_key=response",
        f"data.max_length={settings.sft_max_length}",
        "data.truncation=left",
        f"data.train_batch_size={settings.sft_batch_size}",
        f"data.micro_batch_size_per_gpu={settings.sft_batch_size}",
        f"model.partial_pretrain={base}",
        f"optim.lr={settings.sft_lr}",
        "optim.warmup_steps_ratio=0.1",
        "optim.lr_scheduler=cosine",
        "trainer.total_epochs=100",  # the steps decide
        f"trainer.total_training_steps={settings.sft_steps}",
        f"trainer.default_local_dir={target}",
        "trainer.overwrite=true",
        "trainer.val_before_train=false",
        f"trainer.experiment_name={PRESET}",
        "trainer.logger=[console]",
    ]


def check_warm_start(folder: str | Path, settings: WarmStart = WarmStart()) -> None:
    """Refuse a built warm start whose ``warm_start.json`` records other settings than ``settings`` (a preset built
    by an older version would otherwise be used as if it were this one's).

    Raises:
        RuntimeError: the record is missing or unreadable, or a setting differs (each named, with both values); the
            message says to delete the folder, which the next run rebuilds.
    """
    record = Path(folder) / "warm_start.json"
    try:
        built = json.loads(record.read_text())["settings"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"{folder}: no readable warm_start.json settings ({exc}); delete the folder to rebuild it")
    if not isinstance(built, dict):
        raise RuntimeError(f"{folder}: no readable warm_start.json settings (not a mapping); delete the folder")
    wanted = asdict(settings)
    differ = [f"{k}: built {built.get(k)!r}, expected {v!r}" for k, v in wanted.items() if built.get(k) != v]
    if differ:
        raise RuntimeError(
            f"{folder} was built with other warm-start settings ({'; '.join(differ)}): delete the folder and the "
            f"next run rebuilds it (python -m verl.trainer.route_qa.warm_start)"
        )


def build_warm_start(
    target: str | Path | None = None, settings: WarmStart = WarmStart(), data_dir: str | Path | None = None
) -> Path:
    """Build the warm start into ``target`` (default: the preset's folder, ``verl.utils.model_presets.preset_dir``);
    an existing ``target`` is returned as it is once :func:`check_warm_start` finds it built with ``settings``.
    ``data_dir``: the task's folder (default: the cached one of ``settings.seed``). Returns ``target``.

    Raises:
        RuntimeError: the SFT trainer exited non-zero (its output went to this process's stdout and stderr); an
            existing ``target`` built with other settings.
    """
    from verl.utils.dataset.route_qa import ensure_task
    from verl.utils.fs import publish_dir
    from verl.utils.model_presets import preset_dir, prepare_model

    target = Path(target) if target is not None else preset_dir(PRESET)
    if target.is_dir():
        check_warm_start(target, settings)
        return target

    def build(tmp: Path) -> None:
        import tempfile

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from verl.trainer.route_qa.copy_warmup import CopyWarmup, copy_warmup
        from verl.trainer.route_qa.traces import TraceMix, write_traces

        seconds: dict[str, float] = {}
        start = time.monotonic()
        data = ensure_task(data_dir, seed=settings.seed)
        seconds["data"] = time.monotonic() - start
        source = prepare_model("tiny")
        # the SFT trainer replaces its output folder (tmp) whole: the intermediate files live beside it
        with tempfile.TemporaryDirectory(prefix=f".{PRESET}-work.", dir=tmp.parent) as work:
            warmed, start = Path(work) / "copy_warmup", time.monotonic()
            logger.info("warm start 1/2: copy warm-up of tiny, %d steps", settings.copy_steps)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(source)
            warmup = CopyWarmup(steps=settings.copy_steps, seed=settings.seed, table_share=settings.table_share)
            losses = copy_warmup(model, tokenizer, data / "corpus.jsonl", warmup)
            model.save_pretrained(str(warmed), safe_serialization=True)
            tokenizer.save_pretrained(str(warmed))
            del model
            seconds["copy_warmup"] = time.monotonic() - start
            start = time.monotonic()
            mix = TraceMix(settings.answer_after_call, settings.direct_answer, settings.table)
            traces = write_traces(data, output=Path(work) / "sft_train.parquet", mix=mix)
            seconds["traces"] = time.monotonic() - start
            start = time.monotonic()
            logger.info("warm start 2/2: SFT on the traces, %d steps", settings.sft_steps)
            proc = subprocess.run(sft_command(traces, warmed, tmp, settings))
            if proc.returncode != 0:
                raise RuntimeError(
                    f"the SFT of the {PRESET} warm start exited with status {proc.returncode} (its output is "
                    f"above); nothing was written to {target}"
                )
            seconds["sft"] = time.monotonic() - start
        with open(tmp / "copy_warmup.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"step": i + 1, "loss": x}) + "\n" for i, x in enumerate(losses))
        record = {"settings": asdict(settings), "data_dir": str(data), "seconds": seconds}
        (tmp / "warm_start.json").write_text(json.dumps(record, indent=2) + "\n")
        logger.info("warm start done: %s", ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))

    return publish_dir(build, target)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (the module docstring); prints the folder."""
    parser = argparse.ArgumentParser(
        prog="python -m verl.trainer.route_qa.warm_start", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--output", default=None, help="default: the preset's folder in the cache")
    parser.add_argument("--data_dir", default=None, help="the task's folder (default: generated into the cache)")
    parser.add_argument("--copy_steps", type=int, default=WarmStart.copy_steps)
    parser.add_argument("--sft_steps", type=int, default=WarmStart.sft_steps)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = WarmStart(copy_steps=args.copy_steps, sft_steps=args.sft_steps)
    if args.output is None and settings != WarmStart():
        parser.error("other settings than the preset's need --output (a run would refuse the preset folder)")
    print(build_warm_start(args.output, settings, args.data_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
