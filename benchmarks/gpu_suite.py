"""One command that measures the GPU whenever one is lent (issue 24): ``bash benchmarks/gpu_suite.sh``.

Runs, each as a child process with its own time limit. The whole suite stays under ``--budget-s`` (9 minutes by
default: one call of a lent GPU machine, whose sessions get 15 minutes of device time in all); the time left is split
over the steps still to run in proportion to ``SHARES``, and inside ``update_mfu`` over its models in proportion to
their weights, so that one slow step cannot starve the others:

1. ``update_mfu`` — ``benchmarks/bench_gpu_mfu.py`` on the Qwen2-0.5B-shaped model (8 prompts x 4, R = 512): the
   padded, packed and shared-prompt layouts with sdpa, the packed and shared ones with FlexAttention, all three with
   each decoder layer compiled, and with gradient checkpointing; and on the SmolLM2-135M-shaped model: update-pass
   MFU, peak memory, and the HF rollout's generated tokens/s (plain, shared prefill, static KV cache);
2. ``exactness`` — the FlexAttention tests that need CUDA (gradients and whole updates against the padded path) and
   the bf16 mixed-precision policy on CUDA against a hand-built bf16 computation;
3. ``train_grpo`` — ``train_grpo.sh`` for 10 steps on ``--train-model`` (``smollm2-135m``; ``random:smollm2-135m``
   where its weights are not on the machine) with ``trainer.single_process=true`` (the GPU machines have no Ray):
   seconds per step and each phase's share of the step;
4. ``async`` — ``benchmarks/bench_async_vs_sync.py --only async`` when Ray is importable (else recorded as skipped,
   with the reason);
5. the comparison of every figure with the newest committed ``benchmarks/results/gpu_*.json`` (ratio new / old).

``--only`` picks steps and ``--resume JSON`` keeps what an earlier run measured (its steps and ``update_mfu`` models that
succeeded or were skipped; the failed ones run again), so the suite can be split over several calls or sessions.
Everything goes into one JSON (``--output``, default ``benchmarks/results/gpu_<date>.json``) and a Markdown table on
stdout. A step that fails or runs out of time is recorded with its reason; the suite goes on. ``--cpu-smoke`` runs the
same steps on CPU at toy sizes (2-layer models, the ``tiny`` preset, 1 training step) so that CI checks the suite
itself; its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


SHARES = {"exactness": 0.15, "update_mfu": 0.5, "train_grpo": 0.3, "async": 0.05}  # of the time left, by step


def _text(value) -> str:
    """A child's captured output as text (``TimeoutExpired`` carries bytes even with ``text=True``)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else (value or "")


def run_step(name: str, cmd: list[str], timeout_s: float, env: dict | None = None) -> dict:
    """Run ``cmd``; ``{"ok", "seconds", "returncode", "tail"}`` (the output's last 2,000 characters on failure)."""
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=max(timeout_s, 1))
        ok, code, text = out.returncode == 0, out.returncode, out.stdout + out.stderr
    except subprocess.TimeoutExpired as err:
        ok, code = False, None
        text = f"timed out after {timeout_s:.0f} s: {(_text(err.stdout) + _text(err.stderr))[-1500:]}"
    seconds = time.perf_counter() - start
    print(f"[gpu_suite] {name}: {'ok' if ok else 'FAILED'} in {seconds:.0f} s", flush=True)
    return {"ok": ok, "seconds": round(seconds, 1), "returncode": code, **({} if ok else {"tail": text[-2000:]})}


