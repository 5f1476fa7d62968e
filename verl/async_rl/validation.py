"""Validation of the asynchronous mode: the synchronous trainer's ``trainer.test_freq`` / ``val_before_train`` /
``data.val_files`` / ``rollout.val_kwargs`` on the async inference servers.

Design: ``docs/async.md``, section "Validation". After the weights of policy version ``v`` reach every server, the
orchestrator asks :class:`AsyncValidator` for one pass over the validation rows: each prompt (chat-templated as the
RLLA env actor does, then cut to ``data.max_prompt_length`` by ``data.truncation`` / ``filter_overlong_prompts`` as
the synchronous data loader does) goes to a server with ``max_tokens = data.max_response_length`` and the sampling of
``rollout.val_kwargs`` (greedy unless ``do_sample``; ``n`` responses per prompt). The responses are scored by the
synchronous trainer's validation reward manager (``reward_model.*``, ``custom_reward_function``, ``reward.*``;
``verl.workers.reward_manager.completions.score_completions``) at step ``v``, and the means per data source use the
synchronous trainer's names (``val/test_score/<source>``, ``val/test_format/<source>``, ...;
``verl/trainer/ppo/validation.py``). A sample the reward cannot score is left out of the means and counted in
``val/reward_invalid_count``, as there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

logger = logging.getLogger(__name__)

__all__ = ["AsyncValidator", "validation_sampling"]

MAX_CONCURRENT_REQUESTS = 16  # in flight per validation pass; the HF server batches concurrent requests of one kind


def validation_sampling(val_kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """The server options for ``actor_rollout_ref.rollout.val_kwargs``: ``{"temperature", "n"}``.

    ``do_sample`` false is greedy (temperature 0, as the synchronous rollouts' validation). The async servers sample
    from the full softmax, so sampled validation with a top-k / top-p cut is refused rather than run without it.

    Raises ValueError: ``do_sample`` with ``top_k`` not in (0, -1) or ``top_p`` < 1 (the key named); ``n`` < 1.
    """
    n = int(val_kwargs["n"])
    if n < 1:
        raise ValueError(f"actor_rollout_ref.rollout.val_kwargs.n must be >= 1, got {n}")
    if not bool(val_kwargs["do_sample"]):
        return {"temperature": 0.0, "n": n}
    if int(val_kwargs["top_k"]) not in (0, -1):
        raise ValueError(
            f"actor_rollout_ref.rollout.val_kwargs.top_k={val_kwargs['top_k']}: the async inference "
            "servers sample from the full softmax (use 0 or -1)"
        )
    if float(val_kwargs["top_p"]) < 1.0:
        raise ValueError(
            f"actor_rollout_ref.rollout.val_kwargs.top_p={val_kwargs['top_p']}: the async inference "
            "servers sample from the full softmax (use 1.0)"
        )
    return {"temperature": float(val_kwargs["temperature"]), "n": n}


class AsyncValidator:
    """One validation pass of the async mode over fixed rows (module docstring).

    Args:
        rows: dicts with ``index`` (the row's position in its file), ``data_source``, ``prompt_ids`` (the chat-templated
            prompt, already cut to the prompt limit), ``reward_model`` (the row's dict, with ``ground_truth``) and
            ``extra_info`` (a dict, may be empty).
        tokenizer: the policy's tokenizer (decodes the responses).
        reward_manager: the validation reward manager (``RLLARewardManager`` or a subclass), which reads the data
            source from ``reward_manager.reward_fn_key``.
        max_tokens: new tokens per response (``data.max_response_length``).
        temperature: 0 for greedy; ``n``: responses per prompt (``validation_sampling``).
        dump_dir: ``trainer.validation_data_dir``: each pass also writes ``<dump_dir>/<version>.jsonl`` (one line
            per response: ``input``, ``output``, ``score``, ``step``, ``row``, ``data_source`` and the reward's
            components); None writes nothing.
        timeout_s: seconds one request may take (a batched CPU generate of long responses is slow).

    Raises ValueError: no rows.
    """

    def __init__(
        self,
        rows: Sequence[Mapping[str, Any]],
        tokenizer: Any,
        reward_manager: Any,
        max_tokens: int,
        temperature: float = 0.0,
        n: int = 1,
        dump_dir: Optional[str] = None,
        timeout_s: float = 3600.0,
    ):
        if not rows:
            raise ValueError("validation has no rows (data.val_files)")
        self.rows = [dict(r) for r in rows]
        self.tokenizer, self.reward, self.max_tokens = tokenizer, reward_manager, int(max_tokens)
        self.temperature, self.n = float(temperature), int(n)
        self.dump_dir, self.timeout_s = dump_dir, float(timeout_s)
        self._local = threading.local()

    @classmethod
    def from_config(cls, config: Any, tokenizer: Any, reward_manager: Any) -> "AsyncValidator":
        """Rows and settings from the trainer config, loaded as the synchronous trainer loads its validation set
        (``RLHFDataset`` over ``data.val_files`` with the ``data`` section and ``val_max_samples``: the same prompt
        text, truncation, filtering and errors; null files are the RLLA validation split), plus
        ``data.max_response_length``, ``rollout.val_kwargs`` and ``trainer.validation_data_dir``.

        Raises ValueError: bad ``val_kwargs`` (``validation_sampling``). DataCheckError: prompts
            over ``data.max_prompt_length`` under ``data.truncation=error`` (``check_prompt_lengths``). And what
            ``RLHFDataset`` raises (missing file, malformed row, every row filtered).
        """
        from verl.async_rl.prompts import load_prompt_rows

        sampling = validation_sampling(config.actor_rollout_ref.rollout.val_kwargs)
        files = config.data.val_files
        if files is None:
            from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

            files = str(resolve_rlla_data_dir() / "test.parquet")
        rows = load_prompt_rows(config, files, tokenizer, "data.val_files", config.data.val_max_samples)
        return cls(
            rows,
            tokenizer,
            reward_manager,
            int(config.data.max_response_length),
            dump_dir=config.trainer.validation_data_dir,
            **sampling,
        )

    def _client(self, url: str):
        from verl.async_rl.inference_server import OpenAIClient

        clients = self._local.__dict__.setdefault("clients", {})
        if url not in clients:  # one requests session per thread and server
            clients[url] = OpenAIClient(url, timeout=self.timeout_s)
        return clients[url]

    def _answer(self, url: str, row: Mapping[str, Any]) -> Dict[str, Any]:
        return self._client(url).completions(
            row["prompt_ids"], max_tokens=self.max_tokens, temperature=self.temperature, n=self.n
        )

    def run(self, urls: Sequence[str], version: int) -> Dict[str, float]:
        """Generate and score every row on the servers at ``urls`` (row ``i`` on ``urls[i % len(urls)]``), all of
        which must serve policy ``version``; returns the metrics (module docstring) plus
        ``val/response_length/mean`` (tokens), ``val/policy_version`` and ``timing_s/validate``.

        Raises RuntimeError: a server answered with another policy version (the weights moved during validation),
            or a request failed (the server's error in the message).
        """
        from verl.workers.reward_manager.completions import score_completions

        start = time.perf_counter()
        logger.info(
            "async validation at version %d: %d prompts x %d response(s), up to %d tokens each",
            version,
            len(self.rows),
            self.n,
            self.max_tokens,
        )
        with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_REQUESTS, len(self.rows))) as pool:
            answers = list(pool.map(lambda i: self._answer(urls[i % len(urls)], self.rows[i]), range(len(self.rows))))
        samples = []  # (row, generated ids), in row order, a row's choices in turn
        for row, answer in zip(self.rows, answers):
            if int(answer["policy_version"]) != int(version):
                raise RuntimeError(
                    f"async validation of version {version}: the server answered with policy version "
                    f"{answer['policy_version']}"
                )
            samples += [(row, list(choice["token_ids"])) for choice in answer["choices"]]
        columns = {"reward_model": "reward_model", self.reward.reward_fn_key: "data_source", "extra_info": "extra_info"}
        if all(row.get("raw_prompt") is not None for row, _ in samples):  # the chat, for a reward-API function
            columns["raw_prompt"] = "raw_prompt"
        scored = score_completions(
            self.reward,
            [row["prompt_ids"] for row, _ in samples],
            [ids for _, ids in samples],
            {column: [row[field] for row, _ in samples] for column, field in columns.items()},
            step=int(version),
            pad_token_id=int(self.tokenizer.pad_token_id or 0),
        )
        sums: Dict[str, Dict[str, float]] = defaultdict(lambda: defaultdict(float))
        counts: Dict[str, int] = defaultdict(int)
        records = []
        for i, (row, ids) in enumerate(samples):
            record = {
                "row": row["index"],
                "data_source": row["data_source"],
                "step": int(version),
                "input": self.tokenizer.decode(row["prompt_ids"], skip_special_tokens=False),
                "output": self.tokenizer.decode(ids, skip_special_tokens=False),
            }
            if not scored.valid[i]:
                records.append({**record, "score": None, "reward_error": scored.errors[i]})
                continue
            numbers = {"score": scored.scores[i], **{k: v[i] for k, v in scored.components.items()}}
            counts[row["data_source"]] += 1
            for name, value in numbers.items():
                sums[row["data_source"]][name] += value
            records.append({**record, **numbers})
        lengths = [len(ids) for _, ids in samples]
        invalid = len(samples) - sum(scored.valid)
        metrics: Dict[str, float] = {}
        for source, total in sums.items():
            for name, value in total.items():
                metrics[f"val/test_{name}/{source}"] = value / counts[source]
        metrics["val/response_length/mean"] = sum(lengths) / max(len(lengths), 1)
        if invalid:
            metrics["val/reward_invalid_count"] = float(invalid)
        metrics["val/policy_version"] = float(version)
        metrics["timing_s/validate"] = time.perf_counter() - start
        if self.dump_dir:
            from verl.trainer.ppo.rollout_dump import write_records

            write_records(records, int(version), Path(self.dump_dir))
        logger.info(
            "async validation at version %d done in %.1f s: %s",
            version,
            metrics["timing_s/validate"],
            {k: round(v, 4) for k, v in metrics.items() if k.startswith("val/test_score/")},
        )
        return metrics
