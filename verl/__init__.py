"""verl-compatible PPO/GRPO trainer for tool-using LLMs (the ToolRL fork of verl, rebuilt)."""

from verl.protocol import DataProto

__all__ = ["DataProto"]
__version__ = "0.1.0"
