"""Kill campaign: SIGKILL the training job at many random moments, resume each time, and check that the
end state equals an uninterrupted run's bit for bit.

    python benchmarks/kill_campaign.py --kills 20 --output benchmarks/results/kill_campaign.json

The job: ``tests/trainer/run_in_process.py`` (``main_ppo``, worker in the driver process), model ``tiny``, GRPO with the
router on, 4 short RLLA prompts (2 per step), a checkpoint every step, no validation. After an uninterrupted reference
run, the same command is started again and again in another directory, each start killed by an injected fault
(``VERL_TEST_FAULT=KILL@PHASE:STEP``: SIGKILL on entering a phase of :data:`FAULT_PHASES` of a step after the newest
valid checkpoint; ``save_partial`` is inside the save) or from outside after a random delay (``external``; with the
backstop ``KILL@save_partial:<last step>`` so that an overlong delay cannot finish the run: ``backstop`` if it fires),
then once to the end. Each start must resume from the newest valid checkpoint seen before it. Then every checkpoint
``global_step_1..N`` (every file but ``config.yaml``, which holds the run's paths: weights, Adam state, router head,
HF export, ``data.pt`` with sampler, RNG states and λ) and ``metrics.jsonl`` (steps 1..N once each, in order, the same
keys) must equal the reference's bitwise, except the metrics that measure time, throughput or memory
(:data:`VOLATILE`, chosen by inspecting the records: ``timing_s/*``, ``timing_per_token_ms/*``, ``perf/{time_per_step,
throughput,mfu_*,*_tokens_per_s,peak_tflops_per_worker (measured CPU peak),peak_rss_gb/*,
max_memory_allocated_gb/* (CUDA)}``; counts such as
``perf/total_num_tokens`` and ``perf/model_tflops_*`` stay compared). Exit status 0 only when every planned kill
happened, every start resumed where it should and nothing mismatched.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: make ``verl`` importable
    sys.path.insert(0, str(REPO_ROOT))

from verl.utils import checkpoint_manifest as cm  # noqa: E402

RUNNER = REPO_ROOT / "tests" / "trainer" / "run_in_process.py"
FAULT_PHASES = ("gen", "reward", "old_log_prob", "update_actor", "save_checkpoint", "save_partial", "save_published")
VOLATILE = (
    "timing_s/",
    "timing_per_token_ms/",
    "perf/time_per_step",
    "perf/throughput",
    "perf/mfu_",
    "perf/peak_tflops_per_worker",
    "perf/peak_rss_gb/",
    "perf/max_memory_allocated_gb/",
    "perf/gen_tokens_per_s",
    "perf/actor_tokens_per_s",
)
REQUIRED_FILES = (
    "actor/model_world_size_1_rank_0.pt",
    "actor/optim_world_size_1_rank_0.pt",
    "actor/router_world_size_1_rank_0.pt",
    "data.pt",
)
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Deterministic, varies with the text: gives GRPO groups a non-zero reward spread."""
    return (sum(map(ord, solution_str)) % 7) / 6.0
