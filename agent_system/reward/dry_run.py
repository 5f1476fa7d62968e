"""``reward-dry-run``: score saved responses (or a parquet's ground truths) and print per-component statistics.

Debugging rewards without training (docs/reward_api.md, "Quick start"):

    reward-dry-run --parquet dataset/rlla_4k/test.parquet                  # each GT scored against itself
    reward-dry-run --jsonl rollouts.jsonl --step 40 --set SCHEDULEREWARD=1  # {"response", "ground_truth"[, "step"]}
    reward-dry-run --jsonl rollouts.jsonl --reward-path my_reward.py --reward-name tool_reward --timeout-s 10

Scoring goes through ``default_compute_score`` (so any ``data_source`` it knows; rows without one count as
``"rlla"``; in this process), or through any reward-API function (``--reward-path FILE [--reward-name NAME]``, or
``--reward-name`` of a registered reward such as ``rlla``), each response as one assistant message. A reward-API
function runs through the same runner as in training (``agent_system.reward.make_runner``), with the trainer's
``reward.*`` settings as options: ``--sandbox process|none`` (default ``process`` for ``--reward-path``, ``none`` for a
registered reward), ``--timeout-s`` (default: the reward's own ``@reward_function(timeout_s=...)``, else 30 s),
``--memory-mb`` (default 2048; 0: no limit) and ``--num-workers`` (default 2). In the sandbox a call that runs past
its timeout is killed (its row reported as ``timed out after Ns``), one that allocates past the memory limit gets a
``MemoryError``, and a crash fails only its row. Switches come from the environment, overlaid with
``--set VAR=VALUE``. Samples that raise, time out or crash are counted as invalid with their reason; the command only
fails (exit status 2, one line on stderr naming the file and line) on unreadable input or a reward that cannot be
loaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from verl.utils.jsonl import iter_json_objects
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.rlla import SWITCH_ENV_VARS, RewardSwitches
from verl.utils.reward_score.tool_parse import WRAPPERS

logger = logging.getLogger(__name__)

STAT_KEYS = ("score", "format", "correctness", "length")


@dataclass
class DryRunSample:
    """One sample to score: ``row`` is its position in the input file (0-based; jsonl: line index)."""

    row: int
    response: str
    ground_truth: Any
    data_source: str = "rlla"
    step: int | None = None


@dataclass
class DryRunReport:
    """Result of a dry run: per-sample score dicts of valid samples, ``(row, reason)`` of invalid ones, and how many
    reward calls the sandbox killed for running past the timeout (``timeouts``) or lost to a crashed worker
    (``crashes``); ``sandbox`` describes where a reward-API function ran (None for ``default_compute_score``)."""

    results: list[dict] = field(default_factory=list)
    invalid: list[tuple[int, str]] = field(default_factory=list)
    timeouts: int = 0
    crashes: int = 0
    sandbox: str | None = None

    def stats(self) -> dict[str, dict[str, float]]:
        """``{component: {count, mean, std (population), min, max}}`` over valid samples (NaN when none), for
        ``STAT_KEYS`` and any other numeric key the reward returned (a string such as ``pred``, the answer, is not a
        statistic)."""
        out = {}
        numeric = [k for r in self.results for k, v in r.items() if not isinstance(v, str)]
        for key in dict.fromkeys([*STAT_KEYS, *numeric]):
            values = [float(r[key]) for r in self.results if key in r and not isinstance(r[key], str)]
            n = len(values)
            mean = sum(values) / n if n else math.nan
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / n) if n else math.nan
            out[key] = {
                "count": n,
                "mean": mean,
                "std": std,
                "min": min(values) if n else math.nan,
                "max": max(values) if n else math.nan,
            }
        return out


def load_parquet_samples(path: str) -> list[DryRunSample]:
    """Samples whose response is the row's own ground truth (``reward_model.ground_truth``).

    Raises:
        FileNotFoundError: no such file.
        KeyError: the parquet has no ``reward_model`` column.
    """
    import pandas as pd

    if not os.path.isfile(path):
        raise FileNotFoundError(f"--parquet {path}: no such file")
    frame = pd.read_parquet(path)
    if "reward_model" not in frame.columns:
        raise KeyError(f"--parquet {path}: no 'reward_model' column (columns: {list(frame.columns)})")
    samples = []
    for i, row in enumerate(frame.to_dict("records")):
        reward_model = row["reward_model"]
        gt = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        samples.append(
            DryRunSample(
                row=i,
                response=gt if isinstance(gt, str) else "",
                ground_truth=gt,
                data_source=str(row.get("data_source", "rlla")),
            )
        )
    return samples


def load_jsonl_samples(path: str) -> list[DryRunSample]:
    """Samples from JSON lines with ``response`` and ``ground_truth`` (optional ``step``, ``data_source``).

    Args:
        path: the JSONL file.

    Returns:
        One sample per non-blank line; ``row`` is the 0-based line index.

    Raises:
        FileNotFoundError: no such file.
        JsonInputError: a line is not valid UTF-8, not valid JSON or not a JSON object (a ``ValueError``:
            ``file PATH, line N: problem``).
        ValueError: an object lacks string ``response`` and ``ground_truth``, or has a non-integer ``step``
            (``path:line: problem``).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--jsonl {path}: no such file")
    samples = []
    for lineno, obj in iter_json_objects(path):
        if not isinstance(obj.get("response"), str) or not isinstance(obj.get("ground_truth"), str):
            raise ValueError(
                f"{path}:{lineno}: expected an object with string 'response' and 'ground_truth', got keys {sorted(obj)}"
            )
        step = obj.get("step")
        if step is not None and not isinstance(step, int):
            raise ValueError(f"{path}:{lineno}: 'step' must be an integer, got {step!r}")
        samples.append(
            DryRunSample(
                row=lineno - 1,
                response=obj["response"],
                ground_truth=obj["ground_truth"],
                data_source=str(obj.get("data_source", "rlla")),
                step=step,
            )
        )
    return samples


