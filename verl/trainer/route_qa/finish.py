"""The end of a ``route_qa`` router run (``trainer.after_fit=verl.trainer.route_qa.finish:after_fit``, which the
``router_route_qa`` recipe sets): the test table played by the run's actor, the router's criteria read off it, and
a plot.

Writes into the run folder (``trainer.run_dir``):

- ``test_table.parquet``: :func:`verl.trainer.route_qa.evaluate.play_table` on the task's test split with the actor
  of the last checkpoint (its ``actor/huggingface`` export; the value-mode router leaves it as the warm start was);
  kept with ``test_table.json`` (the model folder and its weights' bytes), and reused when the run is finished again
  by the same actor;
- ``summary.json``: :func:`verl.trainer.route_qa.report.criteria` at ``router.budget_B`` with the policy's expected
  cost over the last third of the training steps, plus the seconds each part took;
- ``plots/route_qa.png``: route shares by kind (router, bag-of-words) and accuracy against cost (random routing at
  every budget, always-tools, the oracle, the bag-of-words baseline, the router).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

__all__ = ["after_fit", "check", "finish_run", "plot_summary", "random_curve"]

logger = logging.getLogger(__name__)


def _last_checkpoint(checkpoint_root: Path) -> Path:
    steps = sorted(
        (int(p.name.split("_")[-1]), p) for p in checkpoint_root.glob("global_step_*") if p.name[12:].isdigit()
    )
    if not steps:
        raise FileNotFoundError(f"route_qa finish: no global_step_* checkpoint under {checkpoint_root}")
    return steps[-1][1]


def finish_run(
    run_dir: str | Path,
    checkpoint: str | Path,
    data_dir: str | Path,
    budget: float,
    model_dir: str | Path | None = None,
    batch_size: int = 64,
    response_length: int = 160,
    max_assistant_turns: int = 2,
) -> dict:
    """Play the test table (unless ``run_dir/test_table.parquet`` exists), read the criteria, write
    ``summary.json`` and the plot; returns the summary.

    Args:
        run_dir: the run folder (``metrics.jsonl`` is read from it for the budget criterion).
        checkpoint: ``.../global_step_N``, the router routed with.
        data_dir: the task's folder (``test.parquet``, ``train.parquet``, ``corpus.jsonl``).
        budget: ``router.budget_B``.
        model_dir: the actor that plays the table (default: the checkpoint's ``actor/huggingface``).
        response_length, max_assistant_turns: an episode's token budget and turns (the run's
            ``data.max_response_length`` and ``multi_turn.max_assistant_turns``).

    Raises:
        FileNotFoundError: no checkpoint, no HF export in it, or a missing task file.
    """
    from verl.trainer.route_qa.evaluate import load_rows, play_table, table_frame
    from verl.utils.fs import atomic_path
    from verl.trainer.route_qa.report import criteria, last_third_mean, read_table, router_routes

    run_dir, data_dir, checkpoint = Path(run_dir), Path(data_dir), Path(checkpoint)
    seconds: dict[str, float] = {}
    rows = load_rows(data_dir / "test.parquet")
    table_path, played_by = run_dir / "test_table.parquet", run_dir / "test_table.json"
    model = Path(model_dir) if model_dir is not None else checkpoint / "actor" / "huggingface"
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"route_qa finish: no HF model at {model} to play the test split with")
    stamp = {"model": str(model), "weights_bytes": sum(p.stat().st_size for p in model.glob("*.safetensors"))}
    reuse = table_path.is_file() and played_by.is_file() and json.loads(played_by.read_text()) == stamp
    if not reuse:  # none yet, or played by another actor
        start = time.monotonic()
        logger.info("route_qa finish: playing %d test questions x 4 settings with %s", len(rows), model)
        table = play_table(
            str(model),
            rows,
            data_dir / "corpus.jsonl",
            batch_size=batch_size,
            response_length=response_length,
            max_assistant_turns=max_assistant_turns,
        )
        with atomic_path(table_path) as tmp:
            table_frame(table, rows).to_parquet(tmp, index=False)
        played_by.write_text(json.dumps(stamp) + "\n")
        seconds["test_table"] = time.monotonic() - start
    table = read_table(table_path, rows)
    start = time.monotonic()
    routes = router_routes(checkpoint, rows, batch_size=batch_size)
    seconds["router_routes"] = time.monotonic() - start
    metrics = run_dir / "metrics.jsonl"
    last = last_third_mean(metrics) if metrics.is_file() else None
    result = criteria(table, rows, routes, load_rows(data_dir / "train.parquet"), budget, last)
    result["random_curve"] = random_curve(table)
    result["checkpoint"], result["seconds"] = str(checkpoint), seconds
    with atomic_path(run_dir / "summary.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    plot_summary(result, run_dir / "plots" / "route_qa.png")
    return result


def random_curve(table: dict, points: int = 11) -> list[dict]:
    """Random routing's ``{"cost", "accuracy"}`` at ``points`` budgets from 0 to the most it can spend (every
    question on a tool route, SEARCH and CALCULATE equally often; ``policies.random_at_budget``)."""
    from verl.trainer.route_qa import policies

    spend = float(policies.expected(table, _all_tools(table), "used_tool").mean())
    curve = []
    for budget in np.linspace(0.0, spend, points):
        policy = policies.random_at_budget(table, float(budget))
        curve.append({"cost": float(budget), "accuracy": float(policies.expected(table, policy, "correct").mean())})
    return curve


def _all_tools(table: dict) -> np.ndarray:
    """Half the questions' mass on SEARCH, half on CALCULATE: random routing's largest spend."""
    from verl.trainer.route_qa.evaluate import SETTINGS

    n = len(table[SETTINGS[0]]["correct"])
    probs = np.zeros(len(SETTINGS))
    probs[[SETTINGS.index("SEARCH"), SETTINGS.index("CALCULATE")]] = 0.5
    return np.tile(probs, (n, 1))


def plot_summary(result: dict, path: str | Path) -> Path:
    """The two panels of the module docstring from a :func:`finish_run` summary; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from verl.utils.dataset.route_qa import KINDS

    summary = result["summary"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    routes = ("ANSWER", "SEARCH", "CALCULATE")
    colors = {"ANSWER": "#8c8c8c", "SEARCH": "#4c72b0", "CALCULATE": "#dd8452"}
    for offset, (name, label) in enumerate((("router", "router"), ("bag_of_words", "bag of words"))):
        shares = summary[name]["route_shares"]
        x = np.arange(len(KINDS)) * 3 + offset
        bottom = np.zeros(len(KINDS))
        for route in routes:
            height = np.array([shares[k].get(route, 0.0) for k in KINDS])
            left.bar(x, height, bottom=bottom, color=colors[route], label=route if offset == 0 else None)
            bottom += height
        for xi in x:
            left.text(xi, 1.02, label, ha="center", fontsize=7, rotation=90, va="bottom")
    left.set_xticks(np.arange(len(KINDS)) * 3 + 0.5, KINDS)
    left.set_ylim(0, 1.3)
    left.set_ylabel("share of routes")
    left.set_title("routes by kind (test split)")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize=8, ncol=3, frameon=False)
    budget = summary["budget"]
    curve = result["random_curve"]
    right.plot([p["cost"] for p in curve], [p["accuracy"] for p in curve], "k--", label="random routing")
    for name, marker in (("router", "o"), ("bag_of_words", "s"), ("always_tools", "^"), ("oracle", "*")):
        right.plot(summary[name]["cost"], summary[name]["accuracy"], marker, markersize=9, label=name)
    right.axvline(budget, color="0.6", lw=0.8)
    right.set_xlabel("cost: share of questions with a tool call")
    right.set_ylabel("accuracy (exact match)")
    right.set_title(f"accuracy against cost (B = {budget:g})")
    right.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def check(config) -> None:
    """What :func:`after_fit` needs of a run, checked before it starts (``verl.trainer.main_ppo.load_after_fit``):
    ``data.task=route_qa`` and a checkpoint to route with (``trainer.save_freq > 0``).

    Raises:
        ConfigError: either is missing, naming the key.
    """
    from verl.trainer.config_errors import ConfigError

    if config.data.task != "route_qa":
        raise ConfigError(
            f"trainer.after_fit=verl.trainer.route_qa.finish:after_fit reads the route_qa test split: it needs "
            f"data.task=route_qa, got {config.data.task}"
        )
    if int(config.trainer.save_freq or -1) <= 0:
        raise ConfigError(
            f"trainer.after_fit=verl.trainer.route_qa.finish:after_fit routes with the last checkpoint: it needs "
            f"trainer.save_freq > 0, got {config.trainer.save_freq}"
        )


def after_fit(config, trainer) -> dict:
    """``trainer.after_fit`` hook: :func:`finish_run` for a finished ``main_ppo`` run on ``data.task=route_qa``
    (the last checkpoint under ``trainer.default_local_dir``, ``router.budget_B``).

    Raises:
        ConfigError: see :func:`check`.
    """
    check(config)
    result = finish_run(
        trainer.run_dir(),
        _last_checkpoint(Path(config.trainer.default_local_dir)),
        config.data.task_dir,
        float(config.router.budget_B),
        response_length=int(config.data.max_response_length),
        max_assistant_turns=int(config.actor_rollout_ref.rollout.multi_turn.max_assistant_turns),
    )
    for name in ("route_shares", "payoff", "loose_budget", "budget"):
        logger.info("route_qa %s: holds=%s", name, result[name]["holds"])
    return result


after_fit.check = check  # verl.trainer.main_ppo.load_after_fit calls it before the run
