"""The non-finite guard: rows with NaN/Inf loss inputs are named, and after max_consecutive_bad_steps bad steps the
trainer saves the last good state and stops; a good step resets the count."""
import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer


def test_non_finite_rows_named_only_on_response_tokens():
    adv = torch.zeros(3, 4)
    adv[1, 2] = float("nan")
    adv[2, 3] = float("inf")  # outside the response mask of row 2: ignored
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]])
    batch = DataProto.from_dict(tensors={"advantages": adv, "response_mask": mask,
                                         "old_log_probs": torch.zeros(3, 4)})
    assert RayPPOTrainer._non_finite_rows(batch) == {"advantages": [1]}


def test_bad_steps_save_and_stop(tmp_path):
    trainer = object.__new__(RayPPOTrainer)
    trainer.config = OmegaConf.create({"trainer": {"max_consecutive_bad_steps": 2, "default_local_dir": str(tmp_path)}})
    trainer.global_steps = 7
    saved = []
    trainer._save_checkpoint = lambda: saved.append(trainer.global_steps)
    trainer._record_bad_step("non-finite advantages")
    assert trainer.bad_steps == 1 and saved == []
    trainer.global_steps = 8
    with pytest.raises(RuntimeError, match="2 consecutive non-finite steps.*global_step_8"):
        trainer._record_bad_step("non-finite advantages")
    assert saved == [8]
