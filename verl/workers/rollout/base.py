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
