"""A fake rollout for the multi-turn tests (importable from every test folder: ``tests/`` is on ``sys.path``)."""

from __future__ import annotations

import torch

from verl.protocol import DataProto


class ScriptedRounds:
    """A fake ``generate_sequences``: round ``k`` answers every row with ``texts[k]`` plus EOS (the worker's output
    layout: ``responses`` and ``response_mask`` [B, W]); records each round's prompts and batches."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.prompts, self.batches = tokenizer, texts, [], []

    def __call__(self, batch: DataProto) -> DataProto:
        k = len(self.prompts)
        self.batches.append(batch)
        self.prompts.append(
            [row[m.bool()].tolist() for row, m in zip(batch.batch["input_ids"], batch.batch["attention_mask"])]
        )
        ids = self.tokenizer.encode(self.texts[k], add_special_tokens=False) + [self.tokenizer.eos_token_id]
        ids = ids[: int(batch.meta_info["max_new_tokens"])]
        n = len(batch)
        return DataProto.from_dict(
            tensors={
                "responses": torch.tensor([ids] * n, dtype=torch.long),
                "response_mask": torch.ones((n, len(ids)), dtype=torch.long),
            }
        )
