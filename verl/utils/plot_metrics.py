"""Render a run's ``metrics.jsonl`` to PNG curves.

Usage: ``python -m verl.utils.plot_metrics outputs/<project>/<experiment>/metrics.jsonl [--out DIR]``

Writes one PNG per panel into ``--out`` (default: the jsonl's directory / ``plots``): reward (train and validation),
reward components, KL, entropy, response length, timing breakdown, and — when the run logged them — the router panel
(four plots, each on its own scale: λ; the policy's expected tool cost ``router/policy_cost`` against the budget B,
the quantity λ's dual step drives towards B; the policy's route probabilities; its task reward); for an SFT log, the
train/validation loss. Prints the written file names.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = {
    "reward": ["critic/score/mean", "critic/rewards/mean", "val/test_score/*"],
    "reward_components": [
        "critic/format_score/mean",
        "critic/correctness_score/mean",
        "critic/length_score/mean",
        "val/test_format/*",
        "val/test_correctness/*",
    ],
    "kl": ["actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty"],
    "entropy": ["actor/entropy"],
    "response_length": ["response_length/mean", "response_length/clip_ratio", "val/response_length/mean"],
    "timing": [
        "timing_s/gen",
        "timing_s/reward",
        "timing_s/old_log_prob",
        "timing_s/ref",
        "timing_s/values",
        "timing_s/adv",
        "timing_s/update_critic",
        "timing_s/update_actor",
        "timing_s/testing",
        "timing_s/step",
    ],
    "sft_loss": ["train/loss", "val/loss"],  # the SFT trainer's log (verl.trainer.fsdp_sft_trainer)
    "episodes": [
        "env/*/success_rate",
        "val/env/*/success_rate",
        "env/*/episode_return/mean",
        "val/env/*/episode_return/mean",
        "env/*/invalid_action_rate",
        "env/*/episode_length/mean",
    ],
    "step_groups": ["gigpo/num_step_groups", "gigpo/mean_step_group_size", "gigpo/frac_rows_in_singleton_step_groups"],
}
# panels of several plots: (title, patterns) each. The router's: not the routed batch's own mean cost and route
# fractions, which a stratified batch (every route for every prompt) fixes at the uniform mix whatever the policy is
GRID_PANELS = {
    "router": [
        ("lambda", ["router/lambda"]),
        ("policy cost vs budget B", ["router/policy_cost", "router/budget"]),
        ("route probabilities", ["router/policy_prob_*"]),
        ("task reward", ["router/policy_task_reward", "val/router/mean_task_reward"]),
    ],
}


def load_series(path: Path) -> dict[str, list[tuple[int, float]]]:
    """``{metric: [(step, value), …]}`` from a metrics.jsonl (text records and non-numeric values skipped)."""
    series: dict[str, list[tuple[int, float]]] = {}
    with open(path) as fh:
        for line_no, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise SystemExit(f"{path}:{line_no}: not JSON ({err})") from None
            step = record.get("step")
            for key, value in record.items():
                if key == "step" or not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                if math.isfinite(value):
                    series.setdefault(key, []).append((step, float(value)))
    return series


def _expand(patterns: list[str], keys) -> list[str]:
    """Keys matching each pattern (``fnmatch`` wildcards, e.g. ``env/*/success_rate``), in pattern order."""
    out = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            out.extend(sorted(k for k in keys if fnmatch.fnmatch(k, pattern) and k not in out))
        elif pattern in keys:
            out.append(pattern)
    return out


def _draw(ax, series: dict, keys: list[str], title: str) -> None:
    for key in keys:
        steps, values = zip(*series[key])
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=key)
    ax.set_xlabel("global step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot(path: Path, out_dir: Path) -> list[Path]:
    """Write the panels that have data; return the PNG paths."""
    series = load_series(path)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    panels = [(name, [(name.replace("_", " "), patterns)]) for name, patterns in PANELS.items()]
    for name, plots in panels + list(GRID_PANELS.items()):
        plots = [(title, keys) for title, patterns in plots if (keys := _expand(patterns, series.keys()))]
        if not plots:
            continue
        cols = 1 if len(plots) == 1 else 2
        rows = math.ceil(len(plots) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4 * rows), squeeze=False)
        for ax, (title, keys) in zip(axes.flat, plots):
            _draw(ax, series, keys, title)
        for ax in list(axes.flat)[len(plots) :]:
            ax.set_visible(False)
        fig.tight_layout()
        target = out_dir / f"{name}.png"
        fig.savefig(target, dpi=110)
        plt.close(fig)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, help="metrics.jsonl written by the trainer")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: <run dir>/plots)")
    args = parser.parse_args(argv)
    if not args.metrics.is_file():
        raise SystemExit(f"{args.metrics}: no such file")
    for target in plot(args.metrics, args.out or args.metrics.parent / "plots"):
        print(target)


if __name__ == "__main__":
    main()
