"""The rollout interface: prompts in, generated responses out (verl's ``verl.workers.rollout.base``)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from verl.protocol import DataProto


class BaseRollout(ABC):
    """Generates one response per prompt row.

    Input ``prompts.batch``: ``input_ids``, ``attention_mask``, ``position_ids`` — left-padded prompts ``[B, P]``.
    Output batch (``B`` rows, or ``B * n`` when ``meta_info['n'] > 1``): ``prompts [B, P]``, ``responses [B, R]``
    (right-padded with the pad id to exactly ``R = rollout.response_length``), ``input_ids [B, P + R]``,
    ``attention_mask [B, P + R]`` (response part 1 up to and including the first EOS), ``position_ids [B, P + R]``
    (continuing the prompt's) and ``response_mask [B, R]``.
    """

    @abstractmethod
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate responses for ``prompts`` (see the class docstring for the tensor layout)."""


def resolve_sampling(config, meta_info: dict) -> dict:
    """Sampling parameters of one ``generate_sequences`` call.

    ``meta_info['validate']`` selects ``rollout.val_kwargs`` (greedy by default); otherwise ``meta_info`` keys
    (``do_sample``, ``temperature``, ``top_k``, ``top_p``) override the ``rollout`` config. Temperature 0 means
    greedy. ``n`` (responses per row, interleaved) comes from ``meta_info['n']`` only: the trainer repeats rows
    itself (upstream's order), so the config's ``rollout.n`` is not applied here. Two per-call keys, in both modes:
    ``max_new_tokens`` (generate at most that many tokens; the output's response width ``R`` is then this value
    instead of ``rollout.response_length``) and ``stop`` (strings ending a response; the engine may keep the stop
    string in the output, so callers cut the text themselves). The RLVCR phase uses both for its alternative thinks.

    Returns:
        ``{do_sample, temperature, top_k (0 = off), top_p, n, max_new_tokens (None = rollout.response_length),
        stop (list of str)}``.

    Raises:
        ValueError: negative temperature, top_p outside (0, 1], n < 1 or max_new_tokens < 1 (naming the key).
    """
    validate = bool(meta_info.get("validate", False))
    # validation reads rollout.val_kwargs only (greedy unless configured); training lets meta_info override the config
    source = config.val_kwargs if validate else config
    overrides = {} if validate else meta_info
    params = {key: overrides.get(key, source[key]) for key in ("do_sample", "temperature", "top_k", "top_p")}
    params["n"] = int(meta_info.get("n", 1))
    if params["temperature"] is None or float(params["temperature"]) < 0:
        raise ValueError(f"rollout.temperature must be >= 0, got {params['temperature']!r}")
    if not 0.0 < float(params["top_p"]) <= 1.0:
        raise ValueError(f"rollout.top_p must be in (0, 1], got {params['top_p']!r}")
    if params["n"] < 1:
        raise ValueError(f"meta_info['n'] must be >= 1, got {params['n']}")
    params["temperature"] = float(params["temperature"])
    params["do_sample"] = bool(params["do_sample"]) and params["temperature"] > 0
    params["top_k"] = max(int(params["top_k"] or 0), 0)
    params["top_p"] = float(params["top_p"])
    budget = meta_info.get("max_new_tokens")
    if budget is not None and int(budget) < 1:
        raise ValueError(f"meta_info['max_new_tokens'] must be >= 1, got {budget}")
    params["max_new_tokens"] = None if budget is None else int(budget)
    stop = meta_info.get("stop") or []
    params["stop"] = [stop] if isinstance(stop, str) else [str(s) for s in stop]
    return params


def assemble_rollout_output(
    prompts: DataProto, responses, response_length: int, eos_token_id, pad_token_id: int, n: int = 1
) -> DataProto:
    """Build the rollout output ``DataProto`` from generated token ids.

    Args:
        prompts: the input (``B`` rows; its ``input_ids``, ``attention_mask``, ``position_ids`` are ``[B, P]``).
        responses: LongTensor ``[B * n, r]`` (``r <= response_length``) of generated ids, rows interleaved
            (``n`` consecutive rows per prompt); anything after a row's first EOS is ignored by the masks.
        response_length: ``R``; responses are right-padded with ``pad_token_id`` to exactly ``R``.
        eos_token_id: int or list of ints ending a response.
        pad_token_id: id used for padding.
        n: responses per prompt row.

    Returns:
        DataProto with ``prompts, responses, input_ids, attention_mask, position_ids, response_mask`` and the
        prompts' non-tensor batch repeated ``n`` times (interleaved); meta_info is the prompts'.

    Raises:
        ValueError: more than ``response_length`` generated tokens.
    """
    import torch

    from verl.utils.torch_functional import get_response_mask, pad_sequence_to_length

    source = prompts.repeat(n, interleave=True) if n > 1 else prompts
    prompt_ids = source.batch["input_ids"]
    prompt_mask = source.batch["attention_mask"]
    prompt_pos = source.batch["position_ids"]
    if responses.shape[1] > response_length:
        raise ValueError(f"generated {responses.shape[1]} tokens, more than rollout.response_length={response_length}")
    responses = pad_sequence_to_length(responses.to(prompt_ids.device), response_length, pad_token_id)
    response_mask = get_response_mask(responses, eos_token_id, dtype=prompt_mask.dtype)
    # a token after the first EOS is padding, whatever the engine wrote there
    responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, pad_token_id))
    delta = torch.arange(1, response_length + 1, device=prompt_pos.device, dtype=prompt_pos.dtype)
    response_pos = prompt_pos[:, -1:] + delta.unsqueeze(0)
    batch = {
        "prompts": prompt_ids,
        "responses": responses,
        "input_ids": torch.cat([prompt_ids, responses], dim=-1),
        "attention_mask": torch.cat([prompt_mask, response_mask], dim=-1),
        "position_ids": torch.cat([prompt_pos, response_pos], dim=-1),
        "response_mask": response_mask,
    }
    return DataProto.from_dict(
        tensors=batch, non_tensors=dict(source.non_tensor_batch), meta_info=dict(prompts.meta_info)
    )
