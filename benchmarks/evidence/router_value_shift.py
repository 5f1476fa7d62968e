"""Why does a ridge router head route a prompt set as it does? Its predicted route values there, how far the prompts
lie from the ones it was fitted on, and which training direction moves them (issue 19 §3.2, offline, no generation).

    python benchmarks/evidence/router_value_shift.py --checkpoint CKPT \
        --prompts train=DIR/train_router_irrelevance_f0.25_s1.parquet \
        --prompts rlla_val=DIR/test_router.parquet --prompts api_bank=API_BANK.parquet \
        --realized rlla_val=GEN_DIR --realized api_bank=GEN_DIR \
        --output benchmarks/results/NAME.json

``CKPT`` is a ``global_step_N`` folder of a ``router.loss_mode=value router.value_fit=ridge`` run. Every prompt that
fits the run's ``data.max_prompt_length`` is read once by the checkpoint's actor; its pooled final hidden state ``x``
is the head's input (:func:`verl.router.head.compute_router_features`). Per set the script reports:

- the head's predicted task reward of each route, ``Q(x, a) = h(x)_a`` (the ridge head predicts the whole reward,
  ``docs/router.md`` "Ridge fit"), and the predicted tool margin ``m(x) = max(Q(x, SEARCH), Q(x, CALCULATE)) −
  Q(x, ANSWER)``, against the price of a tool route at the checkpoint's λ, ``λ·(c̄(tool) − c̄(ANSWER))``: greedy
  routing gives a tool exactly where ``m(x)`` exceeds it (``verl/router/value.py``, ``z = (h − λ·c̄)/τ``);
- how far each prompt lies from what the fit has seen, as the ridge's own confidence width (LinUCB's, Li et al.
  2010, arXiv 1003.0146, eq. 4): ``w_a(x) = sqrt((z − z̄_a)ᵀ A_a⁻¹ (z − z̄_a) + 1/n_a)`` with ``z`` the head's
  normalised input, ``A_a = C_a/s² + α·I`` the penalised centred covariance of route ``a``'s ``n_a`` observations
  in the checkpoint's ridge sums (:class:`verl.router.value.RidgeRouteValues`) and ``z̄_a`` their mean (as α → 0,
  the standard error of the route's predicted value in units of its residual standard deviation). Held-out prompts
  of the training distribution give the scale to read another set's widths against;
- with ``--split`` (default ``train``), the set named there is split into its irrelevance rows
  (``extra_info.irrelevance_source ≥ 0``, :mod:`verl.router.irrelevance`) and the others (its call rows), and each
  set's mean offset from the call rows, ``Δ = z̄_set − z̄_call`` in the head's normalised coordinates, is compared
  with the irrelevance direction ``u = (z̄_irrelevance − z̄_call)/|·|``: ``|Δ|``, ``cos(Δ, u)``, and for each tool
  route the shift of its mean value gap ``Q(x, a) − Q(x, ANSWER)`` from the call rows', ``(w_a − w_ANSWER)·Δ``, in
  total and the part that ``Δ``'s component along ``u`` carries (the head is linear, so the two parts add up);
- with ``--realized NAME=DIR``, the realised route values and tool margin: ``router_frontier.sh``'s greedy generations of the fixed
  routes (``DIR/{answer,search,calculate}.jsonl``) scored by the RLLA reward as ``router_frontier.py`` scores them
  (``main_eval.row_metrics``), ``max(r_SEARCH, r_CALCULATE) − r_ANSWER`` per prompt (matched by ``index``),
  beside the predicted one (mean and Pearson correlation over the prompts both have).

``--cache DIR`` keeps each set's features (``DIR/NAME.npz``, with the checkpoint and file they came from) and reads
them back on a later call with the same checkpoint and file. Progress goes to stderr every 50 prompts. No part of
this is used by the trainer.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from verl.router import RouterAction
from verl.router.head import compute_router_features
from verl.router.infer import RouterInference, load_prompt_rows
from verl.router.irrelevance import SOURCE_KEY
from verl.trainer.main_eval import read_generations, row_metrics
from verl.utils.reward_score.rlla import RewardSwitches

TOOL_ROUTES = (RouterAction.SEARCH, RouterAction.CALCULATE)
ROUTE_FILES = {RouterAction.ANSWER: "answer", RouterAction.SEARCH: "search", RouterAction.CALCULATE: "calculate"}


def named_paths(values: list[str], flag: str) -> dict[str, str]:
    """``NAME=PATH`` pairs of a repeated flag, in order. Raises SystemExit on a malformed or repeated name."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path or name in out:
            raise SystemExit(f"{flag} {value!r}: expected NAME=PATH with a name used once")
        out[name] = path
    return out


