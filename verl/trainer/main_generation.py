"""Batched generation over a prompt file, written as JSONL and scored:
``python -m verl.trainer.main_generation data.path=X model.path=tiny data.output_path=out.jsonl [key=value ...]``.

Hydra over ``config/generation.yaml`` (verl's key names). No Ray: the model is loaded once in this process, on CUDA
when available (``trainer.device`` overrides), and generates with ``HFRollout`` (HF ``generate``, KV cache).

Inputs (``data.format``, ``auto`` decides by extension: ``.json`` → ``api_bank``, anything else → ``rlla``):

- ``rlla``: a parquet file in the RLLA schema (``prompt`` chat column, ``reward_model.ground_truth``); default the RLLA
  test split (``rlla_data.resolve_rlla_file("test")``, 80 rows);
- ``api_bank``: ToolRL's API-Bank JSON of any level (default ``data/api_bank/level-1-api_processed.json`` in the
  shared reference folder, ``$TOOLRL_SHARED`` or the folder ``shared`` beside the checkout; 399 rows), converted to
  RLLA rows by ``verl.utils.dataset.api_bank`` (ground-truth calls in the RLLA output format);
- ``bfcl``: BFCL v4's single-turn categories (``data.categories``; ``data.max_samples`` rows per category) from the
  ``bfcl-eval`` package, asked in the RLLA format (``verl.utils.dataset.bfcl``); each output row also carries
  ``bfcl_id`` and ``bfcl_category``, and the evaluation uses BFCL's own checker (``verl.trainer.eval_bfcl``).

Both go through ``RLHFDataset`` (chat template with the generation prompt, errors naming file/row). Prompts are
sorted by length and batched ``data.batch_size`` at a time, left-padded only to the batch's longest prompt. Progress:
a tqdm bar on a TTY, a heartbeat log line per batch otherwise.

Output (``data.output_path``, written atomically, input order, ``data.n_samples`` consecutive rows per prompt)::

    {"index": extra_info.index, "row": position in the file (counted before data.filter_overlong_prompts drops
     rows, so files generated with different prompt limits pair on the rows they share), "sample": k,
     "data_source": str,
     "prompt": last characters of the last prompt message, "response": decoded response (special tokens kept, up to
     and including EOS), "response_tokens": int, "finished": ended with EOS,
     "tool_calls": parsed calls [{name, parameters}], "ground_truth": str | null, "ground_truth_tool_calls": [...]}

With ``rollout.multi_turn.enable`` every sample is an episode of the executing tool loop (``docs/tools.md``): its calls,
written in ToolRL's format, run on ``rollout.multi_turn.tools`` and come back as tool turns; ``response`` is then the
whole episode (``tool_calls`` and the evaluation read every turn's calls) and each row also carries
``policy_tokens``, ``num_turns``, ``stop_reason`` and ``tool_results``.

With ``eval.enable`` (default) the file is then scored by ``verl.trainer.main_eval`` and the summary (tool-call
accuracy, RLLA reward, generation speed) is written to ``eval.output_path`` and printed.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config_utils import ConfigError
from verl.trainer.preflight import DataCheckError
from verl.trainer.main_eval import atomic_write_text, evaluate_file, ground_truth_calls
from verl.trainer.main_ppo import setup_logging
from verl.utils.dataset.bfcl import bfcl_fields
from verl.utils.reward_score.tool_parse import parse_tool_calls
from verl.utils.torch_functional import trim_left_padding

logger = logging.getLogger(__name__)

DATA_FORMATS = ("auto", "rlla", "api_bank", "bfcl")


def load_generation_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose ``generation.yaml`` with Hydra-style ``key=value`` overrides (tests and scripts)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(__file__).parent / "config"), version_base=None):
        return typed_generation_config(compose(config_name="generation", overrides=list(overrides or [])))


def typed_generation_config(config: DictConfig) -> DictConfig:
    """``generation.yaml`` with the types of ``config_schema.GenerationConfig`` (``data.output_path`` may stay
    ``???``: :func:`run_generation` asks for it by name), its values in the key table's ranges
    (``key_table.check_keys``).

    Raises:
        ConfigError: a value of the wrong type (its key and type named), or outside its range.
    """
    from verl.trainer.config_schema import GenerationConfig
    from verl.trainer.config_utils import typed_as

    from verl.trainer.key_table import check_keys

    typed = typed_as(config, GenerationConfig, "generation.yaml", may_be_missing=("data.output_path",))
    check_keys(typed, _generation_defaults(), "main_generation")
    return typed


def _generation_defaults() -> DictConfig:
    """``generation.yaml``'s values (its ``hydra`` and ``defaults`` entries dropped)."""
    own = OmegaConf.load(Path(__file__).parent / "config" / "generation.yaml")
    return OmegaConf.create({k: v for k, v in OmegaConf.to_container(own).items() if k not in ("hydra", "defaults")})


