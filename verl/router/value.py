"""The router as a value estimate with the price applied at decision time (``router.loss_mode=value``;
``docs/router.md``, "Route values"). Pure tensor functions plus the per-route running baseline.

The budgeted routing problem is a contextual bandit with a knapsack-style constraint: choose a route ``a`` for a
prompt ``x`` to maximise ``E[r_task]`` subject to ``E[cost] ≤ B``. Its Lagrangian relaxation is solved per prompt by
``argmax_a Q(x, a) − λ·C(a)`` with ``Q`` the expected task reward of the route and ``C`` its expected cost, ``λ`` set
by dual ascent on the spent cost (Badanidiyuru, Langford and Slivkins 2014, "Resourceful Contextual Bandits",
arXiv 1402.6779; Agrawal and Devanur 2016, "Linear Contextual Bandits with Knapsacks", arXiv 1507.06738, §3). With
stratified routes (every route observed on every training prompt) ``Q`` is learned by plain regression, whatever
``λ`` is, and ``λ`` only moves the threshold: the policy's logits are ::

    z(x, a) = (b(a) + h(x)_a − λ·c̄(a)) / τ

where ``h`` is the router head's output (the prompt-specific part of ``Q``, trained on ``r_task − b(a)``),
``b(a)`` and ``c̄(a)`` are running means of route ``a``'s task reward and tool cost over the training batches
(:class:`RouteValueBaseline`), and ``τ = router.value_temperature``. Greedy routing takes ``argmax_a z``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import torch

from verl.router import NUM_ROUTER_ACTIONS, RouterAction

LOSS_MODES = ("pg", "value")  # router.loss_mode: the head is the policy (pg) or a route-value estimate (value)


def value_policy_logits(
    values: torch.Tensor, baseline: torch.Tensor, cost: torch.Tensor, lam: float, temperature: float
) -> torch.Tensor:
    """The routing policy's logits ``z = (b + h − λ·c̄) / τ`` (module docstring).

    Args:
        values: float ``[B, 3]``, the head's output ``h(x)``.
        baseline: float ``[3]``, ``b(a)`` (reward units); cost: float ``[3]``, ``c̄(a)``.
        lam: ``λ ≥ 0``; temperature: ``τ > 0``.

    Returns:
        float32 ``[B, 3]``.

    Raises:
        ValueError: wrong shapes, ``λ < 0`` or ``τ ≤ 0``.
    """
    if (
        values.dim() != 2
        or values.shape[-1] != NUM_ROUTER_ACTIONS
        or baseline.shape != (NUM_ROUTER_ACTIONS,)
        or cost.shape != (NUM_ROUTER_ACTIONS,)
    ):
        raise ValueError(
            f"value_policy_logits: values {tuple(values.shape)} must be [B, 3], baseline "
            f"{tuple(baseline.shape)} and cost {tuple(cost.shape)} [3]"
        )
    if lam < 0 or not temperature > 0:
        raise ValueError(f"value_policy_logits: lambda must be >= 0 and temperature > 0, got {lam}, {temperature}")
    shift = (baseline.float() - float(lam) * cost.float()).to(values.device)
    return (values.float() + shift) / float(temperature)


def reprice_probs(
    probs: torch.Tensor, cost: torch.Tensor, lam_from: float, lam_to: float, temperature: float
) -> torch.Tensor:
    """The value policy's probabilities at the price ``lam_to`` from those it gave at ``lam_from``: the logits move by
    ``−(lam_to − lam_from)·c̄(a)/τ`` (:func:`value_policy_logits`) and the prompt's constant cancels in the softmax,
    so a recorded ``router_probs`` row is enough, no forward pass. A zero probability stays zero — including one that
    underflowed in float32 when it was recorded (below ~1e-45), which no price can revive.

    Args:
        probs: float ``[B, 3]``, rows on the simplex (ANSWER, SEARCH, CALCULATE); a row that does not sum to 1 is
            read as its normalised self.
        cost: float ``[3]``, ``c̄(a)``; lam_from, lam_to: prices ``≥ 0``; temperature: ``τ > 0``.

    Returns:
        float64 ``[B, 3]``.

    Raises:
        ValueError: wrong shapes; a negative or non-finite probability or a row without mass; a non-finite cost; a
            price that is not a finite number ``≥ 0``; ``τ ≤ 0``.
    """
    probs = torch.as_tensor(probs, dtype=torch.float64)
    cost = torch.as_tensor(cost, dtype=torch.float64)
    if probs.dim() != 2 or probs.shape[-1] != NUM_ROUTER_ACTIONS or cost.shape != (NUM_ROUTER_ACTIONS,):
        raise ValueError(f"reprice_probs: probs {tuple(probs.shape)} must be [B, 3] and cost {tuple(cost.shape)} [3]")
    if not bool(torch.isfinite(probs).all()) or bool((probs < 0).any()) or bool((probs.sum(-1) <= 0).any()):
        raise ValueError("reprice_probs: probabilities must be finite and >= 0, every row with some mass")
    if not bool(torch.isfinite(cost).all()):
        raise ValueError(f"reprice_probs: route costs must be finite, got {cost.tolist()}")
    if not (math.isfinite(lam_from) and math.isfinite(lam_to) and lam_from >= 0 and lam_to >= 0) or not temperature > 0:
        raise ValueError(
            f"reprice_probs: prices must be finite and >= 0 and temperature > 0, got {lam_from}, "
            f"{lam_to}, {temperature}"
        )
    logits = torch.log(probs) - (float(lam_to) - float(lam_from)) * cost / float(temperature)
    return torch.softmax(logits, dim=-1)


def mean_route_cost(
    probs: torch.Tensor, cost: torch.Tensor, lam_from: float, lam_to: float, temperature: float, greedy: bool = False
) -> float:
    """The value policy's mean route cost over the prompts at the price ``lam_to``: ``(1/B) Σ_x Σ_a π(a|x)·c̄(a)``
    with ``π`` = :func:`reprice_probs` of ``probs`` (recorded at ``lam_from``), or with ``greedy`` the cost
    ``c̄(argmax_a π(a|x))`` of the route greedy routing takes (ties to the first route, as ``torch.argmax``).
    Arguments and errors as :func:`reprice_probs`."""
    cost = torch.as_tensor(cost, dtype=torch.float64)
    repriced = reprice_probs(probs, cost, lam_from, lam_to, temperature)
    per_prompt = cost[repriced.argmax(-1)] if greedy else repriced @ cost
    return float(per_prompt.mean())


def lambda_for_cost(
    probs: torch.Tensor,
    cost: torch.Tensor,
    lam_from: float,
    temperature: float,
    budget: float,
    greedy: bool = False,
    tol: float = 1e-6,
) -> float:
    """The price ``λ ≥ 0`` at which the value policy spends ``budget`` on these prompts in mean route cost ``c̄``
    (:func:`mean_route_cost`): the dual variable set again for a new prompt distribution from the prompts alone (no
    label, no generation). The stochastic policy's cost does not increase with λ (its derivative is
    ``−Var_π(c̄)/τ`` per prompt), nor does the greedy route's (``argmax_a v(a) − λ·c̄(a)`` moves to cheaper routes as
    λ grows), so bisection finds the smallest λ at which the cost is at most ``budget``, to within ``tol`` relative
    (``max(1, λ)·tol``): the returned λ's cost is ``≤ budget``, equal to it up to ``tol`` for the stochastic policy,
    and up to one prompt's step for the greedy one (whose cost moves in steps).

    Args:
        probs: float ``[B, 3]`` recorded at ``lam_from``; cost: ``c̄`` float ``[3]``; temperature: ``τ``;
        budget: the target mean route cost; greedy: the greedy route's cost instead of the policy's expectation;
        tol: the relative bracket width on λ at which the search stops.

    Returns:
        λ (float); 0.0 when the policy spends at most ``budget`` already at λ = 0 (the constraint is slack, so the
        Lagrangian's λ is 0).

    Raises:
        ValueError: as :func:`reprice_probs`; an empty batch; a budget that is not finite; one that no price reaches
            (not above the cheapest route's ``c̄`` for the stochastic policy, below it for the greedy one, or not
            reached up to λ = 1e12, e.g. a prompt that gives the cheapest route probability 0).
    """
    cost = torch.as_tensor(cost, dtype=torch.float64)
    if len(probs) == 0:
        raise ValueError("lambda_for_cost: no prompts")
    if not math.isfinite(budget):
        raise ValueError(f"lambda_for_cost: the budget must be a finite number, got {budget}")

    def spent(lam: float) -> float:
        return mean_route_cost(probs, cost, lam_from, lam, temperature, greedy)

    if spent(0.0) <= budget:
        return 0.0
    cheapest = float(cost.min())
    if budget < cheapest or (budget == cheapest and not greedy):
        raise ValueError(
            f"lambda_for_cost: budget {budget} is not above the cheapest route's cost {cheapest:.4g}: "
            "no price reaches it"
        )
    lo, hi = 0.0, max(1.0, float(lam_from))
    while spent(hi) > budget:
        lo, hi = hi, 2 * hi
        if hi > 1e12:
            raise ValueError(f"lambda_for_cost: no price up to 1e12 brings the cost down to {budget}")
    for _ in range(200):  # the bracket halves each time: 200 halvings reach any float64 tolerance
        if hi - lo <= tol * max(1.0, hi):
            break
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(mid) > budget else (lo, mid)
    return hi


def value_targets(
    task: torch.Tensor, actions: torch.Tensor, baseline: torch.Tensor, valid: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Regression targets of the head: ``r_task − b(a_i)`` per copy, NaN where the reward could not score the row.

    Args: ``task`` float ``[B]``; ``actions`` int64 ``[B]``; ``baseline`` float ``[3]``; ``valid`` bool ``[B]`` or
        None (all scored).
    Returns: float32 ``[B]``.
    """
    target = task.float() - baseline.float()[actions.long()]
    if valid is not None:
        target = torch.where(valid.bool(), target, torch.full_like(target, float("nan")))
    return target


def compute_router_value_loss(
    values: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """Squared error of the head's value of each copy's route against its target (NaN targets skipped)::

        L = ½ · mean_{i: target_i known} (h(x_i)_{a_i} − target_i)²

    Args: ``values`` float ``[B, 3]`` (differentiable); ``actions`` int64 ``[B]``; ``targets`` float ``[B]``
        (:func:`value_targets`).
    Returns: ``(loss, metrics)``: ``router/value_loss`` (the loss), ``router/value_explained_var`` (``1 −
        Var(target − h)/Var(target)`` over the scored rows; absent with fewer than two), ``router/value_rows``.
        With no scored row the loss is a zero that keeps the graph.
    Raises: ValueError on shape mismatches or an action outside 0..2.
    """
    batch = values.shape[0]
    if values.shape != (batch, NUM_ROUTER_ACTIONS) or actions.shape != (batch,) or targets.shape != (batch,):
        raise ValueError(
            f"compute_router_value_loss: values {tuple(values.shape)} must be [B, 3], actions "
            f"{tuple(actions.shape)} and targets {tuple(targets.shape)} [B]"
        )
    if bool(((actions < 0) | (actions >= NUM_ROUTER_ACTIONS)).any()):
        raise ValueError(f"compute_router_value_loss: actions must lie in 0..2, got {actions.tolist()}")
    known = ~torch.isnan(targets)
    chosen = values.float().gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    if not bool(known.any()):
        return values.sum() * 0.0, {"router/value_loss": 0.0, "router/value_rows": 0.0}
    err = chosen[known] - targets[known].float()
    loss = 0.5 * (err**2).mean()
    metrics = {"router/value_loss": loss.item(), "router/value_rows": float(known.sum())}
    if int(known.sum()) > 1:
        var = targets[known].float().var()
        if float(var) > 0:
            metrics["router/value_explained_var"] = float(1.0 - err.detach().var() / var)
    return loss, metrics


class RouteValueBaseline:
    """Running means ``b(a)`` of each route's task reward and ``c̄(a)`` of its tool cost, over training batches.

    Each :meth:`update` takes the batch's per-route means and moves the running values by an exponential average
    with weight ``1 − decay`` (``router.value_baseline_decay``); a route's first observation sets its value. Before
    any observation ``b = c̄ = 0``, so the untrained policy is uniform (as the zero-initialised head of
    ``router.loss_mode=pg``).

    Args:
        decay: in ``[0, 1)``.

    Raises:
        ValueError: ``decay`` outside ``[0, 1)``.
    """

    def __init__(self, decay: float = 0.9):
        if not 0.0 <= float(decay) < 1.0:
            raise ValueError(f"router.value_baseline_decay must lie in [0, 1), got {decay}")
        self.decay = float(decay)
        self.reward = torch.zeros(NUM_ROUTER_ACTIONS, dtype=torch.float64)
        self.cost = torch.zeros(NUM_ROUTER_ACTIONS, dtype=torch.float64)
        self.seen = torch.zeros(NUM_ROUTER_ACTIONS, dtype=torch.bool)

    def update(
        self, task: torch.Tensor, costs: torch.Tensor, actions: torch.Tensor, valid: Optional[torch.Tensor] = None
    ) -> dict[str, float]:
        """Fold one batch in: per route, the mean task reward of its scored copies and the mean cost of all its
        copies (an unscored row's calls were still made). Returns ``router/value_baseline_<route>`` and
        ``router/value_cost_<route>`` after the update.

        Args: ``task``, ``costs`` float ``[B]``; ``actions`` int64 ``[B]``; ``valid`` bool ``[B]`` or None.
        """
        keep = torch.ones_like(actions, dtype=torch.bool) if valid is None else valid.bool().cpu()
        actions = actions.long().cpu()
        for a in range(NUM_ROUTER_ACTIONS):
            rows = actions == a
            if not bool(rows.any()):
                continue
            cost = costs.double().cpu()[rows].mean()
            scored = rows & keep
            reward = task.double().cpu()[scored].mean() if bool(scored.any()) else None
            w = 0.0 if not bool(self.seen[a]) else self.decay
            self.cost[a] = w * self.cost[a] + (1.0 - w) * cost
            if reward is not None:
                self.reward[a] = w * self.reward[a] + (1.0 - w) * reward
            self.seen[a] = True
        metrics = {}
        for action in RouterAction:
            name = action.name.lower()
            metrics[f"router/value_baseline_{name}"] = float(self.reward[int(action)])
            metrics[f"router/value_cost_{name}"] = float(self.cost[int(action)])
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "reward": self.reward.tolist(),
            "cost": self.cost.tolist(),
            "seen": self.seen.tolist(),
            "decay": self.decay,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s values (the decay stays the config's).

        Raises: ValueError: a missing key or a list that is not of length 3 (named).
        """
        for key in ("reward", "cost", "seen"):
            if key not in state or len(state[key]) != NUM_ROUTER_ACTIONS:
                raise ValueError(f"router value baseline state: {key!r} missing or not of length 3")
        self.reward = torch.tensor([float(v) for v in state["reward"]], dtype=torch.float64)
        self.cost = torch.tensor([float(v) for v in state["cost"]], dtype=torch.float64)
        self.seen = torch.tensor([bool(v) for v in state["seen"]], dtype=torch.bool)
        if not all(math.isfinite(v) for v in self.reward.tolist() + self.cost.tolist()):
            raise ValueError("router value baseline state: non-finite values")


VALUE_FITS = ("sgd", "ridge")  # router.value_fit: how the head's route values are fitted in value mode


def policy_baseline(route_means: torch.Tensor, value_fit: str) -> torch.Tensor:
    """``b`` [3] of the value-mode policy and targets: the running route means ``route_means`` [3], or zeros with
    ``router.value_fit=ridge`` (the ridge head's intercept already holds each route's mean; docs/router.md "Ridge
    fit")."""
    return torch.zeros_like(route_means) if value_fit == "ridge" else route_means


class RidgeRouteValues:
    """Closed-form ridge regression of each route's task reward on the pooled prompt features
    (``router.value_fit=ridge``; ``docs/router.md``, "Ridge fit").

    Linear contextual bandits estimate each arm's reward by regularised least squares over every observation so far
    (Li et al. 2010, LinUCB, arXiv 1003.0146, eq. 4; Agrawal and Devanur 2016, arXiv 1507.06738, §3, for the
    budgeted case). With stratified routes every route is observed on every training prompt, so each route ``a`` gets

        w_a = (C_a / s² + α·I)⁻¹ · c_a / s,     c0_a = ȳ_a − w_a · (x̄_a − μ) / s

    where ``C_a = Σ (x − x̄_a)(x − x̄_a)ᵀ`` and ``c_a = Σ (x − x̄_a)(y − ȳ_a)`` run over route ``a``'s scored copies
    (pooled features ``x``, task reward ``y``), and ``μ``, ``s`` are the head's input normalisation (``router.input_norm``:
    running mean and RMS; 0 and 1 with ``none``). The head ``h(x)_a = w_a · (x − μ)/s + c0_a`` is then the ridge
    prediction with an unpenalised intercept, in the head's own normalised coordinates, so ``α``
    (``router.value_ridge_alpha``) is in units of squared normalised features — comparable with the number of
    observations. The sums are kept in float64 and only grow (no learning rate). With ``μ``, ``s`` taken from the
    same sums (:meth:`feature_stats`, as :class:`verl.router.component.RouterComponent` does) the fit after a step
    depends only on the observations so far, whatever their order, batching or split over ranks.

    Args:
        hidden_size: ``H``; alpha: ``α > 0``.

    Raises:
        ValueError: ``α ≤ 0`` or ``H ≤ 0``.
    """

    def __init__(self, hidden_size: int, alpha: float):
        if not float(alpha) > 0:
            raise ValueError(f"router.value_ridge_alpha must be > 0, got {alpha}")
        if int(hidden_size) <= 0:
            raise ValueError(f"ridge route values: hidden_size must be positive, got {hidden_size}")
        self.alpha = float(alpha)
        h, k = int(hidden_size), NUM_ROUTER_ACTIONS
        self.count = torch.zeros(k, dtype=torch.float64)
        self.sum_x = torch.zeros(k, h, dtype=torch.float64)
        self.sum_xx = torch.zeros(k, h, h, dtype=torch.float64)
        self.sum_y = torch.zeros(k, dtype=torch.float64)
        self.sum_xy = torch.zeros(k, h, dtype=torch.float64)

    @staticmethod
    def increments(features: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """One batch's contribution to the sums (float64, CPU): ``features`` ``[B, H]``, ``actions`` int64 ``[B]``,
        ``targets`` float ``[B]`` (NaN rows skipped). Summing increments from several ranks, then :meth:`add`, equals
        adding every rank's rows.

        Raises: ValueError: mismatched shapes or an action outside 0..2."""
        if features.dim() != 2 or actions.shape != (features.shape[0],) or targets.shape != actions.shape:
            raise ValueError(
                f"ridge route values: features {tuple(features.shape)} must be [B, H], actions "
                f"{tuple(actions.shape)} and targets {tuple(targets.shape)} [B]"
            )
        if bool(((actions < 0) | (actions >= NUM_ROUTER_ACTIONS)).any()):
            raise ValueError(f"ridge route values: actions must lie in 0..2, got {actions.tolist()}")
        x = features.detach().double().cpu()
        y = targets.detach().double().cpu()
        known = ~torch.isnan(y)
        onehot = (
            torch.nn.functional.one_hot(actions.long().cpu(), NUM_ROUTER_ACTIONS).double() * known.double()[:, None]
        )
        y = torch.where(known, y, torch.zeros_like(y))
        return {
            "count": onehot.sum(0),
            "sum_x": onehot.T @ x,
            "sum_xx": torch.einsum("ba,bi,bj->aij", onehot, x, x),
            "sum_y": onehot.T @ y,
            "sum_xy": onehot.T @ (x * y[:, None]),
        }

    def add(self, inc: Mapping[str, torch.Tensor]) -> None:
        """Fold :meth:`increments` into the sums."""
        for key in ("count", "sum_x", "sum_xx", "sum_y", "sum_xy"):
            setattr(self, key, getattr(self, key) + inc[key].double().cpu())

    def solve(self, mean: Optional[torch.Tensor] = None, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """``(weight [3, H], bias [3])`` float64 of the head on normalised inputs ``(x − mean)/scale`` (class
        docstring): ``mean`` ``[H]`` (any float dtype; ``None`` = 0) and ``scale`` a positive float in the features'
        units — the head's :meth:`RouterHead.norm_stats`. A route with no observation gets zeros.

        Raises: torch.linalg.LinAlgError: a singular system (cannot happen for ``α > 0`` and finite sums)."""
        k, h = self.sum_x.shape
        mean = torch.zeros(h, dtype=torch.float64) if mean is None else mean.double().cpu()
        weight = torch.zeros(k, h, dtype=torch.float64)
        bias = torch.zeros(k, dtype=torch.float64)
        eye = torch.eye(h, dtype=torch.float64)
        for a in range(k):
            if float(self.count[a]) < 1:
                continue
            _, xbar, ybar, cov, cross = self.centred(a)
            weight[a] = torch.linalg.solve(cov / scale**2 + self.alpha * eye, cross / scale)
            bias[a] = ybar - float(weight[a] @ ((xbar - mean) / scale))
        return weight, bias

    def centred(self, route: int) -> tuple[float, torch.Tensor, float, torch.Tensor, torch.Tensor]:
        """``(n, x̄ [H], ȳ, S [H, H], c [H])`` float64 of route ``route``'s observations in the features' own units:
        their number, feature and target means, the centred scatter ``S = Σxxᵀ − n·x̄x̄ᵀ`` and cross moment
        ``c = Σxy − n·x̄ȳ`` — what :meth:`solve` fits (class docstring; in the head's coordinates ``z = (x − μ)/s``
        the scatter is ``S/s²``, and a LinUCB-style confidence width is ``(z − z̄)ᵀ(S/s² + αI)⁻¹(z − z̄)``).

        Raises: ValueError: ``route`` is not in ``0 … 2``, or the route has no observation (its means are not
        defined)."""
        if not 0 <= route < len(self.count):
            raise ValueError(f"RidgeRouteValues: route {route} is not in 0 … {len(self.count) - 1}")
        n = float(self.count[route])
        if n < 1:
            raise ValueError(f"RidgeRouteValues: route {route} has no observation")
        xbar, ybar = self.sum_x[route] / n, float(self.sum_y[route]) / n
        return (n, xbar, ybar, self.sum_xx[route] - n * torch.outer(xbar, xbar), self.sum_xy[route] - n * xbar * ybar)

    def set_head(self, head: Any) -> None:
        """Make ``head`` (a linear :class:`verl.router.head.RouterHead` with ``input_norm="running"``) the fit of the
        sums so far: its input statistics from :meth:`feature_stats`, then its output layer from :meth:`solve` in
        those coordinates — what the trainer does after every update (``RouterComponent._ridge_update``) and what an
        offline refit must repeat. Raises as ``RouterHead.set_norm_stats`` / ``set_linear``."""
        head.set_norm_stats(*self.feature_stats())
        head.set_linear(*self.solve(*head.norm_stats()))

    def feature_stats(self) -> tuple[float, torch.Tensor, torch.Tensor]:
        """``(n, mean [H], m2 [H])`` float64 of the features of every observation so far, all routes together: their
        number, mean and per-feature sum of squared deviations (``m2 = diag(Σ_a Σxxᵀ) − n·mean²``). The head's input
        normalisation under ``router.value_fit=ridge`` is taken from these (:meth:`RouterHead.set_norm_stats`), so it
        is the same on every data-parallel rank and after any batching of the same observations."""
        n = float(self.count.sum())
        if n < 1:
            return (
                0.0,
                torch.zeros(self.sum_x.shape[1], dtype=torch.float64),
                torch.zeros(self.sum_x.shape[1], dtype=torch.float64),
            )
        mean = self.sum_x.sum(0) / n
        m2 = torch.diagonal(self.sum_xx.sum(0)) - n * mean**2
        return n, mean, m2.clamp_min(0.0)

    def state_dict(self) -> dict[str, Any]:
        """The five sums (``count [3]``, ``sum_x [3, H]``, ``sum_xx [3, H, H]``, ``sum_y [3]``, ``sum_xy [3, H]``,
        float64 copies), as :meth:`load_state_dict` reads them."""
        return {key: getattr(self, key).clone() for key in ("count", "sum_x", "sum_xx", "sum_y", "sum_xy")}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (``α`` stays the config's).

        Raises: ValueError: a missing key or a shape that does not match this head's hidden size (named)."""
        for key in ("count", "sum_x", "sum_xx", "sum_y", "sum_xy"):
            if key not in state or tuple(state[key].shape) != tuple(getattr(self, key).shape):
                raise ValueError(
                    f"ridge route values state: {key!r} missing or of shape "
                    f"{tuple(state[key].shape) if key in state else None}, expected "
                    f"{tuple(getattr(self, key).shape)}"
                )
            setattr(self, key, state[key].double().cpu().clone())
