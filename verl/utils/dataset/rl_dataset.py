"""``RLHFDataset`` (prompts from parquet files, tokenised and left-padded) and its ``collate_fn``.

Compatible with both constructor styles (``docs/verl_compat.md`` "RLHFDataset"):

- ToolRL / verl 0.2: ``RLHFDataset(parquet_files, tokenizer, prompt_key='prompt', max_prompt_length=1024,
  use_chat_template=True, filter_prompts=True, cache_dir='~/.cache/verl/rlhf', chat_template_func=None,
  return_raw_chat=False, truncation='error')``;
- upstream verl: ``RLHFDataset(data_files, tokenizer, config, processor=None, max_samples=-1)`` where ``config`` (dict
  or DictConfig, usually the trainer's ``data`` section; unknown keys are ignored) may hold ``prompt_key``,
  ``max_prompt_length``, ``truncation``, ``filter_overlong_prompts``, ``return_raw_chat``, ``use_chat_template`` and
  ``max_samples``.

Fixes relative to ToolRL, following upstream: ``use_chat_template=False`` joins the message contents (ToolRL left the
prompt empty); ``collate_fn`` always yields 1-D object arrays (ToolRL's became 2-D for equal-length lists); malformed
rows and over-long prompts fail with the file, row and key named. ``filter_prompts`` and ``cache_dir`` are accepted
and ignored, as in ToolRL (its length filter was commented out; files are read in place, no HDFS copy).
"""
from __future__ import annotations

import inspect
import json
import logging
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from verl.utils.torch_functional import compute_position_id_with_mask, postprocess_data

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "left", "right", "middle")


class PromptTooLongError(ValueError):
    """A prompt is longer than ``max_prompt_length`` and ``truncation='error'``."""


def _toolrl_signature(parquet_files, tokenizer, prompt_key="prompt", max_prompt_length=1024, use_chat_template=True,
                      filter_prompts=True, cache_dir="~/.cache/verl/rlhf", chat_template_func=None,
                      return_raw_chat=False, truncation="error", *, filter_overlong_prompts=False, max_samples=-1):
    """ToolRL's constructor (plus the upstream options ``filter_overlong_prompts`` and ``max_samples``)."""


def _upstream_signature(data_files, tokenizer, config=None, processor=None, max_samples=-1):
    """Upstream verl's constructor."""


_TOOLRL_SIG = inspect.signature(_toolrl_signature)
_UPSTREAM_SIG = inspect.signature(_upstream_signature)

# Upstream's config defaults (verl/utils/dataset/rl_dataset.py reads each with ``config.get(key, default)``).
_UPSTREAM_DEFAULTS = dict(prompt_key="prompt", max_prompt_length=1024, truncation="error",
                          filter_overlong_prompts=True, return_raw_chat=False, use_chat_template=True, max_samples=-1)


def message_list_problems(value: Any, key: str = "prompt") -> list[tuple[str, str]]:
    """Check a chat prompt: a non-empty list of ``{role, content}`` objects whose values are non-empty strings.

    Accepts lists, tuples and 1-D numpy object arrays (what pandas returns for a parquet list column).
    Returns ``[(key_path, problem), …]``, empty when the value is valid.
    """
    if not isinstance(value, (list, tuple, np.ndarray)):
        return [(key, f"expected a non-empty list of {{role, content}} messages, got {type(value).__name__}")]
    if len(value) == 0:
        return [(key, "empty message list")]
    problems = []
    for i, msg in enumerate(value):
        if not isinstance(msg, Mapping):
            problems.append((f"{key}[{i}]", f"expected a {{role, content}} object, got {type(msg).__name__}"))
            continue
        for field in ("role", "content"):
            v = msg.get(field)
            if not isinstance(v, str) or not v.strip():
                problems.append((f"{key}[{i}].{field}", f"expected a non-empty string, got {v!r:.60}"))
    return problems


TOOLS_KEY = "tools"  # an optional column: the row's tools, rendered by the chat template (``tools=[...]``)


def row_tools(value: Any) -> list[dict] | None:
    """A row's ``tools`` cell as OpenAI function specs: None (no tools), a JSON string or a list of specs (each
    checked by ``tool_formats.tool_schema``; a bare ``{"name", ...}`` is wrapped).

    Raises:
        ValueError: not JSON, not a list, or a spec without a name (the message says which).
    """
    from verl.utils.reward_score.tool_formats import tool_schema

    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON ({err.msg} at character {err.pos})") from None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, list):
        raise ValueError(f"expected a list of function specs, got {type(value).__name__}")
    return [tool_schema(dict(t) if isinstance(t, Mapping) else t) for t in value]