'''


def prepare_data(out_dir: Path, n_train: int = 4, n_val: int = 2, chars: int = 160) -> Path:
    """Write into ``out_dir`` (returned) the RLLA rows with the shortest chat-templated prompts (as the fixture
    ``small_rlla`` picks them from :func:`verl.utils.dataset.rlla_data.resolve_rlla_data_dir`), every message cut to
    ``chars`` characters: ``train/test.parquet``, their ``*_router.parquet``, a deterministic ``reward.py``.

    Raises:
        FileNotFoundError: no RLLA data could be found or built (``dataset/rlla_4k``, ``../shared/data``).
    """
    import pandas as pd
    from transformers import AutoTokenizer
    from verl.router.preprocess import preprocess_dir
    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir
    from verl.utils.model_presets import prepare_model

    tokenizer, source = AutoTokenizer.from_pretrained(prepare_model("tiny")), resolve_rlla_data_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_val)):
        df = pd.read_parquet(source / f"{split}.parquet")
        lengths = df["prompt"].map(
            lambda m: len(
                tokenizer(tokenizer.apply_chat_template(list(m), tokenize=False, add_generation_prompt=True))[
                    "input_ids"
                ]
            )
        )
        df = df.loc[lengths.sort_values(kind="stable").index[:n]].copy()
        df["prompt"] = df["prompt"].map(lambda msgs: [dict(m, content=m["content"][:chars]) for m in msgs])
        df.to_parquet(out_dir / f"{split}.parquet")
    preprocess_dir(out_dir)
    (out_dir / "reward.py").write_text(REWARD)
    return out_dir


def job_overrides(run_root: Path, data_dir: Path, steps: int) -> list[str]:
    """Hydra overrides of the job: tiny model, GRPO + router, 2 prompts x 2 samples per step, 8 new tokens,
    ``steps`` steps, a checkpoint every step (``run_root/ckpt``), metrics in ``run_root/run``, no validation."""
    a, t = "actor_rollout_ref", "trainer"
    return [
        f"data.train_files={data_dir}/train_router.parquet",
        f"data.val_files={data_dir}/test_router.parquet",
        "data.train_batch_size=2",
        "data.max_prompt_length=1024",
        "data.max_response_length=8",
        "data.filter_overlong_prompts=True",
        f"{a}.model.path=tiny",
        f"{a}.actor.optim.lr=1e-2",
        f"{a}.actor.ppo_mini_batch_size=2",
        f"{a}.actor.ppo_micro_batch_size_per_gpu=2",
        f"{a}.rollout.n=2",
        f"{a}.rollout.micro_batch_size=8",
        f"{a}.ref.log_prob_micro_batch_size_per_gpu=4",
        f"{a}.rollout.log_prob_micro_batch_size_per_gpu=4",
        "critic.ppo_micro_batch_size_per_gpu=2",
        f"{t}.n_gpus_per_node=0",
        f"{t}.cpus_per_worker=0.5",
        f"{t}.logger=[console]",
        f"{t}.project_name=kill",
        f"{t}.default_local_dir={run_root}/ckpt",
        f"{t}.run_dir={run_root}/run",
        f"{t}.experiment_name=campaign",
        f"{t}.log_val_generations=0",
        "algorithm.adv_estimator=grpo",
        "router.enable=true",
        "router.dual_lr=0.5",
        f"{t}.test_freq=-1",
        f"{t}.val_before_train=False",
        f"{t}.save_freq=1",
        f"{t}.total_training_steps={steps}",
        f"custom_reward_function.path={data_dir}/reward.py",
    ]


def start_job(run_root: Path, data_dir: Path, steps: int, log: Path, fault: str = "") -> subprocess.Popen:
    """Start the job in its own session (a kill then takes all it started), stdout and stderr into ``log``."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1", VERL_TEST_FAULT=fault)
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, str(RUNNER), *job_overrides(run_root, data_dir, steps)],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def has_exited(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` s for child ``pid`` to exit, not reaping it (its pid = the job's group id stays taken)."""
    deadline, flags = time.monotonic() + timeout, os.WEXITED | os.WNOWAIT | os.WNOHANG
    while os.waitid(os.P_PID, pid, flags) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.waitid(os.P_PID, pid, flags) is not None


def wait_job(proc: subprocess.Popen, timeout: float, kill_after: float | None = None) -> tuple[int, bool]:
    """Wait for ``proc`` (SIGKILL to its process group after ``kill_after`` s if given), then kill what it left in
    its session. Returns ``(return code, whether the SIGKILL was sent here)``. Raises TimeoutError (after killing
    it) when it still runs after ``timeout`` seconds."""
    exited = has_exited(proc.pid, timeout if kill_after is None else kill_after)
    sent = not exited and kill_after is not None
    if sent:
        os.killpg(proc.pid, signal.SIGKILL)
        exited = has_exited(proc.pid, timeout)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # leftovers of its session; kills it on a timeout
        os.killpg(proc.pid, signal.SIGKILL)
    rc = proc.wait()
    if not exited:
        raise TimeoutError(f"job {proc.pid} still running after {timeout:.0f} s")
    return rc, sent


def resumed_from(log_text: str) -> int | None:
    """The step a start resumed from (its log's ``resumed from .../global_step_K``), None for a fresh start."""
    tail = log_text.split("resumed from ")[-1] if "resumed from " in log_text else None
    return None if tail is None else int(tail.split()[0].rsplit(cm.STEP_PREFIX, 1)[1])


def checkpoint_step(ckpt_root: Path) -> int:
    """Step of the newest valid checkpoint under ``ckpt_root`` (hashes checked), 0 when there is none."""
    return int(last.name[len(cm.STEP_PREFIX) :]) if (last := cm.latest_valid_checkpoint(ckpt_root)) else 0


def read_metrics(run_dir: Path) -> tuple[dict[int, dict], list[int], int]:
    """``({step: record}, [steps in file order], unreadable lines)`` of ``run_dir/metrics.jsonl`` (no file: empty;
    text records skipped; the last record of a step wins)."""
    path, records, bad = run_dir / "metrics.jsonl", [], 0
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            bad += 1
    records = [r for r in records if isinstance(r, dict) and "text" not in r]  # text records: sample generations
    return {r["step"]: r for r in records}, [r["step"] for r in records], bad


def run_reference(root: Path, data_dir: Path, steps: int, timeout: float = 1800) -> dict:
    """Run the job once without interruption into ``root``. Returns its timings: ``wall_s``, ``step_s`` (mean of
    ``timing_s/step`` + ``timing_s/save_checkpoint``), ``startup_s`` (start to the begin of step 1). Raises
    RuntimeError (with the log's tail) when the run fails."""
    log = root.parent / f"{root.name}.log"
    t0, spawned = time.monotonic(), time.time()
    rc, _ = wait_job(start_job(root, data_dir, steps, log), timeout)
    wall, text = time.monotonic() - t0, log.read_text(errors="replace")
    if rc != 0:
        raise RuntimeError(f"reference run failed (exit {rc}):\n{text[-3000:]}")
    per_step = {
        s: m.get("timing_s/step", 0.0) + m.get("timing_s/save_checkpoint", 0.0)
        for s, m in read_metrics(root / "run")[0].items()
    }
    step_s = sum(per_step.values()) / max(len(per_step), 1)
    saved = next(line for line in text.splitlines() if "saved checkpoint" in line)  # logging's asctime: local time
    first_saved = time.mktime(time.strptime(saved[:19], "%Y-%m-%d %H:%M:%S")) + int(saved[20:23]) / 1000
    return {
        "wall_s": round(wall, 2),
        "step_s": round(step_s, 2),
        "startup_s": round(max(first_saved - spawned - per_step.get(1, step_s), 1.0), 2),
    }


def run_campaign(
    root: Path,
    data_dir: Path,
    steps: int,
    plan: list[dict],
    timing: dict,
    rng: random.Random,
    timeout: float = 900,
    echo=print,
) -> dict:
    """Start the job in ``root`` again and again, killing each start as ``plan`` says, then once to the end. Kill
    specs: ``{"kind": "fault", "phase": P[, "step": S]}`` (S drawn so that the kills spread over the steps left) or
    ``{"kind": "external"[, "delay": s]}`` (drawn from 0.6 x startup to startup + 2 steps of ``timing``,
    :func:`run_reference`). Disk specs, ``{"kind": "disk", "errno": "ENOSPC" | "EROFS"[, "step": S]}``: the disk
    refuses the step-S checkpoint's files (``VERL_TEST_FAULT=ENOSPC@save_partial:S``, S default the step after the
    newest checkpoint); the start must fail with the trainer's ``CheckpointError`` naming the fault, leave no partial
    folder and keep the newest checkpoint. ``echo`` gets a line per start.

    Returns:
        ``{"starts": [{start, kind, phase, step | delay_s, landed, expected_resume, resumed_from, checkpoint_after,
        rc, killed, wall_s}], "kills", "resumes", "problems"}``. Problems: a start resumed from another step than
        the newest valid checkpoint, an injected kill did not fire, the run ended before all kills or failed. A kill
        after a checkpoint was published but before its step's metrics were logged is marked ``unlogged_checkpoint``
        (the resume restores that record from ``data.pt``; the metrics comparison checks it).

    Raises:
        TimeoutError: a start ran past ``timeout`` seconds.
    """
    ckpt, starts, problems, pending = root / "ckpt", [], [], list(plan)
    while True:
        before, spec, index = checkpoint_step(ckpt), (pending or [{"kind": "finish"}])[0], len(starts) + 1
        entry, fault, kill_after = {"start": index, "kind": spec["kind"], "expected_resume": before or None}, "", None
        if spec["kind"] == "fault":
            phase = spec["phase"]
            if phase == "save_published" and before + 1 >= steps and not spec.get("step"):
                phase = "save_partial"  # after the last step's checkpoint is published nothing is left to redo
            last = steps - 1 if phase == "save_published" else steps
            share = max(steps - 1 - before, 0) / len(pending)  # the checkpoint advances by ~share steps per kill
            entry.update(
                phase=phase,
                step=spec.get("step") or min(last, before + 1 + int(share) + (rng.random() < share - int(share))),
            )
            fault = f"KILL@{entry['phase']}:{entry['step']}"
        elif spec["kind"] == "disk":
            entry.update(errno=spec["errno"], phase="save_partial", step=spec.get("step") or before + 1)
            fault = f"{spec['errno']}@save_partial:{entry['step']}"
        elif spec["kind"] == "external":
            fault = f"KILL@save_partial:{steps}"  # backstop: an overlong delay must not let the run finish
            span = min(2, steps - before) * timing["step_s"]
            kill_after = spec.get("delay") or rng.uniform(0.6 * timing["startup_s"], timing["startup_s"] + span)
            entry["delay_s"] = round(kill_after, 2)
        log, t0 = root.parent / f"{root.name}.start{index:02d}.log", time.monotonic()
        proc = start_job(root, data_dir, steps, log, fault)
        rc, sent = wait_job(proc, timeout, kill_after)
        text = log.read_text(errors="replace")
        entry.update(
            rc=rc,
            killed=rc == -signal.SIGKILL,
            wall_s=round(time.monotonic() - t0, 1),
            resumed_from=resumed_from(text),
            checkpoint_after=checkpoint_step(ckpt),
        )
        fired = "KILL at phase" in text
        if spec["kind"] == "external" and entry["killed"]:
            if fired and not sent:
                entry.update(kind="backstop", phase="save_partial", step=steps)
            else:  # where it landed: a save (this start's temporary directory left), a step, or before any
                partial = sorted(ckpt.glob(f"{cm.TMP_PREFIX}*.{proc.pid}"))
                began = "resumed from" in text if before else "ActorRolloutRefWorker rank" in text
                entry["landed"] = (
                    "save " + partial[0].name[len(cm.TMP_PREFIX) :].split(".")[0]
                    if partial
                    else f"step {entry['checkpoint_after'] + 1}"
                    if began
                    else "startup"
                )
        if entry["resumed_from"] != entry["expected_resume"] and entry.get("landed") != "startup":
            problems.append(f"start {index}: resumed from {entry['resumed_from']}, expected {entry['expected_resume']}")
        if spec["kind"] == "fault" and not (entry["killed"] and fired):
            problems.append(f"start {index}: injected {fault} did not kill it (exit {rc})")
        if spec["kind"] == "disk":
            said = "no space left on" if spec["errno"] == "ENOSPC" else "cannot write to"
            entry["told"] = f"CheckpointError: {said}" in text
            leftovers = sorted(p.name for p in ckpt.glob(f"{cm.TMP_PREFIX}*"))
            if rc == 0 or not entry["told"] or leftovers or entry["checkpoint_after"] != before:
                problems.append(
                    f"start {index}: {fault}: exit {rc}, CheckpointError {'' if entry['told'] else 'not '}told, "
                    f"partial folders {leftovers}, checkpoint {before} -> {entry['checkpoint_after']}; see {log}"
                )
        logged = max(read_metrics(root / "run")[1], default=0)
        if logged < entry["checkpoint_after"] > before:  # published by this start, killed before its log line:
            entry["unlogged_checkpoint"] = True  # the next start restores the record from data.pt (compared below)
        where = "" if spec["kind"] == "finish" else entry.get("landed") or f"{entry['phase']}:{entry['step']}"
        echo(
            f"start {index:2d} {entry['kind']:8s} {where:17s} resumed from {entry['resumed_from'] or '-':>2} -> "
            f"checkpoint {entry['checkpoint_after']:2d}  exit {rc:3d}  {entry['wall_s']:5.1f} s"
        )
        starts.append(entry)
        if (entry["killed"] or spec["kind"] == "disk") and spec["kind"] != "finish":
            pending.pop(0)
            continue
        if spec["kind"] != "finish" or rc != 0:
            problems.append(
                f"start {index}: exit {rc}, "
                + (f"{len(pending)} kills left" if spec["kind"] != "finish" else "the final start failed")
                + f"; see {log}"
            )
        break
    return {
        "starts": starts,
        "kills": sum(s["killed"] for s in starts),
        "problems": problems,
        "resumes": sum(s["resumed_from"] is not None for s in starts),
        "disk_faults": sum(s["kind"] == "disk" and bool(s.get("told")) for s in starts),
    }


def compare_values(a, b, where: str, out: list[str], limit: int = 5) -> None:
    """Append to ``out`` (at most ``limit`` entries from this call) where the nested values ``a`` and ``b`` differ:
    tensors and arrays bitwise (and dtype and shape), floats bitwise, dicts by keys, sequences by length."""
    import numpy as np
    import torch

    start = len(out)

    def walk(x, y, path: str) -> None:
        if len(out) - start >= limit:
            return
        if isinstance(x, (torch.Tensor, np.ndarray)) and type(x) is type(y):
            if x.dtype != y.dtype or x.shape != y.shape:
                out.append(f"{path}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
            elif (
                isinstance(x, np.ndarray)
                and x.tobytes() != y.tobytes()
                or isinstance(x, torch.Tensor)
                and not (torch.equal(*(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for t in (x, y))))
            ):
                out.append(f"{path}: values differ")
        elif isinstance(x, dict) and isinstance(y, dict):
            if set(x) != set(y):
                out.append(f"{path}: keys differ {sorted(map(str, set(x) ^ set(y)))[:5]}")
            for key in (k for k in x if k in y):
                walk(x[key], y[key], f"{path}/{key}")
        elif isinstance(x, (list, tuple)) and type(x) is type(y):
            if len(x) != len(y):
                out.append(f"{path}: length {len(x)} vs {len(y)}")
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}[{i}]")
        elif type(x) is not type(y) or (struct.pack("d", x) != struct.pack("d", y) if type(x) is float else x != y):
            out.append(f"{path}: {x!r:.80} vs {y!r:.80}")

    walk(a, b, where)


def _load(path: Path):
    """A checkpoint file's content: ``.pt`` (``torch.load``), ``.safetensors``, ``.json``; else its bytes. The
    step's metrics record kept in ``data.pt`` loses its :data:`VOLATILE` keys (timings differ between runs)."""
    import torch
    from safetensors.torch import load_file

    readers = {
        ".pt": lambda: torch.load(path, weights_only=False, map_location="cpu"),
        ".safetensors": lambda: load_file(str(path)),
        ".json": lambda: json.loads(path.read_text()),
    }
    content = readers.get(path.suffix, path.read_bytes)()
    if path.name == "data.pt" and isinstance(content, dict) and isinstance(content.get("metrics"), dict):
        content["metrics"] = {k: v for k, v in content["metrics"].items() if not k.startswith(VOLATILE)}
    return content


def compare_checkpoint(ref_dir: Path, run_dir: Path) -> list[str]:
    """Differences between two ``global_step_N`` directories: the manifests' step, epoch, world size and resume keys,
    the lists of files, and each file but ``config.yaml`` (read here, not trusted to the manifest; when the bytes
    differ, compared by content with :func:`compare_values`). Every file of :data:`REQUIRED_FILES` must be there."""
    try:
        ref_manifest, run_manifest = (json.loads((d / cm.MANIFEST).read_text()) for d in (ref_dir, run_dir))
    except (OSError, json.JSONDecodeError) as err:
        return [f"{run_dir.name}: no readable manifest ({err})"]
    out = [
        f"{run_dir.name}/{cm.MANIFEST}: {key} {ref_manifest.get(key)} vs {run_manifest.get(key)}"
        for key in ("step", "epoch", "world_size", "resume_keys")
        if ref_manifest.get(key) != run_manifest.get(key)
    ]
    listed, others = ({e["path"] for e in m["files"]} - {"config.yaml"} for m in (ref_manifest, run_manifest))
    if listed != others:
        out.append(f"{run_dir.name}: files differ {sorted(listed ^ others)}")
    out += [f"{run_dir.name}: {name} missing" for name in REQUIRED_FILES if name not in listed]
    for rel in sorted(listed & others):
        a, b = ref_dir / rel, run_dir / rel
        if not (a.is_file() and b.is_file()):
            out.append(f"{run_dir.name}/{rel}: missing")
        elif a.read_bytes() != b.read_bytes():
            found = len(out)
            compare_values(_load(a), _load(b), f"{run_dir.name}/{rel}", out)
            if len(out) == found and a.suffix not in (".pt", ".safetensors", ".json"):
                out.append(f"{run_dir.name}/{rel}: bytes differ")
    return out


def compare_metrics(ref_run: Path, run: Path, steps: int) -> list[str]:
    """Differences between two ``metrics.jsonl``: in ``run`` the steps 1..``steps`` logged once each, in order, no
    unreadable line; per step the same keys and bitwise-equal values but for keys starting with :data:`VOLATILE`."""
    (ref, _, _), (got, order, bad) = read_metrics(ref_run), read_metrics(run)
    out = [f"metrics.jsonl: {bad} unreadable line(s)"] if bad else []
    if order != list(range(1, steps + 1)):
        out.append(f"metrics.jsonl: steps logged {order}, expected 1..{steps} once each")
    for step in range(1, steps + 1):
        a, b = ref.get(step), got.get(step)
        if a is None or b is None:
            out.append(f"metrics step {step}: missing in the {'reference' if a is None else 'campaign'} run")
            continue
        keys_a, keys_b = ({k for k in m if not k.startswith(VOLATILE)} for m in (a, b))
        if keys_a != keys_b:  # a record restored from its checkpoint lacks the save's own timing (volatile)
            out.append(f"metrics step {step}: keys differ {sorted(keys_a ^ keys_b)}")
        for key in sorted(k for k in set(a) & set(b) if not k.startswith(VOLATILE)):
            compare_values(a[key], b[key], f"metrics step {step} {key}", out)
    return out


def compare_runs(ref_root: Path, run_root: Path, steps: int) -> list[str]:
    """Every mismatch between the reference and the campaign run: checkpoints of steps 1..``steps``
    (:func:`compare_checkpoint`) and ``metrics.jsonl`` (:func:`compare_metrics`); empty when bitwise equal."""
    out = []
    for step in range(1, steps + 1):
        a, b = (root / "ckpt" / f"{cm.STEP_PREFIX}{step}" for root in (ref_root, run_root))
        if a.is_dir() and b.is_dir():
            out += compare_checkpoint(a, b)
        else:
            out.append(f"{a.name}: missing in the {'campaign run' if a.is_dir() else 'reference'}")
    return out + compare_metrics(ref_root / "run", run_root / "run", steps)


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring). Returns the exit status: 0 when all planned kills happened, every
    start resumed where it should and nothing mismatched, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs to deliver (default 20)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: 2 + kills/3, 3..12)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill plan (kinds, phases, steps, delays)")
    parser.add_argument("--external-share", type=float, default=0.3, help="share of external kills (default 0.3)")
    parser.add_argument(
        "--disk-faults", type=int, default=2, help="saves refused by the disk, ENOSPC and EROFS in turn (default 2)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where the runs go (default: a temporary dir)")
    parser.add_argument("--keep", action="store_true", help="keep the workdir (default: deleted when done)")
    parser.add_argument("--output", type=Path, default=None, help="write the JSON summary here")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one start may run (default 900)")
    args = parser.parse_args(argv)
    steps, rng = args.steps or max(3, min(12, 2 + math.ceil(args.kills / 3))), random.Random(args.seed)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kill_campaign_"))
    if (work / "campaign").exists() or (work / "reference").exists():
        parser.error(f"{work} already holds a campaign; give an empty --workdir")
    t0 = time.monotonic()
    print(f"kill campaign: {args.kills} kills, {steps} steps, seed {args.seed}, workdir {work}", flush=True)
    timing = run_reference(work / "reference", prepare_data(work / "data"), steps, 2 * args.timeout)
    print(f"reference: {timing['wall_s']} s ({timing['startup_s']} s startup, {timing['step_s']} s/step)", flush=True)
    n_ext, phases = round(args.kills * args.external_share), rng.sample(FAULT_PHASES, len(FAULT_PHASES))
    plan = [{"kind": "external"}] * n_ext + [
        {"kind": "fault", "phase": phases[i % len(phases)]} for i in range(args.kills - n_ext)
    ]  # each phase equally often (±1)
    rng.shuffle(plan)
    for i in range(args.disk_faults):  # spread among the kills
        plan.insert(rng.randrange(len(plan) + 1), {"kind": "disk", "errno": ("ENOSPC", "EROFS")[i % 2]})
    campaign = run_campaign(
        work / "campaign",
        work / "data",
        steps,
        plan,
        timing,
        rng,
        args.timeout,
        echo=lambda line: print(line, flush=True),
    )
    mismatches = compare_runs(work / "reference", work / "campaign", steps)
    wall = time.monotonic() - t0
    ok = not mismatches and not campaign["problems"] and campaign["kills"] == args.kills
    ok = ok and campaign["disk_faults"] == args.disk_faults
    by = collections.Counter(
        f"external {st['landed']}" if st["kind"] == "external" else f"{st['kind']} {st['phase']}"
        for st in campaign["starts"]
        if st["killed"]
    )
    print(
        "\n".join(
            [
                f"kills: {campaign['kills']} of {args.kills} planned "
                f"({', '.join(f'{k}: {v}' for k, v in sorted(by.items()))})",
                f"starts: {len(campaign['starts'])}, resumes (from a checkpoint): {campaign['resumes']}",
                f"disk faults told and survived: {campaign['disk_faults']} of {args.disk_faults}",
                f"problems: {len(campaign['problems'])}",
                *(f"  - {p}" for p in campaign["problems"]),
                f"mismatches: {len(mismatches)}",
                *(f"  - {m}" for m in mismatches[:50]),
                f"wall time: {wall:.0f} s",
                "OK: bitwise equal to the uninterrupted run" if ok else "FAILED",
            ]
        ),
        flush=True,
    )
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps(
                {
                    "command": " ".join(
                        ["python benchmarks/kill_campaign.py", *(sys.argv[1:] if argv is None else argv)]
                    ),
                    "kills_planned": args.kills,
                    "kills": campaign["kills"],
                    "disk_faults": campaign["disk_faults"],
                    "steps": steps,
                    "seed": args.seed,
                    "resumes": campaign["resumes"],
                    "mismatches": mismatches,
                    "problems": campaign["problems"],
                    "reference": timing,
                    "wall_s": round(wall, 1),
                    "ok": ok,
                    "starts": campaign["starts"],
                },
                indent=1,
            )
            + "\n"
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
