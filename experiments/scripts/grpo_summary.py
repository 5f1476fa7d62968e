"""Summarise a GRPO evidence run (issue 19 §3.1) into one committed JSON and a plot.

    python experiments/scripts/grpo_summary.py outputs/evidence/grpo_smollm2_sft_p1024 \
        experiments/runs/grpo-02/training.json --plot experiments/runs/grpo-02/training.png \
        --before experiments/runs/eval-02/eval_smollm2-135m-sft/headline.json \
        --after experiments/runs/grpo-02/eval_step40/headline.json \
        --paired experiments/runs/grpo-02/paired.json --subset "prompt<=1024" --command "..."

Reads the run directory's ``metrics.jsonl`` (one record per step; validation records carry ``val/*``) and
``config.yaml``; keeps the settings that size the run, the step time (median / min / max of ``timing_s/step``), every
in-training validation (score / format / correctness of the RLLA reward), the training score per 5 steps, the
before/after evaluation headlines written by ``scripts/eval_tool_calling.sh`` and the paired per-prompt gains of
``paired_by_prompt_length.py``. The verdict is issue 19's criterion: the paired correctness gain on ``--subset`` (the
prompts of the training lengths) is significant when it exceeds two standard errors.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

VAL_KEYS = {
    "score": "val/test_score/rlla",
    "format": "val/test_format/rlla",
    "correctness": "val/test_correctness/rlla",
}
TRAIN_KEYS = {"score": "critic/score/mean", "correctness": "critic/correctness_score/mean"}


def read_records(metrics_file: Path) -> list[dict]:
    """The numeric records of one run's ``metrics.jsonl``, in order; a later record for the same step (a resumed
    run that logged it again) replaces the earlier one. Raises ``ValueError`` naming the line that is not JSON."""
    by_step: dict[tuple[int, bool], dict] = {}
    for number, line in enumerate(metrics_file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{metrics_file}:{number}: not a JSON record ({err})") from None
        if "step" not in record or "text" in record:
            continue
        is_val = any(k.startswith("val/") for k in record)
        by_step[(int(record["step"]), is_val)] = record
    return [by_step[k] for k in sorted(by_step)]


def summarise(run_dir: Path, reward_switches: list[str] | None = None) -> dict:
    """Settings, cost, validation and training means of one run directory (``metrics.jsonl`` + ``config.yaml``).
    ``reward_switches``: the ToolRL reward switches that were on, for a run whose ``config.yaml`` predates its
    ``reward_switches_on`` record (None: not recorded); the record wins where there is one."""
    records = read_records(run_dir / "metrics.jsonl")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    validation = [
        {"step": r["step"], **{k: round(r[key], 4) for k, key in VAL_KEYS.items() if key in r}}
        for r in records
        if VAL_KEYS["score"] in r
    ]
    train = [r for r in records if TRAIN_KEYS["score"] in r]
    step_s = [r["timing_s/step"] for r in train if "timing_s/step" in r]
    means = []
    for start in range(0, len(train), 5):
        chunk = train[start : start + 5]
        means.append(
            {
                "steps": f"{chunk[0]['step']}-{chunk[-1]['step']}",
                **{k: round(statistics.fmean(r[key] for r in chunk), 3) for k, key in TRAIN_KEYS.items()},
            }
        )
    data, actor, rollout = config["data"], config["actor_rollout_ref"]["actor"], config["actor_rollout_ref"]["rollout"]
    settings = {
        "base_model": Path(config["actor_rollout_ref"]["model"]["path"]).name,
        "prompts_per_step": data["train_batch_size"],
        "rollout_n": rollout["n"],
        "rollout_temperature": rollout.get("temperature"),
        "max_prompt_length": data["max_prompt_length"],
        "max_response_length": data["max_response_length"],
        "lr": actor["optim"]["lr"],
        "kl_in_reward": (
            config["algorithm"].get("kl_ctrl", {}).get("kl_coef")
            if config["algorithm"].get("use_kl_in_reward")
            else 0.0
        ),
        "kl_loss": (
            {"coef": actor.get("kl_loss_coef"), "type": actor.get("kl_loss_type")} if actor.get("use_kl_loss") else None
        ),
        "reward_switches_on": config.get("reward_switches_on", reward_switches),
        "entropy_coeff": actor.get("entropy_coeff"),
        "steps": train[-1]["step"] if train else 0,
        "seed": data.get("seed"),
    }
    cost = (
        {
            "median_step_s": round(statistics.median(step_s), 1),
            "min_step_s": round(min(step_s), 1),
            "max_step_s": round(max(step_s), 1),
            "steps_timed": len(step_s),
        }
        if step_s
        else {}
    )
    peak = [v for r in train for k, v in r.items() if k.startswith("perf/peak_rss_gb/")]
    if peak:
        cost["peak_rss_gb"] = round(max(peak), 2)
    return {"settings": settings, "cost": cost, "validation_in_training": validation, "train_means_per_5_steps": means}


def verdict(paired: dict, subset: str) -> dict:
    """Issue 19's criterion on ``paired[subset]``: correctness gain > 2 standard errors. Raises ``KeyError`` naming
    the subset when the paired file has no such split."""
    if subset not in paired:
        raise KeyError(f"paired file has no subset {subset!r} (has {sorted(k for k in paired if 'rows' in paired[k])})")
    stats = paired[subset]["metrics"]["correctness"]
    return {
        "subset": subset,
        "n": stats["n"],
        "correctness_before": round(stats["before"], 4),
        "correctness_after": round(stats["after"], 4),
        "gain": round(stats["gain"], 4),
        "se": round(stats["se"], 4),
        "t": round(stats["t"], 2),
        "sign_test_p": round(stats["sign_test_p"], 4),
        "more_than_two_se": bool(stats["gain"] > 2 * stats["se"]),
    }


def plot(summary: dict, path: str, title: str) -> None:
    """Validation score / format / correctness (markers, where the run validated) and the training score per 5 steps
    (line) against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    val = summary["validation_in_training"]
    for key, marker in (("score", "o"), ("format", "s"), ("correctness", "^")) if val else ():
        ax.plot([v["step"] for v in val], [v.get(key) for v in val], marker=marker, label=f"validation {key}")
    means = summary["train_means_per_5_steps"]
    ax.plot(
        [int(m["steps"].split("-")[1]) for m in means],
        [m["score"] for m in means],
        color="grey",
        linestyle="--",
        label="training score (mean of 5 steps)",
    )
    ax.set_xlabel("training step")
    ax.set_ylabel("RLLA reward part")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="the run's RUN_DIR (metrics.jsonl, config.yaml)")
    parser.add_argument("output")
    parser.add_argument("--plot", default=None)
    parser.add_argument("--before", default=None, help="headline.json of the starting model's evaluation")
    parser.add_argument("--after", default=None, help="headline.json of the trained model's evaluation")
    parser.add_argument("--paired", default=None, help="paired_by_prompt_length.py output")
    parser.add_argument("--subset", default="all", help="the paired split the verdict reads (e.g. 'prompt<=1024')")
    parser.add_argument("--command", default="", help="the command that produced the run")
    parser.add_argument("--eval-command", action="append", default=[], help="a command of the evaluation (repeat)")
    parser.add_argument("--reading", default="", help="what the numbers say (kept beside them)")
    parser.add_argument(
        "--reward-switches",
        default=None,
        help="comma-separated ToolRL switches that were on (REFINEDREWARD,...), for a run whose "
        "config.yaml does not record them; '' for none",
    )
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    switches = None if args.reward_switches is None else [s for s in args.reward_switches.split(",") if s]
    summary = summarise(run_dir, switches)
    out = {
        "issue": "19 §3.1: GRPO without the router",
        "command": args.command,
        "eval_commands": args.eval_command,
        **summary,
    }
    if args.before and args.after:
        out["eval_before_after"] = {
            "before": json.loads(Path(args.before).read_text()),
            "after": json.loads(Path(args.after).read_text()),
        }
    if args.paired:
        paired = json.loads(Path(args.paired).read_text())
        out["paired"] = {k: v["metrics"] for k, v in paired.items() if isinstance(v, dict) and "metrics" in v}
        out["verdict"] = verdict(paired, args.subset)
    if args.reading:
        out["reading"] = args.reading
    if args.plot:
        plot(summary, args.plot, run_dir.name)
    Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("validation_in_training", "verdict") if k in out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