def actor_sections(config: DictConfig, model_dir: str) -> tuple[DictConfig, DictConfig]:
    """The ``actor_rollout_ref.model`` and ``.rollout`` sections (typed, the trainer's defaults) that
    ``load_causal_lm`` and ``HFRollout`` read, filled from this config's ``model`` and ``rollout``."""
    from verl.trainer.config_utils import default_section

    model, rollout = config.model, config.rollout
    model_section = default_section(
        "actor_rollout_ref.model",
        path=model_dir,
        trust_remote_code=model.trust_remote_code,
        override_config=OmegaConf.to_container(model.override_config),
    )
    rollout_section = default_section(
        "actor_rollout_ref.rollout",
        name=rollout.name,
        temperature=rollout.temperature,
        top_k=rollout.top_k,
        top_p=rollout.top_p,
        do_sample=rollout.do_sample,
        prompt_length=rollout.prompt_length,
        response_length=rollout.response_length,
        micro_batch_size=rollout.micro_batch_size,
        dtype=rollout.dtype,
    )
    return model_section, rollout_section


def resolve_data_format(path: str | None, data_format: str) -> str:
    """``rlla``, ``api_bank`` or ``bfcl`` from ``data.format`` (``auto``: ``.json`` → ``api_bank``, else ``rlla``).

    Raises:
        ConfigError: unknown ``data.format``.
    """
    if data_format not in DATA_FORMATS:
        raise ConfigError(f"data.format must be one of {DATA_FORMATS}, got {data_format!r}")
    if data_format != "auto":
        return data_format
    return "api_bank" if path and str(path).lower().endswith(".json") else "rlla"


def resolve_parquet(data_cfg: DictConfig, tmp_dir: str) -> tuple[str, str]:
    """``(parquet path, format)`` to read prompts from; API-Bank JSON is converted into ``tmp_dir`` first.

    Raises:
        FileNotFoundError: ``data.path`` does not exist.
    """
    path = data_cfg.path
    data_format = resolve_data_format(path, data_cfg.format)
    if data_format == "bfcl":
        if path:
            raise ConfigError(
                f"data.path={path!r} with data.format=bfcl: BFCL's data come from the bfcl-eval "
                "package; choose them with data.categories (and data.max_samples per category)"
            )
        if data_cfg.filter_overlong_prompts:
            raise ConfigError(
                "data.filter_overlong_prompts=true with data.format=bfcl would drop rows that BFCL "
                "counts (its scores would rise); raise rollout.prompt_length instead (6144 fits every "
                "row with the SmolLM2 tokenizer)"
            )
        from verl.utils.dataset.bfcl import write_bfcl_parquet

        max_rows = int(data_cfg.max_samples or -1)
        try:
            parquet = write_bfcl_parquet(Path(tmp_dir) / "bfcl.parquet", data_cfg.categories, max_rows)
        except ValueError as err:
            raise ConfigError(f"data.categories: {err}") from err
        return str(parquet), data_format
    if path and not os.path.isfile(os.path.expanduser(str(path))):
        raise FileNotFoundError(f"data.path: {path} not found")
    if data_format == "api_bank":
        from verl.utils.dataset.api_bank import write_api_bank_parquet

        parquet = write_api_bank_parquet(Path(tmp_dir) / "api_bank.parquet", path)
        return str(parquet), data_format
    if not path:
        from verl.utils.dataset.rlla_data import resolve_rlla_file

        path = resolve_rlla_file("test")
    return os.path.expanduser(str(path)), data_format