def score_samples(
    samples: Iterable[DryRunSample], step: int = 0, wrapper: str | None = "qwen", switches: RewardSwitches | None = None
) -> DryRunReport:
    """Score every sample with ``default_compute_score``; a sample's own ``step`` overrides ``step``.

    ``wrapper=None`` chooses the wrapper from ``switches.experiment_name`` like ToolRL. Exceptions per sample are
    recorded in ``DryRunReport.invalid`` as ``(row, "Type: message")``.
    """
    sw = RewardSwitches.from_env() if switches is None else switches
    report = DryRunReport()
    for sample in samples:
        info = {"step": step if sample.step is None else sample.step, "wrapper": wrapper, "reward_switches": sw}
        try:
            if not isinstance(sample.ground_truth, str):
                raise ValueError(f"row {sample.row}: no string ground truth (got {sample.ground_truth!r:.80})")
            report.results.append(default_compute_score(sample.data_source, sample.response, sample.ground_truth, info))
        except Exception as err:  # noqa: BLE001 - a dry run reports bad samples instead of stopping
            report.invalid.append((sample.row, f"{type(err).__name__}: {err}"))
    return report


def default_sandbox(fn: Any) -> str:
    """The trainer's default ``reward.sandbox`` for ``fn``: ``"process"`` for a reward loaded from a file (a user's
    code; ``fn.source.path`` set), ``"none"`` for a registered or importable one (e.g. the built-in ``rlla``).

    Args:
        fn: an ``agent_system.reward.RewardFunction``.

    Returns:
        ``"process"`` or ``"none"``.
    """
    source = getattr(fn, "source", None)
    return "process" if source is not None and source.path is not None else "none"


def score_with_reward_function(
    samples: Iterable[DryRunSample],
    fn: Any,
    step: int = 0,
    wrapper: str | None = "qwen",
    switches: RewardSwitches | None = None,
    sandbox: str | None = None,
    timeout_s: float | None = None,
    memory_mb: float | None = None,
    num_workers: int = 2,
) -> DryRunReport:
    """Score every sample with the reward-API function ``fn`` through ``agent_system.reward.make_runner``, as the
    trainer does: each response is one assistant message (and ``solution_str``), with ``data_source`` and
    ``extra_info`` (``step``, ``wrapper``) as keywords; a result's ``score`` and ``metrics`` are the sample's
    components.

    Args:
        samples: the samples; a sample's own ``step`` overrides ``step``.
        fn: an ``agent_system.reward.RewardFunction``.
        step: trainer step passed to the reward.
        wrapper: chat wrapper passed in ``extra_info`` (None: from ``switches.experiment_name``).
        switches: reward switches passed as ``reward_switches`` (None: from the environment).
        sandbox: ``"process"`` or ``"none"``; None: :func:`default_sandbox` (``process`` for a reward from a file).
        timeout_s: per-call limit in the process sandbox; None: the reward's own ``timeout_s``, else 30 s.
        memory_mb: memory a sandbox worker may add after loading the reward (MiB); None: 2048; 0: no limit.
        num_workers: sandbox worker processes.

    Returns:
        The report: results of valid samples; ``(row, reason)`` of samples whose reward raised, returned garbage,
        ran past the timeout (``reward 'NAME' timed out after Ns; ...``), hit the memory limit or crashed its
        worker; the timeout and crash counts.

    Raises:
        ValueError: unknown ``sandbox``, or ``process`` for a reward without a file or module to load it from.
        RewardSandboxError: a sandbox worker could not start (the reward does not load there).
    """
    from agent_system.reward import RewardRequest, make_runner
    from agent_system.reward.sandbox import DEFAULT_MEMORY_MB

    sw = RewardSwitches.from_env() if switches is None else switches
    samples = list(samples)
    requests = [
        RewardRequest(
            messages=[{"role": "assistant", "content": s.response}],
            ground_truth=s.ground_truth,
            kwargs={
                "data_source": s.data_source,
                "solution_str": s.response,
                "extra_info": {"step": step if s.step is None else s.step, "wrapper": wrapper},
            },
        )
        for s in samples
    ]
    with make_runner(
        fn,
        sandbox=sandbox or default_sandbox(fn),
        num_workers=num_workers,
        timeout_s=timeout_s,
        memory_mb=DEFAULT_MEMORY_MB if memory_mb is None else memory_mb,
    ) as runner:
        run = runner.run(requests, {"step": step, "reward_switches": dataclasses.asdict(sw)})
    report = DryRunReport(timeouts=run.timeouts, crashes=run.crashes, sandbox=_describe_runner(runner))
    for sample, result in zip(samples, run.results):
        if result.is_score_valid and result.score is not None:
            report.results.append({"score": result.score, **result.metric_values()})
        else:
            report.invalid.append((sample.row, result.reason or "no score"))
    return report


