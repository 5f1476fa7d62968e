"""A ridge router head fitted again with more training rows, offline: what the trainer's ridge fit would be had those
rows been in its batches (issue 19 §3.2).

    python experiments/scripts/router_ridge_refit.py --checkpoint CKPT \
        --add-prompts EXTRA.parquet --add-routes EXTRA_GEN_DIR \
        --route NAME=PROMPTS.parquet:FRONTIER_DIR [--route ...] --out-dir DIR --output SUMMARY.json

Under ``router.loss_mode=value router.value_fit=ridge`` the actor is not trained and every route of every training
prompt is generated greedily (``run_router_training.sh``'s ``value_ridge`` recipe), so the head after any set of
observations is the closed-form fit of their sums, whatever their order or batching
(:class:`verl.router.value.RidgeRouteValues`, ``docs/router.md`` "Ridge fit"). This script folds into the
checkpoint's sums one observation per route of each ``EXTRA`` prompt that fits the run's ``data.max_prompt_length``:
its pooled prompt features (:func:`verl.router.head.compute_router_features` on the original prompt) and the RLLA
reward (``main_eval.row_metrics``' score, as ``router_frontier.py`` scores) of that route's greedy response, read
from ``EXTRA_GEN_DIR/{answer,search,calculate}.jsonl`` (``python -m verl.router.infer --routes answer|search|
calculate --max_new_tokens 128 --filter_overlong_prompts`` on the checkpoint, as ``router_frontier.sh`` makes them;
a row the reward cannot score is left out, as the trainer leaves out NaN targets; the reward's chat wrapper and
tool format are the checkpoint's ``reward_model.wrapper`` and ``data.tool_format``). The head's input normalisation
and output layer are then set from the new sums by the trainer's own step (:meth:`RidgeRouteValues.set_head`, which
``RouterComponent._ridge_update`` calls); the script first checks that the checkpoint's own sums give its head back.
λ and the route costs stay the checkpoint's: with the extra rows the dual ascent would have moved λ too, which this
does not simulate.

For each ``--route NAME=PROMPTS:FRONTIER_DIR`` it writes ``DIR/NAME.jsonl``: the rows of
``FRONTIER_DIR/answer.jsonl`` (a ``router_frontier.sh`` folder of the same checkpoint and prompts) keyed as there,
without their response, with the refitted head's ``router_probs`` and greedy ``route`` at the checkpoint's λ, ready
for ``router_frontier.py --policy``. Generation rows are matched to prompts by their position in the prompts file
(``row``), and each row's ``index`` must be that prompt's ``extra_info.index`` (an error names the file and line
otherwise). The summary JSON records the rows added and their mean reward per route, the reward settings, and for
each ``--route`` set the head's predicted route values and tool margin (``max(Q(SEARCH), Q(CALCULATE)) −
Q(ANSWER)``) before and after the refit, and the command.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

from verl.router import RouterAction
from verl.router.infer import RouterInference, load_prompt_rows
from verl.router.value import RidgeRouteValues, value_policy_logits
from verl.trainer.main_eval import read_generations

sys.path.insert(0, str(Path(__file__).resolve().parent))
from router_value_shift import (
    load_ridge,
    named_paths,
    prompt_features,
    reward_settings,  # noqa: E402
    route_scores,
    tool_margin,
)


def refit(
    head,
    ridge: RidgeRouteValues,
    features: torch.Tensor,
    positions: list[int],
    rewards: dict[RouterAction, dict[int, float]],
) -> dict:
    """Fold one observation per route and prompt into ``ridge`` and make ``head`` the fit of the new sums
    (:meth:`RidgeRouteValues.set_head`, as the trainer does); both are modified in place.

    Args:
        head: a linear :class:`verl.router.head.RouterHead` (``input_norm="running"``); ridge: the sums so far.
        features: float ``[N, H]``, the pooled features of the prompts at file ``positions`` (length N).
        rewards: ``{route: {file position: RLLA score}}`` (:func:`router_value_shift.route_scores` keyed by ``row``);
            a prompt a route has no score for adds no observation of that route.

    Returns: ``{route name: {"rows": observations added, "mean_reward": their mean or None}}``.

    Raises: KeyError: a route missing from ``rewards``; ValueError: ``features`` and ``positions`` of other lengths.
    """
    if len(features) != len(positions):
        raise ValueError(f"refit: {len(features)} feature rows for {len(positions)} positions")
    added = {}
    for route in RouterAction:
        have = [(i, rewards[route][p]) for i, p in enumerate(positions) if p in rewards[route]]
        rows = torch.tensor([i for i, _ in have], dtype=torch.long)
        targets = torch.tensor([r for _, r in have], dtype=torch.float64)
        ridge.add(RidgeRouteValues.increments(features[rows], torch.full((len(have),), int(route)), targets))
        added[route.name] = {"rows": len(have), "mean_reward": float(targets.mean()) if have else None}
    ridge.set_head(head)
    return added


def checked_position(row: dict, prompts: dict, prompts_file: str) -> int:
    """The prompts-file position a generation row answers (its ``row``), after checking that its ``index`` is that
    prompt's. Raises SystemExit naming the generation file and line and the prompts file on a mismatch."""
    position = int(row["row"])
    prompt = prompts.get(position)
    if prompt is None or int(row.get("index", prompt.index)) != prompt.index:
        raise SystemExit(
            f"{row.get('_where')}: row {position} index {row.get('index')} is not a prompt of "
            f"{prompts_file} (there: {None if prompt is None else prompt.index}): the generations were "
            "made from another prompts file"
        )
    return position