@torch.no_grad()
def prompt_features(infer: RouterInference, rows, batch_size: int = 4) -> tuple[np.ndarray, list[int]]:
    """``(features [N, H] float64, kept positions)`` of the rows that fit the run's prompt limit, in file order."""
    keep = [i for i, row in enumerate(rows) if infer.prompt_length(row.messages) <= infer.max_prompt_length]
    out, started = [], time.time()
    for start in range(0, len(keep), batch_size):
        if start and start % 50 < batch_size:
            print(f"  {start}/{len(keep)} prompts, {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        batch = [rows[i].messages for i in keep[start:start + batch_size]]
        tokens = {k: v.to(infer.device) for k, v in infer._tokenize(batch).items()}
        out.append(compute_router_features(infer.model, infer.head, tokens["input_ids"], tokens["attention_mask"],
                                           tokens["position_ids"]).double().cpu().numpy())
    return (np.concatenate(out) if out else np.zeros((0, int(infer.model.config.hidden_size)))), keep


def cached_features(infer: RouterInference, rows, checkpoint: str, path: str, cache):
    """:func:`prompt_features`, kept in ``cache`` (an ``.npz``; None: no cache) and read back when it was made from
    the same checkpoint and file (path, size and modification time)."""
    stat = Path(path).stat()
    tag = np.array([str(Path(checkpoint).resolve()), str(Path(path).resolve()), str(stat.st_size),
                    str(stat.st_mtime_ns)])
    if cache is not None and cache.is_file():
        saved = np.load(cache)
        if saved["tag"].tolist() == tag.tolist():
            return saved["features"], saved["keep"].tolist()
    x, keep = prompt_features(infer, rows)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, features=x, keep=np.array(keep, dtype=np.int64), tag=tag)
    return x, keep


def ridge_widths(ridge: dict, norm_mean: torch.Tensor, norm_scale: float, alpha: float):
    """``widths(x [N, H], route) -> [N]``: the ridge's confidence width ``sqrt((z − z̄_a)ᵀ A_a⁻¹ (z − z̄_a) + 1/n_a)``
    (module docstring) from the checkpoint's ridge sums (``count``, ``sum_x``, ``sum_xx``), with the head's
    normalisation ``z = (x − norm_mean)/norm_scale``."""
    solved = []
    for a in range(len(ridge["count"])):
        n = float(ridge["count"][a])
        xbar = ridge["sum_x"][a] / n
        cov = (ridge["sum_xx"][a] - n * torch.outer(xbar, xbar)) / norm_scale ** 2
        eye = torch.eye(cov.shape[0], dtype=torch.float64)
        solved.append((n, (xbar - norm_mean) / norm_scale, torch.linalg.inv(cov + alpha * eye)))

    def widths(x: np.ndarray, route: int) -> np.ndarray:
        n, zbar, a_inv = solved[route]
        d = (torch.from_numpy(x) - norm_mean) / norm_scale - zbar
        return torch.sqrt(((d @ a_inv) * d).sum(1) + 1.0 / n).numpy()

    return widths


