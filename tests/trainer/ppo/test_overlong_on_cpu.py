"""DAPO's overlong reward shaping and truncation masking (verl/trainer/ppo/overlong.py), by hand."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.ppo.overlong import apply_overlong_shaping, overlong_penalty, truncated_rows

EOS = 2


def test_penalty_is_linear_over_the_buffer():
    # L_max = 10, buffer 4: no penalty up to 6, then -(L - 6) / 4 * factor
    lengths = torch.tensor([3, 6, 7, 8, 10])
    torch.testing.assert_close(overlong_penalty(lengths, 10, 4, 1.0), torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0]))
    torch.testing.assert_close(overlong_penalty(lengths, 10, 4, 0.5)[-1], torch.tensor(-0.5))
    with pytest.raises(ValueError, match="overlong_buffer.len=0"):
        overlong_penalty(lengths, 10, 0, 1.0)


def _batch():
    # rows: ends with EOS at length 3; uses every column and ends with EOS; uses every column without EOS (cut)
    responses = torch.tensor([[5, 6, EOS, 0], [5, 6, 7, EOS], [5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])
    scores = torch.zeros(3, 4)
    scores[torch.arange(3), torch.tensor([2, 3, 3])] = 1.0
    return DataProto.from_dict(
        {
            "responses": responses,
            "response_mask": mask,
            "token_level_scores": scores,
            "token_level_scores_length": torch.zeros(3, 4),
        }
    )


def test_shaping_and_masking_in_a_batch():
    assert truncated_rows(_batch().batch["responses"], _batch().batch["response_mask"], [EOS]).tolist() == [
        False,
        False,
        True,
    ]
    config = OmegaConf.create(
        {
            "reward_model": {"overlong_buffer": {"enable": True, "len": 2, "penalty_factor": 1.0}},
            "actor_rollout_ref": {"actor": {"mask_truncated": True}},
        }
    )
    batch = _batch()
    metrics = apply_overlong_shaping(batch, config, EOS)
    # lengths 3, 4, 4 against L_max 4 with a 2-token buffer: -0.5, -1, -1 on the last response token
    assert batch.batch["token_level_scores"].sum(-1).tolist() == [0.5, 0.0, 0.0]
    assert batch.batch["token_level_scores_length"].sum(-1).tolist() == [-0.5, -1.0, -1.0]
    assert batch.batch["response_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    assert metrics == {
        "response/overlong_penalty/mean": pytest.approx(-2.5 / 3),
        "response/truncated_frac": pytest.approx(1 / 3),
    }
    off = _batch()
    assert apply_overlong_shaping(off, OmegaConf.create({}), EOS) == {}
    assert off.batch["token_level_scores"].sum().item() == 3.0


def test_config_check(tmp_path):
    from conftest import e2e_overrides
    from verl.trainer.config_utils import ConfigError, load_default_config, validate_config

    base = e2e_overrides(tmp_path, "unused") + ["reward_model.overlong_buffer.enable=true"]
    with pytest.raises(ConfigError, match="overlong_buffer.len=0"):
        validate_config(load_default_config(base), check_files=False)
    validate_config(load_default_config(base + ["reward_model.overlong_buffer.len=4"]), check_files=False)
