"""Time and disk size of one training checkpoint, per model preset.

    python benchmarks/checkpoint_cost.py                       # tiny and smollm2-135m
    python benchmarks/checkpoint_cost.py --models tiny --repeat 3

For each model the real trainer is built the way ``main_ppo`` builds it (GRPO, so the actor only; workers in this
process; CPU; RLLA data), the AdamW moments are materialised (one optimizer step on zero gradients: the checkpoint
then has its full size), and ``RayPPOTrainer._save_checkpoint`` writes ``global_step_1``: worker files (model,
optimizer, extra state, HF export), ``data.pt``, ``config.yaml``, the manifest with SHA-256 of every file, fsync,
rename. Reported per model: save time (median of ``--repeat`` saves), the time to verify the manifest (hash every
file; what a resume does before loading) and to load it back (``_load_checkpoint``), and the size on disk by part.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: make ``verl`` importable
    sys.path.insert(0, str(REPO_ROOT))


def _build(model: str, root: Path):
    from verl.trainer.main_ppo import build_local_trainer

    return build_local_trainer(
        [
            f"actor_rollout_ref.model.path={model}",
            "algorithm.adv_estimator=grpo",
            "trainer.n_gpus_per_node=0",
            "data.train_batch_size=2",
            "data.max_samples=8",
            "data.val_max_samples=2",
            "data.max_prompt_length=2048",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
            f"trainer.default_local_dir={root}/ckpt",
            f"trainer.run_dir={root}/run",
            "trainer.logger=[console]",
        ]
    )


def _fill_optimizer(worker) -> None:
    """Create the AdamW moments (lazily allocated at the first step) so the optimizer file has its real size."""
    import torch

    for p in worker.actor_module.parameters():
        p.grad = torch.zeros_like(p)
    worker.actor_optimizer.step()
    worker.actor_optimizer.zero_grad(set_to_none=True)


def _sizes(step_dir: Path) -> dict:
    parts = {"model": 0, "optimizer": 0, "extra_state": 0, "huggingface": 0, "driver (data.pt, config, manifest)": 0}
    for path in step_dir.rglob("*"):
        if not path.is_file():
            continue
        size, rel = path.stat().st_size, str(path.relative_to(step_dir))
        if "/huggingface/" in f"/{rel}":
            parts["huggingface"] += size
        elif "model_world_size" in rel:
            parts["model"] += size
        elif "optim_world_size" in rel:
            parts["optimizer"] += size
        elif "extra_state" in rel:
            parts["extra_state"] += size
        else:
            parts["driver (data.pt, config, manifest)"] += size
    parts["total"] = sum(parts.values())
    return parts


def measure(model: str, repeat: int, workdir: Path) -> dict:
    from verl.utils import checkpoint_manifest as cm

    root = workdir / model
    trainer = _build(model, root)
    try:
        worker = trainer.actor_rollout_wg.worker
        _fill_optimizer(worker)
        n_params = sum(p.numel() for p in worker.actor_module.parameters())
        trainer.global_steps = 1
        save_s = []
        for _ in range(repeat):  # the same step again replaces the directory, as a replayed step does
            start = time.perf_counter()
            trainer._save_checkpoint()
            save_s.append(time.perf_counter() - start)
        step_dir = root / "ckpt" / "global_step_1"
        start = time.perf_counter()
        cm.verify_checkpoint(step_dir)
        verify_s = time.perf_counter() - start
        start = time.perf_counter()
        trainer._load_checkpoint()
        load_s = time.perf_counter() - start
        return {
            "model": model,
            "parameters": n_params,
            "save_s": statistics.median(save_s),
            "save_s_all": save_s,
            "verify_sha256_s": verify_s,
            "load_s (verify + load)": load_s,
            "bytes": _sizes(step_dir),
        }
    finally:
        trainer.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"])
    parser.add_argument("--repeat", type=int, default=3, help="saves per model; the median is reported")
    parser.add_argument("--workdir", default=None, help="where checkpoints are written (default: a temp dir)")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ckpt_cost_"))
    results = []
    try:
        for model in args.models:
            results.append(measure(model, args.repeat, workdir))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    mib = 1 << 20
    print(
        f"{'model':<14} {'params':>11} {'save s':>7} {'verify s':>9} {'load s':>7} {'total MiB':>10} "
        f"{'model':>7} {'optim':>7} {'hf':>7}"
    )
    for r in results:
        b = r["bytes"]
        print(
            f"{r['model']:<14} {r['parameters']:>11,} {r['save_s']:>7.2f} {r['verify_sha256_s']:>9.2f} "
            f"{r['load_s (verify + load)']:>7.2f} {b['total'] / mib:>10.1f} {b['model'] / mib:>7.1f} "
            f"{b['optimizer'] / mib:>7.1f} {b['huggingface'] / mib:>7.1f}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