def route_scores(gen_dir: str, key: str = "index") -> dict[RouterAction, dict[int, float]]:
    """``{route: {row[key]: RLLA score}}`` of a folder of fixed-route generations (``DIR/{answer,search,
    calculate}.jsonl``, ``router.infer`` output), scored as ``router_frontier.py`` scores them
    (``main_eval.row_metrics``, reward switches from the environment). A row the reward cannot score is left out and
    named on stderr."""
    switches = RewardSwitches.from_env()
    out: dict[RouterAction, dict[int, float]] = {}
    for route, stem in ROUTE_FILES.items():
        out[route] = {}
        for row in read_generations(str(Path(gen_dir) / f"{stem}.jsonl")):
            try:
                out[route][int(row[key])] = row_metrics(row, switches)["score"]
            except (ValueError, KeyError) as err:
                print(f"{gen_dir}/{stem}.jsonl {key} {row.get(key)}: not scored ({err})", file=sys.stderr)
    return out


def realized(gen_dir: str) -> dict[int, dict[str, float]]:
    """``{extra_info index: {route name: score, "margin": max(r_SEARCH, r_CALCULATE) − r_ANSWER}}`` over the prompts
    all three route files score."""
    scores = route_scores(gen_dir)
    common = set.intersection(*(set(s) for s in scores.values()))
    return {i: {**{a.name: scores[a][i] for a in RouterAction},
                "margin": max(scores[a][i] for a in TOOL_ROUTES) - scores[RouterAction.ANSWER][i]}
            for i in sorted(common)}