def _describe_runner(runner: Any) -> str:
    from agent_system.reward import ProcessSandbox

    if isinstance(runner, ProcessSandbox):
        memory = f"{runner.memory_mb:g} MiB" if runner.memory_mb else "unlimited"
        return f"process (timeout {runner.timeout_s:g}s, memory {memory}, {runner.num_workers} workers)"
    return "none (in this process: no timeout or memory limit)"


def format_report(report: DryRunReport, max_reasons: int = 5) -> str:
    """Human-readable table of ``report.stats()`` plus the invalid count, the sandbox's timeout and crash counts
    (when any) and the first ``max_reasons`` reasons (``invalid row N: reason``)."""
    lines = [f"{'component':<12} {'count':>6} {'mean':>10} {'std':>10} {'min':>10} {'max':>10}"]
    for key, s in report.stats().items():
        lines.append(
            f"{key:<12} {s['count']:>6d} {s['mean']:>10.4f} {s['std']:>10.4f} {s['min']:>10.4f} {s['max']:>10.4f}"
        )
    total = len(report.results) + len(report.invalid)
    lines.append(f"samples: {total}, valid: {len(report.results)}, invalid: {len(report.invalid)}")
    if report.timeouts or report.crashes:
        lines.append(f"sandbox: {report.timeouts} call(s) timed out, {report.crashes} crashed")
    for row, reason in report.invalid[:max_reasons]:
        lines.append(f"  invalid row {row}: {reason[:300]}")
    if len(report.invalid) > max_reasons:
        lines.append(f"  ... {len(report.invalid) - max_reasons} more")
    return "\n".join(lines)


def _parse_set(items: Sequence[str]) -> dict[str, str]:
    known = set(SWITCH_ENV_VARS.values()) | {"EXPERIMENT_NAME"}
    overlay = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise argparse.ArgumentTypeError(f"--set {item!r}: expected VAR=VALUE with VAR in {sorted(known)}")
        overlay[key] = value
    return overlay


def _load_reward(path: str | None, name: str | None) -> Any:
    """The reward-API function of ``--reward-path`` / ``--reward-name``, or None for ``default_compute_score``."""
    if not path and not name:
        return None
    from agent_system.reward import get_reward_function, load_reward_function

    return load_reward_function(path, name or "compute_score") if path else get_reward_function(name)


def _number(kind: type, ok: Any, expected: str) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return value

    return parse


_positive_float = _number(float, lambda v: v > 0, "a number > 0")
_non_negative_float = _number(float, lambda v: v >= 0, "a number >= 0")
_positive_int = _number(int, lambda v: v >= 1, "an integer >= 1")

