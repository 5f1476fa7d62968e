"""Record what every launch script hands the trainer, as resolved config values, for the recipe golden test.

    python tests/trainer/launch_golden/record.py            # rewrites tests/trainer/launch_golden/*.json

Each case runs a launch script with a stub interpreter (``PYTHON``): the stub records the arguments of
``python -m verl.trainer.main_ppo`` / ``main_async`` and the ToolRL reward-switch variables in its environment, skips
the plot step, and runs everything else (data discovery, router preprocessing, irrelevance rows, the resume check) with
the real interpreter. SFT presets are stubbed by a ``config.json`` in a temporary ``TOOLRL_CACHE``, so nothing is
trained or built. The recorded arguments are then composed over the trainer's YAML (Hydra) and resolved; paths under
this checkout are written as ``<repo>/...``.

The golden files were made by this script on the commit before the launch path moved into recipes (the shell scripts
then held the settings); ``tests/trainer/test_recipes_golden_on_cpu.py`` checks that each recipe composes to the same
values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent
SWITCHES = (
    "WITHLENGTH",
    "REFINEDREWARD",
    "COARSEREWARD",
    "STRICTMATCH",
    "CORRECTMAX1",
    "MAX1STEP30MAX3",
    "SCHEDULEREWARD",
    "SCHEDULELENGTH",
    "INTERMEDIATEREWARD",
)
# the launch variables a user may have set: every case starts without them
LAUNCH_VARS = (
    "N_GPUS",
    "BASE_MODEL",
    "DATA_DIR",
    "EXPERIMENT_NAME",
    "PROJECT_NAME",
    "TRAIN_BATCH_SIZE",
    "ROLLOUT_N",
    "PPO_MINI_BATCH_SIZE",
    "MAX_PROMPT_LENGTH",
    "MAX_RESPONSE_LENGTH",
    "TOTAL_EPOCHS",
    "TOTAL_STEPS",
    "LR",
    "SAVE_FREQ",
    "TEST_FREQ",
    "ROLLOUT_NAME",
    "SHARED_PROMPT",
    "FUSED_KERNELS",
    "SINGLE_PROCESS",
    "MICRO_BATCH_PER_GPU",
    "FILTER_OVERLONG",
    "ROLLOUT_TP_SIZE",
    "RUN_DIR",
    "BUDGET_B",
    "ROUTER_RECIPE",
    "IRRELEVANCE_FRACTION",
    "IRRELEVANCE_SEED",
    "ENV_NAME",
    "ESTIMATOR",
    "TASKS_PER_STEP",
    "GROUP_N",
    "MAX_TURNS",
    "VAL_TASKS",
    "MICRO_BATCH",
    "MODEL",
    "STEPS",
    "NAME",
) + SWITCHES

# name -> (script, environment variables, extra arguments)
CASES = {
    "router_cpu": ("run_router_training.sh", {"N_GPUS": "0"}, []),
    "router_gpu": ("run_router_training.sh", {"N_GPUS": "1"}, []),
    "router_option_a_cpu": ("run_router_training.sh", {"N_GPUS": "0", "ROUTER_RECIPE": "option_a"}, []),
    "router_value_ridge_gpu": ("run_router_training.sh", {"N_GPUS": "1", "ROUTER_RECIPE": "value_ridge"}, []),
    "router_cpu_vars": (
        "run_router_training.sh",
        {
            "N_GPUS": "0",
            "BUDGET_B": "0.5",
            "TRAIN_BATCH_SIZE": "16",
            "ROLLOUT_N": "2",
            "IRRELEVANCE_FRACTION": "0.5",
            "IRRELEVANCE_SEED": "3",
            "EXPERIMENT_NAME": "mine",
            "BASE_MODEL": "tiny",
            "LR": "3e-4",
            "TOTAL_STEPS": "7",
            "REFINEDREWARD": "1",
        },
        ["router.dual_lr=0.1"],
    ),
    "router_option_a_cpu_no_irrelevance": (
        "run_router_training.sh",
        {"N_GPUS": "0", "ROUTER_RECIPE": "option_a", "IRRELEVANCE_FRACTION": "0"},
        [],
    ),
    "grpo_cpu": ("train_grpo.sh", {"N_GPUS": "0"}, []),
    "grpo_gpu": ("train_grpo.sh", {"N_GPUS": "1"}, []),
    "grpo_cpu_vars": (
        "train_grpo.sh",
        {
            "N_GPUS": "0",
            "BASE_MODEL": "smollm2-135m",
            "LR": "1e-5",
            "TOTAL_STEPS": "5",
            "ROLLOUT_N": "8",
            "MAX_RESPONSE_LENGTH": "256",
            "SHARED_PROMPT": "False",
            "SAVE_FREQ": "2",
            "SCHEDULEREWARD": "1",
        },
        ["trainer.val_before_train=false"],
    ),
    "ppo_cpu": ("train_ppo.sh", {"N_GPUS": "0"}, []),
    "ppo_gpu": ("train_ppo.sh", {"N_GPUS": "1"}, []),
    "grpo_smollm2_sft_cpu": ("examples/grpo_trainer/run_grpo_smollm2_sft_cpu.sh", {"N_GPUS": "0"}, []),
    "gspo_cpu": ("examples/gspo_trainer/run_gspo.sh", {"N_GPUS": "0"}, []),
    "cispo_cpu": ("examples/cispo_trainer/run_cispo.sh", {"N_GPUS": "0"}, []),
    "agent_cpu": ("examples/gigpo_trainer/run_agent.sh", {"N_GPUS": "0"}, []),
    "agent_gpu": ("examples/gigpo_trainer/run_agent.sh", {"N_GPUS": "1"}, []),
    "agent_cpu_vars": (
        "examples/gigpo_trainer/run_agent.sh",
        {
            "N_GPUS": "0",
            "ENV_NAME": "line_world",
            "ESTIMATOR": "rlvcr",
            "GROUP_N": "2",
            "TOTAL_STEPS": "10",
            "BASE_MODEL": "tiny",
        },
        [],
    ),
    "async_cpu": ("examples/async/run_async.sh", {}, []),
    # ToolRL's own launch lines, typed as its train_grpo.sh / train_ppo.sh expand them (no launch script of ours)
    "toolrl_grpo_line": (None, {}, "TOOLRL_GRPO"),
    "toolrl_ppo_line": (None, {}, "TOOLRL_PPO"),
}
_TOOLRL_COMMON = [
    "data.train_files=./dataset/rlla_4k/train.parquet",
    "data.val_files=./dataset/rlla_4k/test.parquet",
    "data.train_batch_size=512",
    "data.val_batch_size=128",
    "data.max_prompt_length=2048",
    "data.max_response_length=1024",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.grad_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[wandb]",
    "trainer.project_name=TinyZero",
    "trainer.experiment_name=grpo-qwen2.5-3b",
    "trainer.n_gpus_per_node=4",
    "trainer.nnodes=1",
    "trainer.save_freq=15",
    "trainer.test_freq=5",
    "trainer.total_epochs=15",
]
TOOLRL_LINES = {
    "TOOLRL_GRPO": [
        "algorithm.adv_estimator=grpo",
        *_TOOLRL_COMMON,
        "actor_rollout_ref.actor.ppo_micro_batch_size=32",
        "actor_rollout_ref.actor.use_dynamic_bsz=True",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0.001",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size=64",
        "actor_rollout_ref.ref.log_prob_micro_batch_size=64",
    ],
    "TOOLRL_PPO": [
        *_TOOLRL_COMMON,
        "actor_rollout_ref.actor.ppo_micro_batch_size=32",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size=64",
        "actor_rollout_ref.ref.log_prob_micro_batch_size=64",
        "critic.optim.lr=1e-5",
        "critic.model.use_remove_padding=True",
        "critic.model.path=Qwen/Qwen2.5-3B-Instruct",
        "critic.model.enable_gradient_checkpointing=False",
        "critic.ppo_micro_batch_size=32",
        "critic.model.fsdp_config.param_offload=False",
        "critic.model.fsdp_config.grad_offload=False",
        "critic.model.fsdp_config.optimizer_offload=False",
    ],
}

STUB = r"""#!/usr/bin/env bash
if [ "${1:-}" = "-m" ] && { [ "${2:-}" = verl.trainer.main_ppo ] || [ "${2:-}" = verl.trainer.main_async ]; }; then
  exec "$REAL_PYTHON" -c 'import json, os, sys
