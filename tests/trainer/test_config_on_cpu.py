"""Config loading: ToolRL's launch overrides are accepted verbatim, deprecated keys map with a warning, and bad
batch arithmetic / names / files fail at load with errors that name the keys."""

import logging

import pytest
from hydra.errors import ConfigCompositionException

from verl.trainer.config_utils import ConfigError, load_default_config, normalize_config, validate_config, world_size

# ToolRL's examples/grpo_trainer/run_grpo.sh override list (../shared/specs/verl_compat.md §4), values filled in.
TOOLRL_GRPO = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=X/train.parquet",
    "data.val_files=X/test.parquet",
    "data.train_batch_size=512",
    "data.val_batch_size=128",
    "data.max_prompt_length=2048",
    "data.max_response_length=1024",
    "actor_rollout_ref.model.path=M",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.grad_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=['console','wandb']",
    "trainer.project_name=TinyZero",
    "trainer.experiment_name=grpo-qwen2.5-3b",
    "trainer.n_gpus_per_node=2",
    "trainer.nnodes=1",
    "trainer.save_freq=15",
    "trainer.test_freq=5",
    "trainer.total_epochs=15",
]

# ToolRL's examples/ppo_trainer/run_ppo.sh differences (gae default, critic keys, global micro batches).
TOOLRL_PPO = [
    "data.train_files=X/train.parquet",
    "data.val_files=X/test.parquet",
    "data.train_batch_size=512",
    "data.val_batch_size=128",
    "data.max_prompt_length=1024",
    "data.max_response_length=512",
    "actor_rollout_ref.model.path=M",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.ppo_micro_batch_size=8",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.grad_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.optim.lr=1e-5",
    "critic.model.use_remove_padding=True",
    "critic.model.path=M",
    "critic.model.enable_gradient_checkpointing=False",
    "critic.ppo_mini_batch_size=128",
    "critic.ppo_micro_batch_size=8",
    "critic.model.fsdp_config.param_offload=True",
    "critic.model.fsdp_config.grad_offload=True",
    "critic.model.fsdp_config.optimizer_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=['console','wandb']",
    "trainer.project_name=TinyZero",
    "trainer.experiment_name=ppo-qwen",
    "trainer.n_gpus_per_node=2",
    "trainer.nnodes=1",
    "trainer.save_freq=15",
    "trainer.test_freq=5",
    "trainer.total_epochs=15",
]


def test_toolrl_grpo_overrides_accepted_verbatim():
    cfg = normalize_config(load_default_config(TOOLRL_GRPO + ["trainer.device=cpu"]))
    validate_config(cfg, check_files=False)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.actor_rollout_ref.rollout.response_length == 1024  # interpolated from data.max_response_length
    assert cfg.critic.enable is False  # critic only for gae
    assert world_size(cfg) == 2


def test_toolrl_ppo_overrides_map_deprecated_micro_batches(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = normalize_config(load_default_config(TOOLRL_PPO + ["trainer.device=cpu"]))
    validate_config(cfg, check_files=False)
    assert cfg.critic.enable is True
    # global micro batch 8 over 2 workers -> 4 per worker; the deprecated key is cleared
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 4
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size is None
    assert cfg.critic.ppo_micro_batch_size_per_gpu == 4
    assert "ppo_micro_batch_size is deprecated" in caplog.text
    assert "grad_offload is deprecated" in caplog.text
    assert "val_batch_size=128 is ignored" in caplog.text


def test_unknown_key_rejected():
    with pytest.raises(ConfigCompositionException, match="no_such_key"):
        load_default_config(["actor_rollout_ref.actor.no_such_key=1"])


@pytest.mark.parametrize(
    "overrides, keys",
    [
        (
            ["data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=4"],
            ["data.train_batch_size", "ppo_mini_batch_size"],
        ),
        (
            ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
            ["ppo_mini_batch_size", "must not exceed"],
        ),
        (
            ["data.train_batch_size=3", "actor_rollout_ref.actor.ppo_mini_batch_size=3", "trainer.n_gpus_per_node=2"],
            ["rollout.n", "number of workers"],
        ),
        (
            [
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
            ],
            ["ppo_micro_batch_size_per_gpu"],
        ),
        (["algorithm.adv_estimator=nope"], ["algorithm.adv_estimator", "nope"]),
        (["actor_rollout_ref.rollout.name=sglang"], ["actor_rollout_ref.rollout.name"]),
        (["trainer.single_process=true", "trainer.n_gpus_per_node=2"], ["trainer.single_process", "2 workers"]),
        (["trainer.single_process=true", "ray_init.address=auto"], ["trainer.single_process", "ray_init.address"]),
        (
            ["trainer.single_process=true", "env.env_name=line_world", "env.train_tasks=8"],
            ["trainer.single_process", "env.use_ray_workers=false"],
        ),
    ],
)
def test_bad_batch_arithmetic_names_keys(overrides, keys):
    base = [
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=1",
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    ]
    cfg = normalize_config(load_default_config(base + overrides))
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, check_files=False)
    for key in keys:
        assert key in str(err.value)


