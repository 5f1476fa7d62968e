"""Prompt rows of the asynchronous mode, read as the synchronous trainer reads its data files.

The RLLA env actors' training rows and the validator's rows are loaded by ``verl.utils.dataset.rl_dataset.RLHFDataset``
with the ``data`` section (``prompt_key``, ``max_prompt_length``, ``truncation``, ``filter_overlong_prompts``, the
tool format), so a prompt is the token ids ``main_ppo`` would generate from, and the same load-time errors apply
(``verl.trainer.preflight.check_prompt_lengths`` under ``data.truncation=error``). They are loaded once, in the driver,
and handed to the env actors.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = ["check_data_files", "load_prompt_rows", "train_files"]


def train_files(config: Any, data_file: Any = None) -> Any:
    """The training files of an RLLA env: its ``data_file``, else ``data.train_files``, else the RLLA train split
    (``verl.utils.dataset.rlla_data.resolve_rlla_data_dir``, as ``main_ppo`` discovers it).

    Raises FileNotFoundError: nothing set and no RLLA data found (the places looked at named)."""
    if data_file:
        return data_file
    if config.data.train_files:
        return config.data.train_files
    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

    return str(resolve_rlla_data_dir() / "train.parquet")


def load_prompt_rows(
    config: Any, files: Any, tokenizer: Any, key: str, max_samples: Optional[int] = None
) -> List[Dict[str, Any]]:
    """The rows of ``files`` as dicts: ``index`` (the row in its file), ``data_source`` (the ``data.reward_fn_key``
    column), ``prompt_ids`` (list of int: the chat-templated prompt, cut or filtered by ``data.truncation`` /
    ``filter_overlong_prompts``), ``reward_model`` (dict), ``extra_info`` (dict, may be empty) and ``raw_prompt``
    (the chat messages with ``data.return_raw_chat``, which the reward managers hand a reward-API function; else None).

    Args: ``config``: the trainer config (its ``data`` section); ``files``: a path or a list of paths; ``tokenizer``:
        the policy's; ``key``: the config key ``files`` came from, for messages (``data.train_files``);
        ``max_samples``: the first rows only (None or -1: all).
    Raises: DataCheckError: prompts over ``data.max_prompt_length`` under ``data.truncation=error`` (each named as
        ``file:row``). What ``RLHFDataset`` raises: a missing file, a malformed row, every row filtered.
    """
    from omegaconf import OmegaConf

    from verl.trainer.preflight import check_prompt_lengths
    from verl.utils.dataset.rl_dataset import RLHFDataset

    data_config = {**OmegaConf.to_container(config.data, resolve=True), "max_samples": max_samples or -1}
    dataset = RLHFDataset(data_files=files, tokenizer=tokenizer, config=data_config)
    check_prompt_lengths(config, {key: dataset})
    column, rows = str(config.data.reward_fn_key), []
    for item, (_path, file_row) in enumerate(dataset.origins()):
        row = dataset[item]
        rows.append(
            {
                "index": int(file_row),
                "data_source": row.get(column),
                "prompt_ids": row["input_ids"][row["attention_mask"].bool()].tolist(),
                "reward_model": dict(row["reward_model"]),
                "extra_info": dict(row.get("extra_info") or {}),
                # the chat (data.return_raw_chat, as main_ppo hands it to a reward-API function), else None
                "raw_prompt": [dict(m) for m in row["raw_prompt"]] if row.get("raw_prompt") is not None else None,
            }
        )
    return rows


def check_data_files(config: Any) -> None:
    """``main_ppo``'s row check at load (``verl.trainer.preflight.check_data_files``: files exist, are parquet, have
    rows of the right schema) on every ``rlla`` env's files and, when validation is on, on ``data.val_files``; run
    before Ray starts, so a bad file is one ``error:`` line.

    Raises DataCheckError: the file or row named, under the key it came from (``async.envs.<name>.data_file`` or
    ``data.train_files`` / ``data.val_files``), also when no RLLA data can be found.
    """
    from omegaconf import OmegaConf

    from verl.trainer.preflight import DataCheckError
    from verl.trainer.preflight import check_data_files as check_rows

    trainer = config.trainer
    checks = [
        (f"async.envs.{name}.data_file" if spec.data_file else "data.train_files", "train_files", spec.data_file)
        for name, spec in config["async"].envs.items()
        if spec.kind == "rlla"
    ]
    if int(trainer.test_freq) > 0 or trainer.val_before_train:
        checks.append(("data.val_files", "val_files", None))
    for key, slot, own in checks:
        try:
            if slot == "train_files":
                files = train_files(config, own)
            else:
                files = config.data.val_files
                if files is None:
                    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

                    files = str(resolve_rlla_data_dir() / "test.parquet")
        except FileNotFoundError as err:
            raise DataCheckError(f"{key}: {err}") from None
        probe = OmegaConf.create(
            {"env": {"env_name": None}, "data": {"prompt_key": config.data.prompt_key, slot: files}}
        )
        try:
            check_rows(probe)
        except DataCheckError as err:
            raise DataCheckError(str(err).replace(f"data.{slot}", key, 1)) from None
