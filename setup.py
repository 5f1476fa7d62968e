"""Installable package for the ToolRL-compatible RL trainer with a budgeted tool router.

Install the CPU torch wheel first (``pip install torch==2.13.0``), then ``pip install -e .[test]``.
"""
from setuptools import find_packages, setup

INSTALL_REQUIRES = [
    "torch>=2.4",
    "transformers>=4.51",
    "accelerate",
    "gguf",
    "safetensors",
    "tokenizers",
    "tensordict>=0.8",
    "ray>=2.40",
    "hydra-core>=1.3",
    "omegaconf>=2.3",
    "numpy",
    "pandas",
    "pyarrow",
    "pydantic>=2",
    "tqdm",
    "tensorboard",
    "matplotlib",
]

EXTRAS = {
    "test": ["pytest>=8", "pytest-timeout"],
    "gpu": ["vllm"],
    "wandb": ["wandb"],
    "bench": ["trl", "psutil"],
    # text environments (env.env_name=sokoban / textworld); gym-sokoban's missing pkg_resources (setuptools >= 81)
    # is worked around in agent_system/environments/sokoban_env.py
    "sokoban": ["gym-sokoban"],
    "textworld": ["textworld"],
}

setup(
    name="toolrl-router",
    version="0.1.0",
    description="verl-compatible PPO/GRPO trainer for tool-using LLM agents, with a budgeted tool router",
    packages=find_packages(include=["verl", "verl.*", "agent_system", "agent_system.*", "rlvcr", "rlvcr.*"]),
    package_data={"verl": ["trainer/config/*.yaml"]},
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": [
            "validate-data=verl.utils.dataset.validate_data:main",
            "reward-dry-run=verl.utils.reward_score.dry_run:main",
            "prepare-model=verl.utils.model_presets:main",
        ]
    },
)
