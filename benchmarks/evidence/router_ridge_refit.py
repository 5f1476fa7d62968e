"""A ridge router head fitted again with more training rows, offline: what the trainer's ridge fit would be had those
rows been in its batches (issue 19 §3.2).

    python benchmarks/evidence/router_ridge_refit.py --checkpoint CKPT \
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
a row the reward cannot score is left out, as the trainer leaves out NaN targets). The head's input normalisation
and output layer are then set from the new sums as the trainer sets them (``RouterComponent._ridge_update``). λ and
the route costs stay the checkpoint's: with the extra rows the dual ascent would have moved λ too, which this does
not simulate.

For each ``--route NAME=PROMPTS:FRONTIER_DIR`` it writes ``DIR/NAME.jsonl``: the rows of
``FRONTIER_DIR/answer.jsonl`` (a ``router_frontier.sh`` folder of the same checkpoint and prompts) with the refitted
head's ``router_probs`` and greedy ``route`` at the checkpoint's λ, ready for ``router_frontier.py --policy``.
Prompts are matched by their position in ``PROMPTS`` (the ``row`` field). The summary JSON records the rows added,
their mean reward per route, and the command.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from verl.router import RouterAction
from verl.router.infer import RouterInference, load_prompt_rows
from verl.router.value import RidgeRouteValues
from verl.trainer.main_eval import read_generations

sys.path.insert(0, str(Path(__file__).resolve().parent))
from router_value_shift import named_paths, prompt_features, route_scores  # noqa: E402


def refit(infer: RouterInference, ridge: RidgeRouteValues, features: torch.Tensor, positions: list[int],
          rewards: dict[RouterAction, dict[int, float]]) -> dict:
    """Fold one observation per route and prompt into ``ridge`` and set ``infer.head`` from the sums.

    Args: ``features`` float ``[N, H]`` of the prompts at file ``positions`` (length N); ``rewards`` as
        :func:`router_value_shift.route_scores` keyed by file position (``row``). Returns the number of observations added per route and their mean reward."""
    added = {}
    for route in RouterAction:
        have = [(i, rewards[route][p]) for i, p in enumerate(positions) if p in rewards[route]]
        rows = torch.tensor([i for i, _ in have], dtype=torch.long)
        targets = torch.tensor([r for _, r in have], dtype=torch.float64)
        ridge.add(RidgeRouteValues.increments(features[rows], torch.full((len(have),), int(route)), targets))
        added[route.name] = {"rows": len(have), "mean_reward": float(targets.mean()) if have else None}
    infer.head.set_norm_stats(*ridge.feature_stats())
    weight, bias = ridge.solve(*infer.head.norm_stats())
    infer.head.set_linear(weight, bias)
    return added


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
    state = torch.load(infer.files.router_file, map_location="cpu", weights_only=False)
    ridge = RidgeRouteValues(int(infer.model.config.hidden_size), float(infer.router_cfg.value_ridge_alpha))
    ridge.load_state_dict(state["ridge"])
    before = [float(c) for c in ridge.count]
    # the checkpoint's head is the fit of its own sums: solving them again must give it back
    mean, scale = infer.head.norm_stats()
    weight, bias = ridge.solve(mean, scale)
    reproduced = max(float((weight - infer.head.net.weight.detach().double()).abs().max()),
                     float((bias - infer.head.net.bias.detach().double()).abs().max()))
    if reproduced > 1e-4:
        raise SystemExit(f"{infer.files.router_file}: the head is not the ridge fit of its sums (max difference "
                         f"{reproduced:.3g}): the refit would not be the trainer's")

    rows = load_prompt_rows(args.add_prompts)
    x, keep = prompt_features(infer, rows)
    positions = [rows[i].position for i in keep]
    added = refit(infer, ridge, torch.from_numpy(x), positions, route_scores(args.add_routes, key="row"))

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (prompts, frontier) in targets.items():
        by_position = {r.position: r for r in load_prompt_rows(prompts)}
        table = read_generations(str(Path(frontier) / "answer.jsonl"))
        messages = [by_position[int(r["row"])].messages for r in table]
        with torch.no_grad():
            probs = torch.cat([torch.softmax(infer._policy_logits(messages[i:i + 4]), -1)
                               for i in range(0, len(messages), 4)])
        with open(out_dir / f"{name}.jsonl", "w") as fh:
            for r, p in zip(table, probs.tolist()):
                kept = {k: v for k, v in r.items() if not k.startswith("_")}
                kept.update(route=RouterAction(int(torch.tensor(p).argmax())).name,
                            router_probs={a.name: p[int(a)] for a in RouterAction},
                            router_lambda=infer.value_policy[2])
                fh.write(json.dumps(kept) + "\n")
        written[name] = {"file": str(out_dir / f"{name}.jsonl"), "rows": len(table),
                         "tool_route_share": float((probs.argmax(-1) != int(RouterAction.ANSWER)).float().mean())}
    summary = {"checkpoint": str(args.checkpoint), "lambda": infer.value_policy[2],
               "ridge_observations_before": before,
               "checkpoint_head_reproduced_max_abs_diff": reproduced, "ridge_observations_after": [float(c) for c in ridge.count],
               "added": {"prompts_file": args.add_prompts, "prompts_fit": len(keep), "rows": len(rows),
                         "per_route": added},
               "routed": written, "seconds": round(time.time() - started, 1),
               "command": "python benchmarks/evidence/router_ridge_refit.py " + " ".join(
                   argv if argv is not None else sys.argv[1:])}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(written, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