def mfu_runs(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 1 (module docstring). ``done``: models an earlier run measured (kept, not run again)."""
    if args.cpu_smoke:
        configs = {"qwen2-0.5b": ["--model-shape", "qwen2-0.5b"]}
        sizes = ["--cpu-smoke", "--prompts", "2", "--n", "2", "--response-length", "16", "--micro-batch", "2",
                 "--steps", "1", "--warmup", "0", "--rollout-micro-batch", "2"]
    else:
        qwen, no_rollout = ["--model-shape", "qwen2-0.5b"], ["--rollouts", ""]
        configs = {"qwen2-0.5b": qwen,
                   "qwen2-0.5b_flex": [*qwen, "--attn-implementation", "flex_attention", "--layouts", "packed,shared",
                                       *no_rollout],
                   "qwen2-0.5b_compiled": [*qwen, "--compile-layers", *no_rollout],
                   "qwen2-0.5b_gc": [*qwen, "--gradient-checkpointing", *no_rollout],
                   "smollm2-135m": ["--model-shape", "smollm2-135m", "--rollouts", "plain,static"]}
        sizes = ["--prompts", "8", "--n", "4", "--response-length", "512", "--micro-batch", "8"]
    # shares of the step's time: the first model also times three rollouts (measured on an H200: 226 s of 0.5B)
    weights = {"qwen2-0.5b": 4.0, "qwen2-0.5b_flex": 1.5, "qwen2-0.5b_compiled": 1.5, "qwen2-0.5b_gc": 1.0,
               "smollm2-135m": 2.0}
    out = {name: step for name, step in (done or {}).items() if step.get("ok")}
    todo = [name for name in configs if name not in out]
    for i, name in enumerate(todo):
        path = tmp / f"mfu_{name}.json"
        share = weights.get(name, 1.0) / sum(weights.get(n, 1.0) for n in todo[i:])
        step = run_step(f"update_mfu/{name}", [sys.executable, "benchmarks/bench_gpu_mfu.py", *sizes, *configs[name],
                                               "--json", str(path)], (deadline - time.time()) * share)
        if step["ok"] and path.is_file():
            result = json.loads(path.read_text())
            step.update(update={k: {"mfu": v["mfu"], "median_s": v["median_s"], "max_mem_gib": v["max_mem_gib"]}
                                for k, v in result["update"].items()},
                        rollout_tokens_per_s={k: v["tokens_per_s"] for k, v in result["rollout"].items()},
                        device=result["gpu"], params=result["params"])
        out[name] = step
    return {name: out[name] for name in configs if name in out}


def exactness_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """The exactness tests that need CUDA (FlexAttention's backward has no CPU implementation): the flex layouts'
    gradients and whole updates against the padded sdpa path, and the bf16 policy on CUDA. On CPU (``--cpu-smoke``)
    the same files run their CPU tests and skip those."""
    only_cuda = [] if args.cpu_smoke else ["-k", "flex_gradients or flex_update or cuda"]  # CI runs the CPU ones
    return run_step("exactness", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *only_cuda,
                                  "tests/workers/test_flex_attention_on_cpu.py",
                                  "tests/workers/test_mixed_precision_on_cpu.py"], deadline - time.time())


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


# train_grpo's batch on a GPU (ToolRL's GPU defaults, 512 prompts x 4 x 1,024 tokens, take minutes per step); each
# can be changed through the environment variable of the same name. Random weights rarely emit EOS: every response
# runs to MAX_RESPONSE_LENGTH.
TRAIN_SIZES = {"TRAIN_BATCH_SIZE": "8", "PPO_MINI_BATCH_SIZE": "8", "ROLLOUT_N": "4", "MAX_PROMPT_LENGTH": "1024",
               "MAX_RESPONSE_LENGTH": "128", "FILTER_OVERLONG": "True", "TOTAL_STEPS": "10"}
SMOKE_TRAIN_SIZES = {"N_GPUS": "0", "TRAIN_BATCH_SIZE": "2", "PPO_MINI_BATCH_SIZE": "2", "MICRO_BATCH_PER_GPU": "2",
                     "ROLLOUT_N": "2", "MAX_RESPONSE_LENGTH": "8", "TOTAL_STEPS": "1"}


def train_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 3 (module docstring): ``train_grpo.sh`` and the per-phase shares of its steps. The steps a run finished
    before its time ran out count too (``metrics.jsonl`` is written per step)."""
    run_dir = tmp / "train_grpo"
    sizes = SMOKE_TRAIN_SIZES if args.cpu_smoke else {k: os.environ.get(k, v) for k, v in TRAIN_SIZES.items()}
    env = {**os.environ, "RUN_DIR": str(run_dir), "EXPERIMENT_NAME": "gpu_suite", "SINGLE_PROCESS": "True",
           "SAVE_FREQ": "-1", "TEST_FREQ": "-1", "BASE_MODEL": "tiny" if args.cpu_smoke else args.train_model,
           "PYTHON": sys.executable, **sizes}
    if env["BASE_MODEL"].startswith("random:"):
        env["BASE_MODEL"] = random_model(env["BASE_MODEL"][len("random:"):], tmp)
    step = run_step(f"train_grpo ({args.train_model})", ["bash", "train_grpo.sh", f"trainer.default_local_dir={tmp}/ckpt",
                                   "trainer.val_before_train=False", "trainer.single_process=true"],
                    deadline - time.time(), env=env)
    step["sizes"] = sizes
    metrics = run_dir / "metrics.jsonl"
    records = [r for r in map(json.loads, metrics.read_text().splitlines()) if "timing_s/step" in r] \
        if metrics.is_file() else []
    if len(records) >= 2 or (records and step["ok"]):
        later = records[1:] or records  # the first step includes compilation / warm-up
        step_s = sum(r["timing_s/step"] for r in later) / len(later)
        phases = {k[len("timing_s/"):]: sum(r.get(k, 0.0) for r in later) / len(later) / step_s
                  for k in later[0] if k.startswith("timing_s/") and k != "timing_s/step"}
        step.update(model=args.train_model, steps=len(records), step_s=step_s, phase_share={k: round(v, 3) for k, v in phases.items()})
    return step


def async_run(args, tmp: Path, deadline: float, done: dict | None = None) -> dict:
    """Step 4 (module docstring)."""
    if importlib.util.find_spec("ray") is None:
        return {"ok": False, "skipped": "Ray is not importable on this machine"}
    path = tmp / "async.json"
    sizes = (["--rows", "8", "--prompts", "2", "--n", "2", "--max-new-tokens", "8", "--steps", "1"] if args.cpu_smoke
             else ["--model", "smollm2-135m", "--steps", "6"])
    step = run_step("async", [sys.executable, "benchmarks/bench_async_vs_sync.py", "--only", "async", *sizes,
                              "--json", str(path)], deadline - time.time())
    if step["ok"] and path.is_file():
        summary = next((r for r in json.loads(path.read_text()) if r.get("mode") == "async"), {})
        step["result"] = {k: summary[k] for k in ("rollouts_trained_per_s", "rollouts_generated_per_s",
                                                  "learner_step_s_median", "frac_on_policy") if k in summary}
    return step


STEPS = {"update_mfu": mfu_runs, "exactness": exactness_run, "train_grpo": train_run, "async": async_run}


def flatten(results: dict) -> dict:
    """Numeric leaves of ``results`` as ``{"a/b/c": value}`` (for the comparison and the table)."""
    from verl.utils.checkpoint_manifest import flatten as flatten_keys

    return {name: float(value) for name, value in flatten_keys(results, sep="/").items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def compare(figures: dict, previous: Path | None) -> dict:
    """``{figure: new / old}`` for every figure both runs have (MFU, tokens/s, step seconds, ...)."""
    if previous is None:
        return {}
    old = flatten(json.loads(previous.read_text()).get("figures", {}))
    return {k: round(v / old[k], 3) for k, v in figures.items() if old.get(k)}


def kept_steps(steps: dict) -> dict:
    """What ``--resume`` keeps of an earlier run's steps: those that succeeded or were skipped, and of ``update_mfu``
    the models that succeeded (the rest run again)."""
    kept = {name: s for name, s in steps.items() if name != "update_mfu" and (s.get("ok") or s.get("skipped"))}
    mfu = {name: s for name, s in steps.get("update_mfu", {}).items() if s.get("ok")}
    return {**kept, **({"update_mfu": mfu} if mfu else {})}


def previous_result(device: str) -> Path | None:
    """The newest committed ``benchmarks/results/gpu_*.json`` measured on the same device (figures from another GPU
    are not compared)."""
    for path in sorted(glob.glob(str(REPO_ROOT / "benchmarks" / "results" / "gpu_*.json")), reverse=True):
        if json.loads(Path(path).read_text()).get("device") == device:
            return Path(path)
    return None


def git_commit() -> str | None:
    """The checkout's commit (``-dirty`` when files differ from it), or None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="toy sizes on CPU: checks the suite, not the GPU")
    parser.add_argument("--output", default=None, help="JSON (default benchmarks/results/gpu_<date>.json)")
    parser.add_argument("--budget-s", type=float, default=9 * 60, help="the whole suite's time limit (seconds)")
    parser.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps to run, of {', '.join(STEPS)}")
    parser.add_argument("--resume", default=None, help="a JSON an earlier (partial) run wrote: what it measured is "
                                                       "kept, its failed steps run again (a suite split over calls)")
    parser.add_argument("--train-model", default="smollm2-135m",
                        help="train_grpo.sh's BASE_MODEL; random:<shape> (e.g. random:smollm2-135m) builds that "
                             "architecture with seeded random weights where the pretrained ones are not available")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(STEPS)
    if unknown:
        parser.error(f"--only: unknown step(s) {sorted(unknown)}; expected some of {', '.join(STEPS)}")
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_suite: no CUDA GPU here (torch.cuda.is_available() is False); use --cpu-smoke to check the suite",
              file=sys.stderr)
        return 2
    deadline = time.time() + args.budget_s
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M")
    output = Path(args.output or REPO_ROOT / "benchmarks" / "results" / f"gpu_{stamp}.json")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() and not args.cpu_smoke else "cpu"
    previous = None if args.cpu_smoke else previous_result(device)
    steps = kept_steps(json.loads(Path(args.resume).read_text())["steps"]) if args.resume else {}
    pending = [name for name in args.only.split(",") if name not in steps or name == "update_mfu"]
    with tempfile.TemporaryDirectory(prefix="gpu_suite_") as tmp:
        for i, name in enumerate(pending):
            share = SHARES[name] / sum(SHARES[n] for n in pending[i:])
            step_deadline = time.time() + (deadline - time.time()) * share
            steps[name] = STEPS[name](args, Path(tmp), step_deadline, steps.get(name))
    steps = {name: steps[name] for name in STEPS if name in steps}  # in STEPS order
    mfu_steps = steps.get("update_mfu", {})
    figures = {
        "update_mfu": {name: s.get("update", {}) for name, s in mfu_steps.items()},
        "rollout_tokens_per_s": {name: s.get("rollout_tokens_per_s", {}) for name, s in mfu_steps.items()},
        "train_grpo_step_s": steps.get("train_grpo", {}).get("step_s"),
        "async": steps.get("async", {}).get("result") or {},
    }
    figures = {k: v for k, v in figures.items() if v not in (None, {})}
    result = {"date": stamp, "cpu_smoke": args.cpu_smoke, "device": device, "tree": git_commit(), "steps": steps,
              "figures": figures,
              "compared_with": str(previous.relative_to(REPO_ROOT)) if previous else None,
              "ratio_vs_previous": compare(flatten(figures), previous)}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n")
    ratios = result["ratio_vs_previous"]
    print("\n| figure | value | vs previous |\n|---|---|---|")
    for name, value in sorted(flatten(figures).items()):
        print(f"| {name} | {value:.4g} | {ratios.get(name, '-')} |")
    failed = [name for name, s in steps.items() if name != "update_mfu" and s.get("ok") is False and
              not s.get("skipped")]
    failed += [f"update_mfu/{n}" for n, s in mfu_steps.items() if not s.get("ok")]
    print(f"\nwritten {output}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
