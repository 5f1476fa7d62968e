"""Helpers for the worker tests: synthetic actor batches and worker configs from the real yaml."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask

REPO_ROOT = Path(__file__).resolve().parents[2]
EOS = 2  # <|im_end|> of the SmolLM2 tokenizer (also the pad id)


def make_batch(batch_size: int = 6, prompt_len: int = 7, response_len: int = 5, seed: int = 0) -> DataProto:
    """A rollout-shaped batch: left-padded prompts of varying length, right-padded responses ending in EOS.

    Rows get different valid lengths so padding, packing and micro-batching all matter. Also carries
    ``old_log_probs``/``advantages``/``ref_log_prob``/``values``/``returns`` filled with seeded noise.
    """
    gen = torch.Generator().manual_seed(seed)
    prompt_mask = torch.ones(batch_size, prompt_len, dtype=torch.long)
    response_mask = torch.ones(batch_size, response_len, dtype=torch.long)
    for row in range(batch_size):
        prompt_mask[row, : row % (prompt_len - 1)] = 0  # 0 .. prompt_len-2 pad tokens on the left
        ended = response_len - (row % response_len)  # response ends (with EOS) after `ended` tokens
        response_mask[row, ended:] = 0
    prompts = torch.randint(3, 2000, (batch_size, prompt_len), generator=gen)
    prompts[prompt_mask == 0] = EOS
    responses = torch.randint(3, 2000, (batch_size, response_len), generator=gen)
    ends = response_mask.sum(-1) - 1
    responses[torch.arange(batch_size), ends] = EOS
    responses[response_mask == 0] = EOS
    data = _actor_batch(prompts, prompt_mask, responses, response_mask, gen)
    data.batch["values"] = 0.1 * torch.randn(batch_size, response_len, generator=gen)
    data.batch["returns"] = torch.randn(batch_size, response_len, generator=gen)
    return data


def _actor_batch(prompts, prompt_mask, responses, response_mask, gen) -> DataProto:
    """The trainer's actor tensors from left-padded prompts and right-padded responses, plus seeded noise for
    ``old_log_probs`` / ``ref_log_prob`` / ``advantages``."""
    rows, response_len = responses.shape
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
        "old_log_probs": -10.8 + 0.1 * torch.randn(rows, response_len, generator=gen),
        "ref_log_prob": -10.8 + 0.1 * torch.randn(rows, response_len, generator=gen),
        "advantages": torch.randn(rows, response_len, generator=gen),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def trainer_config(model_dir: str, **overrides):
    """The lead's ``ppo_trainer.yaml`` with small sizes for the tiny model; ``overrides`` are dotted keys."""
    cfg = OmegaConf.load(REPO_ROOT / "verl" / "trainer" / "config" / "ppo_trainer.yaml")
    base = {
        "data.max_prompt_length": 8,
        "data.max_response_length": 6,
        "actor_rollout_ref.model.path": model_dir,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.actor.optim.lr": 1e-3,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 3,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 3,
        "critic.model.path": model_dir,
        "critic.model.tokenizer_path": model_dir,
        "critic.ppo_mini_batch_size": 2,
        "critic.optim.lr": 1e-3,
    }
    for key, value in {**base, **overrides}.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    OmegaConf.update(cfg, "actor_rollout_ref.device", "cpu", force_add=True)
    OmegaConf.update(cfg, "critic.device", "cpu", force_add=True)
    OmegaConf.update(cfg, "critic.rollout_n", cfg.actor_rollout_ref.rollout.n, force_add=True)
    return cfg


def make_rlla_group_batch(
    tokenizer, n: int, num_prompts: int = 3, response_len: int = 12, seed: int = 0, max_prompt_tokens: int = 900
) -> DataProto:
    """An actor batch on real RLLA validation prompts: ``num_prompts`` chat-templated prompts of different lengths
    (left-padded to the longest), each repeated ``n`` times as a rollout would (consecutive rows), with seeded random
    responses of uneven lengths (EOS-terminated, right-padded) and the noise fields of ``make_batch``."""
    import pandas as pd

    from verl.utils.dataset.rlla_data import resolve_rlla_file

    df = pd.read_parquet(resolve_rlla_file("test"))
    prompts = [tokenizer.apply_chat_template(list(m), tokenize=True, add_generation_prompt=True) for m in df["prompt"]]
    prompts = [list(p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p) for p in prompts]
    prompts = sorted((p for p in prompts if len(p) <= max_prompt_tokens), key=len)
    picked = [prompts[(i * (len(prompts) - 1)) // max(num_prompts - 1, 1)] for i in range(num_prompts)]
    prompt_len = max(len(p) for p in picked)
    gen = torch.Generator().manual_seed(seed)
    rows = num_prompts * n
    prompt_ids = torch.full((rows, prompt_len), EOS, dtype=torch.long)
    prompt_mask = torch.zeros(rows, prompt_len, dtype=torch.long)
    for g, p in enumerate(picked):
        for k in range(n):
            prompt_ids[g * n + k, prompt_len - len(p) :] = torch.tensor(p)
            prompt_mask[g * n + k, prompt_len - len(p) :] = 1
    lengths = torch.randint(1, response_len + 1, (rows,), generator=gen)
    lengths[0] = response_len  # at least one full-length response
    response_mask = (torch.arange(response_len).unsqueeze(0) < lengths.unsqueeze(1)).long()
    responses = torch.randint(3, 2000, (rows, response_len), generator=gen)
    responses[torch.arange(rows), lengths - 1] = EOS
    responses[response_mask == 0] = EOS
    return _actor_batch(prompt_ids, prompt_mask, responses, response_mask, gen)