switches = {k: os.environ[k] for k in sys.argv[2].split(",") if k in os.environ}
print(json.dumps({"module": sys.argv[1], "args": sys.argv[3:], "switches": switches}))' "$2" "$SWITCH_NAMES" "${@:3}" > "$CAPTURE"
fi
case "${1:-}" in *plot_metrics.py) exit 0 ;; esac
exec "$REAL_PYTHON" "$@"
"""


def flat(node, prefix=""):
    """``{dotted.key: value}`` of a resolved container (lists kept whole)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            out.update(flat(value, f"{prefix}{key}."))
        return out if node else {prefix[:-1]: {}}
    return {prefix[:-1]: node}


def relative(value):
    """Paths under this checkout as ``<repo>/...`` (the golden files hold no machine's folders)."""
    if isinstance(value, str) and str(REPO) in value:
        return value.replace(str(REPO), "<repo>")
    if isinstance(value, list):
        return [relative(v) for v in value]
    return value


def compose(module: str, args: list[str]) -> dict:
    """The config ``module``'s Hydra app would receive for ``args``, resolved and flattened."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    name = "async_trainer" if module.endswith("main_async") else "ppo_trainer"
    with initialize_config_dir(config_dir=str(REPO / "verl" / "trainer" / "config"), version_base=None):
        config = hydra_compose(config_name=name, overrides=args)
    container = OmegaConf.to_container(config, resolve=True)
    container.pop("hydra", None)
    return {k: relative(v) for k, v in flat(container).items()}


def record(name: str, script: str | None, env_vars: dict, extra, tmp: Path) -> dict:
    if script is None:  # a launch line typed by hand: composed as written
        args = TOOLRL_LINES[extra]
        return {
            "script": None,
            "env": {},
            "args": args,
            "module": "verl.trainer.main_ppo",
            "switches": {},
            "config": compose("verl.trainer.main_ppo", args),
        }
    cache = tmp / "cache"
    for preset in ("tiny-sft", "smollm2-135m-sft"):
        (cache / "models" / preset).mkdir(parents=True, exist_ok=True)
        (cache / "models" / preset / "config.json").write_text("{}")
    stub = tmp / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    capture = tmp / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith("SFT_")}
    env.update(
        PYTHON=str(stub),
        REAL_PYTHON=sys.executable,
        CAPTURE=str(capture),
        SWITCH_NAMES=",".join(SWITCHES),
        TOOLRL_CACHE=str(cache),
        **env_vars,
    )
    proc = subprocess.run(["bash", script, *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not capture.is_file():
        raise SystemExit(f"{name}: {script} exited {proc.returncode}\n{proc.stderr[-3000:]}")
    captured = json.loads(capture.read_text())
    return {
        "script": script,
        "env": env_vars,
        "args": extra,
        "module": captured["module"],
        "switches": captured["switches"],
        "config": compose(captured["module"], captured["args"]),
    }


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        cases = {name: record(name, *case, Path(tmp)) for name, case in CASES.items()}
    out = {"recorded_at_commit": commit, "how": "python tests/trainer/launch_golden/record.py", "cases": cases}
    (OUT / "scripts_before_recipes.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} cases -> {OUT / 'scripts_before_recipes.json'}")


if __name__ == "__main__":
    main()
