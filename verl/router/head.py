"""The router head on the actor LM: prompt pooling, the 3-way head, action sampling (spec "Router head").

Flow inside the actor worker (``compute_router_logits``)::

    hidden = prompt_hidden_states(actor_module, input_ids, attention_mask, position_ids)   # [B, L, H]
    router_logits = router_head(hidden, attention_mask)                                     # [B, 3] float32
    router_action, router_log_prob = sample_actions(router_logits, greedy=...)              # [B] int64, [B] float32

or in one call :func:`compute_router_logits`. Prompts are left-padded (verl's ``RLHFDataset``), so the last prompt
token is the last position whose attention mask is 1.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
from torch import nn
import torch.nn.functional as F

from verl.router import NUM_ROUTER_ACTIONS

logger = logging.getLogger(__name__)

POOLING_MODES = ("last_token", "mean")
HEAD_TYPES = ("linear", "mlp")
INPUT_NORMS = ("none", "running")


def last_valid_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last position where ``mask`` is non-zero, per row.

    Works for left padding (always ``L - 1``), right padding and masks with holes.

    Args:
        mask: ``[B, L]`` 0/1 (any dtype).

    Returns:
        LongTensor ``[B]``.

    Raises:
        ValueError: a row of ``mask`` is all zero (its position is named).
    """
    valid = mask != 0
    empty = ~valid.any(dim=-1)
    if bool(empty.any()):
        raise ValueError(f"mask rows {empty.nonzero().flatten().tolist()} have no valid position")
    length = mask.shape[-1]
    return (length - 1 - valid.flip(-1).long().argmax(dim=-1)).long()


def pool_hidden(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str = "last_token") -> torch.Tensor:
    """Pool prompt hidden states into one vector per prompt (spec "Router head": input).

    Args:
        hidden: ``[B, L, H]`` final-layer hidden states of the (left-padded) prompt.
        attention_mask: ``[B, L]`` 0/1; 0 marks padding.
        mode: ``"last_token"``: the hidden state at the last position whose mask is 1 (the last prompt token under
            left padding); ``"mean"``: the mean over positions whose mask is 1. Padding positions never contribute.

    Returns:
        ``[B, H]`` in ``hidden``'s dtype (the mean is accumulated in float32).

    Raises:
        ValueError: unknown ``mode``, shape mismatch, or a row without any valid position.
    """
    if mode not in POOLING_MODES:
        raise ValueError(f"router pooling must be one of {POOLING_MODES}, got {mode!r}")
    if hidden.dim() != 3 or attention_mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"pool_hidden: hidden {tuple(hidden.shape)} and attention_mask {tuple(attention_mask.shape)}"
            " must be [B, L, H] and [B, L]"
        )
    last = last_valid_index(attention_mask)  # also rejects empty rows
    if mode == "last_token":
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    weights = (attention_mask != 0).to(torch.float32).unsqueeze(-1)  # [B, L, 1]
    summed = (hidden.float() * weights).sum(dim=1)
    return (summed / weights.sum(dim=1)).to(hidden.dtype)