def build_dataset(config: DictConfig, tokenizer, parquet: str):
    """``RLHFDataset`` over ``parquet`` with the generation settings (raw chat kept for the ``prompt`` field)."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    data = config.data
    return RLHFDataset(
        parquet,
        tokenizer,
        config={
            "prompt_key": data.prompt_key,
            "max_prompt_length": int(config.rollout.prompt_length),
            "truncation": data.truncation,
            "filter_overlong_prompts": bool(data.filter_overlong_prompts),
            "return_raw_chat": True,
            # format bfcl applies max_samples per category when it writes the rows
            "max_samples": -1 if data.format == "bfcl" else int(data.max_samples or -1),
        },
    )


def length_sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Row indices sorted by prompt length (stable), cut into batches of ``batch_size``.

    Raises:
        ValueError: ``batch_size < 1``.
    """
    if batch_size < 1:
        raise ValueError(f"data.batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def prompt_tail(messages: Any, chars: int | None) -> str:
    """The last ``chars`` characters of the last message's content (all of it when ``chars`` is 0 or None)."""
    content = str(messages[-1]["content"]) if len(messages) else ""
    if chars and len(content) > chars:
        return "..." + content[-chars:]
    return content


def _device(name: str | None) -> torch.device:
    """``trainer.device`` if set (``cpu`` | ``cuda``), else CUDA when available."""
    if name and name not in ("cpu", "cuda"):
        raise ConfigError(f"trainer.device must be 'cpu' or 'cuda', got {name!r}")
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def _sampling_check(rollout: DictConfig, n_samples: int) -> None:
    if rollout.name != "hf":  # the trainer's vLLM rollout needs its worker; generation here is HF generate only
        raise ConfigError(
            f"rollout.name={rollout.name!r}: main_generation generates with HF generate only; set rollout.name=hf"
        )
    greedy = not rollout.do_sample or float(rollout.temperature) <= 0
    if n_samples < 1:
        raise ConfigError(f"data.n_samples must be >= 1, got {n_samples}")
    if greedy and n_samples > 1:
        raise ConfigError(
            f"data.n_samples={n_samples} with greedy decoding gives identical samples; set "
            "rollout.do_sample=true and rollout.temperature>0, or data.n_samples=1"
        )


def generate_rows(config: DictConfig) -> tuple[list[dict], dict]:
    """Generate for every prompt of ``config.data``; returns the JSONL rows (input order) and timing stats.

    Raises:
        ConfigError: inconsistent sampling settings or ``data.format``.
        FileNotFoundError / ValueError / PromptTooLongError: from the data file (file, row and key named).
    """
    from transformers import AutoTokenizer

    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.utils.model_presets import prepare_model
    from verl.utils.model_utils import load_causal_lm
    from verl.utils.tracking import StepProgress
    from verl.workers.rollout.hf_rollout import HFRollout

    n_samples = int(config.data.n_samples)
    _sampling_check(config.rollout, n_samples)
    config = typed_generation_config(config)
    torch.manual_seed(int(config.rollout.seed))
    model_dir = prepare_model(config.model.path)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=config.model.trust_remote_code)
    with tempfile.TemporaryDirectory(prefix="main_generation_") as tmp:
        try:  # a missing, unreadable or malformed prompt file, a prompt too long: one error line naming it (main)
            parquet, data_format = resolve_parquet(config.data, tmp)
            dataset = build_dataset(config, tokenizer, parquet)
            items = [dataset[i] for i in range(len(dataset))]
        except (FileNotFoundError, ValueError) as err:  # pyarrow's ArrowInvalid and PromptTooLongError are ValueErrors
            if isinstance(err, ConfigError):
                raise
            message = " ".join(str(err).split())
            named = message.startswith("data.path") or not config.data.path
            raise DataCheckError(message if named else f"data.path: {message}") from err
        file_rows = [row for _, row in dataset.origins()]  # position in the file, before filter_overlong_prompts
    device = _device(config.trainer.device)
    model_section, rollout_section = actor_sections(config, model_dir)
    model = load_causal_lm(model_section, trainable=False).to(device)
    rollout = HFRollout(model, rollout_section, tokenizer)
    meta = {"n": n_samples, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": dataset.pad_token_id}
    multi_turn = _multi_turn(config, tokenizer)
    batches = length_sorted_batches([int(it["attention_mask"].sum()) for it in items], int(config.data.batch_size))
    logger.info(
        "generating %d prompts x %d samples (%s, %s) in %d batches on %s, response_length=%d, %s",
        len(items),
        n_samples,
        data_format,
        parquet if data_format == "rlla" else config.data.path,
        len(batches),
        device,
        int(config.rollout.response_length),
        "sampling" if config.rollout.do_sample else "greedy",
    )
    progress = StepProgress(total=len(batches), desc="generate")
    out: list[dict | None] = [None] * (len(items) * n_samples)
    tail_chars = int(config.data.prompt_tail_chars or 0)
    start, new_tokens = time.monotonic(), 0
    try:
        for batch_idx in batches:
            if multi_turn is not None:
                new_tokens += _play_batch(multi_turn, rollout, items, batch_idx, file_rows, n_samples, out, config)
                progress.update({})
                continue
            batch = collate_fn([items[i] for i in batch_idx])
            tensors = trim_left_padding({k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")})
            result = rollout.generate_sequences(DataProto.from_dict(tensors=tensors, meta_info=meta))
            lengths = result.batch["response_mask"].sum(-1).tolist()
            responses = result.batch["responses"]
            for j, length in enumerate(lengths):
                row, sample = batch_idx[j // n_samples], j % n_samples
                ids = responses[j, : int(length)].tolist()
                out[row * n_samples + sample] = _output_row(
                    items[row], file_rows[row], sample, ids, tokenizer, tail_chars
                )
            new_tokens += int(sum(lengths))
            progress.update({"response_length/mean": sum(lengths) / len(lengths)})
    finally:
        progress.close()
        if multi_turn is not None:
            multi_turn.close()
    seconds = time.monotonic() - start
    stats = {
        "generation": {
            "model": str(config.model.path),
            "model_dir": model_dir,
            "data_format": data_format,
            "device": str(device),
            "prompts": len(items),
            "samples": len(out),
            "response_length": int(config.rollout.response_length),
            "do_sample": bool(config.rollout.do_sample),
            "batch_size": int(config.data.batch_size),
            "seconds": round(seconds, 2),
            "new_tokens": new_tokens,
            "new_tokens_per_s": round(new_tokens / seconds, 1) if seconds > 0 else None,
            "mean_response_tokens": new_tokens / max(len(out), 1),
        }
    }
    return out, stats  # type: ignore[return-value]


def _multi_turn(config: DictConfig, tokenizer):
    """``rollout.multi_turn.enable``: the trainer's multi-turn rollout (``verl.trainer.ppo.multi_turn``) over this
    config's tools, calls in ToolRL's format (what the output's ``tool_calls`` and the evaluation parse); else None.

    Raises:
        ConfigError: the tools are missing or do not load (``rollout.multi_turn.tools`` named).
    """
    if not config.rollout.multi_turn.enable:
        return None
    from verl.trainer.ppo.multi_turn import MultiTurnRollout

    section, length = config.rollout.multi_turn, int(config.rollout.response_length)
    return MultiTurnRollout(section, tokenizer, "toolrl", length, key="rollout.multi_turn")


def _play_batch(multi_turn, rollout, items, batch_idx, file_rows, n_samples, out, config) -> int:
    """One batch through the tool loop: ``n_samples`` episodes per prompt, each written as a row whose ``response`` is
    the whole episode (turns and tool turns; ``response_tokens`` counts both, ``policy_tokens`` the policy's) plus
    ``num_turns``, ``stop_reason`` and ``tool_results`` (name, ok, content per executed call); ``finished`` is an
    episode that ended with an answer; ``tool_calls`` are parsed from the whole episode. Returns the policy's
    tokens."""
    prompts = [items[i]["input_ids"][items[i]["attention_mask"].bool()].tolist() for i in batch_idx]
    prompts = [p for p in prompts for _ in range(n_samples)]
    do_sample = bool(config.rollout.do_sample)
    episodes = multi_turn.play(prompts, rollout.generate_sequences, do_sample=do_sample, validate=not do_sample)
    tail = int(config.data.prompt_tail_chars or 0)
    for j, episode in enumerate(episodes):
        row, sample = batch_idx[j // n_samples], j % n_samples
        record = _output_row(items[row], file_rows[row], sample, episode.response_ids, multi_turn.tokenizer, tail)
        record.update(
            policy_tokens=sum(episode.response_mask),
            finished=episode.stop_reason == "answer",
            num_turns=episode.turns,
            stop_reason=episode.stop_reason,
            tool_results=[
                {"name": c.result.name, "ok": c.result.ok, "content": c.result.content} for c in episode.calls
            ],
        )
        out[row * n_samples + sample] = record
    return sum(sum(e.response_mask) for e in episodes)


def _output_row(item: Mapping, row: int, sample: int, response_ids: list[int], tokenizer, tail_chars: int) -> dict:
    """One JSONL row (see the module docstring)."""
    response = tokenizer.decode(response_ids, skip_special_tokens=False)
    gt = (item.get("reward_model") or {}).get("ground_truth")
    bfcl = bfcl_fields(item.get("extra_info"))
    return {
        "index": int(item["index"]),
        "row": row,
        "sample": sample,
        "data_source": item.get("data_source"),
        "prompt": prompt_tail(item["raw_prompt"], tail_chars),
        "response": response,
        "response_tokens": len(response_ids),
        "finished": bool(response_ids) and response_ids[-1] == tokenizer.eos_token_id,
        "tool_calls": parse_tool_calls(response),
        "ground_truth": gt,
        "ground_truth_tool_calls": ground_truth_calls(gt, f"row {row}: reward_model.ground_truth")
        if isinstance(gt, str)
        else None,
        **bfcl,
    }


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> Path:
    """Write ``rows`` as JSONL atomically (temporary sibling file, then rename)."""
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def run_generation(config: DictConfig) -> dict:
    """Generate, write ``data.output_path`` and, with ``eval.enable``, score it.

    Returns:
        The evaluation summary (plus ``generation`` stats) when ``eval.enable``, else the generation stats; both carry
        ``output_path``.

    Raises:
        ConfigError: ``data.output_path`` unset, or inconsistent settings.
    """
    config = typed_generation_config(config)
    output = None if OmegaConf.is_missing(config.data, "output_path") else config.data.output_path
    if not output:
        raise ConfigError("data.output_path is required (e.g. data.output_path=outputs/generations.jsonl)")
    rows, stats = generate_rows(config)
    write_jsonl(output, rows)
    logger.info(
        "wrote %d generations to %s (%.1f s, %s new tokens/s)",
        len(rows),
        output,
        stats["generation"]["seconds"],
        stats["generation"]["new_tokens_per_s"],
    )
    if not config.eval.enable:
        return {"output_path": str(output), **stats}
    dataset = config.eval.dataset
    if dataset == "auto" and stats["generation"]["data_format"] == "bfcl":
        dataset = "bfcl"
    return evaluate_file(output, dataset, config.eval.output_path, extra={"output_path": str(output), **stats})


@hydra.main(config_path="config", config_name="generation", version_base=None)
def main(config: DictConfig) -> None:
    """Hydra entry point (see the module docstring); prints the summary JSON. A user's mistake (a key, file or row
    named) is one ``error:`` line with exit status 2, as in ``main_ppo``."""
    import sys

    from verl.trainer.main_ppo import user_errors

    setup_logging()
    try:
        summary = run_generation(config)
    except user_errors() as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