def test_missing_data_file_named(tmp_path):
    cfg = normalize_config(
        load_default_config(
            [
                "trainer.device=cpu",
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                f"data.train_files={tmp_path}/missing.parquet",
                f"data.val_files={tmp_path}/missing.parquet",
            ]
        )
    )
    with pytest.raises(ConfigError, match="data.train_files: file not found"):
        validate_config(cfg)


def test_cpu_when_no_gpus_requested():
    cfg = normalize_config(load_default_config(["trainer.n_gpus_per_node=0"]))
    assert cfg.trainer.device == "cpu" and cfg.actor_rollout_ref.device == "cpu"
    assert world_size(cfg) == 1


@pytest.mark.parametrize("overrides", [TOOLRL_GRPO, TOOLRL_PPO], ids=["run_grpo.sh", "run_ppo.sh"])
def test_toolrl_lines_keep_toolrl_kl_penalty_and_entropy_bonus(overrides, caplog):
    """ToolRL's lines set no use_kl_in_reward: its trainer put the KL penalty in the reward because use_kl_loss is
    false, and its entropy coefficient default was 0.001. Both resolve to ToolRL's behaviour here, with one line
    saying why (docs/toolrl_defaults.md)."""
    with caplog.at_level(logging.INFO, logger="verl.trainer.config_utils"):
        cfg = normalize_config(load_default_config(overrides + ["trainer.device=cpu"]))
    assert cfg.algorithm.use_kl_in_reward is True and cfg.algorithm.kl_ctrl.kl_coef == 0.001
    assert cfg.actor_rollout_ref.actor.entropy_coeff == 0.001
    assert (
        "algorithm.use_kl_in_reward=null -> True (ToolRL's rule: KL penalty in the reward (kl_coef=0.001) "
        "because actor.use_kl_loss=false)" in caplog.text
    )


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["algorithm.use_kl_in_reward=false"], False),  # an explicit value wins
        (["actor_rollout_ref.actor.use_kl_loss=true"], False),  # KL in the loss instead
        (["algorithm.kl_ctrl.kl_coef=0"], False),  # nothing to apply
        (["env.env_name=sokoban"], False),  # agent mode: not a ToolRL setup
        ([], True),
    ],
)
def test_kl_in_reward_rule(extra, expected):
    cfg = normalize_config(load_default_config(extra + ["trainer.device=cpu"]))
    assert cfg.algorithm.use_kl_in_reward is expected


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "sequence parallelism is not implemented"),
        ("reward_model.enable=true", "model-based rewards are not implemented"),
        ("router.sample_per_rollout=false", "only an independent route per copy"),
        ("router.detach_backbone=false", "gradient into the LM would be dropped"),
        ("actor_rollout_ref.actor.strategy=megatron", "Megatron is not implemented"),
        ("actor_rollout_ref.rollout.mode=async", "python -m verl.trainer.main_async"),
        ("data.tokenizer=gpt2", "the actor's tokenizer"),
        ("reward_model.reward_manager=dapo", "registered: \\['naive', 'rlla'\\]"),
        ("reward.timeout_s=5", "the built-in default scores in the trainer process"),
        ("reward.num_workers=0", "expected an integer >= 1"),
        ("actor_rollout_ref.actor.checkpoint.save_contents=[model,optim]", "unknown \\['optim'\\]"),
    ],
)
def test_keys_nothing_implements_are_refused_by_name(override, message):
    """Keys kept for ToolRL's and upstream's lines whose other values nothing implements: refused at load, not
    accepted and ignored (issue 21)."""
    cfg = normalize_config(load_default_config(["trainer.device=cpu", "router.enable=true", override]))
    with pytest.raises(ConfigError, match=f"{override.split('=')[0]}=.*{message}"):
        validate_config(cfg, check_files=False)


