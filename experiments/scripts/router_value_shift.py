"""Why does a ridge router head route a prompt set as it does? Its predicted route values there, how far the prompts
lie from the ones it was fitted on, and which training direction moves them (issue 19 §3.2, offline, no generation).

    python experiments/scripts/router_value_shift.py --checkpoint CKPT \
        --prompts train=DIR/train_router_irrelevance_f0.25_s1.parquet \
        --prompts rlla_val=DIR/test_router.parquet --prompts api_bank=API_BANK.parquet \
        --realized rlla_val=GEN_DIR --realized api_bank=GEN_DIR \
        --output experiments/runs/ID/NAME.json

``CKPT`` is a ``global_step_N`` folder of a ``router.loss_mode=value router.value_fit=ridge`` run. Every prompt that
fits the run's ``data.max_prompt_length`` is read once by the checkpoint's actor; its pooled final hidden state ``x``
is the head's input (:func:`verl.router.head.compute_router_features`). Per set the script reports:

- the head's predicted task reward of each route, ``Q(x, a) = h(x)_a`` (the ridge head predicts the whole reward,
  ``docs/router.md`` "Ridge fit"), and the predicted tool margin ``m(x) = max(Q(x, SEARCH), Q(x, CALCULATE)) −
  Q(x, ANSWER)``, beside the price of a tool route at the checkpoint's λ, ``λ·(c̄(tool) − c̄(ANSWER))`` (the dearer
  tool route's ``c̄``; under the default cost weights both tool routes cost the same, and greedy routing then gives a
  tool exactly where ``m(x)`` exceeds the price); the share of prompts greedy routing sends to a tool is computed
  exactly, ``max_tool (Q − λ·c̄) > Q(ANSWER) − λ·c̄(ANSWER)`` (``verl/router/value.py``, ``z = (h − λ·c̄)/τ``);
- how far each prompt lies from what the fit has seen, as the ridge's own confidence width (LinUCB's, Li et al.
  2010, arXiv 1003.0146, eq. 4): ``w_a(x) = sqrt((z − z̄_a)ᵀ A_a⁻¹ (z − z̄_a) + 1/n_a)`` with ``z`` the head's
  normalised input, ``A_a = C_a/s² + α·I`` the penalised centred scatter matrix (a sum, not a mean) of route ``a``'s
  ``n_a`` observations in the checkpoint's ridge sums (:class:`verl.router.value.RidgeRouteValues`) and ``z̄_a``
  their mean: the posterior standard deviation of the route's predicted value, in units of the reward noise σ,
  under the prior ``w ~ N(0, σ²/α·I)`` (with fewer observations than features, as here, the penalty sets much of
  it). Held-out prompts of the training distribution give the scale to read another set's widths against;
- with ``--split`` (default ``train``), the set named there is split into its irrelevance rows
  (``extra_info.irrelevance_source ≥ 0``, :mod:`verl.router.irrelevance`) and the others (its call rows), and each
  set's mean offset from the call rows, ``Δ = z̄_set − z̄_call`` in the head's normalised coordinates, is compared
  with the irrelevance direction ``u = (z̄_irrelevance − z̄_call)/|·|``: ``|Δ|``, ``cos(Δ, u)``, and for each tool
  route the shift of its mean value gap ``Q(x, a) − Q(x, ANSWER)`` from the call rows', ``(w_a − w_ANSWER)·Δ``, in
  total and the part that ``Δ``'s component along ``u`` carries (the head is linear, so the two parts add up), and
  ``|Δ|`` expected from sampling alone were the set drawn from the call rows' distribution,
  ``sqrt(tr Σ_call · (1/n + 1/n_call))``;
- with ``--realized NAME=DIR``, the realised route values and tool margin: ``router_frontier.sh``'s greedy
  generations of the fixed routes (``DIR/{answer,search,calculate}.jsonl``) scored by the RLLA reward as
  ``router_frontier.py`` scores them (``main_eval.row_metrics``), ``max(r_SEARCH, r_CALCULATE) − r_ANSWER`` per
  prompt (matched by ``index``), beside the predicted one (mean and Pearson correlation over the prompts both have).
  The realised margin takes each prompt's better tool route in hindsight, which no estimate of expected values can
  match; the margin of the tool route that is better on average, ``max_a mean(r_a) − mean(r_ANSWER)``, is recorded
  beside it. Rewards use the checkpoint's ``reward_model.wrapper`` (``auto``: from the tokenizer's chat template)
  and ``data.tool_format``, and ToolRL's reward switches from the environment.

``--cache DIR`` keeps each set's features (``DIR/NAME.npz``, tagged with the checkpoint's router file and the
prompts file: path, size and modification time) and reads them back on a later call with the same tag. Progress goes
to stderr every 50 prompts. No part of this is used by the trainer.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
from omegaconf import OmegaConf

from verl.router import RouterAction
from verl.router.infer import RouterInference, load_prompt_rows
from verl.router.irrelevance import SOURCE_KEY
from verl.router.value import RidgeRouteValues
from verl.trainer.main_eval import read_generations, row_metrics
from verl.utils.reward_score.rlla import RewardSwitches
from verl.workers.reward_manager.naive import infer_wrapper

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


def prompt_features(infer: RouterInference, rows, batch_size: int = 4) -> tuple[np.ndarray, list[int]]:
    """``(features [N, H] float64, kept positions)`` of the rows (:class:`verl.router.infer.PromptRow`) that fit the
    run's prompt limit, in file order (:meth:`RouterInference.prompt_features`)."""
    keep = [i for i, row in enumerate(rows) if infer.prompt_length(row.messages) <= infer.max_prompt_length]
    out, started = [], time.time()
    for start in range(0, len(keep), batch_size):
        if start and start % 50 < batch_size:
            print(f"  {start}/{len(keep)} prompts, {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        out.append(infer.prompt_features([rows[i].messages for i in keep[start : start + batch_size]]).double().numpy())
    return (np.concatenate(out) if out else np.zeros((0, int(infer.model.config.hidden_size)))), keep


def cached_features(infer: RouterInference, rows, path: str, cache):
    """:func:`prompt_features`, kept in ``cache`` (an ``.npz``; None: no cache) and read back when it was made from
    the same checkpoint router file and prompts file (path, size and modification time of each)."""
    tag = np.array([part for f in (infer.files.router_file, path) for part in file_tag(f)])
    if cache is not None and cache.is_file():
        saved = np.load(cache)
        if saved["tag"].tolist() == tag.tolist():
            return saved["features"], saved["keep"].tolist()
    x, keep = prompt_features(infer, rows)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, features=x, keep=np.array(keep, dtype=np.int64), tag=tag)
    return x, keep