def value_summary(values: torch.Tensor) -> dict:
    """Mean predicted value per route and mean tool margin of head outputs ``[N, 3]``."""
    values = values.numpy()
    return {
        **{a.name: float(values[:, int(a)].mean()) for a in RouterAction},
        "tool_margin": float(tool_margin(values).mean()),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--add-prompts", required=True)
    parser.add_argument("--add-routes", required=True, help="folder of answer/search/calculate.jsonl")
    parser.add_argument("--route", action="append", required=True, help="NAME=PROMPTS.parquet:FRONTIER_DIR")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    targets = {}
    for name, spec in named_paths(args.route, "--route").items():
        prompts, sep, frontier = spec.rpartition(":")
        if not sep or not prompts:
            raise SystemExit(f"--route {name}={spec}: expected NAME=PROMPTS.parquet:FRONTIER_DIR")
        targets[name] = (prompts, frontier)

    started = time.time()
    infer = RouterInference(args.checkpoint, max_new_tokens=1, device="cpu")
    if infer.value_policy is None or infer.router_cfg.value_fit != "ridge":
        raise SystemExit(f"{args.checkpoint}: not a router.loss_mode=value router.value_fit=ridge checkpoint")
    ridge = load_ridge(infer)
    before = [float(c) for c in ridge.count]
    # the checkpoint's head is the fit of its own sums: fitting a copy from them must give it back
    check = copy.deepcopy(infer.head)
    ridge.set_head(check)
    with torch.no_grad():
        reproduced = max(
            float((check.net.weight - infer.head.net.weight).abs().max()),
            float((check.net.bias - infer.head.net.bias).abs().max()),
        )
    if reproduced > 1e-4:
        raise SystemExit(
            f"{infer.files.router_file}: the head is not the ridge fit of its sums (max difference "
            f"{reproduced:.3g}): the refit would not be the trainer's"
        )
    wrapper, tool_format = reward_settings(infer)

    # the sets to route, read before the refit so that their values can be compared
    sets = {}
    for name, (prompts, frontier) in targets.items():
        by_position = {r.position: r for r in load_prompt_rows(prompts)}
        table = read_generations(str(Path(frontier) / "answer.jsonl"))
        positions = [checked_position(r, by_position, prompts) for r in table]
        features = torch.cat(
            [
                infer.prompt_features([by_position[p].messages for p in positions[i : i + 4]])
                for i in range(0, len(positions), 4)
            ]
        )
        with torch.no_grad():
            sets[name] = (table, features, infer.head.head_of_pooled(features).double())

    rows = load_prompt_rows(args.add_prompts)
    x, keep = prompt_features(infer, rows)
    by_position = {rows[i].position: rows[i] for i in keep}
    # every row must answer a prompt of the file, with its index
    scores = route_scores(
        args.add_routes,
        "row",
        wrapper,
        tool_format,
        check=lambda row: checked_position(row, by_position, args.add_prompts),
    )
    added = refit(infer.head, ridge, torch.from_numpy(x), [rows[i].position for i in keep], scores)

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (table, features, values_before) in sets.items():
        with torch.no_grad():
            values_after = infer.head.head_of_pooled(features).double()
            probs = torch.softmax(value_policy_logits(values_after, *infer.value_policy), -1)
        with open(out_dir / f"{name}.jsonl", "w") as fh:
            for r, p in zip(table, probs.tolist()):
                kept = {k: v for k, v in r.items() if not k.startswith("_") and k not in ("response", "tool_calls")}
                kept.update(
                    route=RouterAction(max(range(len(p)), key=p.__getitem__)).name,
                    router_probs={a.name: p[int(a)] for a in RouterAction},
                    router_lambda=infer.value_policy[2],
                )
                fh.write(json.dumps(kept) + "\n")
        written[name] = {
            "file": str(out_dir / f"{name}.jsonl"),
            "rows": len(table),
            "greedy_tool_share": float((probs.argmax(-1) != int(RouterAction.ANSWER)).double().mean()),
            "predicted_before": value_summary(values_before),
            "predicted_after": value_summary(values_after),
        }
    summary = {
        "checkpoint": str(args.checkpoint),
        "lambda": infer.value_policy[2],
        "reward_wrapper": wrapper,
        "tool_format": tool_format,
        "ridge_observations_before": before,
        "checkpoint_head_reproduced_max_abs_diff": reproduced,
        "ridge_observations_after": [float(c) for c in ridge.count],
        "added": {"prompts_file": args.add_prompts, "prompts_fit": len(keep), "rows": len(rows), "per_route": added},
        "routed": written,
        "seconds": round(time.time() - started, 1),
        "command": "python experiments/scripts/router_ridge_refit.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(written, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
