"""Checks before training (issue 22): data files and every row at load, over-long prompts at load, model paths
without network retries, keys the config does not define, and a checkpoint manifest that disagrees with its files.
Each was a probe that failed late, silently or with a traceback naming nothing."""

from __future__ import annotations

import logging
import time

import pandas as pd
import pytest
from omegaconf import OmegaConf

from verl.trainer.config_keys import check_known_keys
from verl.trainer.config_utils import ConfigError, load_default_config
from verl.trainer.preflight import DataCheckError, check_data_files, check_prompt_lengths
from verl.utils.model_presets import ModelPathError, prepare_model


def _config(train, val, **data):
    config = load_default_config([f"data.train_files={train}", f"data.val_files={val}"])
    for key, value in data.items():
        config.data[key] = value
    return config


def test_rows_checked_at_load_with_file_and_row(small_rlla, tmp_path):
    df = pd.read_parquet(small_rlla / "train.parquet")
    bad = df.copy()
    bad["reward_model"] = [
        dict(rm, ground_truth=None if i == 3 else rm["ground_truth"]) for i, rm in enumerate(bad["reward_model"])
    ]
    bad.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(DataCheckError) as info:
        check_data_files(_config(tmp_path / "bad.parquet", small_rlla / "test.parquet"))
    message = str(info.value)
    assert message.startswith("data.train_files: 1 problem(s)")
    assert f"{tmp_path / 'bad.parquet'}:3: reward_model.ground_truth" in message and "validate-data" in message
    assert check_data_files(_config(small_rlla / "train.parquet", small_rlla / "test.parquet")) == {
        str(small_rlla / "train.parquet"): 8,
        str(small_rlla / "test.parquet"): 4,
    }


