"""Side-by-side GRPO training step: this project's trainer (``main_ppo.run_ppo``, one Ray worker) against TRL's
``GRPOTrainer``, at equal settings on the same machine.

Both systems train the same model (``--model``, default the ``tiny`` preset: the same weights on disk) on the 80
RLLA validation prompts (``resolve_rlla_file('test')``) taken in file order, so step ``k`` of either system sees the
same ``--prompts`` rows (the order wraps around after the last row). Shared settings:

- ``--n`` samples per prompt at temperature 1.0 (top-k/top-p off), at most ``--max-new-tokens`` new tokens;
- one optimizer step per step (ours: ``ppo_mini_batch_size`` = the whole batch, one PPO epoch; TRL: gradient
  accumulation over the batch), micro-batches of ``--micro-batch`` sequences for every forward/backward (ours also for
  the old-log-prob forward), one ``generate`` call over all ``prompts x n`` rows;
- AdamW, lr ``--lr`` (constant), weight decay 0.01, gradient clipping 1.0, token-mean loss, clip 0.2;
- no reference model and no KL (TRL ``beta=0``; ours ``use_kl_loss=False, use_kl_in_reward=False``);
- ``--device cpu`` (the default): float32 (TRL ``bf16=False, use_cpu=True``; ours always runs float32 on CPU),
  ``--threads`` torch threads; ``--device cuda``: one GPU, bf16 compute over float32 master weights for both (TRL
  ``bf16=True``: autocast; ours: FSDP2's bf16 ``MixedPrecisionPolicy``, the default on CUDA), HF ``generate`` for both
  (TRL without vLLM, ours ``rollout.name=hf``), ours in the trainer's process (the GPU recipe on one GPU) with the GPU
  recipe's layout (shared prompt and fused head off unless asked for);
- gradient checkpointing on or off for both (``--gradient-checkpointing``, on by default as TRL's GRPOConfig);
- the RLLA reward (``compute_score(..., wrapper="qwen")``).

Ours is exactly what ``python -m verl.trainer.main_ppo`` runs (Ray started by the trainer, one
``ActorRolloutRefWorker`` actor), or with ``--single-process`` what ``main_ppo ... trainer.single_process=true`` runs
(the same worker inside the trainer's process, no Ray, as TRL runs); step and phase times come from its
``metrics.jsonl`` (``timing_s/*``). TRL's step is
timed with a trainer callback and its ``generate`` calls with a wrapper. Each system runs in its own subprocess (ours
first, then TRL), so memory numbers do not mix. Peak RSS is the sum, over the subprocess and every process it starts
(Ray's daemons and worker actors), of each process's own peak (``VmHWM``, polled every 0.1 s): exact per process and an
upper bound of the simultaneous total. For TRL (one process) it is the process's peak RSS.

Usage::

    python benchmarks/bench_grpo_vs_trl.py                       # both, 1 warm-up + 10 measured steps (all 80 prompts)
    python benchmarks/bench_grpo_vs_trl.py --steps 2 --warmup 1  # short smoke run
    python benchmarks/bench_grpo_vs_trl.py --only ours --json ours.json
    python benchmarks/bench_grpo_vs_trl.py --no-shared-prompt   # ours without the shared-prompt layout
    python benchmarks/bench_grpo_vs_trl.py --device cuda --model <HF dir> --steps 3   # on one GPU (gpu_suite.py)

Needs ``pip install -e .[bench]`` (``trl``, ``psutil``) for the TRL half. Timings are only meaningful on a quiet
machine: the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: make ``verl`` importable here and in Ray workers
    sys.path.insert(0, str(REPO_ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))

# the targets at 8 prompts x 4 samples x 128 new tokens: our median step at most 0.4x TRL's on CPU (micro-batch 32,
# where our peak RSS is at most 0.3x TRL's too) and at most 0.5x TRL's on one GPU
TRL_STEP_TARGET = {"cpu": 0.4, "cuda": 0.5}
TRL_RSS_TARGET = 0.3
GB = 2**30


# ------------------------------------------------------------------------------------------------------ shared
def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("ours", "trl"), help="run one system only (default: both)")
    parser.add_argument("--steps", type=int, default=10, help="measured steps, after the warm-up")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps, not measured")
    parser.add_argument("--model", default="tiny", help="model preset or local HF directory")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward micro-batch")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch threads of the training process (ours: the worker actor)",
    )
    parser.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="activation checkpointing in the update, for both systems (TRL's default is on)",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both systems train")
    parser.add_argument(
        "--shared-prompt",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ours: compute each prompt once for its n samples (model.use_shared_prompt; exact; "
        "default: on with --device cpu, off with cuda, as the recipes set it); TRL has no "
        "equivalent",
    )
    parser.add_argument(
        "--fused-kernels",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ours: log-probs/entropy from the final hidden states in chunks, no [tokens, vocab] "
        "logits (model.use_fused_kernels; default: on with --device cpu, off with cuda, as the "
        "recipes set it)",
    )
    parser.add_argument(
        "--single-process",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ours: trainer.single_process=true, the worker inside the trainer's process and no Ray "
        "(as TRL runs); default: the Ray worker actor of a plain main_ppo run on CPU, the "
        "trainer's process on one GPU (as hardware/gpu.yaml runs it)",
    )
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--result-file", help=argparse.SUPPRESS)  # child mode: run --only, write the result here
    args = parser.parse_args(argv)
    on_cpu = args.device == "cpu"
    for key, cpu_default in (("shared_prompt", True), ("fused_kernels", True), ("single_process", False)):
        if getattr(args, key) is None:
            setattr(args, key, cpu_default if on_cpu else not cpu_default)
    rows = args.prompts * args.n
    if (
        min(args.steps, args.prompts, args.n, args.micro_batch, args.max_new_tokens, args.threads) < 1
        or args.warmup < 0
    ):
        parser.error("--steps, --prompts, --n, --micro-batch, --max-new-tokens, --threads must be >= 1, --warmup >= 0")
    if rows % args.micro_batch:
        parser.error(f"--micro-batch {args.micro_batch} must divide prompts x n = {rows}")
    return args


def rlla_rows(args):
    """The RLLA validation file and its rows (pandas), checked to hold at least one step's prompts."""
    import pandas as pd

    from verl.utils.dataset.rlla_data import resolve_rlla_file

    path = resolve_rlla_file("test")
    df = pd.read_parquet(path)
    if len(df) < args.prompts:
        raise SystemExit(f"--prompts {args.prompts} exceeds the {len(df)} rows of {path}")
    return path, df