def summary(values: np.ndarray) -> dict:
    """Mean, standard error and quartiles of a 1-D array."""
    n = len(values)
    return {"n": n, "mean": float(values.mean()), "se": float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else None,
            "quartiles": [float(q) for q in np.quantile(values, [0.25, 0.5, 0.75])]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--prompts", action="append", required=True, help="NAME=PARQUET (repeatable)")
    parser.add_argument("--realized", action="append", default=[], help="NAME=router_frontier generation folder")
    parser.add_argument("--split", default="train", help="the set holding irrelevance rows ('' to skip)")
    parser.add_argument("--cache", default=None, help="folder for each set's features (reused when they match)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    sets, realized_dirs = named_paths(args.prompts, "--prompts"), named_paths(args.realized, "--realized")
    unknown = set(realized_dirs) - set(sets)
    if unknown or (args.split and args.split not in sets):
        raise SystemExit(f"--realized {sorted(unknown)} / --split {args.split!r}: not a --prompts name")

    started = time.time()
    infer = RouterInference(args.checkpoint, max_new_tokens=1, device="cpu")
    if infer.value_policy is None:
        raise SystemExit(f"{args.checkpoint}: a router.loss_mode=pg head has no route values")
    _, route_cost, lam, _ = infer.value_policy
    price = lam * float(max(route_cost[a] for a in TOOL_ROUTES) - route_cost[RouterAction.ANSWER])
    state = torch.load(infer.files.router_file, map_location="cpu", weights_only=False)
    ridge = state.get("ridge") if isinstance(state, dict) else None
    if ridge is None:
        raise SystemExit(f"{infer.files.router_file}: no ridge sums (router.value_fit=ridge runs keep them)")
    norm_mean, norm_scale = infer.head.norm_stats()
    weight = infer.head.net.weight.detach().double()  # [3, H] on normalised inputs
    bias = infer.head.net.bias.detach().double()
    widths = ridge_widths(ridge, norm_mean, norm_scale, float(infer.router_cfg.value_ridge_alpha))

    def values(x: np.ndarray) -> np.ndarray:
        z = (torch.from_numpy(x) - norm_mean) / norm_scale
        return (z @ weight.T + bias).numpy()

    result = {"checkpoint": str(args.checkpoint), "lambda": lam, "route_cost": [float(c) for c in route_cost],
              "tool_price": price,
              "ridge_observations": [float(c) for c in ridge["count"]], "sets": {}}
    feats, index_of, irrelevant = {}, {}, {}
    for name, path in sets.items():
        rows = load_prompt_rows(path)
        t0 = time.time()
        x, keep = cached_features(infer, rows, args.checkpoint, path,
                                  Path(args.cache) / f"{name}.npz" if args.cache else None)
        feats[name] = x
        index_of[name] = [rows[i].index for i in keep]
        irrelevant[name] = np.array([int((rows[i].extra_info or {}).get(SOURCE_KEY, -1)) >= 0 for i in keep])
        q = values(x)
        margin = q[:, [int(a) for a in TOOL_ROUTES]].max(1) - q[:, int(RouterAction.ANSWER)]
        width = {a.name: widths(x, int(a)) for a in RouterAction}
        entry = {"file": path, "rows": len(rows), "rows_fit": len(keep),
                 "predicted_value": {a.name: summary(q[:, int(a)]) for a in RouterAction},
                 "predicted_tool_margin": summary(margin), "share_margin_above_price": float((margin > price).mean()),
                 "ridge_width": {k: summary(v) for k, v in width.items()}, "seconds": round(time.time() - t0, 1)}
        if name in realized_dirs:
            real = realized(realized_dirs[name])
            pairs = [(m, real[i]) for m, i in zip(margin, index_of[name]) if i in real]
            pm, rm = np.array([m for m, _ in pairs]), np.array([r["margin"] for _, r in pairs])
            entry["realized_value"] = {a.name: summary(np.array([r[a.name] for _, r in pairs])) for a in RouterAction}
            entry["predicted_value_same_prompts"] = {
                a.name: summary(np.array([q[k, int(a)] for k, i in enumerate(index_of[name]) if i in real]))
                for a in RouterAction}
            entry["realized_tool_margin"] = summary(rm)
            entry["predicted_tool_margin_same_prompts"] = summary(pm)
            entry["pearson_predicted_realized"] = float(np.corrcoef(pm, rm)[0, 1])
            entry["share_realized_margin_above_price"] = float((rm > price).mean())
        result["sets"][name] = entry
        print(f"{name}: {len(keep)}/{len(rows)} prompts, margin {margin.mean():+.2f} (price {price:.2f}), "
              f"ridge width {width['ANSWER'].mean():.3f}, {entry['seconds']} s", file=sys.stderr, flush=True)

    if args.split:
        irr = irrelevant[args.split]
        if not irr.any() or irr.all():
            raise SystemExit(f"--split {args.split}: needs both irrelevance rows and others")
        z = {name: ((torch.from_numpy(x) - norm_mean) / norm_scale).numpy() for name, x in feats.items()}
        call_mean, irr_mean = z[args.split][~irr].mean(0), z[args.split][irr].mean(0)
        u = (irr_mean - call_mean) / np.linalg.norm(irr_mean - call_mean)
        w_margin = {a.name: (weight[int(a)] - weight[int(RouterAction.ANSWER)]).numpy() for a in TOOL_ROUTES}
        parts = {"call_rows": z[args.split][~irr], "irrelevance_rows": z[args.split][irr]}
        parts.update({name: zz for name, zz in z.items() if name != args.split})
        result["offset_from_call_rows"] = {}
        for name, zz in parts.items():
            delta = zz.mean(0) - call_mean
            along = float(delta @ u) * u
            result["offset_from_call_rows"][name] = {
                "rows": len(zz), "norm": float(np.linalg.norm(delta)),
                "cos_with_irrelevance_direction": float(delta @ u / np.linalg.norm(delta)) if np.linalg.norm(delta) else None,
                "value_gap_shift": {k: {"total": float(w @ delta), "along_irrelevance_direction": float(w @ along)}
                                    for k, w in w_margin.items()}}
    result["seconds"] = round(time.time() - started, 1)
    result["command"] = "python benchmarks/evidence/router_value_shift.py " + " ".join(
        a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:]))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