class RouterHead(nn.Module):
    """3-way router head on pooled prompt hidden states (spec "Router head").

    Args:
        hidden_size: the LM's hidden size ``H``.
        head: ``"linear"`` (``Linear(H, 3)``) or ``"mlp"`` (``Linear(H, mlp_hidden) -> GELU -> Linear(mlp_hidden, 3)``).
        pooling: ``"last_token"`` or ``"mean"`` (:func:`pool_hidden`).
        detach_backbone: detach the hidden states before the head, so router losses never reach the LM.
        mlp_hidden_size: width of the MLP's hidden layer (default ``H``).
        input_norm: ``"none"`` or ``"running"`` (``router.input_norm``): centre each pooled feature by its running
            mean over the prompts the head was trained on and divide by the running root-mean-square of the centred
            features (one scale for all features), before the head. A causal LM's last hidden state is dominated by a
            few dimensions that hardly vary between prompts (SmolLM2-135M: one of ~47 in a vector of norm ~57): on
            raw features every weight step moves all prompts' outputs together, centring leaves only what tells
            prompts apart. The statistics are buffers (saved with the head), updated by :meth:`observe`.

    The output layer is zero-initialised: the initial router is uniform over the three routes (maximum entropy), so
    the first GRPO groups see every route. Parameters are float32 unless the caller casts the module.

    Forward: ``(hidden [B, L, H], attention_mask [B, L]) -> router_logits [B, 3]`` float32.

    Raises:
        ValueError: invalid ``head`` / ``pooling`` / sizes.
    """

    def __init__(
        self,
        hidden_size: int,
        head: str = "linear",
        pooling: str = "last_token",
        detach_backbone: bool = True,
        mlp_hidden_size: Optional[int] = None,
        input_norm: str = "none",
    ):
        super().__init__()
        if input_norm not in INPUT_NORMS:
            raise ValueError(f"router.input_norm must be one of {INPUT_NORMS}, got {input_norm!r}")
        self.input_norm = input_norm
        if input_norm == "running":
            self.register_buffer("feature_count", torch.zeros((), dtype=torch.float64))
            self.register_buffer("feature_mean", torch.zeros(int(hidden_size), dtype=torch.float64))
            self.register_buffer("feature_m2", torch.zeros(int(hidden_size), dtype=torch.float64))
        if head not in HEAD_TYPES:
            raise ValueError(f"router.head must be one of {HEAD_TYPES}, got {head!r}")
        if pooling not in POOLING_MODES:
            raise ValueError(f"router.pooling must be one of {POOLING_MODES}, got {pooling!r}")
        if int(hidden_size) <= 0:
            raise ValueError(f"router head hidden_size must be positive, got {hidden_size!r}")
        self.hidden_size = int(hidden_size)
        self.head_type = head
        self.pooling = pooling
        self.detach_backbone = bool(detach_backbone)
        if head == "linear":
            out = nn.Linear(self.hidden_size, NUM_ROUTER_ACTIONS)
            self.net = out
        else:
            width = int(mlp_hidden_size or self.hidden_size)
            if width <= 0:
                raise ValueError(f"router mlp_hidden_size must be positive, got {mlp_hidden_size!r}")
            out = nn.Linear(width, NUM_ROUTER_ACTIONS)
            self.net = nn.Sequential(nn.Linear(self.hidden_size, width), nn.GELU(), out)
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)

    @torch.no_grad()
    def observe(self, pooled: torch.Tensor) -> None:
        """Fold a batch of pooled features ``[N, H]`` into the running mean and sum of squared deviations (Chan et
        al.'s parallel update of Welford's algorithm); a no-op with ``input_norm="none"``."""
        if self.input_norm != "running" or pooled.shape[0] == 0:
            return
        x = pooled.detach().double()
        n_b = float(x.shape[0])
        mean_b = x.mean(0)
        m2_b = ((x - mean_b) ** 2).sum(0)
        n_a = float(self.feature_count)
        delta = mean_b - self.feature_mean
        total = n_a + n_b
        self.feature_mean += delta * (n_b / total)
        self.feature_m2 += m2_b + delta**2 * (n_a * n_b / total)
        self.feature_count += n_b

    def normalize(self, pooled: torch.Tensor) -> torch.Tensor:
        """``(x − mean) / rms`` with the running statistics (``input_norm="running"``; the identity before any
        observation, or with ``"none"``). ``rms = sqrt(mean over features of the running variance + 1e-6)``."""
        mean, scale = self.norm_stats()
        if mean is None:
            return pooled
        return ((pooled.double() - mean.to(pooled.device)) / scale).to(pooled.dtype)

    def norm_stats(self) -> tuple[Optional[torch.Tensor], float]:
        """``(mean [H] float64 or None, scale)`` that :meth:`normalize` applies: the running mean and RMS, or
        ``(None, 1.0)`` (identity) before any observation and with ``input_norm="none"``."""
        if self.input_norm != "running" or float(self.feature_count) < 1:
            return None, 1.0
        return self.feature_mean.clone(), float(torch.sqrt((self.feature_m2 / self.feature_count).mean() + 1e-6))

    @torch.no_grad()
    def set_norm_stats(self, count: float, mean: torch.Tensor, m2: torch.Tensor) -> None:
        """Overwrite the running input statistics (``router.value_fit=ridge`` sets them from its sums, every scored
        copy so far, :meth:`verl.router.value.RidgeRouteValues.feature_stats`): ``count`` a float, ``mean`` and ``m2``
        ``[H]`` (stored as float64).

        Raises: ValueError: ``input_norm`` other than ``"running"``, or shapes other than ``[H]``."""
        if self.input_norm != "running":
            raise ValueError("RouterHead.set_norm_stats needs router.input_norm=running")
        if tuple(mean.shape) != (self.hidden_size,) or tuple(m2.shape) != (self.hidden_size,):
            raise ValueError(
                f"RouterHead.set_norm_stats: mean {tuple(mean.shape)} / m2 {tuple(m2.shape)}, expected "
                f"({self.hidden_size},)"
            )
        self.feature_count.fill_(float(count))
        self.feature_mean.copy_(mean.to(self.feature_mean))
        self.feature_m2.copy_(m2.to(self.feature_m2))

    @torch.no_grad()
    def set_linear(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Overwrite the linear head's output layer (``router.value_fit=ridge`` writes its closed-form fit here):
        ``weight [3, H]``, ``bias [3]``, cast to the layer's dtype.

        Raises: ValueError: an ``mlp`` head, or shapes other than ``[3, H]`` / ``[3]``."""
        if self.head_type != "linear":
            raise ValueError("RouterHead.set_linear needs router.head=linear")
        if tuple(weight.shape) != tuple(self.net.weight.shape) or tuple(bias.shape) != tuple(self.net.bias.shape):
            raise ValueError(
                f"RouterHead.set_linear: weight {tuple(weight.shape)} / bias {tuple(bias.shape)}, "
                f"expected {tuple(self.net.weight.shape)} / {tuple(self.net.bias.shape)}"
            )
        self.net.weight.copy_(weight.to(self.net.weight))
        self.net.bias.copy_(bias.to(self.net.bias))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, observe: bool = False) -> torch.Tensor:
        """``router_logits [B, 3]`` float32; ``observe`` first folds this batch's pooled features into the running
        statistics (the router update does, once per distinct prompt)."""
        if hidden.shape[-1] != self.hidden_size:
            raise ValueError(f"RouterHead expects hidden size {self.hidden_size}, got {hidden.shape[-1]}")
        if self.detach_backbone:
            hidden = hidden.detach()
        pooled = pool_hidden(hidden, attention_mask, self.pooling)
        if observe:
            self.observe(pooled)
        return self.head_of_pooled(pooled)

    def head_of_pooled(self, pooled: torch.Tensor) -> torch.Tensor:
        """``router_logits [B, 3]`` float32 of pooled features ``[B, H]`` (normalised, then the head's layers)."""
        weight_dtype = next(self.parameters()).dtype
        return self.net(self.normalize(pooled.float()).to(weight_dtype)).float()


def prompt_hidden_states(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Final-layer hidden states of a Hugging Face causal LM on a padded prompt batch.

    Calls the full model (so FSDP-wrapped models gather their parameters as usual) with ``output_hidden_states=True``
    and ``logits_to_keep=1`` (the vocabulary projection is computed for one position only), and returns the last
    entry of ``hidden_states`` (for Llama/Qwen-style models: after the final norm, i.e. what the LM head sees).

    Args:
        model: an HF ``*ForCausalLM`` (possibly wrapped by FSDP).
        input_ids, attention_mask, position_ids: ``[B, L]`` (left-padded prompts; ``position_ids`` from
            ``compute_position_id_with_mask``; None lets the model derive them).

    Returns:
        ``[B, L, H]`` in the model's compute dtype; differentiable unless called under ``torch.no_grad()``.

    Raises:
        ValueError: the model did not return hidden states.
    """
    output = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        output_hidden_states=True,
        logits_to_keep=1,
    )
    hidden_states = getattr(output, "hidden_states", None)
    if not hidden_states:
        raise ValueError(f"{type(model).__name__} returned no hidden_states (needs an HF causal LM)")
    return hidden_states[-1]


def compute_router_logits(
    model: nn.Module,
    router_head: RouterHead,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: Optional[torch.Tensor] = None,
    observe: bool = False,
) -> torch.Tensor:
    """``router_logits [B, 3]`` (float32) for a prompt batch: backbone hidden states -> pooling -> head.

    When ``router_head.detach_backbone`` is true the backbone runs under ``torch.no_grad()`` (same result as
    detaching, without keeping the LM's activations); otherwise gradients reach the LM. ``observe``: see
    :meth:`RouterHead.forward`.
    """
    if router_head.detach_backbone:
        with torch.no_grad():
            hidden = prompt_hidden_states(model, input_ids, attention_mask, position_ids)
    else:
        hidden = prompt_hidden_states(model, input_ids, attention_mask, position_ids)
    return router_head(hidden, attention_mask, observe=observe)


@torch.no_grad()
def compute_router_features(
    model: nn.Module,
    router_head: RouterHead,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The head's input before normalisation: pooled final hidden states ``[B, H]`` float32 of a prompt batch (no
    gradient; ``router.value_fit=ridge`` fits the head on these)."""
    hidden = prompt_hidden_states(model, input_ids, attention_mask, position_ids)
    return pool_hidden(hidden, attention_mask, router_head.pooling).float()


def sample_actions(
    logits: torch.Tensor, greedy: bool = False, generator: Optional[torch.Generator] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample (or take the argmax of) the router's categorical policy ``softmax(logits)``.

    Args:
        logits: ``[B, 3]`` router logits.
        greedy: take ``argmax`` (validation / inference, ``router.greedy_eval``); ties go to the lowest index.
        generator: optional ``torch.Generator`` (on ``logits``' device) for reproducible sampling.

    Returns:
        ``(router_action LongTensor [B], router_log_prob float32 [B])``, both detached; ``router_log_prob`` is
        ``log_softmax(logits)[action]``.

    Raises:
        ValueError: ``logits`` is not ``[B, 3]`` or holds NaN.
    """
    if logits.dim() != 2 or logits.shape[-1] != NUM_ROUTER_ACTIONS:
        raise ValueError(f"router logits must be [B, {NUM_ROUTER_ACTIONS}], got {tuple(logits.shape)}")
    with torch.no_grad():
        log_probs = F.log_softmax(logits.float(), dim=-1)
        if bool(torch.isnan(log_probs).any()):
            raise ValueError("router logits contain NaN")
        if greedy:
            actions = log_probs.argmax(dim=-1)
        else:
            actions = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
        chosen = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    return actions.long(), chosen


ROUTE_SAMPLING_MODES = ("policy", "stratified")


def stratified_actions(num_prompts: int, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Routes for ``router.route_sampling=stratified``: every route for every prompt (``docs/router.md``, "Router
    policy update").

    The ``n`` copies of each prompt (consecutive rows, as ``DataProto.repeat(interleave=True)`` lays them out) take
    the routes of a random permutation of ``0..2`` drawn per prompt, cycling: copy ``j`` gets ``perm[j mod 3]``. With
    ``n = 3`` each route appears once per group; with ``n > 3`` the first ``n mod 3`` routes of the permutation get
    one copy more.

    Args:
        num_prompts: number of distinct prompts ``P``.
        n: copies per prompt (``rollout.n``), at least 3.
        generator: optional ``torch.Generator`` (CPU) for reproducible permutations.

    Returns:
        LongTensor ``[P·n]`` of route ids.

    Raises:
        ValueError: ``n < 3`` (a route would go unobserved in some group) or ``num_prompts < 0``.
    """
    if n < NUM_ROUTER_ACTIONS:
        raise ValueError(
            f"stratified routes need at least {NUM_ROUTER_ACTIONS} copies per prompt (one per route), got n={n}"
        )
    if num_prompts < 0:
        raise ValueError(f"num_prompts must be >= 0, got {num_prompts}")
    cycle = torch.arange(n) % NUM_ROUTER_ACTIONS
    rows = [torch.randperm(NUM_ROUTER_ACTIONS, generator=generator)[cycle] for _ in range(num_prompts)]
    return torch.cat(rows).long() if rows else torch.zeros(0, dtype=torch.long)