def median(values) -> float:
    return float(statistics.median(values)) if values else float("nan")


class ProcessTreeMemory:
    """Per-process peak RSS (``VmHWM``) of this process and all its descendants, polled in a background thread.

    A process's ``VmHWM`` only grows, so the last value read before it exits is its peak (short-lived processes may
    be missed; Ray's are long-lived). ``stop()`` returns ``{"peak_rss_gb": sum of per-process peaks,
    "processes": [{"pid", "name", "peak_rss_gb"}, ...] largest first, "peak_total_rss_gb", "peak_total_pss_gb"}``.

    The sum of per-process peaks adds peaks reached at different times and counts shared pages (the Python and torch
    libraries every process maps) once per process. The two sampled totals bound it from below: the largest sum over
    the tree of the current RSS seen at one poll (``VmRSS``, simultaneous but still counting shared pages per process),
    and the largest sum of the proportional set size (``Pss`` in ``/proc/PID/smaps_rollup``: a page shared by k
    processes counts 1/k in each, so the sum is the memory the tree holds). Being sampled every ``interval_s``, they
    can miss a spike shorter than that. For one process, PSS = RSS minus its share of pages shared with others.
    """

    def __init__(self, interval_s: float = 0.1) -> None:
        import psutil

        self._root = psutil.Process(os.getpid())
        self._interval_s = interval_s
        self._peaks: dict[int, tuple[str, int]] = {}
        self._peak_totals = {"VmRSS": 0, "Pss": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-poller", daemon=True)

    def _poll(self) -> None:
        import psutil

        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        from verl.utils.memory import proc_kb_fields

        totals = {"VmRSS": 0, "Pss": 0}
        for proc in procs:
            status = proc_kb_fields(f"/proc/{proc.pid}/status", "VmHWM", "VmRSS")
            if not status or "VmHWM" not in status:  # the process has exited
                continue
            hwm = status["VmHWM"]
            totals["VmRSS"] += status.get("VmRSS", 0)
            totals["Pss"] += (proc_kb_fields(f"/proc/{proc.pid}/smaps_rollup", "Pss") or {}).get("Pss", 0)
            name, best = self._peaks.get(proc.pid, ("?", 0))
            if not name.startswith("ray::") or name == "ray::IDLE":  # a forked process execs (named as its parent
                name = self._name(proc)  # until then); Ray renames a worker after its actor once it hosts one
            self._peaks[proc.pid] = (name, max(best, hwm))
        for key, value in totals.items():
            self._peak_totals[key] = max(self._peak_totals[key], value)

    def _name(self, proc) -> str:
        """``main process`` for this process, ``ray::<Actor>`` for Ray workers, else the executable's name."""
        import psutil

        if proc.pid == self._root.pid:
            return "main process"
        try:
            cmdline = proc.cmdline()
            if cmdline and cmdline[0].startswith("ray::"):
                return cmdline[0].split()[0].split(".")[0]
            return proc.name()
        except psutil.Error:
            return "?"

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._poll()

    def start(self) -> "ProcessTreeMemory":
        self._poll()
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._poll()
        procs = sorted(
            ({"pid": pid, "name": name, "peak_rss_gb": hwm / GB} for pid, (name, hwm) in self._peaks.items()),
            key=lambda p: -p["peak_rss_gb"],
        )
        return {
            "peak_rss_gb": sum(p["peak_rss_gb"] for p in procs),
            "processes": procs,
            "peak_total_rss_gb": self._peak_totals["VmRSS"] / GB,
            "peak_total_pss_gb": self._peak_totals["Pss"] / GB,
        }


# --------------------------------------------------------------------------------------------------------- ours
def ours_config(args, data_path: Path, max_prompt_length: int, run_dir: str):
    """The trainer config of this benchmark (``ppo_trainer.yaml`` plus the equal-settings overrides)."""
    from verl.trainer.config_utils import load_default_config

    rows = args.prompts * args.n
    return load_default_config(
        [
            f"data.train_files={data_path}",
            f"data.val_files={data_path}",
            f"data.train_batch_size={args.prompts}",
            f"data.max_prompt_length={max_prompt_length}",
            f"data.max_response_length={args.max_new_tokens}",
            "data.shuffle=False",
            "data.truncation=error",
            f"actor_rollout_ref.model.path={args.model}",
            f"actor_rollout_ref.model.enable_gradient_checkpointing={args.gradient_checkpointing}",
            f"actor_rollout_ref.model.use_shared_prompt={args.shared_prompt}",
            f"actor_rollout_ref.model.use_fused_kernels={args.fused_kernels}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
            f"actor_rollout_ref.actor.optim.lr={args.lr}",
            "actor_rollout_ref.actor.optim.weight_decay=0.01",
            "actor_rollout_ref.actor.grad_clip=1.0",
            "actor_rollout_ref.actor.loss_agg_mode=token-mean",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.actor.entropy_coeff=0.0",
            f"actor_rollout_ref.rollout.n={args.n}",
            "actor_rollout_ref.rollout.temperature=1.0",
            f"actor_rollout_ref.rollout.micro_batch_size={rows}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
            "algorithm.adv_estimator=grpo",
            "algorithm.use_kl_in_reward=False",
            "reward_model.wrapper=qwen",
            f"trainer.device={args.device}",
            f"trainer.n_gpus_per_node={int(args.device == 'cuda')}",
            *([f"trainer.cpu_threads={args.threads}"] if args.device == "cpu" else []),
            "actor_rollout_ref.rollout.name=hf",
            f"trainer.single_process={args.single_process}",
            "trainer.logger=[]",
            f"trainer.total_training_steps={args.warmup + args.steps}",
            "trainer.val_before_train=False",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.resume_mode=disable",
            f"trainer.seed={args.seed}",
            f"data.seed={args.seed}",
            "trainer.project_name=bench",
            "trainer.experiment_name=grpo_vs_trl",
            f"trainer.run_dir={run_dir}",
            f"trainer.default_local_dir={run_dir}/ckpt",
        ]
    )


def run_ours(args) -> dict:
    """``run_ppo`` (the ``main_ppo`` entry point: Ray and one worker actor, or with ``--single-process`` the worker in
    this process) for warm-up + measured steps."""
    from transformers import AutoTokenizer

    from verl.trainer.config_utils import default_section
    from verl.trainer.main_ppo import run_ppo
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.model_presets import prepare_model

    path, _ = rlla_rows(args)
    tokenizer = AutoTokenizer.from_pretrained(prepare_model(args.model))
    # the file's longest prompt as the trainer's dataset measures it (chat template, the row's tools): the trainer's
    # load-time check holds every row to it with truncation=error; rows are left-padded to data.max_prompt_length on
    # loading and cut to each batch's longest prompt before the rollout
    unlimited = default_section("data", max_prompt_length=1 << 20, truncation="left")
    max_prompt = max(RLHFDataset(data_files=str(path), tokenizer=tokenizer, config=unlimited).prompt_lengths())
    run_dir = tempfile.mkdtemp(prefix="bench_ours_")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        run_ppo(ours_config(args, path, max_prompt, run_dir))
        records = [json.loads(line) for line in Path(run_dir, "metrics.jsonl").read_text().splitlines()]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    steps = sorted((r for r in records if "timing_s/step" in r), key=lambda r: r["step"])[args.warmup :]
    rows = args.prompts * args.n
    phases = sorted({k for r in steps for k in r if k.startswith("timing_s/")} - {"timing_s/step"})
    return {
        "step_s": [r["timing_s/step"] for r in steps],
        "gen_s": [r["timing_s/gen"] for r in steps],
        "gen_tokens": [r["response_length/mean"] * rows for r in steps],
        "prompt_tokens": [r["prompt_length/mean"] for r in steps],
        "phases_s": {p[len("timing_s/") :]: median([r[p] for r in steps]) for p in phases},
        "worker_peak_rss_gb": {
            k[len("perf/peak_rss_gb/") :]: max(r[k] for r in steps if k in r)
            for k in sorted({k for r in steps for k in r if k.startswith("perf/peak_rss_gb/")})
        },
        "gpu_peak_gb": max(
            (v for r in steps for k, v in r.items() if k.startswith("perf/max_memory_allocated_gb/")), default=None
        ),
        "padded_prompt_length": max_prompt,
    }


# ---------------------------------------------------------------------------------------------------------- TRL
def run_trl(args) -> dict:
    """``GRPOTrainer.train()`` for warm-up + measured steps; step times from a callback, generation from a wrapper."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from verl.utils.model_presets import prepare_model
    from verl.utils.reward_score.rlla import compute_score

    torch.set_num_threads(args.threads)
    _, df = rlla_rows(args)
    model_dir = prepare_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)  # bf16 on CUDA: TRL's autocast
    eos = tokenizer.eos_token_id
    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": m["role"], "content": m["content"]} for m in msgs] for msgs in df.prompt],
            "ground_truth": [rm["ground_truth"] for rm in df.reward_model],
        }
    )

    def rlla_reward(completions, ground_truth, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [compute_score(t, gt, 0, wrapper="qwen")[0] for t, gt in zip(texts, ground_truth)]

    timing = {"step_s": [], "gen_s": [], "gen_tokens": [], "prompt_tokens": []}
    current: dict = {}
    original_generate = model.generate

    def timed_generate(*gen_args, **gen_kwargs):
        start = time.perf_counter()
        out = original_generate(*gen_args, **gen_kwargs)
        current["gen_s"] = current.get("gen_s", 0.0) + time.perf_counter() - start
        completion = out[:, gen_kwargs["input_ids"].shape[1] :]
        is_eos = completion == eos
        ended = is_eos.any(dim=1)
        lengths = torch.where(ended, is_eos.int().argmax(dim=1) + 1, completion.shape[1])  # up to and with EOS
        current["gen_tokens"] = current.get("gen_tokens", 0) + int(lengths.sum())
        current["prompt_tokens"] = float(gen_kwargs["attention_mask"].sum(-1).float().mean())
        return out

    model.generate = timed_generate  # TRL calls generate on this very object (no wrapper on CPU)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            current.clear()
            current["start"] = time.perf_counter()

        def on_step_end(self, *_, **__):
            timing["step_s"].append(time.perf_counter() - current["start"])
            for key in ("gen_s", "gen_tokens", "prompt_tokens"):
                timing[key].append(current.get(key, 0))

    rows = args.prompts * args.n
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench_trl_"),
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=rows // args.micro_batch,
        num_generations=args.n,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        weight_decay=0.01,
        max_grad_norm=1.0,
        bf16=args.device == "cuda",
        use_cpu=args.device == "cpu",
        max_steps=args.warmup + args.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        seed=args.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=rlla_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    try:
        trainer.train()
    finally:
        shutil.rmtree(config.output_dir, ignore_errors=True)
    result = {key: values[args.warmup :] for key, values in timing.items()}
    result["gpu_peak_gb"] = torch.cuda.max_memory_allocated() / GB if args.device == "cuda" else None
    other = [s - g for s, g in zip(result["step_s"], result["gen_s"])]
    result["phases_s"] = {"gen": median(result["gen_s"]), "rest (reward, loss, backward, optimizer)": median(other)}
    return result


# ----------------------------------------------------------------------------------------------------- driver
def run_child(system: str, args) -> dict:
    """Run one system in a fresh interpreter (this script with ``--only``); returns its result dict."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        result_file = fh.name
    argv = [
        "--only",
        system,
        "--result-file",
        result_file,
        "--gradient-checkpointing" if args.gradient_checkpointing else "--no-gradient-checkpointing",
        "--shared-prompt" if args.shared_prompt else "--no-shared-prompt",
        "--fused-kernels" if args.fused_kernels else "--no-fused-kernels",
        "--single-process" if args.single_process else "--no-single-process",
    ]
    for key in (
        "steps",
        "warmup",
        "model",
        "prompts",
        "n",
        "max_new_tokens",
        "micro_batch",
        "lr",
        "seed",
        "threads",
        "device",
    ):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    print(f"=== {system}: {' '.join(argv)}", flush=True)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *argv])
    if proc.returncode != 0:
        raise SystemExit(f"the {system} run failed (exit status {proc.returncode}); its output is above")
    result = json.loads(Path(result_file).read_text())
    os.unlink(result_file)
    return result


