"""One command that runs and measures the GPU whenever one is lent: ``bash benchmarks/gpu_suite.sh``.

Runs, each as a child process with its own time limit, in this order (what users run first). The whole suite stays
under ``--budget-s`` (540 s by default: one call of a lent GPU machine, whose sessions get 15 minutes of device time
in all, machine start-up included; a call that fails at once leaves room for a second, and ``--resume`` measures in a
later session what one call could not). A step may use the time left less what ``RESERVE`` keeps for the steps after
it, and a model of ``update_mfu`` the step's time left less ``MODEL_RESERVE`` for each model after it, so that a slow
step cannot starve the rest; a step with under ``MIN_LAUNCH_S`` left is recorded as not run instead of being started.
A step out of time gets SIGTERM, then SIGKILL 5 s later, with everything in its process group:

1. ``main_job`` — ``benchmarks/resume_check.py``: the router main job as a user runs it (``bash
   run_router_training.sh``, the GPU recipe, on ``--train-model`` at 8 prompts x 4 x 64 tokens) for 3 steps with
   ``trainer.deterministic=true``; the same command stopped by SIGTERM after step 1 and run again, resuming; the two
   runs' last checkpoints and metrics compared bit for bit;
2. ``train_grpo`` — ``train_grpo.sh`` for 6 steps on ``--train-model`` (``smollm2-135m``; ``random:smollm2-135m``
   where its weights are not on the machine) with ``trainer.single_process=true`` (the GPU machines have no Ray) at
   ``TRAIN_SIZES``: seconds per step and each phase's share of the step (a run stopped by its time limit after two
   or more steps is kept as ``partial``);
3. ``trl`` — ``benchmarks/bench_grpo_vs_trl.py --device cuda``: our GRPO step against TRL's ``GRPOTrainer`` on the
   same GPU, model, prompts, group size and lengths, HF generation for both (recorded as skipped where ``trl`` is not
   importable: carry it as wheels, benchmarks/README.md);
4. ``update_mfu`` — ``benchmarks/bench_gpu_mfu.py`` on the Qwen2-0.5B-shaped model (8 prompts x 4, R = 512): the
   padded, packed and shared-prompt layouts with sdpa and the HF rollout's generated tokens/s (plain and static KV
   cache, both decoding with the rollout's plain copy of the model, and ``wrapped``: through the FSDP2 wrapper);
   then the packed and shared layouts with FlexAttention, all three with each decoder
   layer compiled, and with gradient checkpointing; and the SmolLM2-135M-shaped model (update and rollout); a model
   stopped by its time limit keeps the figures it measured before (``partial``; the benchmark writes its JSON after
   every measurement), and ``--resume`` keeps it as measured (delete its entry from the JSON to measure it again);
   a model that crashed keeps its figures too but stays a failure;
5. ``exactness`` — the FlexAttention tests that need CUDA (gradients and whole updates against the padded path) and
   the bf16 mixed-precision policy on CUDA against a hand-built bf16 computation;
6. ``async`` — ``benchmarks/bench_async_vs_sync.py --only async`` when Ray is importable (else recorded as skipped,
   with the reason);
7. the comparison of every figure with the newest committed ``benchmarks/results/gpu_*.json`` measured on the same
   GPU model (ratio new / old).

``--only`` picks steps and ``--resume JSON`` starts from what an earlier run on the same GPU model recorded: what it
measured is kept, and the steps of ``--only`` (and ``update_mfu`` models) it did not measure run again, so the suite
can be split over several calls or sessions. The JSON (``--output``, default ``benchmarks/results/gpu_<date>.json``)
is written after every step, so a call cut short keeps what it measured; a Markdown table goes to stdout. A step that
fails, raises or runs out of time is recorded with its reason and the suite goes on. ``--cpu-smoke`` runs the same
steps on CPU at toy sizes (2-layer models in float32, the ``tiny`` preset, 1 training step) so that CI checks the
suite itself; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUDGET_S = 540.0
SMOKE_BUDGET_S = 1200.0  # --cpu-smoke on 2 CPU cores: ~7 min
# the time kept for each step still to run, as a fraction of --budget-s (540 s: 54 / 92 / 135 / 27 / 22 s). Measured
# on an H200 on 2026-11-27: the 0.5B model's 3 updates and 3 rollouts of 3 calls took 226 s (update_mfu keeps what
# each model measured before its time ran out; the suite now times 1 rollout call after the warm-up), a
# train_grpo.sh step at TRAIN_SIZES ~10 s after ~30 s of start-up (54 s: 2 or 3 steps, kept as partial). The main
# job (three starts of ~30 s, 6 steps of 64 tokens, 3 checkpoints of ~2 GB) is estimated at ~170 s; it gets what is
# left, 232 s when Ray is missing (as on the lent machines: the async step is then skipped at once). The CUDA
# exactness tests took over 53 s in each earlier call: they get what is left at the end
RESERVE = {"train_grpo": 0.1, "trl": 0.17, "update_mfu": 0.25, "exactness": 0.05, "async": 0.04}
MODEL_RESERVE = 0.08  # of update_mfu's time, kept for each model after the one starting
MIN_LAUNCH_S = 15.0


def _text(value) -> str:
    """A child's captured output as text (bytes after a timeout)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def run_step(name: str, cmd: list[str], timeout_s: float, env: dict | None = None) -> dict:
    """Run ``cmd`` in its own process group; ``{"ok", "seconds", "returncode", "tail"}`` (the output's last 2,000
    characters on failure). On a timeout the whole group gets SIGTERM, then SIGKILL 5 s later (a launch script's
    trainer too, not only the shell that started it). Under ``MIN_LAUNCH_S`` it is not started:
    ``{"ok": False, "not_run": ...}``."""
    if timeout_s < MIN_LAUNCH_S:
        print(f"[gpu_suite] {name}: not run ({timeout_s:.0f} s left)", flush=True)
        return {"ok": False, "not_run": f"no time left ({timeout_s:.0f} s)"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        ok, code, text = proc.returncode == 0, proc.returncode, _text(out)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # a child that cleans up on SIGTERM (resume_check's runs) gets to
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            out = b""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        more, _ = proc.communicate()
        out = _text(out) + _text(more)
        ok, code, text = False, None, f"timed out after {timeout_s:.0f} s: {_text(out)[-1500:]}"
    seconds = time.perf_counter() - start
    print(f"[gpu_suite] {name}: {'ok' if ok else 'FAILED'} in {seconds:.0f} s", flush=True)
    return {"ok": ok, "seconds": round(seconds, 1), "returncode": code, **({} if ok else {"tail": text[-2000:]})}


def measured(step: dict) -> bool:
    """Whether a step's (or model's) record holds a measurement to keep: it succeeded, was skipped on purpose, or (a
    training run stopped by its time limit) is partial."""
    return bool(step.get("ok") or step.get("skipped") or step.get("partial"))


def mfu_runs(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 4 (module docstring). ``done``: an earlier run's records of the models (those measured are kept, the others
    run again)."""
    if args.cpu_smoke:
        configs = {"qwen2-0.5b": ["--model-shape", "qwen2-0.5b"]}
        # --cpu-smoke computes in float32, as the workers do on CPU (bench_gpu_mfu.py's --mixed-precision default)
        sizes = [
            "--cpu-smoke",
            "--prompts",
            "2",
            "--n",
            "2",
            "--response-length",
            "16",
            "--micro-batch",
            "2",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--rollout-micro-batch",
            "2",
        ]
    else:
        qwen, no_rollout = ["--model-shape", "qwen2-0.5b"], ["--rollouts", ""]
        configs = {
            "qwen2-0.5b": [*qwen, "--rollouts", "plain,wrapped,static", "--rollout-steps", "1"],
            "qwen2-0.5b_flex": [
                *qwen,
                "--attn-implementation",
                "flex_attention",
                "--layouts",
                "packed,shared",
                *no_rollout,
            ],
            "qwen2-0.5b_compiled": [*qwen, "--compile-layers", *no_rollout],
            "qwen2-0.5b_gc": [*qwen, "--gradient-checkpointing", *no_rollout],
            "smollm2-135m": ["--model-shape", "smollm2-135m", "--rollouts", "plain,static"],
        }
        sizes = ["--prompts", "8", "--n", "4", "--response-length", "512", "--micro-batch", "8"]
    out = dict(done or {})
    todo = [name for name in configs if not measured(out.get(name, {}))]
    reserve = MODEL_RESERVE * max(deadline - time.time(), 0.0)
    for i, name in enumerate(todo):
        path = tmp / f"mfu_{name}.json"
        timeout = deadline - time.time() - reserve * (len(todo) - 1 - i)
        step = run_step(
            f"update_mfu/{name}",
            [sys.executable, "benchmarks/bench_gpu_mfu.py", *sizes, *configs[name], "--json", str(path)],
            timeout,
        )
        if path.is_file():  # written after every measurement: a model stopped by its time limit keeps those
            result = json.loads(path.read_text())
            step.update(
                update={
                    k: {"mfu": v["mfu"], "median_s": v["median_s"], "max_mem_gib": v["max_mem_gib"]}
                    for k, v in result["update"].items()
                },
                rollout_tokens_per_s={k: v["tokens_per_s"] for k, v in result.get("rollout", {}).items()},
                device=result["gpu"],
                params=result["params"],
            )
            timed_out = "returncode" in step and step["returncode"] is None
            if timed_out and (step["update"] or step["rollout_tokens_per_s"]):
                step["partial"] = True  # stopped by its time limit, not a crash: what it measured counts
        out[name] = step
    return {name: out[name] for name in configs if name in out}


def exactness_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """The exactness tests that need CUDA (FlexAttention's backward has no CPU implementation): the flex layouts'
    gradients and whole updates against the padded sdpa path, and the bf16 policy on CUDA. On CPU (``--cpu-smoke``)
    the same files run their CPU tests and skip those."""
    only_cuda = [] if args.cpu_smoke else ["-k", "flex_gradients or flex_update or cuda"]  # CI runs the CPU ones
    return run_step(
        "exactness",
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *only_cuda,
            "tests/workers/test_flex_attention_on_cpu.py",
            "tests/workers/test_mixed_precision_on_cpu.py",
        ],
        deadline - time.time(),
    )


def random_model(shape: str, tmp: Path) -> str:
    """A model directory with ``shape``'s architecture (``bench_gpu_mfu.SHAPES``), weights from a fixed seed and the
    real SmolLM2 tokenizer: the trainer's step time on machines without the pretrained weights (random weights rarely
    emit EOS, so every response runs to its length: the slowest case)."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    from bench_gpu_mfu import SHAPES  # this script's folder is on sys.path
    from verl.utils.model_presets import prepare_tokenizer

    family, config = SHAPES[shape]
    torch.manual_seed(0)
    model = getattr(transformers, f"{family}ForCausalLM")(getattr(transformers, f"{family}Config")(**config))
    path = tmp / f"random_{shape}"
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(str(prepare_tokenizer())).save_pretrained(path)
    return str(path)


def train_model(args, tmp: Path) -> str:
    """The model the training steps use: ``tiny`` with ``--cpu-smoke``, else ``--train-model`` (a ``random:<shape>``
    one built once per suite run, in ``tmp``)."""
    if args.cpu_smoke:
        return "tiny"
    if args.train_model.startswith("random:"):
        shape = args.train_model[len("random:") :]
        built = tmp / f"random_{shape}"
        return str(built) if built.is_dir() else random_model(shape, tmp)
    return args.train_model


def main_job_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 1 (module docstring): ``resume_check.py``, given an absolute deadline 20 s before the step's: its runs
    are sessions of their own, which it kills itself at its deadline or on the step's SIGTERM."""
    if deadline - time.time() < MIN_LAUNCH_S + 20:
        return {"ok": False, "not_run": f"no time left ({deadline - time.time():.0f} s)"}
    path = tmp / "resume_check.json"
    model = train_model(args, tmp)
    cmd = [
        sys.executable,
        "benchmarks/resume_check.py",
        "--model",
        model,
        "--json",
        str(path),
        "--deadline-at",
        f"{deadline - 20:.0f}",
        *(["--cpu-smoke"] if args.cpu_smoke else []),
    ]
    step = run_step("main_job (SIGTERM and resume, bitwise)", cmd, deadline - time.time())
    if path.is_file():
        result = json.loads(path.read_text())
        step.update(bitwise_equal=result.get("ok", False), result=result)
        step["ok"] = step["ok"] and step["bitwise_equal"]
        if result.get("reference", {}).get("step_s_mean"):
            step["step_s"] = result["reference"]["step_s_mean"]
    return step


def trl_importable() -> bool:
    """Whether TRL is installed (the lent GPU machines have none unless it is carried as wheels)."""
    return importlib.util.find_spec("trl") is not None


def trl_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 3 (module docstring): the bench's JSON is written after each system, so a TRL half cut short keeps ours.
    Without TRL (the CPU smoke in CI), our half alone runs and TRL's is recorded as skipped."""
    path = tmp / "trl.json"
    sizes = (
        [
            "--prompts",
            "2",
            "--n",
            "2",
            "--max-new-tokens",
            "8",
            "--micro-batch",
            "4",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--single-process",
        ]
        if args.cpu_smoke
        else [
            "--device",
            "cuda",
            "--prompts",
            "8",
            "--n",
            "4",
            "--max-new-tokens",
            "128",
            "--micro-batch",
            "8",
            "--steps",
            "2",
            "--warmup",
            "1",
        ]
    )
    only = [] if trl_importable() else ["--only", "ours"]
    step = run_step(
        "trl (GRPO step vs TRL)",
        [
            sys.executable,
            "benchmarks/bench_grpo_vs_trl.py",
            *sizes,
            *only,
            "--model",
            train_model(args, tmp),
            "--json",
            str(path),
        ],
        deadline - time.time(),
    )
    if only:
        step["trl_skipped"] = "trl is not importable on this machine"
    if path.is_file():
        by = {r["system"]: r for r in json.loads(path.read_text())["results"]}
        step.update(
            {
                name: {
                    k: r.get(k)
                    for k in (
                        "step_median_s",
                        "gen_median_s",
                        "gen_tokens_per_s",
                        "mean_response_tokens",
                        "phases_s",
                        "gpu_peak_gb",
                        "peak_rss_gb",
                    )
                }
                for name, r in by.items()
            }
        )
        if "ours" in by and "trl" in by:
            step["ours_over_trl_step"] = by["ours"]["step_median_s"] / by["trl"]["step_median_s"]
        elif "ours" in by and not step["ok"] and step.get("returncode") is None:
            step["partial"] = True  # TRL's half ran out of time: ours still counts
    return step


# train_grpo's batch on a GPU (ToolRL's GPU defaults, 512 prompts x 4 x 1,024 tokens, take minutes per step); each
# can be changed through the environment variable of the same name. Random weights rarely emit EOS: every response
# runs to MAX_RESPONSE_LENGTH.
TRAIN_SIZES = {
    "TRAIN_BATCH_SIZE": "8",
    "PPO_MINI_BATCH_SIZE": "8",
    "ROLLOUT_N": "4",
    "MAX_PROMPT_LENGTH": "1024",
    "MAX_RESPONSE_LENGTH": "128",
    "FILTER_OVERLONG": "True",
    "TOTAL_STEPS": "6",
}
SMOKE_TRAIN_SIZES = {
    "N_GPUS": "0",
    "TRAIN_BATCH_SIZE": "2",
    "PPO_MINI_BATCH_SIZE": "2",
    "MICRO_BATCH_PER_GPU": "2",
    "ROLLOUT_N": "2",
    "MAX_RESPONSE_LENGTH": "8",
    "TOTAL_STEPS": "1",
}


def train_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 2 (module docstring): ``train_grpo.sh`` and the per-phase shares of its steps. The steps a run finished
    before its time ran out count too (``metrics.jsonl`` is written per step)."""
    run_dir = tmp / "train_grpo"
    sizes = SMOKE_TRAIN_SIZES if args.cpu_smoke else {k: os.environ.get(k, v) for k, v in TRAIN_SIZES.items()}
    env = {
        **os.environ,
        "RUN_DIR": str(run_dir),
        "EXPERIMENT_NAME": "gpu_suite",
        "SINGLE_PROCESS": "True",
        "SAVE_FREQ": "-1",
        "TEST_FREQ": "-1",
        "PYTHON": sys.executable,
        **sizes,
    }
    if deadline - time.time() < MIN_LAUNCH_S:
        return run_step(f"train_grpo ({args.train_model})", [], deadline - time.time())  # recorded as not run
    env["BASE_MODEL"] = train_model(args, tmp)
    step = run_step(
        f"train_grpo ({args.train_model})",
        [
            "bash",
            "train_grpo.sh",
            f"trainer.default_local_dir={tmp}/ckpt",
            "trainer.val_before_train=False",
            "trainer.single_process=true",
        ],
        deadline - time.time(),
        env=env,
    )
    step["sizes"] = sizes
    from kill_campaign import read_metrics  # this script's folder is on sys.path; a torn last line is skipped

    records = [r for r in read_metrics(run_dir)[0].values() if "timing_s/step" in r]
    if len(records) >= 2 or (records and step["ok"]):
        step["partial"] = not step["ok"]  # stopped by its time limit: the steps it finished still count
        later = records[1:] or records  # the first step includes compilation / warm-up
        step_s = sum(r["timing_s/step"] for r in later) / len(later)
        phases = {
            k[len("timing_s/") :]: sum(r.get(k, 0.0) for r in later) / len(later) / step_s
            for k in later[0]
            if k.startswith("timing_s/") and k != "timing_s/step"
        }
        step.update(
            model=args.train_model,
            steps=len(records),
            step_s=step_s,
            phase_share={k: round(v, 3) for k, v in phases.items()},
        )
    return step


def ray_importable() -> bool:
    """Whether Ray is installed (the lent GPU machines have none)."""
    return importlib.util.find_spec("ray") is not None


def async_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 6 (module docstring)."""
    if not ray_importable():
        return {"ok": False, "skipped": "Ray is not importable on this machine"}
    path = tmp / "async.json"
    sizes = (
        ["--rows", "8", "--prompts", "2", "--n", "2", "--max-new-tokens", "8", "--steps", "1"]
        if args.cpu_smoke
        else ["--model", "smollm2-135m", "--steps", "6"]
    )
    step = run_step(
        "async",
        [sys.executable, "benchmarks/bench_async_vs_sync.py", "--only", "async", *sizes, "--json", str(path)],
        deadline - time.time(),
    )
    if step["ok"] and path.is_file():
        summary = next((r for r in json.loads(path.read_text()) if r.get("mode") == "async"), {})
        step["result"] = {
            k: summary[k]
            for k in ("rollouts_trained_per_s", "rollouts_generated_per_s", "learner_step_s_median", "frac_on_policy")
            if k in summary
        }
    return step


STEPS = {
    "main_job": main_job_run,
    "train_grpo": train_run,
    "trl": trl_run,
    "update_mfu": mfu_runs,
    "exactness": exactness_run,
    "async": async_run,
}


def flatten(results: dict) -> dict:
    """Numeric leaves of ``results`` as ``{"a/b/c": value}`` (for the comparison and the table)."""
    from verl.utils.checkpoint_manifest import flatten as flatten_keys

    return {
        name: float(value)
        for name, value in flatten_keys(results, sep="/").items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def compare(figures: dict, previous: Path | None) -> dict:
    """``{figure: new / old}`` for every figure both runs have (MFU, tokens/s, step seconds, ...)."""
    if previous is None:
        return {}
    old = flatten(json.loads(previous.read_text()).get("figures", {}))
    return {k: round(v / old[k], 3) for k, v in figures.items() if old.get(k)}


def previous_result(device: str, exclude: tuple[Path, ...] = ()) -> Path | None:
    """The newest committed ``benchmarks/results/gpu_*.json`` measured on ``device`` (figures from another GPU model
    are not compared), leaving out ``exclude`` (this run's output and the file it resumes). Committed means tracked
    by git; outside a git checkout every such file counts."""
    results = REPO_ROOT / "benchmarks" / "results"
    try:
        listed = subprocess.run(
            ["git", "ls-files", "benchmarks/results/"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
        paths = [REPO_ROOT / p for p in listed]
    except (OSError, subprocess.CalledProcessError):
        paths = list(results.glob("*"))
    skip = {p.resolve() for p in exclude}
    for path in sorted((p for p in paths if p.name.startswith("gpu_") and p.suffix == ".json"), reverse=True):
        if path.is_file() and path.resolve() not in skip and json.loads(path.read_text()).get("device") == device:
            return path
    return None


def git_commit() -> str | None:
    """The checkout's commit (``-dirty`` when tracked files differ from it): ``$GPU_SUITE_TREE`` where set (a copy of
    the tree without ``.git``, as on the lent machines), else git's answer, else None."""
    if os.environ.get("GPU_SUITE_TREE"):
        return os.environ["GPU_SUITE_TREE"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def load_resume(path: str, device: str, cpu_smoke: bool) -> dict:
    """The steps recorded by the run ``--resume`` names. Raises ValueError when it is not a suite JSON or was measured
    on another device or in the other mode (its figures would be mixed with this run's)."""
    record = json.loads(Path(path).read_text())
    if not isinstance(record.get("steps"), dict):
        raise ValueError(f"--resume {path}: not a gpu_suite JSON (no 'steps' object)")
    if (record.get("device"), bool(record.get("cpu_smoke"))) != (device, cpu_smoke):
        raise ValueError(
            f"--resume {path}: measured on {record.get('device')!r} (cpu_smoke={record.get('cpu_smoke')}),"
            f" this run is on {device!r} (cpu_smoke={cpu_smoke}); start a new JSON instead"
        )
    return record["steps"]


def summary(steps: dict, device: str, stamp: str, cpu_smoke: bool, previous: Path | None) -> dict:
    """The suite's JSON: steps, figures and their ratios to ``previous``."""
    mfu_steps = steps.get("update_mfu", {})
    figures = {
        "update_mfu": {name: s.get("update", {}) for name, s in mfu_steps.items()},
        "rollout_tokens_per_s": {name: s.get("rollout_tokens_per_s", {}) for name, s in mfu_steps.items()},
        "main_job_step_s": steps.get("main_job", {}).get("step_s"),
        "train_grpo_step_s": steps.get("train_grpo", {}).get("step_s"),
        "trl": {
            k: v
            for k, v in {
                "ours_step_s": steps.get("trl", {}).get("ours", {}).get("step_median_s"),
                "trl_step_s": steps.get("trl", {}).get("trl", {}).get("step_median_s"),
                "ours_over_trl_step": steps.get("trl", {}).get("ours_over_trl_step"),
            }.items()
            if v is not None
        },
        "async": steps.get("async", {}).get("result") or {},
    }
    figures = {k: v for k, v in figures.items() if v not in (None, {})}
    return {
        "date": stamp,
        "cpu_smoke": cpu_smoke,
        "device": device,
        "tree": git_commit(),
        "steps": {name: steps[name] for name in STEPS if name in steps},
        "figures": figures,
        "compared_with": str(previous.relative_to(REPO_ROOT)) if previous else None,
        "ratio_vs_previous": compare(flatten(figures), previous),
    }


def failures(steps: dict) -> list[str]:
    """The steps and ``update_mfu`` models recorded without a measurement (kept from a resumed run too)."""
    failed = [name for name, s in steps.items() if name != "update_mfu" and not measured(s)]
    return failed + [f"update_mfu/{n}" for n, s in steps.get("update_mfu", {}).items() if not measured(s)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="toy sizes on CPU: checks the suite, not the GPU")
    parser.add_argument("--output", default=None, help="JSON (default benchmarks/results/gpu_<date>.json)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help=f"the whole suite's time limit (s; default {DEFAULT_BUDGET_S:.0f}, with --cpu-smoke {SMOKE_BUDGET_S:.0f})",
    )
    parser.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps to run, of {', '.join(STEPS)}")
    parser.add_argument(
        "--resume",
        default=None,
        help="a JSON an earlier (partial) run on the same GPU wrote: what it "
        "measured is kept, the rest of --only runs (again)",
    )
    parser.add_argument(
        "--train-model",
        default="smollm2-135m",
        help="train_grpo.sh's BASE_MODEL; random:<shape> (e.g. random:smollm2-135m) builds that "
        "architecture with seeded random weights where the pretrained ones are not available",
    )
    args = parser.parse_args(argv)
    if args.budget_s is None:
        args.budget_s = SMOKE_BUDGET_S if args.cpu_smoke else DEFAULT_BUDGET_S
    unknown = set(args.only.split(",")) - set(STEPS)
    if unknown:
        parser.error(f"--only: unknown step(s) {sorted(unknown)}; expected some of {', '.join(STEPS)}")
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "gpu_suite: no CUDA GPU here (torch.cuda.is_available() is False); use --cpu-smoke to check the suite",
            file=sys.stderr,
        )
        return 2
    deadline = time.time() + args.budget_s
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M")
    output = Path(args.output or REPO_ROOT / "benchmarks" / "results" / f"gpu_{stamp}.json")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() and not args.cpu_smoke else "cpu"
    try:
        steps = load_resume(args.resume, device, args.cpu_smoke) if args.resume else {}
    except ValueError as err:
        parser.error(str(err))
    exclude = (output,) + ((Path(args.resume),) if args.resume else ())
    previous = None if args.cpu_smoke else previous_result(device, exclude)
    ray_missing = not ray_importable()  # the async step is then skipped at once: no time kept for it
    # update_mfu always runs: it keeps the models already measured and runs the others
    pending = [
        name
        for name in STEPS
        if name in args.only.split(",") and (name == "update_mfu" or not measured(steps.get(name, {})))
    ]
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu_suite_", ignore_cleanup_errors=True) as tmp:
        for i, name in enumerate(pending):
            kept = (
                sum(RESERVE.get(n, 0.0) for n in pending[i + 1 :] if not (n == "async" and ray_missing)) * args.budget_s
            )
            try:
                steps[name] = STEPS[name](args, Path(tmp), deadline - kept, steps.get(name))
            except Exception as err:  # noqa: BLE001 - recorded, and the suite goes on
                print(f"[gpu_suite] {name}: raised {err!r}", flush=True)
                steps[name] = {"ok": False, "error": repr(err)}
            output.write_text(json.dumps(summary(steps, device, stamp, args.cpu_smoke, previous), indent=1) + "\n")
    result = summary(steps, device, stamp, args.cpu_smoke, previous)
    output.write_text(json.dumps(result, indent=1) + "\n")
    ratios = result["ratio_vs_previous"]
    print("\n| figure | value | vs previous |\n|---|---|---|")
    for name, value in sorted(flatten(result["figures"]).items()):
        print(f"| {name} | {value:.4g} | {ratios.get(name, '-')} |")
    failed = failures(result["steps"])
    print(f"\nwritten {output}" + (f"; not measured: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
