"""Asynchronous mode against the synchronous trainer at equal batch settings, one after the other on this machine.

Both train the same model (``--model``, default the ``tiny`` preset) on the first ``--rows`` RLLA training rows
(single-turn RLLA, the RLLA reward) with RLOO advantages, ``--n`` samples per prompt at temperature 1.0, at most
``--max-new-tokens`` new tokens, one optimizer step per learner step, the same lr and micro-batch:

- sync: ``python -m verl.trainer.main_ppo`` with ``data.train_batch_size=--prompts`` (so ``prompts x n`` rollouts per
  step), ``ppo_mini_batch_size`` = the whole batch, one PPO epoch, no reference model / KL, shared-prompt layout as
  ``--shared-prompt`` (the async learner gets the same switch); a step is generate + old log-probs + reward + update,
  in sequence.
- async: ``python -m verl.trainer.main_async`` with ``--replicas`` RLLA env actors (``group_size=--n``; default one
  per prompt of a sync step, so the server can batch a sync step's worth of groups in one ``generate``), one HF
  inference server (``--server-threads`` torch threads, default 1) and the learner (``--learner-threads``, default 1:
  server and learner have one core each on a 2-core machine); a batch is a sync step's ``--prompts`` groups
  (``--batch-by groups``, the default: ``async.batcher.max_groups=prompts`` under a token budget of
  ``prompts x n x (max-prompt-length + max-new-tokens)``, which they always fit), or with ``--batch-by tokens`` as
  many groups as fit ``prompts x n x (mean prompt tokens + max-new-tokens)`` tokens (about as many rollouts as a sync
  step; the measured count is printed), handed out in ``--order`` (default ``oldest_first``: fewer stale drops);
  ``async.max_buffer_rollouts`` = ``--max-buffer`` (default ``prompts x n``: buffered plus in-flight rollouts stay
  within one batch's worth); ``async.replay.max_age`` = ``--max-age``. The async mode's own defaults (one env actor,
  ``newest_first``, torch's threads for the learner, no group limit) are ``--replicas 1 --order newest_first
  --learner-threads 0 --batch-by tokens``.

Measured after ``--warmup`` steps: wall seconds per learner step, learner steps/s, rollouts trained/s (rollouts that
entered an update), rollouts generated/s (async: every completed rollout, stale ones included), and for async the
staleness of what was trained (``replays/rlla/used_version_lag/k`` summed: k = learner version minus the rollout's
policy version when the batch was made), ``used_frac_on_policy``, the seed's ``frac_on_policy`` and the stale drops.
The last line prints the async/sync ratios. ``--validate`` adds greedy validation after the last step in both modes
(the async mode's: ``docs/async.md`` "Validation"; its time is left out of the rates). Timings need a quiet machine: the load average before and after is printed.
Sync time is the sum of the trainer's ``timing_s/step`` (logging between steps left out); async time is wall time
between learner results, so the comparison leans slightly towards sync. The staleness counts are of the rollouts the
batcher handed out (overlong ones, which are not trained, included).

Usage::

    python benchmarks/bench_async_vs_sync.py                          # 1 warm-up + 6 measured steps each
    python benchmarks/bench_async_vs_sync.py --prompts 4 --n 4 --steps 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
import itertools

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="model preset or local HF directory")
    parser.add_argument("--rows", type=int, default=32, help="first RLLA training rows used by both modes")
    parser.add_argument(
        "--prompts",
        type=int,
        default=4,
        help="prompts per sync step (async: groups per batch, or "
        "their rollouts' worth of tokens with --batch-by tokens)",
    )
    parser.add_argument("--n", type=int, default=4, help="samples per prompt (async: group size)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-prompt-length", type=int, default=1024, help="rows with longer prompts are skipped")
    parser.add_argument("--micro-batch", type=int, default=4, help="sequences per forward/backward micro-batch")
    parser.add_argument("--steps", type=int, default=6, help="measured learner steps, after the warm-up")
    parser.add_argument(
        "--warmup", type=int, default=1, help="learner steps not measured (model loading, first batch); >= 1"
    )
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--max-age", type=int, default=1, help="async.replay.max_age")
    parser.add_argument(
        "--rollout-is",
        choices=("token", "sequence"),
        default=None,
        help="async: algorithm.rollout_correction.rollout_is (the learner's correction of stale "
        "rollouts; default none: behaviour-policy PPO)",
    )
    parser.add_argument("--rollout-is-threshold", type=float, default=2.0)
    parser.add_argument(
        "--shared-prompt",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="model.use_shared_prompt (the CPU launch default), for both modes: the async learner's "
        "forward of single-turn rollouts is the synchronous actor's",
    )
    parser.add_argument(
        "--server-threads",
        type=int,
        default=1,
        help="async.inference.num_threads (torch threads of the inference server)",
    )
    parser.add_argument("--learner-threads", type=int, default=1, help="async.learner_threads (0: torch's default)")
    parser.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="RLLA env actors (concurrent requests to the server; default --prompts)",
    )
    parser.add_argument(
        "--order",
        choices=("newest_first", "oldest_first"),
        default="oldest_first",
        help="async.batcher.order (the hand-out order of ready groups)",
    )
    parser.add_argument(
        "--batch-by",
        choices=("groups", "tokens"),
        default="groups",
        help="async: a batch is --prompts groups (async.batcher.max_groups), or what fits a token "
        "budget of --prompts x --n mean-length rollouts",
    )
    parser.add_argument(
        "--max-buffer",
        type=int,
        default=None,
        help="async.max_buffer_rollouts (default: prompts x n, one batch's worth)",
    )
    parser.add_argument("--only", choices=("sync", "async"), help="run one mode only (default: both)")
    parser.add_argument(
        "--validate",
        action="store_true",
        help="greedy validation on the RLLA validation rows whose prompt fits "
        "--max-prompt-length, --max-new-tokens per response, after the last step "
        "(trainer.test_freq = the step count); its time is left out of the rates",
    )
    parser.add_argument("--val-before-train", action="store_true", help="with --validate: also at step 0")
    parser.add_argument("--val-dump", help="with --validate: trainer.validation_data_dir (per-response scores)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument(
        "--keep",
        help="run in this folder and keep it (each mode's metrics.jsonl, config and logs); "
        "default: a temporary folder, removed at the end",
    )
    args = parser.parse_args(argv)
    if min(args.rows, args.prompts, args.n, args.max_new_tokens, args.micro_batch, args.steps, args.warmup) < 1:
        parser.error(
            "--rows, --prompts, --n, --max-new-tokens, --micro-batch, --steps, --warmup must be >= 1 (the "
            "async timings are measured from the end of the last warm-up step)"
        )
    if args.n < 2:
        parser.error("--n must be >= 2 (RLOO needs two samples per prompt)")
    if args.replicas is None:
        args.replicas = args.prompts
    if args.max_buffer is None:
        args.max_buffer = args.prompts * args.n
    if min(args.replicas, args.max_buffer) < 1 or args.learner_threads < 0:
        parser.error("--replicas and --max-buffer must be >= 1, --learner-threads >= 0")
    return args


def prepare_rows(args, out_dir: Path) -> tuple[Path, float]:
    """The first ``--rows`` RLLA training rows whose chat-templated prompt fits ``--max-prompt-length``, as a parquet
    in ``out_dir``; returns its path and their mean prompt length in tokens."""
    import pandas as pd
    from transformers import AutoTokenizer

    from verl.async_rl.inference_server import template_ids
    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir
    from verl.utils.model_presets import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model(args.model))
    frame = pd.read_parquet(resolve_rlla_data_dir() / "train.parquet")
    lengths = frame["prompt"].map(lambda m: len(template_ids(tokenizer, list(m), add_generation_prompt=True)))
    keep = lengths[lengths <= args.max_prompt_length].index[: args.rows]
    if len(keep) < args.prompts:
        raise SystemExit(f"only {len(keep)} RLLA rows fit --max-prompt-length {args.max_prompt_length}")
    path = out_dir / "train.parquet"
    frame.loc[keep].reset_index(drop=True).to_parquet(path)
    return path, float(lengths[keep].mean())


def common_overrides(args, run_dir: Path, name: str) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={args.model}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        # the learner of both modes is the same actor worker and step: the same keys
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.rollout.n={args.n}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        "algorithm.adv_estimator=rloo",
        "algorithm.use_kl_in_reward=False",
        f"actor_rollout_ref.model.use_shared_prompt={args.shared_prompt}",
        "trainer.logger=[console]",
        "trainer.project_name=bench",
        f"trainer.experiment_name={name}",
        f"trainer.run_dir={run_dir}",
        f"trainer.default_local_dir={run_dir}/ckpt",
        "trainer.save_freq=-1",
        f"trainer.total_training_steps={args.warmup + args.steps}",
        "ray_init.num_cpus=2",
        "trainer.device=cpu",
    ]


def validation_overrides(args) -> list[str]:
    """``--validate``: greedy validation after the last step (and at step 0 with ``--val-before-train``) on the RLLA
    validation rows that fit ``--max-prompt-length``, ``--max-new-tokens`` per response; the same keys in both
    modes."""
    if not args.validate:
        return ["trainer.val_before_train=False", "trainer.test_freq=-1"]
    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

    return [
        f"data.val_files={resolve_rlla_data_dir() / 'test.parquet'}",
        "data.filter_overlong_prompts=True",
        f"trainer.test_freq={args.warmup + args.steps}",
        f"trainer.val_before_train={args.val_before_train}",
        *([f"trainer.validation_data_dir={Path(args.val_dump).resolve()}"] if args.val_dump else []),
    ]


def sync_command(args, data: Path, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *common_overrides(args, run_dir, "sync"),
        f"data.train_files={data}",
        *([] if args.validate else [f"data.val_files={data}"]),
        f"data.train_batch_size={args.prompts}",
        f"data.max_prompt_length={args.max_prompt_length}",
        f"data.max_response_length={args.max_new_tokens}",
        "data.shuffle=False",
        *validation_overrides(args),
        "trainer.resume_mode=disable",
        "trainer.n_gpus_per_node=0",
    ]


def async_command(args, data: Path, run_dir: Path, mean_prompt: float) -> list[str]:
    rollouts = args.prompts * args.n
    if args.batch_by == "groups":
        budget, max_groups = rollouts * (args.max_prompt_length + args.max_new_tokens), str(args.prompts)
    else:
        budget, max_groups = int(rollouts * (mean_prompt + args.max_new_tokens)), "null"
    return [
        sys.executable,
        "-m",
        "verl.trainer.main_async",
        *common_overrides(args, run_dir, "async"),
        f"async.inference.max_tokens={args.max_new_tokens}",
        f"async.batcher.total_token_budget={budget}",
        f"async.batcher.max_seq_len={args.max_prompt_length + args.max_new_tokens}",
        f"async.max_buffer_rollouts={args.max_buffer}",
        f"async.replay.max_age={args.max_age}",
        f"async.batcher.order={args.order}",
        f"async.batcher.max_groups={max_groups}",
        "~async.envs.line_world",
        f"+async.envs.rlla={{kind: rlla, data_file: {data}, replicas: {args.replicas}, fraction: 1.0, "
        f"group_size: {args.n}}}",
        f"async.inference.num_threads={args.server_threads}",
        *([f"async.learner_threads={args.learner_threads}"] if args.learner_threads else []),
        *(
            [
                f"algorithm.rollout_correction.rollout_is={args.rollout_is}",
                f"algorithm.rollout_correction.rollout_is_threshold={args.rollout_is_threshold}",
            ]
            if args.rollout_is
            else []
        ),
        f"data.max_prompt_length={args.max_prompt_length}",
        f"data.max_response_length={args.max_new_tokens}",
        *validation_overrides(args),
    ]


def run(command: list[str], label: str) -> float:
    """Run ``command`` from the repository root (its output to this terminal); returns its wall seconds."""
    env = dict(
        os.environ,
        RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"),
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    print(f"=== {label}: {' '.join(command[1:4])} ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run(command, cwd=REPO_ROOT, env=env, check=True)
    return time.perf_counter() - t0


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def summarise_sync(args, recs: list[dict]) -> dict:
    measured = [r for r in recs if r["step"] > args.warmup and "timing_s/step" in r]  # not the text records
    step_s = [r["timing_s/step"] for r in measured]
    rollouts = args.prompts * args.n
    total = sum(step_s)
    return {
        "mode": "sync",
        "steps": len(measured),
        "step_s_median": statistics.median(step_s),
        "learner_steps_per_s": len(measured) / total,
        "rollouts_per_step": float(rollouts),
        "rollouts_trained_per_s": rollouts * len(measured) / total,
        "rollouts_generated_per_s": rollouts * len(measured) / total,
        "frac_on_policy": 1.0,
        "used_version_lag": {0: rollouts * len(measured)},
        "validation": {
            r["step"]: {k: v for k, v in r.items() if k.startswith("val/")}
            for r in recs
            if any(k.startswith("val/test_score/") for k in r)
        },
    }


def summarise_async(args, recs: list[dict]) -> dict:
    validations = {
        int(r["val/policy_version"]): {k: v for k, v in r.items() if k.startswith("val/")}
        for r in recs
        if "val/policy_version" in r
    }
    by_version = {int(r["policy_version"]): r for r in recs if "policy_version" in r}
    start, end = by_version[args.warmup], by_version[args.warmup + args.steps]
    measured = [by_version[v] for v in range(args.warmup + 1, args.warmup + args.steps + 1)]

    def busy(r):  # elapsed seconds without validation (the learner waits while the servers validate)
        return r["orchestrator/elapsed_s"] - r.get("orchestrator/validation_s", 0.0)

    wall = busy(end) - busy(start)
    lags: Counter = Counter()
    for r in measured:
        for key, value in r.items():
            if key.startswith("replays/rlla/used_version_lag/"):
                lags[int(key.rsplit("/", 1)[1])] += int(value)
    step_wall = [busy(measured[0]) - busy(start)] + [busy(b) - busy(a) for a, b in itertools.pairwise(measured)]
    trained = sum(r.get("batches/rollouts", 0.0) for r in measured)
    generated = end["orchestrator/rollouts_generated"] - start["orchestrator/rollouts_generated"]
    used = sum(lags.values())
    return {
        "mode": "async",
        "steps": len(measured),
        "step_s_median": statistics.median(step_wall),
        "learner_steps_per_s": len(measured) / wall,
        "rollouts_per_step": trained / len(measured),
        "rollouts_trained_per_s": trained / wall,
        "rollouts_generated_per_s": generated / wall,
        "frac_on_policy": lags.get(0, 0) / used if used else float("nan"),
        # the seed's frac_on_policy is taken on the pool left after the batch (0 when it is empty): averaged
        # over the reports where something was left
        "seed_frac_on_policy_mean": statistics.mean(
            [r["replays/rlla/frac_on_policy"] for r in measured if r.get("replays/rlla/rollouts_in_buffer", 0) > 0]
            or [float("nan")]
        ),
        "learner_step_s_median": statistics.median(r.get("learner/step_time_s", float("nan")) for r in measured),
        "stale_dropped": sum(r.get("replays/rlla/evicted_stale", 0.0) for r in measured),
        "broadcast_latency_s_median": statistics.median(
            r.get("weights/broadcast_latency_s", float("nan")) for r in measured
        ),
        "used_version_lag": dict(sorted(lags.items())),
        # the reward of the rollouts that arrived during the measured steps (the policy's quality as it trains)
        "reward_mean": _mean_of(measured, "replays/rlla/reward/mean"),
        "reward_mean_last_half": _mean_of(measured[len(measured) // 2 :], "replays/rlla/reward/mean"),
        **{
            f"{k}_mean": _mean_of(measured, k)
            for k in (
                "rollout_corr/kl",
                "rollout_corr/is_weight_mean",
                "rollout_corr/is_weight_max",
                "actor/pg_clipfrac",
            )
        },
        "validation": dict(sorted(validations.items())),
    }


def _mean_of(records_: list[dict], key: str) -> float:
    values = [r[key] for r in records_ if key in r]
    return statistics.mean(values) if values else float("nan")


def main(argv=None) -> None:
    args = parse_args(argv)
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    load_before = os.getloadavg()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_async_"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        data, mean_prompt = prepare_rows(args, work)
        print(
            f"{args.rows} RLLA rows, mean prompt {mean_prompt:.0f} tokens; {args.prompts} prompts x {args.n} "
            f"samples x {args.max_new_tokens} new tokens per step",
            flush=True,
        )
        for mode in (args.only,) if args.only else ("sync", "async"):
            run_dir = work / mode
            command = (
                sync_command(args, data, run_dir) if mode == "sync" else async_command(args, data, run_dir, mean_prompt)
            )
            wall = run(command, mode)
            summary = (summarise_sync if mode == "sync" else summarise_async)(args, records(run_dir))
            summary["process_wall_s"] = wall
            results.append(summary)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"\nload average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} (2-core machine: > 0.5 "
        f"before means the timings are disturbed)"
    )
    print(
        f"{'mode':>6} {'s/step':>7} {'steps/s':>8} {'rollouts/step':>14} {'trained/s':>10} {'generated/s':>12} "
        f"{'on-policy':>10}  staleness of trained rollouts (lag: count)"
    )
    for r in results:
        print(
            f"{r['mode']:>6} {r['step_s_median']:>7.2f} {r['learner_steps_per_s']:>8.4f} "
            f"{r['rollouts_per_step']:>14.1f} {r['rollouts_trained_per_s']:>10.3f} "
            f"{r['rollouts_generated_per_s']:>12.3f} {r['frac_on_policy']:>10.2f}  {r['used_version_lag']}"
        )
    by = {r["mode"]: r for r in results}
    if "async" in by:
        a = by["async"]
        print(
            f"async: learner step {a['learner_step_s_median']:.2f} s (median), broadcast "
            f"{a['broadcast_latency_s_median']:.3f} s, stale rollouts dropped {a['stale_dropped']:.0f}, seed "
            f"frac_on_policy (pool left after a batch, when not empty) {a['seed_frac_on_policy_mean']:.2f}"
        )
    if len(by) == 2:
        s, a = by["sync"], by["async"]
        print(
            f"async/sync: learner steps/s {a['learner_steps_per_s'] / s['learner_steps_per_s']:.2f}x, rollouts "
            f"trained/s {a['rollouts_trained_per_s'] / s['rollouts_trained_per_s']:.2f}x, rollouts generated/s "
            f"{a['rollouts_generated_per_s'] / s['rollouts_generated_per_s']:.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