SANDBOX_OPTIONS = ("sandbox", "timeout_s", "memory_mb", "num_workers")


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of ``reward-dry-run``.

    Returns:
        The parser (see the module docstring for the options).
    """
    parser = argparse.ArgumentParser(prog="reward-dry-run", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--parquet", help="RLHF parquet; each row's ground truth is scored against itself")
    source.add_argument("--jsonl", help="JSON lines with 'response', 'ground_truth' and optional 'step'")
    parser.add_argument("--step", type=int, default=0, help="trainer step for the schedules (default 0)")
    parser.add_argument(
        "--wrapper",
        choices=WRAPPERS + ("env",),
        default="qwen",
        help="chat wrapper to strip; 'env' chooses from EXPERIMENT_NAME like ToolRL (default qwen)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="override a reward switch or EXPERIMENT_NAME for this run (repeatable)",
    )
    parser.add_argument("--limit", type=int, default=None, help="score only the first N samples")
    parser.add_argument("--show-invalid", type=int, default=5, help="how many invalid reasons to print (default 5)")
    parser.add_argument("--json", action="store_true", help="print the statistics as one JSON object instead")
    parser.add_argument("--reward-path", help="score with this file's reward function (reward API) instead")
    parser.add_argument(
        "--reward-name",
        help="function in --reward-path (default compute_score), or without it a registered reward (e.g. rlla)",
    )
    sandbox = parser.add_argument_group("reward sandbox (with --reward-path / --reward-name; the trainer's reward.*)")
    sandbox.add_argument(
        "--sandbox",
        choices=("process", "none"),
        default=None,
        help="where the reward runs (default: process for --reward-path, none for a registered reward)",
    )
    sandbox.add_argument(
        "--timeout-s",
        type=_positive_float,
        default=None,
        help="per-call limit in the process sandbox (default: the reward's own timeout_s, else 30)",
    )
    sandbox.add_argument(
        "--memory-mb",
        type=_non_negative_float,
        default=None,
        help="memory a sandbox worker may add after loading the reward, MiB (default 2048; 0: none)",
    )
    sandbox.add_argument("--num-workers", type=_positive_int, default=None, help="sandbox worker processes (default 2)")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of ``reward-dry-run``.

    Args:
        argv: command-line arguments (None: ``sys.argv[1:]``).
        out: where the report goes (None: stdout).

    Returns:
        The exit status: 0 (also when samples are invalid, time out or crash), or 2 on unreadable input, a bad
        ``--set``, sandbox limits without the process sandbox, or a reward that cannot be loaded or started: then
        one line ``reward-dry-run: error: ...`` (naming file and line for a bad input line) goes to stderr.

    Raises:
        SystemExit: bad arguments (status 2, from argparse).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out or sys.stdout

    def fail(err: object) -> int:
        sys.stderr.write(f"reward-dry-run: error: {err}\n")
        return 2

    try:
        overlay = _parse_set(args.set)
    except argparse.ArgumentTypeError as err:
        parser.print_usage(sys.stderr)
        return fail(err)
    given = [f"--{k.replace('_', '-')}" for k in SANDBOX_OPTIONS if getattr(args, k) is not None]
    if given and not (args.reward_path or args.reward_name):
        return fail(
            f"{', '.join(given)}: only with --reward-path or --reward-name (the built-in "
            "default_compute_score runs in this process)"
        )
    try:
        samples = load_parquet_samples(args.parquet) if args.parquet else load_jsonl_samples(args.jsonl)
        reward_fn = _load_reward(args.reward_path, args.reward_name)
    except (FileNotFoundError, KeyError, ValueError, AttributeError, TypeError) as err:
        return fail(err)
    if reward_fn is not None and (args.sandbox or default_sandbox(reward_fn)) == "none":
        limits = [f"--{k.replace('_', '-')}" for k in SANDBOX_OPTIONS[1:] if getattr(args, k) is not None]
        if limits:
            return fail(
                f"{', '.join(limits)}: only with the process sandbox (add --sandbox process; the reward "
                f"{reward_fn.name!r} runs in this process by default)"
            )
    if args.limit is not None:
        samples = samples[: args.limit]
    switches = RewardSwitches.from_env({**os.environ, **overlay})
    wrapper = None if args.wrapper == "env" else args.wrapper
    if reward_fn is None:
        report = score_samples(samples, step=args.step, wrapper=wrapper, switches=switches)
    else:
        from agent_system.reward import RewardSandboxError

        try:
            report = score_with_reward_function(
                samples,
                reward_fn,
                step=args.step,
                wrapper=wrapper,
                switches=switches,
                sandbox=args.sandbox,
                timeout_s=args.timeout_s,
                memory_mb=args.memory_mb,
                num_workers=args.num_workers or 2,
            )
        except (ValueError, RewardSandboxError) as err:
            return fail(err)
    if args.json:
        payload = {
            "stats": report.stats(),
            "valid": len(report.results),
            "invalid": len(report.invalid),
            "invalid_reasons": [{"row": r, "reason": m} for r, m in report.invalid[: args.show_invalid]],
            "switches": switches.active(),
            "step": args.step,
            "sandbox": report.sandbox,
            "timeouts": report.timeouts,
            "crashes": report.crashes,
        }
        stream.write(json.dumps(payload, allow_nan=True) + "\n")
    else:
        sandbox = f"; sandbox {report.sandbox}" if report.sandbox else ""
        stream.write(f"switches on: {switches.active() or 'none'}; step {args.step}; wrapper {args.wrapper}{sandbox}\n")
        stream.write(format_report(report, args.show_invalid) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
