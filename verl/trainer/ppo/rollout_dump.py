"""``trainer.rollout_data_dir`` / ``trainer.validation_data_dir`` (verl's keys): every training step's rollouts,
and every validation's responses, as ``<dir>/<step>.jsonl``.

One JSON object per response, upstream's fields: ``input`` (the prompt text), ``output`` (the response text, special
tokens kept, padding dropped), ``score`` (the sequence reward, float), ``step``; plus the reward's components
(``format``, ``correctness``, ``length``), ``reward_valid`` / ``reward_error`` and the route (``router_action``) when
the batch holds them. The file is written atomically, so a killed step leaves none or a whole one.
"""

from __future__ import annotations

import json
from pathlib import Path

from verl.trainer.ppo.metric_utils import REWARD_COMPONENTS
from verl.utils.fs import atomic_path


def dump_rollouts(batch, tokenizer, step: int, out_dir: str | Path) -> Path:
    """Write ``batch`` (after the reward: ``prompts`` [B, P], ``responses`` [B, R], ``attention_mask`` [B, P + R],
    ``token_level_scores`` [B, R]) to ``out_dir/<step>.jsonl``.

    Returns:
        The file written.
    """
    prompts, responses = batch.batch["prompts"], batch.batch["responses"]
    mask = batch.batch["attention_mask"]
    prompt_len = prompts.shape[-1]
    scores = batch.batch["token_level_scores"].sum(-1).tolist()
    extra = {k: batch.non_tensor_batch[k] for k in ("reward_valid", "reward_error") if k in batch.non_tensor_batch}
    for name in REWARD_COMPONENTS:  # the reward's parts, where the reward manager recorded them
        if f"token_level_scores_{name}" in batch.batch.keys():
            extra[name] = batch.batch[f"token_level_scores_{name}"].sum(-1)
    if "router_action" in batch.batch.keys():  # 0 ANSWER, 1 SEARCH, 2 CALCULATE (verl.router.RouterAction)
        extra["router_action"] = batch.batch["router_action"].tolist()
    lines = []
    for i in range(len(batch)):
        record = {
            "input": tokenizer.decode(prompts[i][mask[i, :prompt_len].bool()], skip_special_tokens=False),
            "output": tokenizer.decode(responses[i][mask[i, prompt_len:].bool()], skip_special_tokens=False),
            "score": float(scores[i]),
            "step": int(step),
        }
        record.update({k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in extra.items()})
        lines.append(record)
    return write_records(lines, step, out_dir)


def write_records(records: list[dict], step: int, out_dir: str | Path) -> Path:
    """Write ``records`` (JSON-serialisable dicts) as ``out_dir/<step>.jsonl``, one per line, atomically (a killed
    write leaves no file or the previous one); returns the file written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{step}.jsonl"
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path