@pytest.mark.parametrize(
    "extra, error",
    [
        (
            ["custom_reward_function.name=rlla", "reward.timeout_s=5"],
            r"reward.timeout_s=5.0 is a limit of the process sandbox.*reward.sandbox=null, which is none",
        ),
        (["custom_reward_function.name=rlla", "reward.sandbox=process", "reward.timeout_s=5"], None),
        (
            ["custom_reward_function.name=rlla", "reward.sandbox=none", "reward.memory_mb=0"],
            "reward.memory_mb=0 is a limit",
        ),
        (["actor_rollout_ref.actor.strategy=fsdp2", "reward_model.reward_manager=rlla"], None),
        (["critic.strategy=megatron"], None),  # no critic under GRPO: nothing to refuse
        (["+actor_rollout_ref.rollout.engine_kwargs.sglang.x=1"], "engine_kwargs.sglang: no such engine here"),
        (
            ["+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4", "actor_rollout_ref.rollout.name=hf"],
            "the arguments go to vLLM's engine only",
        ),
        (["actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]"], "has no 'model': its checkpoints cannot be"),
        (["actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]", "trainer.resume_mode=disable"], None),
        (
            ["actor_rollout_ref.rollout.ignore_eos=true", "actor_rollout_ref.rollout.name=hf"],
            "only vLLM's engine decodes past EOS",
        ),
    ],
)
def test_settings_that_act_only_with_another_are_refused_alone(extra, error):
    """reward.* limits act only in the process sandbox (reward-dry-run refuses the same); upstream's fsdp2 and the
    registered manager names pass; critic.* rules apply only with a critic."""
    cfg = normalize_config(load_default_config(["trainer.device=cpu", "algorithm.adv_estimator=grpo"] + extra))
    if error is None:
        validate_config(cfg, check_files=False)
    else:
        with pytest.raises(ConfigError, match=error):
            validate_config(cfg, check_files=False)


def test_the_critic_tokenizer_follows_the_actor_unless_set(monkeypatch):
    """critic.model.tokenizer_path at its default (the actor's path) becomes the actor's resolved directory; a path
    the user set is kept, not overwritten."""
    from verl.trainer.main_ppo import resolve_models
    from verl.utils import model_presets

    monkeypatch.setattr(model_presets, "prepare_model", lambda path, key=None: f"/resolved/{path}")
    base = ["trainer.device=cpu", "critic.enable=true", "actor_rollout_ref.model.path=tiny", "critic.model.path=tiny"]
    assert resolve_models(load_default_config(base)).critic.model.tokenizer_path == "/resolved/tiny"
    own = resolve_models(load_default_config(base + ["critic.model.tokenizer_path=my_tokenizer"]))
    assert own.critic.model.tokenizer_path == "my_tokenizer"


def test_optimizer_offload_moves_the_state_around_each_update(monkeypatch):
    """ToolRL's run_ppo.sh sets critic optimizer_offload=True: accepted, and implemented: on a GPU the state goes to
    the device for the update and back to host memory after; on CPU nothing moves."""
    import torch

    from verl.utils import model_utils

    validate_config(normalize_config(load_default_config(TOOLRL_PPO + ["trainer.device=cpu"])), check_files=False)
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([param], lr=0.1)
    param.grad = torch.ones(3)
    optimizer.step()
    assert model_utils.move_optimizer_state(optimizer, "cpu") == 0  # exp_avg, exp_avg_sq, step already there
    calls = []
    monkeypatch.setattr(model_utils, "move_optimizer_state", lambda opt, device: calls.append(device) or 0)
    with model_utils.optimizer_on_device(optimizer, "cuda", offload=True):
        assert calls == ["cuda"]
    assert calls == ["cuda", "cpu"]
    for device, offload in (("cpu", True), ("cuda", False)):
        with model_utils.optimizer_on_device(optimizer, device, offload=offload):
            pass
    assert calls == ["cuda", "cpu"]


def test_external_lib_is_imported_before_the_model(tmp_path, monkeypatch):

    from verl.trainer.config_utils import default_section
    from verl.utils.model_utils import import_external_lib

    (tmp_path / "my_arch.py").write_text("import builtins\nbuiltins._my_arch_imported = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import_external_lib(default_section("actor_rollout_ref.model", external_lib="my_arch"))
    import builtins

    assert getattr(builtins, "_my_arch_imported", False)
    del builtins._my_arch_imported
    with pytest.raises(ModuleNotFoundError, match="model.external_lib='no_such_module'"):
        import_external_lib(default_section("actor_rollout_ref.model", external_lib="no_such_module"))


def test_policy_loss_mode_is_checked_at_load():
    base = ["trainer.device=cpu"]
    for mode in ("vanilla", "gspo", "cispo"):
        validate_config(
            normalize_config(load_default_config(base + [f"actor_rollout_ref.actor.policy_loss.loss_mode={mode}"])),
            check_files=False,
        )
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.policy_loss.loss_mode: unknown policy loss 'gpso'"):
        validate_config(
            normalize_config(load_default_config(base + ["actor_rollout_ref.actor.policy_loss.loss_mode=gpso"])),
            check_files=False,
        )
