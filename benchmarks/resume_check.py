"""The main job stopped by SIGTERM and run again, against an uninterrupted run of the same command, bit for bit.

    python benchmarks/resume_check.py --json resume.json              # on a GPU: the router main job's GPU recipe
    python benchmarks/resume_check.py --cpu-smoke --json resume.json  # the same three runs on CPU, toy sizes

The command is the one a user types, ``bash run_router_training.sh`` (``ROUTER_RECIPE=option_a``: the recipe a GPU
gets; with ``--cpu-smoke`` the CPU hardware's sizes of the same recipe), at the sizes of :data:`SIZES` (launch
variables, as a user sets them), a checkpoint at the last step (``SAVE_FREQ`` = ``--steps``: checkpoints of a
135M model are ~2 GB each), no validation, ``trainer.deterministic=true``
(``verl/utils/determinism.py``: deterministic CUDA kernels, cuDNN deterministic and not benchmarking, a fixed cuBLAS
workspace). Three runs, each a process of its own:

1. ``reference``: the command to its last step (``--steps``) in ``<workdir>/reference``;
2. ``interrupted``: the command in ``<workdir>/resumed``, sent SIGTERM (to the trainer's process, as ``kill PID`` or a
   scheduler would) as soon as step 1's metrics are written; the recipe's ``trainer.save_on_exit`` finishes the step
   in flight, saves it and exits with 128 + 15;
3. ``resumed``: the same command again in ``<workdir>/resumed``, which must resume from that checkpoint and finish.

Then the last checkpoint ``global_step_N`` of the two directories (weights, AdamW state, router head, HF export,
``data.pt`` with sampler, RNG states and lambda; every file but ``config.yaml``, which holds the run's paths) and
``metrics.jsonl`` (each step once, in order, the same keys and values but for those that measure time, throughput or
memory) must be equal bit for bit (``kill_campaign.compare_checkpoint`` and ``compare_metrics``). Where deterministic kernels make the reference
run fail (an op with no deterministic implementation raises, naming itself), the reason is recorded and the three
runs go on without them.

The JSON (``--json``) is written after every run, so a call cut short keeps what was measured: per run its exit
code, wall seconds, mean step seconds and the deterministic settings the worker logged; ``resumed_from``;
``mismatches`` (at most 20); ``ok``. Exit status 0 only when the resumed run equals the reference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # kill_campaign's comparison
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from kill_campaign import (  # noqa: E402
    checkpoint_step,
    compare_checkpoint,
    compare_metrics,
    has_exited,
    read_metrics,
    resumed_from,
    wait_job,
)
from verl.utils.checkpoint_manifest import STEP_PREFIX  # noqa: E402

# launch variables of run_router_training.sh (verl/trainer/launch.py): on a GPU, 8 prompts x 4 routes-and-samples x 64
# new tokens (random weights rarely emit EOS: every response runs to its length), prompts over 1,024 tokens dropped
SIZES = {
    "TRAIN_BATCH_SIZE": "8",
    "PPO_MINI_BATCH_SIZE": "8",
    "MICRO_BATCH_PER_GPU": "8",
    "ROLLOUT_N": "4",
    "MAX_PROMPT_LENGTH": "1024",
    "MAX_RESPONSE_LENGTH": "64",
    "FILTER_OVERLONG": "True",
}
SMOKE_SIZES = {
    "N_GPUS": "0",
    "TRAIN_BATCH_SIZE": "2",
    "PPO_MINI_BATCH_SIZE": "2",
    "MICRO_BATCH_PER_GPU": "2",
    "ROLLOUT_N": "2",
    "MAX_RESPONSE_LENGTH": "8",
}
DETERMINISTIC_LOG = re.compile(r"deterministic kernels: (\{.*\})")  # the worker's log line (trainer.deterministic)
NO_DETERMINISTIC = "does not have a deterministic implementation"  # PyTorch's error for such an op


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="toy sizes on CPU (the tiny model): checks the check")
    parser.add_argument("--model", default=None, help="BASE_MODEL (default: smollm2-135m; tiny with --cpu-smoke)")
    parser.add_argument("--steps", type=int, default=3, help="training steps of each run (at least 2)")
    parser.add_argument("--workdir", default=None, help="where the runs write (default: a temporary folder, removed)")
    parser.add_argument("--deadline-s", type=float, default=600.0, help="time for the three runs together (s)")
    parser.add_argument(
        "--deadline-at",
        type=float,
        default=None,
        help="the same as an absolute time (seconds since the epoch; wins over --deadline-s): what "
        "gpu_suite.py passes, so that start-up does not eat its margin",
    )
    parser.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="trainer.deterministic for the runs (default on)",
    )
    parser.add_argument("--json", default=None, help="write the result here (after every run)")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (one before the SIGTERM, one after the resume)")
    return args


def command(root: Path, deterministic: bool) -> list[str]:
    """The user's command with this check's paths: checkpoints in ``root/ckpt``, metrics in ``root/run``."""
    return [
        "bash",
        "run_router_training.sh",
        f"trainer.default_local_dir={root}/ckpt",
        f"trainer.run_dir={root}/run",
        "trainer.val_before_train=False",
        f"trainer.deterministic={str(deterministic).lower()}",
    ]


def environment(args) -> dict:
    sizes = SMOKE_SIZES if args.cpu_smoke else SIZES
    model = args.model or ("tiny" if args.cpu_smoke else "smollm2-135m")
    return {
        **os.environ,
        **sizes,
        "BASE_MODEL": model,
        "ROUTER_RECIPE": "option_a",
        "TOTAL_STEPS": str(args.steps),
        "SAVE_FREQ": str(args.steps),
        "TEST_FREQ": "-1",
        "EXPERIMENT_NAME": "resume_check",
        "PYTHON": sys.executable,
        "PYTHONUNBUFFERED": "1",
    }


RUNNING: list[subprocess.Popen] = []  # the run in flight, killed with its session on SIGTERM


def _stop(signum, frame) -> None:
    """SIGTERM to this script (gpu_suite.py's step timeout): kill the run in flight with its whole session, exit."""
    for proc in RUNNING:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit(128 + signum)


def start(root: Path, log: Path, env: dict, deterministic: bool) -> subprocess.Popen:
    """The command in its own session (a timeout then kills all it started), stdout and stderr into ``log``."""
    root.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            command(root, deterministic),
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    RUNNING[:] = [proc]
    return proc


def summarize(root: Path, log: Path, rc: int, seconds: float) -> dict:
    """One run's record: exit code, wall and mean step seconds, the steps it logged, the worker's deterministic
    settings (``None``: not logged, i.e. off), the log's tail when it failed."""
    text = log.read_text(errors="replace")
    records = read_metrics(root / "run")[0]
    steps = [r["timing_s/step"] for r in records.values() if "timing_s/step" in r]
    found = DETERMINISTIC_LOG.findall(text)
    record = {
        "returncode": rc,
        "wall_s": round(seconds, 1),
        "steps_logged": sorted(records),
        "step_s_mean": round(sum(steps) / len(steps), 3) if steps else None,
        "deterministic": json.loads(found[-1]) if found else None,
    }
    if rc not in (0, 128 + signal.SIGTERM):
        record["tail"] = text[-2000:]
    return record


def wait_until(proc: subprocess.Popen, deadline: float) -> int | None:
    """The run's exit code, or None when it was still running at ``deadline`` (then killed with its session)."""
    try:
        return wait_job(proc, max(deadline - time.time(), 1.0))[0]
    except TimeoutError:
        return None


def run_to_end(root: Path, log: Path, env: dict, deterministic: bool, deadline: float) -> dict:
    start_s = time.monotonic()
    rc = wait_until(start(root, log, env, deterministic), deadline)
    return summarize(root, log, rc, time.monotonic() - start_s)


def run_interrupted(root: Path, log: Path, env: dict, deterministic: bool, deadline: float) -> dict:
    """Phase 2: SIGTERM to the trainer once step 1's metrics record is written, then wait for it to save and exit."""
    start_s, sent_at = time.monotonic(), None
    proc = start(root, log, env, deterministic)
    # not proc.poll(): it would reap the child, and wait_job waits on it without reaping
    while not has_exited(proc.pid, 0.2) and time.time() < deadline:
        if 1 in read_metrics(root / "run")[0]:
            proc.send_signal(signal.SIGTERM)  # the bash script exec'd the trainer: this pid is the trainer
            sent_at = round(time.monotonic() - start_s, 1)
            break
    record = summarize(root, log, wait_until(proc, deadline), time.monotonic() - start_s)
    record.update(sigterm_sent_at_s=sent_at, saved_step=checkpoint_step(root / "ckpt"))
    return record


def main(argv=None) -> int:
    args = parse_args(argv)
    deadline = args.deadline_at if args.deadline_at is not None else time.time() + args.deadline_s
    signal.signal(signal.SIGTERM, _stop)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="resume_check_"))
    env = environment(args)
    result: dict = {
        "command": " ".join(command(Path("<root>"), args.deterministic)),
        "steps": args.steps,
        "launch_variables": {
            k: env[k]
            for k in (
                *(SMOKE_SIZES if args.cpu_smoke else SIZES),
                "BASE_MODEL",
                "ROUTER_RECIPE",
                "TOTAL_STEPS",
                "SAVE_FREQ",
                "TEST_FREQ",
            )
        },
        "deterministic_requested": args.deterministic,
        "ok": False,
    }

    def write(phase: str | None = None) -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        if phase:
            run = result[phase]
            print(
                f"[resume_check] {phase}: exit {run['returncode']} in {run['wall_s']} s, steps {run['steps_logged']}, "
                f"deterministic {run['deterministic'] is not None}",
                flush=True,
            )

    try:
        deterministic = args.deterministic
        reference = run_to_end(work / "reference", work / "reference.log", env, deterministic, deadline)
        if reference["returncode"] != 0 and deterministic and NO_DETERMINISTIC in reference.get("tail", ""):
            result["deterministic_error"] = reference["tail"][-600:]  # an op without a deterministic kernel
            deterministic = False
            shutil.rmtree(work / "reference", ignore_errors=True)
            reference = run_to_end(work / "reference", work / "reference.log", env, deterministic, deadline)
        result.update(deterministic_used=deterministic, reference=reference)
        write("reference")
        if reference["returncode"] != 0:
            return 1
        result["interrupted"] = run_interrupted(work / "resumed", work / "resumed.log", env, deterministic, deadline)
        write("interrupted")
        saved = result["interrupted"]["saved_step"]
        if result["interrupted"]["returncode"] != 128 + signal.SIGTERM or not 1 <= saved < args.steps:
            result["error"] = (
                f"the SIGTERM'd run should exit with {128 + signal.SIGTERM} after saving a step before "
                f"{args.steps}; it exited with {result['interrupted']['returncode']}, newest "
                f"checkpoint step {saved}"
            )
            return 1
        log = work / "resumed_again.log"
        result["resumed"] = run_to_end(work / "resumed", log, env, deterministic, deadline)
        result["resumed_from"] = resumed_from(log.read_text(errors="replace"))
        write("resumed")
        if result["resumed"]["returncode"] != 0 or result["resumed_from"] != saved:
            result["error"] = f"the second start should resume from step {saved} and finish"
            return 1
        last = f"{STEP_PREFIX}{args.steps}"
        mismatches = compare_checkpoint(work / "reference" / "ckpt" / last, work / "resumed" / "ckpt" / last)
        mismatches += compare_metrics(work / "reference" / "run", work / "resumed" / "run", args.steps)
        result.update(mismatches=mismatches[:20], n_mismatches=len(mismatches), ok=not mismatches)
        print(
            f"[resume_check] resumed run {'equals' if not mismatches else 'DIFFERS FROM'} the reference bit for bit"
            + "".join(f"\n  {m}" for m in mismatches[:20]),
            flush=True,
        )
        return 0 if not mismatches else 1
    finally:
        write()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
