"""``rollout.val_kwargs.n``: validation samples n responses per prompt, as upstream verl does."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import e2e_overrides


@pytest.mark.parametrize("val_n", [1, 3])
def test_validation_samples_val_kwargs_n_responses_per_prompt(tmp_path, small_rlla, val_n):
    from verl.trainer.main_ppo import build_local_trainer

    sampled = (
        ["actor_rollout_ref.rollout.val_kwargs.do_sample=True", "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"]
        if val_n > 1
        else []
    )
    trainer = build_local_trainer(
        e2e_overrides(tmp_path, small_rlla) + sampled + [f"actor_rollout_ref.rollout.val_kwargs.n={val_n}"]
    )
    seen = []
    generate = trainer._generate

    def recording(batch, **kwargs):
        out = generate(batch, **kwargs)
        seen.append(out)
        return out

    trainer._generate = recording
    try:
        metrics = trainer._validate()
    finally:
        trainer.shutdown()
    rows = len(trainer.val_dataset)
    assert sum(len(b) for b in seen) == rows * val_n
    assert all(math.isfinite(v) for k, v in metrics.items() if k.startswith("val/test_score"))
    # upstream verl's names over the samples of each prompt; the score's mean over every sample equals val/test_score
    source = next(k.split("/")[-1] for k in metrics if k.startswith("val/test_score/"))
    core = f"val-core/{source}/reward/mean@{val_n}"
    assert core in metrics and f"val-aux/{source}/correctness/mean@{val_n}" in metrics
    if "val/reward_invalid_count" not in metrics:  # every sample scored: the two means agree
        assert metrics[core] == pytest.approx(metrics[f"val/test_score/{source}"], abs=1e-5)
    if val_n > 1:
        assert {f"val-core/{source}/reward/best@3/mean", f"val-aux/{source}/reward/worst@2/std"} <= set(metrics)
        # the RLLA scorer's answers (its tool calls) are voted on
        assert {f"val-core/{source}/reward/maj@3/mean", f"val-aux/{source}/reward/maj@2/std"} <= set(metrics)
        assert (
            metrics[f"val-core/{source}/reward/best@3/mean"]
            >= metrics[core]
            >= metrics[f"val-aux/{source}/reward/worst@3/mean"]
        )
    if val_n > 1:  # copies are interleaved: same prompt, independently sampled responses
        batch = seen[0]
        prompts, responses = batch.batch["prompts"], batch.batch["responses"]
        assert torch.equal(prompts[0], prompts[1]) and torch.equal(prompts[0], prompts[2])
        assert not (torch.equal(responses[0], responses[1]) and torch.equal(responses[1], responses[2]))


def test_val_kwargs_n_below_one_is_rejected_at_load(tmp_path, small_rlla):
    from verl.trainer.config_utils import ConfigError, load_default_config, normalize_config, validate_config

    config = load_default_config(e2e_overrides(tmp_path, small_rlla) + ["actor_rollout_ref.rollout.val_kwargs.n=0"])
    normalize_config(config)
    with pytest.raises(ConfigError, match="val_kwargs.n must be >= 1"):
        validate_config(config)