def _count_worker_phase_peaks(mem: dict, phase_peaks: dict, args) -> None:
    """The worker resets its process's ``VmHWM`` at each phase start (``perf/peak_rss_gb/*``), so a peak in the last
    poll interval of a phase could escape the poller: the hosting process's peak is at least its largest phase peak
    (the worker actor, or with ``--single-process`` the main process). Updates ``mem`` in place."""
    if not phase_peaks:
        return
    host = "main process" if args.single_process else "ray::ActorRolloutRefWorker"
    for proc in mem["processes"]:
        if proc["name"].startswith(host):
            proc["peak_rss_gb"] = max(proc["peak_rss_gb"], max(phase_peaks.values()))
    mem["processes"].sort(key=lambda p: -p["peak_rss_gb"])
    mem["peak_rss_gb"] = sum(p["peak_rss_gb"] for p in mem["processes"])


def child_main(args) -> None:
    """Child mode: run ``args.only`` under the memory poller and write its result to ``args.result_file``."""
    memory = ProcessTreeMemory().start()
    start = time.perf_counter()
    try:
        result = run_ours(args) if args.only == "ours" else run_trl(args)
    finally:
        mem = memory.stop()
    _count_worker_phase_peaks(mem, result.get("worker_peak_rss_gb", {}), args)
    rows = args.prompts * args.n
    result.update(system=args.only, total_s=time.perf_counter() - start, rows_per_step=rows, **mem)
    result["step_median_s"] = median(result["step_s"])
    result["gen_median_s"] = median(result["gen_s"])
    result["gen_tokens_per_s"] = sum(result["gen_tokens"]) / max(sum(result["gen_s"]), 1e-9)
    result["mean_response_tokens"] = sum(result["gen_tokens"]) / max(len(result["gen_tokens"]), 1) / rows
    Path(args.result_file).write_text(json.dumps(result))