def renders_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template reads the ``tools`` variable (``apply_chat_template`` drops it silently
    otherwise)."""
    return "tools" in (getattr(tokenizer, "chat_template", None) or "")


def prompt_text(tokenizer, messages: list[dict], use_chat_template: bool = True,
                chat_template_func: Callable | None = None, tools: list[dict] | None = None) -> str:
    """The text a prompt is tokenised from: ``chat_template_func(messages)`` if given, else the tokenizer's chat
    template with the generation prompt (verl) — with ``tools`` (OpenAI function specs) rendered by the template as
    the model was trained to see them — else the message contents joined with newlines (ToolRL returned an empty
    prompt here, a bug).

    Raises:
        ValueError: ``tools`` given but the prompt is not built by a chat template that renders them.
    """
    if tools is not None and (chat_template_func is not None or not use_chat_template or not renders_tools(tokenizer)):
        raise ValueError("the row has tools but its prompt is not built by a chat template that renders them "
                         "(the tokenizer's template has no `tools` variable, or use_chat_template / "
                         "chat_template_func is set)")
    if chat_template_func is not None:
        return chat_template_func(messages)
    if use_chat_template:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **({"tools": tools} if tools is not None else {}))
    return "\n".join(m["content"] for m in messages)


def _as_file_list(files: Any) -> list[str]:
    if isinstance(files, (str, os.PathLike)):
        return [os.fspath(files)]
    if files is None:
        raise ValueError("RLHFDataset: no data files given (expected a parquet path or a list of paths)")
    return [os.fspath(f) for f in files]


def _as_dict(config: Any) -> dict:
    if config is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            return OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"RLHFDataset: config must be a dict or DictConfig, got {type(config).__name__}")


class RLHFDataset(Dataset):
    """Prompts of one or more parquet files, each item tokenised with the chat template and left-padded.

    Item (``__getitem__``): every column of the row except the prompt column, plus

    - ``input_ids``: LongTensor ``[max_prompt_length]``, left-padded with ``tokenizer.pad_token_id``;
    - ``attention_mask``: LongTensor ``[max_prompt_length]``, 0 on padding;
    - ``position_ids``: LongTensor ``[max_prompt_length]``, ``compute_position_id_with_mask`` (0 on padding);
    - ``raw_prompt``: the messages as a list of dicts (only with ``return_raw_chat``);
    - ``index``: ``extra_info["index"]`` (0 when the row has none, as in verl) — GRPO's prompt id in ToolRL.

    Prompt text: ``chat_template_func(messages)`` if given, else ``tokenizer.apply_chat_template(messages,
    add_generation_prompt=True)`` if ``use_chat_template``, else the contents joined with newlines. Tokenised without
    special tokens (verl's ``tokenize_and_postprocess_data``). A ``tools`` column (OpenAI function specs, a list or a
    JSON string per row; :func:`row_tools`) is rendered by the chat template (``apply_chat_template(..., tools=...)``),
    which must read ``tools`` (checked at construction: a template that would drop them is an error).

    Truncation of prompts longer than ``max_prompt_length``: ``error`` raises :class:`PromptTooLongError` (naming file,
    row and length) when the item is fetched; ``left`` keeps the last tokens (ToolRL's trainer), ``right`` the first,
    ``middle`` both ends. ``filter_overlong_prompts`` drops such rows at construction and logs how many.
    ``max_samples > 0`` keeps the first rows (before filtering, as upstream does without ``shuffle``). ``processor``
    (upstream's multimodal processor) is stored but unused: prompts are text only.

    Raises:
        FileNotFoundError: a data file is missing.
        ValueError: a row is malformed (``file:row: key: problem``), a setting is invalid, or every row was filtered.
        TypeError: the arguments match neither constructor.
    """

    def __init__(self, *args, **kwargs):
        opts = self._parse_args(args, kwargs)
        self.tokenizer = opts["tokenizer"]
        self.processor = opts.get("processor")
        self.prompt_key = opts["prompt_key"]
        self.max_prompt_length = opts["max_prompt_length"]
        self.use_chat_template = bool(opts["use_chat_template"])
        self.chat_template_func: Callable | None = opts.get("chat_template_func")
        self.return_raw_chat = bool(opts["return_raw_chat"])
        self.truncation = opts["truncation"]
        self.filter_overlong_prompts = bool(opts["filter_overlong_prompts"])
        self.max_samples = int(opts["max_samples"] if opts["max_samples"] is not None else -1)
        self.cache_dir = os.path.expanduser(opts.get("cache_dir") or "~/.cache/verl/rlhf")
        self.data_files = _as_file_list(opts["files"])
        self.parquet_files = self.data_files  # ToolRL's attribute name

        if not isinstance(self.max_prompt_length, int) or isinstance(self.max_prompt_length, bool) \
                or self.max_prompt_length <= 0:
            raise ValueError(f"RLHFDataset: max_prompt_length must be a positive int, got {self.max_prompt_length!r}")
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"RLHFDataset: truncation must be one of {TRUNCATION_MODES}, got {self.truncation!r}")
        self.pad_token_id = self.tokenizer.pad_token_id
        if self.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ValueError("RLHFDataset: the tokenizer has neither a pad nor an eos token")
            logger.warning("tokenizer has no pad token; padding with eos id %d", self.tokenizer.eos_token_id)
            self.pad_token_id = self.tokenizer.eos_token_id

        self._read_files()
        if self.filter_overlong_prompts:
            self._filter_overlong()

    # ------------------------------------------------------------------------------------------------------------
    @staticmethod
    def _parse_args(args: tuple, kwargs: dict) -> dict:
        """Bind the call to ToolRL's or upstream's signature and return one normalised option dict."""
        upstream = ("config" in kwargs or "data_files" in kwargs or "processor" in kwargs
                    or (len(args) >= 3 and not isinstance(args[2], str)))
        sig = _UPSTREAM_SIG if upstream else _TOOLRL_SIG
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"RLHFDataset{sig}: {exc} (expected ToolRL's or upstream verl's arguments)") from None
        bound.apply_defaults()
        a = dict(bound.arguments)
        if not upstream:
            a["files"] = a.pop("parquet_files")
            return a
        cfg = {**_UPSTREAM_DEFAULTS, **{k: v for k, v in _as_dict(a["config"]).items() if v is not None}}
        return dict(cfg, files=a["data_files"], tokenizer=a["tokenizer"], processor=a["processor"],
                    max_samples=a["max_samples"] if a["max_samples"] and a["max_samples"] > 0 else cfg["max_samples"])

    def _read_files(self) -> None:
        frames, origins = [], []
        for path in self.data_files:
            local = os.path.expanduser(path)
            if not os.path.isfile(local):
                raise FileNotFoundError(f"RLHFDataset: parquet file {local} not found")
            df = pd.read_parquet(local)
            if self.prompt_key not in df.columns:
                raise ValueError(f"{local}: missing column {self.prompt_key!r} (prompt_key); columns are "
                                 f"{list(df.columns)}")
            for row, (prompt, extra) in enumerate(zip(df[self.prompt_key], df.get("extra_info", [None] * len(df)))):
                problems = message_list_problems(prompt, self.prompt_key) + _extra_info_problems(extra)
                if problems:
                    key, problem = problems[0]
                    raise ValueError(f"{local}:{row}: {key}: {problem}")
            if TOOLS_KEY in df.columns:
                self._check_tools(local, df[TOOLS_KEY])
            frames.append(df)
            origins.extend((local, row) for row in range(len(df)))
        self.dataframe = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        self._origins = origins
        if 0 < self.max_samples < len(self.dataframe):
            self.dataframe = self.dataframe.iloc[: self.max_samples].reset_index(drop=True)
            self._origins = self._origins[: self.max_samples]
        logger.info("RLHFDataset: %d rows from %s", len(self.dataframe), ", ".join(self.data_files))

    def _check_tools(self, path: str, column) -> None:
        """A ``tools`` column needs a chat template that renders tools, and every cell must read as specs."""
        if not (self.use_chat_template and self.chat_template_func is None and renders_tools(self.tokenizer)):
            raise ValueError(f"{path}: column {TOOLS_KEY!r} holds tools for the chat template, but the prompts are not "
                             f"built by a template that renders them (the tokenizer of this model has no `tools` in its "
                             f"chat template, or use_chat_template / chat_template_func is set); drop the column or "
                             f"use a model whose template supports tools")
        for row, value in enumerate(column):
            try:
                row_tools(value)
            except (ValueError, TypeError) as err:
                raise ValueError(f"{path}:{row}: {TOOLS_KEY}: {err}") from None

    def _tools(self, row: Mapping) -> list[dict] | None:
        return row_tools(row.get(TOOLS_KEY)) if TOOLS_KEY in self.dataframe.columns else None

    def prompt_lengths(self) -> list[int]:
        """Token length of every row's prompt text (chat-templated as ``__getitem__`` builds it), in row order."""
        texts = [self._prompt_text(self._messages(row[self.prompt_key]), self._tools(row))
                 for row in self.dataframe.to_dict("records")]
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def origins(self) -> list[tuple[str, int]]:
        """``(file, row in that file)`` of every item, in item order (rows counted from 0, before any filtering)."""
        return list(self._origins)

    def _filter_overlong(self) -> None:
        lengths = self.prompt_lengths()
        keep = [n <= self.max_prompt_length for n in lengths]
        dropped = len(keep) - sum(keep)
        logger.info("RLHFDataset: filtered %d of %d prompts longer than max_prompt_length=%d", dropped, len(keep),
                    self.max_prompt_length)
        if dropped == len(keep):
            raise ValueError(f"RLHFDataset: all {len(keep)} prompts of {self.data_files} exceed max_prompt_length="
                             f"{self.max_prompt_length} (longest {max(lengths)}, shortest {min(lengths)} tokens)")
        self.dataframe = self.dataframe[keep].reset_index(drop=True)
        self._origins = [o for o, k in zip(self._origins, keep) if k]

    # ------------------------------------------------------------------------------------------------------------
    @staticmethod
    def _messages(prompt: Sequence[Mapping]) -> list[dict]:
        return [dict(m) for m in prompt]

    def _prompt_text(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        return prompt_text(self.tokenizer, messages, self.use_chat_template, self.chat_template_func, tools)

    def __len__(self) -> int:
        return len(self.dataframe)

    def __getitem__(self, item: int) -> dict:
        row = self.dataframe.iloc[item].to_dict()
        messages = self._messages(row.pop(self.prompt_key))
        enc = self.tokenizer(self._prompt_text(messages, self._tools(row)), return_tensors="pt",
                             add_special_tokens=False)
        length = enc["input_ids"].shape[-1]
        if length > self.max_prompt_length and self.truncation == "error":
            file, file_row = self._origins[item]
            raise PromptTooLongError(f"{file}:{file_row}: {self.prompt_key}: {length} tokens exceed max_prompt_length="
                                     f"{self.max_prompt_length} (use truncation=left/right or "
                                     f"filter_overlong_prompts=True)")
        input_ids, attention_mask = postprocess_data(enc["input_ids"], enc["attention_mask"], self.max_prompt_length,
                                                     self.pad_token_id, left_pad=True, truncation=self.truncation)
        row["input_ids"] = input_ids[0]
        row["attention_mask"] = attention_mask[0]
        row["position_ids"] = compute_position_id_with_mask(attention_mask)[0]
        if self.return_raw_chat:
            row["raw_prompt"] = messages
        extra = row.get("extra_info")
        row["index"] = int(extra.get("index", 0)) if isinstance(extra, Mapping) else 0
        return row


def _extra_info_problems(extra: Any) -> list[tuple[str, str]]:
    """``extra_info`` is optional; when present it must be an object whose optional ``index`` is an int."""
    if extra is None:
        return []
    if not isinstance(extra, Mapping):
        return [("extra_info", f"expected an object, got {type(extra).__name__}")]
    index = extra.get("index", 0)
    if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
        return [("extra_info.index", f"expected an int, got {index!r:.40}")]
    return []


def collate_fn(data_list: Sequence[Mapping]) -> dict:
    """Batch dataset items: tensors are stacked (``[B, …]``); every other value becomes a numpy object array of shape
    ``(B,)`` — also when each row holds an equal-length list (ToolRL's ``np.array(list, dtype=object)`` turned those
    into 2-D arrays; this follows upstream's fix).

    Raises:
        ValueError: empty batch, rows with different keys, a key mixing tensors and non-tensors, or tensors of
            different shapes (the key and row are named).
    """
    if len(data_list) == 0:
        raise ValueError("collate_fn: empty batch")
    keys = list(data_list[0].keys())
    for i, row in enumerate(data_list):
        if set(row.keys()) != set(keys):
            raise ValueError(f"collate_fn: row {i} has keys {sorted(row)}, row 0 has {sorted(keys)}")
    out: dict = {}
    for key in keys:
        values = [row[key] for row in data_list]
        is_tensor = [isinstance(v, torch.Tensor) for v in values]
        if all(is_tensor):
            shapes = {tuple(v.shape) for v in values}
            if len(shapes) > 1:
                raise ValueError(f"collate_fn: {key}: tensors of different shapes {sorted(shapes)}")
            out[key] = torch.stack(values)
        elif any(is_tensor):
            raise ValueError(f"collate_fn: {key}: row {is_tensor.index(not is_tensor[0])} mixes tensors and "
                             "non-tensors")
        else:
            arr = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):
                arr[i] = v
            out[key] = arr
    return out