def test_missing_column_empty_and_cut_files_are_named(small_rlla, tmp_path):
    df = pd.read_parquet(small_rlla / "train.parquet")
    df.drop(columns=["reward_model"]).to_parquet(tmp_path / "no_rm.parquet")
    df.head(0).to_parquet(tmp_path / "empty.parquet")
    data = (small_rlla / "train.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    val = small_rlla / "test.parquet"
    with pytest.raises(DataCheckError, match=r"no_rm.parquet:0: reward_model: missing"):
        check_data_files(_config(tmp_path / "no_rm.parquet", val))
    with pytest.raises(DataCheckError, match=r"data.val_files: .*empty.parquet has no rows"):
        check_data_files(_config(small_rlla / "train.parquet", tmp_path / "empty.parquet"))
    with pytest.raises(DataCheckError, match=r"data.train_files: .*cut.parquet is not a readable parquet file"):
        check_data_files(_config(tmp_path / "cut.parquet", val))


def test_over_long_prompt_found_at_load_not_at_its_step(small_rlla, tokenizer):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = _config(
        small_rlla / "train.parquet",
        small_rlla / "test.parquet",
        truncation="error",
        filter_overlong_prompts=False,
        max_prompt_length=64,
    )
    data = OmegaConf.to_container(config.data)
    train = RLHFDataset(data_files=str(small_rlla / "train.parquet"), tokenizer=tokenizer, config=data)
    longest = max(train.prompt_lengths())
    with pytest.raises(DataCheckError) as info:
        check_prompt_lengths(config, {"data.train_files": train})
    assert "data.train_files: 8 prompt(s) longer than data.max_prompt_length=64" in str(info.value)
    assert f"{small_rlla / 'train.parquet'}:0: " in str(info.value)
    config.data.max_prompt_length = longest  # every prompt fits: nothing to say
    check_prompt_lengths(config, {"data.train_files": train})
    config.data.max_prompt_length, config.data.truncation = 64, "left"  # truncation keeps the last tokens
    check_prompt_lengths(config, {"data.train_files": train})


def test_model_path_errors_name_key_presets_and_folder_without_retries(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelPathError) as info:
        prepare_model("tiny_sft_typo", key="actor_rollout_ref.model.path")
    assert time.monotonic() - start < 5  # no hub retries
    message = str(info.value)
    assert (
        "actor_rollout_ref.model.path=tiny_sft_typo: not a preset (smollm2-135m, smollm2-135m-sft, tiny, tiny-sft, tiny-route-qa)"
        in message
        and "model hub is not reachable" in message
    )
    with pytest.raises(ModelPathError, match="no folder /nonexistent exists"):
        prepare_model("/nonexistent")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "llama",')
    with pytest.raises(ModelPathError, match=r"broken/config.json is not valid JSON \(.*line 1"):
        prepare_model(str(tmp_path / "broken"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelPathError, match="has no config.json"):
        prepare_model(str(tmp_path / "empty"))


def test_plus_key_the_config_does_not_define_is_refused():
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref.actor.optim.lrr \(did you mean "
        r"actor_rollout_ref.actor.optim.lr\?\)",
    ):
        check_known_keys(load_default_config(["+actor_rollout_ref.actor.optim.lrr=1e-5"]))
    with pytest.raises(ConfigError, match="trainer.not_a_key"):
        check_known_keys(load_default_config(["+trainer.not_a_key=1"]))
    with pytest.raises(ConfigError, match="env.settings"):  # the open section is textworld's, not env's
        check_known_keys(load_default_config(["+env.settings.rewards=sparse"]))
    # open sections, and ToolRL's own launch keys, are accepted
    check_known_keys(
        load_default_config(
            [
                "+actor_rollout_ref.model.override_config.attn_implementation=eager",
                "+env.textworld.settings.rewards=sparse",
                "actor_rollout_ref.actor.fsdp_config.grad_offload=False",
            ]
        )
    )


def _checkpoint(tmp_path, step=3, epoch=1):
    from verl.trainer.ppo.checkpointing import _check_manifest_against_files
    from verl.utils import checkpoint_manifest as cm

    config = OmegaConf.create({"data": {"train_batch_size": 8}, "trainer": {"total_epochs": 2}})
    step_dir = tmp_path / f"global_step_{step}"
    step_dir.mkdir()
    (step_dir / "config.yaml").write_text(OmegaConf.to_yaml(config, resolve=True))
    state = {"global_step": step, "epoch": epoch}
    manifest = cm.write_manifest(
        step_dir, step=step, epoch=epoch, config=OmegaConf.to_container(config), world_size=1, version="t"
    )
    return step_dir, manifest, state, _check_manifest_against_files


def test_manifest_fields_checked_against_the_files(tmp_path):
    from verl.utils.checkpoint_manifest import CheckpointError

    step_dir, manifest, state, check = _checkpoint(tmp_path)
    check(step_dir, manifest, state)  # consistent
    with pytest.raises(CheckpointError, match="says epoch 1, data.pt holds 0"):
        check(step_dir, manifest, {**state, "epoch": 0})
    with pytest.raises(CheckpointError, match="config_sha256 does not match config.yaml"):
        check(step_dir, {**manifest, "config_sha256": "0" * 64}, state)
    with pytest.raises(CheckpointError, match="resume_keys differ from config.yaml on data.train_batch_size"):
        check(step_dir, {**manifest, "resume_keys": {**manifest["resume_keys"], "data.train_batch_size": 16}}, state)


def test_tracker_file_disagreeing_with_newest_checkpoint_is_reported(tmp_path, caplog):
    from verl.trainer.ppo.checkpointing import _warn_if_tracker_disagrees
    from verl.utils import checkpoint_manifest as cm

    step_dir = tmp_path / "global_step_4"
    with caplog.at_level(logging.WARNING):
        _warn_if_tracker_disagrees(tmp_path, step_dir)
        (tmp_path / cm.TRACKER).write_text("7")
        _warn_if_tracker_disagrees(tmp_path, step_dir)
        (tmp_path / cm.TRACKER).write_text("4")
        _warn_if_tracker_disagrees(tmp_path, step_dir)
    assert "latest_checkpointed_iteration.txt is missing: resuming from global_step_4" in caplog.text
    assert "says '7' but the newest valid checkpoint is global_step_4" in caplog.text
    assert caplog.text.count("WARNING") == 2


def test_router_weak_labels_required_when_sup_coeff_pulls_towards_them(small_rlla, tmp_path):
    """router.sup_coeff > 0 on a training file without weak labels used to train with router/sup_loss = 0, silently:
    refused at load, naming the key, the file and the ways out; the router's preprocessed file passes, and so does
    sup_coeff = 0."""
    import shutil

    from verl.router.preprocess import preprocess_dir

    train, val = small_rlla / "train.parquet", small_rlla / "test.parquet"
    config = _config(train, val)
    config.router.enable = True
    assert float(config.router.sup_coeff) > 0
    with pytest.raises(DataCheckError, match=r"router.sup_coeff=.*weak labels.*router_target_action.*train.parquet"):
        check_data_files(config)
    config.router.sup_coeff = 0.0
    check_data_files(config)
    for split in ("train", "test"):
        shutil.copy(small_rlla / f"{split}.parquet", tmp_path / f"{split}.parquet")
    preprocess_dir(tmp_path)
    labelled = _config(tmp_path / "train_router.parquet", val)
    labelled.router.enable = True
    check_data_files(labelled)