def print_report(results: list[dict], args) -> None:
    print(
        f"\nGRPO step, model {args.model}: {args.prompts} prompts x {args.n} samples, {args.max_new_tokens} new "
        f"tokens, micro-batch {args.micro_batch}, gradient checkpointing "
        f"{'on' if args.gradient_checkpointing else 'off'}, ours with shared prompt "
        f"{'on' if args.shared_prompt else 'off'}, fused kernels {'on' if args.fused_kernels else 'off'}, "
        f"{'single process' if args.single_process else 'Ray worker actor'}, "
        f"{'float32, ' + str(args.threads) + ' threads' if args.device == 'cpu' else 'bf16 on one GPU'}; "
        f"median of {args.steps} steps after {args.warmup} warm-up"
    )
    print(
        f"{'system':<6} {'step s':>8} {'gen s':>7} {'gen tok/s':>10} {'resp tok':>9} {'prompt tok':>11} "
        f"{'peak RSS GB':>12} {'largest process':>24}"
    )
    for r in results:
        top = r["processes"][0]
        print(
            f"{r['system']:<6} {r['step_median_s']:>8.2f} {r['gen_median_s']:>7.2f} {r['gen_tokens_per_s']:>10.0f} "
            f"{r['mean_response_tokens']:>9.1f} {median(r['prompt_tokens']):>11.1f} {r['peak_rss_gb']:>12.2f} "
            f"{top['peak_rss_gb']:>7.2f} {top['name'][:16]:>16}"
        )
    for r in results:
        print(f"{r['system']} step times s: {', '.join(f'{s:.1f}' for s in r['step_s'])}")
        phases = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["phases_s"].items(), key=lambda kv: -kv[1]))
        print(f"{r['system']} phases (median s): {phases}")
        if len(r["processes"]) > 1:
            procs = ", ".join(f"{p['name'][:24]} {p['peak_rss_gb']:.2f}" for p in r["processes"][:6])
            print(
                f"{r['system']} peak RSS by process (GB): {procs}"
                + (f", {len(r['processes']) - 6} more" if len(r["processes"]) > 6 else "")
            )
        if r.get("gpu_peak_gb") is not None:
            print(f"{r['system']} GPU memory: peak allocated {r['gpu_peak_gb']:.2f} GB")
        print(
            f"{r['system']} memory (GB): sum of per-process peaks {r['peak_rss_gb']:.2f}, largest simultaneous "
            f"RSS total {r['peak_total_rss_gb']:.2f}, largest simultaneous PSS total {r['peak_total_pss_gb']:.2f}"
        )
        if r.get("worker_peak_rss_gb"):
            peaks = ", ".join(f"{k} {v:.2f}" for k, v in r["worker_peak_rss_gb"].items())
            print(f"{r['system']} worker peak RSS by phase (GB, perf/peak_rss_gb/*, max over steps): {peaks}")
    by = {r["system"]: r for r in results}
    if "ours" in by:
        print(
            f"ours loads prompts padded to data.max_prompt_length={by['ours']['padded_prompt_length']} and cuts "
            f"them to each batch's longest prompt before the rollout, as TRL pads them"
        )
    if "ours" in by and "trl" in by:
        ours, trl = by["ours"], by["trl"]
        if [round(x, 3) for x in ours["prompt_tokens"]] != [round(x, 3) for x in trl["prompt_tokens"]]:
            print(
                f"WARNING: the systems saw different prompts (mean prompt tokens per step: ours "
                f"{ours['prompt_tokens']}, TRL {trl['prompt_tokens']})"
            )
        step_ratio = ours["step_median_s"] / trl["step_median_s"]
        rss_ratio = ours["peak_rss_gb"] / trl["peak_rss_gb"]
        target = TRL_STEP_TARGET[args.device]
        print(
            f"ours/TRL: step time {step_ratio:.2f}x (target <= {target}: "
            f"{'met' if step_ratio <= target else 'NOT met'}), generated tokens/s "
            f"{ours['gen_tokens_per_s'] / trl['gen_tokens_per_s']:.2f}x, peak RSS {rss_ratio:.2f}x "
            f"(target <= {TRL_RSS_TARGET} at micro-batch 32: {'met' if rss_ratio <= TRL_RSS_TARGET else 'NOT met'})"
        )
        print(
            f"ours/TRL memory, other measures: largest simultaneous RSS total "
            f"{ours['peak_total_rss_gb'] / trl['peak_total_rss_gb']:.2f}x, largest simultaneous PSS total "
            f"{ours['peak_total_pss_gb'] / trl['peak_total_pss_gb']:.2f}x, our largest process "
            f"({ours['processes'][0]['name']}) {ours['processes'][0]['peak_rss_gb'] / trl['peak_rss_gb']:.2f}x"
        )


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.result_file:
        if args.only is None:
            raise SystemExit("--result-file needs --only ours|trl")
        child_main(args)
        return
    load_before, results = os.getloadavg(), []

    def write_json() -> None:  # after each system: a run cut short keeps the half it measured
        if args.json:
            Path(args.json).write_text(
                json.dumps(
                    {
                        "args": {k: v for k, v in vars(args).items() if k != "result_file"},
                        "results": results,
                        "loadavg_before": load_before,
                        "loadavg_after": os.getloadavg(),
                    },
                    indent=1,
                )
            )

    for system in (args.only,) if args.only else ("ours", "trl"):
        results.append(run_child(system, args))
        write_json()
    load_after = os.getloadavg()
    print_report(results, args)
    print(
        f"load average (1/5/15 min): before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
        f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} on {os.cpu_count()} CPUs "
        f"(other load inflates the timings)"
    )


if __name__ == "__main__":
    main()
