"""Load-time checks of the ``router`` section (``validate_config`` calls :func:`validate_router_settings`): each
error names its key (``docs/router.md``, "Config keys")."""

from __future__ import annotations

from omegaconf import DictConfig

from verl.router.head import INPUT_NORMS, ROUTE_SAMPLING_MODES
from verl.router.loss import ROUTE_ADV_NORMS, ROUTE_PG_MODES
from verl.router.value import LOSS_MODES, VALUE_FITS
from verl.trainer.config_errors import ConfigError

CHOICES = (
    ("route_sampling", ROUTE_SAMPLING_MODES),
    ("route_adv_norm", ROUTE_ADV_NORMS),
    ("route_pg", ROUTE_PG_MODES),
    ("loss_mode", LOSS_MODES),
    ("input_norm", INPUT_NORMS),
    ("value_fit", VALUE_FITS),
)  # the router modules' own lists


def validate_router_settings(config: DictConfig) -> None:
    """The router's options against each other and the rollout (nothing is checked when ``router.enable`` is false).

    Raises:
        ConfigError: the first bad setting, named by its key.
    """
    router, rollout = config.router, config.actor_rollout_ref.rollout
    if not router.enable:
        return
    for key, allowed in CHOICES:
        if router[key] not in allowed:
            raise ConfigError(f"router.{key} must be one of {allowed}, got {router[key]!r}")
    for key in ("obs_tokens", "seconds"):
        if float(router.cost_weights[key]) != 0 and not rollout.multi_turn.enable:
            raise ConfigError(
                f"router.cost_weights.{key}={router.cost_weights[key]} prices executed tool calls, and this run "
                "executes none: set actor_rollout_ref.rollout.multi_turn.enable=true (docs/tools.md) or the weight 0"
            )
    n = int(rollout.n)
    if router.route_sampling == "stratified" and n < 3:
        raise ConfigError(
            f"router.route_sampling=stratified routes one copy of each prompt to each of the 3 routes: "
            f"it needs actor_rollout_ref.rollout.n >= 3, got {n}"
        )
    if router.loss_mode == "value":
        if router.route_sampling != "stratified":
            raise ConfigError(
                "router.loss_mode=value regresses every route's task reward, which needs every route "
                "observed on every prompt: set router.route_sampling=stratified"
            )
        for key in ("entropy_coeff", "sup_coeff"):  # terms of the policy-gradient loss only
            if float(router[key]) != 0.0:
                raise ConfigError(
                    f"router.{key}={router[key]}: router.loss_mode=value has no policy-gradient loss "
                    f"for this term to join: set router.{key}=0"
                )
        if not float(router.value_temperature) > 0:
            raise ConfigError(f"router.value_temperature must be > 0, got {router.value_temperature}")
        if not 0.0 <= float(router.value_baseline_decay) < 1.0:
            raise ConfigError(f"router.value_baseline_decay must lie in [0, 1), got {router.value_baseline_decay}")
        if router.value_fit == "ridge":
            if router.head != "linear":
                raise ConfigError(
                    f"router.value_fit=ridge fits a linear head in closed form: set router.head=linear "
                    f"(got {router.head!r})"
                )
            if router.input_norm != "running":  # α is in units of the running-normalised features
                raise ConfigError(
                    f"router.value_fit=ridge fits on features normalised by the statistics of every "
                    f"observation: set router.input_norm=running (got {router.input_norm!r})"
                )
            if not float(router.value_ridge_alpha) > 0:
                raise ConfigError(f"router.value_ridge_alpha must be > 0, got {router.value_ridge_alpha}")
    elif router.value_fit != "sgd":
        raise ConfigError(f"router.value_fit={router.value_fit} fits route values: it needs router.loss_mode=value")
    if router.answer_forbids_tool_calls:
        if rollout.name != "hf":
            raise ConfigError(
                f"router.answer_forbids_tool_calls=true blocks tool calls while decoding, which the HF "
                f"rollout implements: set actor_rollout_ref.rollout.name=hf (got {rollout.name!r})"
            )
        if int(rollout.top_k) > 0 or float(rollout.top_p) < 1.0:  # generate truncates before the ban
            raise ConfigError(
                f"router.answer_forbids_tool_calls=true needs untruncated sampling: rollout.top_k="
                f"{rollout.top_k} / top_p={rollout.top_p} could leave an ANSWER row only banned "
                "tokens (set top_k=-1, top_p=1.0)"
            )