def file_tag(path) -> list[str]:
    """``[resolved path, size, modification time in ns]`` of a file, as strings."""
    stat = Path(path).stat()
    return [str(Path(path).resolve()), str(stat.st_size), str(stat.st_mtime_ns)]


def load_ridge(infer: RouterInference) -> RidgeRouteValues:
    """The ridge sums saved with the checkpoint's router head (``router.value_fit=ridge``).

    Raises: SystemExit: the router file holds no ridge sums (named)."""
    state = torch.load(infer.files.router_file, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or "ridge" not in state:
        raise SystemExit(f"{infer.files.router_file}: no ridge sums (router.value_fit=ridge runs keep them)")
    ridge = RidgeRouteValues(int(infer.model.config.hidden_size), float(infer.router_cfg.value_ridge_alpha))
    ridge.load_state_dict(state["ridge"])
    return ridge


def tool_margin(values: np.ndarray) -> np.ndarray:
    """``max(Q(SEARCH), Q(CALCULATE)) − Q(ANSWER)`` per row of route values ``[N, 3]``."""
    return values[:, [int(a) for a in TOOL_ROUTES]].max(1) - values[:, int(RouterAction.ANSWER)]


def ridge_widths(ridge: RidgeRouteValues, norm_mean: torch.Tensor, norm_scale: float, alpha: float):
    """``widths(x [N, H], route) -> [N]``: the ridge's confidence width ``sqrt((z − z̄_a)ᵀ A_a⁻¹ (z − z̄_a) + 1/n_a)``
    (module docstring) from the ridge sums (``count``, ``sum_x``, ``sum_xx``), with the head's
    normalisation ``z = (x − norm_mean)/norm_scale``.

    Raises: ValueError: a route without observations (its width is not defined)."""
    solved = []
    for a in range(len(ridge.count)):
        if float(ridge.count[a]) < 1:
            raise ValueError(f"ridge sums: route {RouterAction(a).name} has no observation")
        n, xbar, _, scatter, _ = ridge.centred(a)
        eye = torch.eye(scatter.shape[0], dtype=torch.float64)
        solved.append((n, (xbar - norm_mean) / norm_scale, torch.linalg.inv(scatter / norm_scale**2 + alpha * eye)))

    def widths(x: np.ndarray, route: int) -> np.ndarray:
        n, zbar, a_inv = solved[route]
        d = (torch.from_numpy(x) - norm_mean) / norm_scale - zbar
        return torch.sqrt(((d @ a_inv) * d).sum(1) + 1.0 / n).numpy()

    return widths


def reward_settings(infer: RouterInference) -> tuple[str, str]:
    """``(wrapper, tool_format)`` the checkpoint's run scored with: ``reward_model.wrapper`` (``auto`` resolved from
    the tokenizer's chat template, as the reward manager does) and ``data.tool_format``."""
    wrapper = str(OmegaConf.select(infer.config, "reward_model.wrapper", default="auto"))
    tool_format = str(OmegaConf.select(infer.config, "data.tool_format", default="toolrl"))
    return (infer_wrapper(infer.tokenizer) if wrapper == "auto" else wrapper), tool_format


def route_scores(
    gen_dir: str,
    key: str = "index",
    wrapper: str = "qwen",
    tool_format: str = "toolrl",
    check: Optional[Callable[[dict], Any]] = None,
) -> dict[RouterAction, dict[int, float]]:
    """``{route: {row[key]: RLLA score}}`` of a folder of fixed-route generations (``DIR/{answer,search,
    calculate}.jsonl``, ``router.infer`` output), scored as ``router_frontier.py`` scores them
    (``main_eval.row_metrics`` with ``wrapper`` and ``tool_format``, reward switches from the environment). A row
    the reward cannot score is left out and named on stderr, as the trainer leaves out a row whose reward failed.
    ``check``, when given, is called on every row first (e.g. to refuse generations of another prompts file).

    Raises: FileNotFoundError: a route file is missing; whatever ``check`` raises."""
    switches = RewardSwitches.from_env()
    out: dict[RouterAction, dict[int, float]] = {}
    for route, stem in ROUTE_FILES.items():
        out[route] = {}
        for row in read_generations(str(Path(gen_dir) / f"{stem}.jsonl")):
            if check is not None:
                check(row)
            try:
                out[route][int(row[key])] = row_metrics(row, switches, wrapper, tool_format)["score"]
            except Exception as err:  # noqa: BLE001 - one unscorable row must not stop the rest
                print(f"{row.get('_where')}: not scored ({type(err).__name__}: {err})", file=sys.stderr)
    return out


def realized(gen_dir: str, wrapper: str, tool_format: str) -> dict[int, dict[str, float]]:
    """``{extra_info index: {route name: score, "margin": max(r_SEARCH, r_CALCULATE) − r_ANSWER}}`` over the prompts
    all three route files score (:func:`route_scores`)."""
    scores = route_scores(gen_dir, "index", wrapper, tool_format)
    common = set.intersection(*(set(s) for s in scores.values()))
    return {
        i: {
            **{a.name: scores[a][i] for a in RouterAction},
            "margin": max(scores[a][i] for a in TOOL_ROUTES) - scores[RouterAction.ANSWER][i],
        }
        for i in sorted(common)
    }


def summary(values: np.ndarray) -> dict:
    """Mean, standard error and quartiles of a 1-D array (``{"n": 0}`` when empty)."""
    n = len(values)
    if n == 0:
        return {"n": 0}
    return {
        "n": n,
        "mean": float(values.mean()),
        "se": float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else None,
        "quartiles": [float(q) for q in np.quantile(values, [0.25, 0.5, 0.75])],
    }


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
    ridge = load_ridge(infer)
    norm_mean, norm_scale = infer.head.norm_stats()
    weight = infer.head.net.weight.detach().double()  # [3, H] on normalised inputs
    widths = ridge_widths(ridge, norm_mean, norm_scale, ridge.alpha)
    wrapper, tool_format = reward_settings(infer)
    priced_cost = lam * route_cost.double().numpy()

    def values(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return infer.head.head_of_pooled(torch.from_numpy(x)).double().numpy()

    def greedy_tool(v: np.ndarray) -> np.ndarray:
        net = v - priced_cost
        return net[:, [int(a) for a in TOOL_ROUTES]].max(1) > net[:, int(RouterAction.ANSWER)]

    result = {
        "checkpoint": str(args.checkpoint),
        "lambda": lam,
        "route_cost": [float(c) for c in route_cost],
        "tool_price": price,
        "reward_wrapper": wrapper,
        "tool_format": tool_format,
        "ridge_observations": [float(c) for c in ridge.count],
        "sets": {},
    }
    feats, index_of, irrelevant = {}, {}, {}
    for name, path in sets.items():
        rows = load_prompt_rows(path)
        t0 = time.time()
        x, keep = cached_features(infer, rows, path, Path(args.cache) / f"{name}.npz" if args.cache else None)
        feats[name] = x
        index_of[name] = [rows[i].index for i in keep]
        irrelevant[name] = np.array([int((rows[i].extra_info or {}).get(SOURCE_KEY, -1)) >= 0 for i in keep])
        q = values(x)
        margin = tool_margin(q)
        width = {a.name: widths(x, int(a)) for a in RouterAction}
        entry = {
            "file": path,
            "rows": len(rows),
            "rows_fit": len(keep),
            "predicted_value": {a.name: summary(q[:, int(a)]) for a in RouterAction},
            "predicted_tool_margin": summary(margin),
            "greedy_tool_share": float(greedy_tool(q).mean()),
            "ridge_width": {k: summary(v) for k, v in width.items()},
            "seconds": round(time.time() - t0, 1),
        }
        if name in realized_dirs:
            real = realized(realized_dirs[name], wrapper, tool_format)
            pairs = [(m, real[i]) for m, i in zip(margin, index_of[name]) if i in real]
            pm, rm = np.array([m for m, _ in pairs]), np.array([r["margin"] for _, r in pairs])
            entry["realized_value"] = {a.name: summary(np.array([r[a.name] for _, r in pairs])) for a in RouterAction}
            entry["predicted_value_same_prompts"] = {
                a.name: summary(np.array([q[k, int(a)] for k, i in enumerate(index_of[name]) if i in real]))
                for a in RouterAction
            }
            entry["realized_tool_margin"] = summary(rm)
            entry["predicted_tool_margin_same_prompts"] = summary(pm)
            entry["pearson_predicted_realized"] = float(np.corrcoef(pm, rm)[0, 1])
            rv = np.array([[r[a.name] for a in RouterAction] for _, r in pairs])
            entry["realized_margin_of_better_route_on_average"] = float(
                rv[:, [int(a) for a in TOOL_ROUTES]].mean(0).max() - rv[:, int(RouterAction.ANSWER)].mean()
            )
            entry["greedy_tool_share_if_values_were_realized"] = float(greedy_tool(rv).mean())
        result["sets"][name] = entry
        print(
            f"{name}: {len(keep)}/{len(rows)} prompts, margin {margin.mean():+.2f} (price {price:.2f}), "
            f"ridge width {width['ANSWER'].mean():.3f}, {entry['seconds']} s",
            file=sys.stderr,
            flush=True,
        )

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
        calls = z[args.split][~irr]
        call_trace = float(((calls - call_mean) ** 2).sum(1).mean())  # tr Σ_call
        result["offset_from_call_rows"] = {}
        for name, zz in parts.items():
            delta = zz.mean(0) - call_mean
            along = float(delta @ u) * u
            norm = float(np.linalg.norm(delta))
            result["offset_from_call_rows"][name] = {
                "rows": len(zz),
                "norm": norm,
                "norm_if_same_distribution": math.sqrt(call_trace * (1 / len(zz) + 1 / len(calls))),
                "cos_with_irrelevance_direction": float(delta @ u / norm) if norm else None,
                "value_gap_shift": {
                    k: {"total": float(w @ delta), "along_irrelevance_direction": float(w @ along)}
                    for k, w in w_margin.items()
                },
            }
    result["seconds"] = round(time.time() - started, 1)
    result["command"] = "python experiments/scripts/router_value_shift.py " + " ".join(
        a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
