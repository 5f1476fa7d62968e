"""GPU benchmark: MFU of the actor's update pass and the HF rollout's tokens/s on a 0.5B Qwen2-shaped model.

The model is Qwen2-0.5B's architecture (24 layers, hidden 896, 14/2 heads, MLP 4864, vocab 151,936, tied embeddings)
built from a config with random weights: nothing is downloaded. Prompts are the real RLLA validation prompts
(chat template applied with the project's SmolLM2 tokenizer, whose ids are valid Qwen2 ids); responses are random
tokens of random lengths in [R/4, R]. The update pass is exactly ``DataParallelPPOActor.update_policy`` on the
model as the workers place it (float32 master weights under FSDP2's bf16 ``MixedPrecisionPolicy`` on one rank,
``--mixed-precision``; AdamW, one optimizer step per batch), timed with CUDA synchronisation, in three
layouts: padded, packed (``use_remove_padding``) and shared-prompt (``use_shared_prompt``: each prompt once per
micro-batch). MFU counts the model FLOPs of the valid tokens of the unshared batch (``verl.utils.flops_counter``: 3x
forward, logits at response positions) against the GPU's dense bf16 peak, so for the shared layout it is the
"effective" MFU (useful work of the unshared computation per second); the FLOPs the shared layout really executes are
printed beside it. ``--attn-implementation flex_attention`` runs the layouts through FlexAttention (block masks);
``--compile-layers`` compiles each decoder layer for the update pass. The rollout is ``HFRollout.generate_sequences``
(KV cache, sampling at temperature 1) on the same prompts with ``n`` samples each: plain, with the shared prefill, and
with a static KV cache (``rollout.cache_implementation=static``, decoded by a compiled forward on CUDA), each decoding
with the rollout's plain copy of the one-rank FSDP2 model (``verl/workers/rollout/decode_copy.py``), and ``wrapped``:
plain decoding through the FSDP2 wrapper itself (the rollout before that copy, for the ratio); tokens/s
counts generated tokens up to EOS (random weights rarely stop, so nearly all R), after a first (warm-up) call.

    python benchmarks/bench_gpu_mfu.py --json mfu.json        # needs a CUDA GPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: make ``verl`` importable
    sys.path.insert(0, str(REPO_ROOT))

QWEN2_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)
# SmolLM2-135M's architecture (Llama: 30 layers, hidden 576, 9/3 heads, MLP 1536, vocab 49,152, tied embeddings)
SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)
SHAPES = {"qwen2-0.5b": ("Qwen2", QWEN2_05B), "smollm2-135m": ("Llama", SMOLLM2_135M)}


def build_batch(args, tokenizer, device):
    """Left-padded RLLA prompts x n, random right-padded responses, as the trainer's batch (a DataProto)."""
    import pandas as pd

    from verl.protocol import DataProto
    from verl.utils.dataset.rlla_data import resolve_rlla_file

    frame = pd.read_parquet(resolve_rlla_file("test"))
    chats = [list(row) for row in frame["prompt"][: args.prompts]]
    prompts = [
        tokenizer.apply_chat_template([dict(m) for m in chat], add_generation_prompt=True, tokenize=True)
        for chat in chats
    ]
    prompts = [p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p for p in prompts]
    P, R, n = max(len(p) for p in prompts), args.response_length, args.n
    gen = torch.Generator().manual_seed(0)
    rows = []
    for p in prompts:
        for _ in range(n):
            length = int(torch.randint(R // 4, R + 1, (1,), generator=gen))
            rows.append((p, torch.randint(0, tokenizer.vocab_size, (length,), generator=gen).tolist()))
    B = len(rows)
    input_ids = torch.zeros(B, P + R, dtype=torch.long)
    attention_mask = torch.zeros(B, P + R, dtype=torch.long)
    for i, (p, r) in enumerate(rows):
        input_ids[i, P - len(p) : P] = torch.tensor(p)
        input_ids[i, P : P + len(r)] = torch.tensor(r)
        attention_mask[i, P - len(p) : P + len(r)] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    response_mask = attention_mask[:, P:].clone()
    batch = DataProto.from_dict(
        tensors=dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            responses=input_ids[:, P:].clone(),
            response_mask=response_mask,
            advantages=torch.randn(B, 1, generator=gen).expand(B, R) * response_mask,
            prompts=input_ids[:, :P].clone(),
        ),
        meta_info=dict(temperature=1.0),
    )
    seq_lens = attention_mask.sum(-1).tolist()
    return batch.to(device), prompts, seq_lens, int(response_mask.sum())


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_update(actor, batch, steps, warmup):
    times = []
    for i in range(warmup + steps):
        _sync()
        start = time.perf_counter()
        actor.update_policy(batch)
        _sync()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--rollout-micro-batch", type=int, default=32)
    parser.add_argument("--tokenizer", default="tiny", help="model preset or directory whose tokenizer is used")
    parser.add_argument("--json", default=None)
    parser.add_argument("--cpu-smoke", action="store_true", help="run a 2-layer model on CPU (checks the script only)")
    parser.add_argument(
        "--model-shape",
        default="qwen2-0.5b",
        choices=sorted(SHAPES),
        help="architecture of the randomly initialised model",
    )
    parser.add_argument(
        "--attn-implementation",
        default="sdpa",
        help="transformers attention (model.override_config.attn_implementation): sdpa, flex_attention, ...",
    )
    parser.add_argument(
        "--compile-layers",
        action="store_true",
        help="torch.compile each decoder layer for the update pass (regional compilation)",
    )
    parser.add_argument("--layouts", default="padded,packed,shared", help="update-pass layouts to time")
    parser.add_argument(
        "--rollouts",
        default="plain,wrapped,shared_prefill,static",
        help="HF rollout variants to time (static: rollout.cache_implementation=static; wrapped: "
        "decoding through the FSDP2 wrapper, no plain copy); '' for none",
    )
    parser.add_argument("--rollout-steps", type=int, default=2)
    parser.add_argument(
        "--mixed-precision",
        default=None,
        choices=["bf16", "fp32"],
        help="fsdp_config.mixed_precision.param_dtype: bf16 compute over float32 master weights "
        "(FSDP2 MixedPrecisionPolicy) or plain float32; default as the workers' null: bf16 on "
        "the GPU, fp32 with --cpu-smoke (a CPU without AVX512-BF16 / AMX emulates bf16 matmuls: "
        "on 2 AVX2-only AMD EPYC cores, 2026-11-29, the padded update took 256 s, 9.7 s in fp32)",
    )
    args = parser.parse_args()
    if args.mixed_precision is None:
        args.mixed_precision = "fp32" if args.cpu_smoke else "bf16"
    if not torch.cuda.is_available() and not args.cpu_smoke:
        raise SystemExit("bench_gpu_mfu.py needs a CUDA GPU (torch.cuda.is_available() is False)")

    import transformers
    from transformers import AutoTokenizer

    from verl.protocol import DataProto
    from verl.utils.flops_counter import gpu_bf16_peak_flops, mfu, train_flops
    from verl.utils.model_utils import wrap_with_fsdp2
    from verl.utils.model_presets import prepare_model
    from verl.trainer.config_utils import default_section
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.rollout.hf_rollout import HFRollout

    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    gpu = "CPU smoke" if args.cpu_smoke else torch.cuda.get_device_name()
    peak = 1e12 if args.cpu_smoke else gpu_bf16_peak_flops(gpu)
    tokenizer = AutoTokenizer.from_pretrained(prepare_model(args.tokenizer))
    torch.manual_seed(0)
    family, shape = SHAPES[args.model_shape]
    config = getattr(transformers, f"{family}Config")(
        **{**shape, **(dict(num_hidden_layers=2) if args.cpu_smoke else {})}
    )
    model = (
        getattr(transformers, f"{family}ForCausalLM")
        ._from_config(config, attn_implementation=args.attn_implementation)
        .to(device)
    )  # float32 master weights
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = model.model.layers
    if args.compile_layers:  # regional compilation: one compiled graph per decoder layer, reused by all of them
        for layer in layers:
            layer.compile(dynamic=True)
    # what the workers do on one GPU (verl/utils/mixed_precision.py)
    wrap_with_fsdp2(model, device.type, 1, {"param_dtype": args.mixed_precision}, "--mixed-precision")
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    batch, prompts, seq_lens, response_tokens = build_batch(args, tokenizer, device)
    flops = train_flops(config, seq_lens, logit_positions=response_tokens)
    results = dict(
        gpu=gpu,
        model_shape=args.model_shape,
        attn_implementation=args.attn_implementation,
        compile_layers=args.compile_layers,
        peak_bf16_flops=peak,
        params=params,
        rows=len(batch),
        args=vars(args),
        prompt_tokens=sum(len(p) for p in prompts) * args.n,
        response_tokens=response_tokens,
        padded_tokens=int(batch.batch["attention_mask"].numel()),
        model_flops_per_update=flops,
        update={},
    )

    def save() -> None:  # after every measurement, so that a run stopped by a time limit keeps what it measured
        if args.json:
            tmp = f"{args.json}.tmp"
            with open(tmp, "w") as fh:
                json.dump(results, fh, indent=1)
            os.replace(tmp, args.json)

    print(
        f"{gpu}: {args.model_shape}-shaped model, {params / 1e6:.0f}M parameters; {len(batch)} rows "
        f"({args.prompts} RLLA prompts x {args.n}), {results['prompt_tokens'] + response_tokens} valid tokens of "
        f"{results['padded_tokens']} padded; {flops / 1e12:.2f} model TFLOPs per update"
    )

    from verl.utils.flops_counter import shared_prompt_forward_flops

    groups = [(len(p), [seq_lens[g * args.n + k] - len(p) for k in range(args.n)]) for g, p in enumerate(prompts)]
    shared_flops = 3 * shared_prompt_forward_flops(config, groups, logit_positions=response_tokens)
    print(
        f"shared-prompt layout executes {shared_flops / 1e12:.2f} TFLOPs per update "
        f"({shared_flops / flops:.2f}x of the unshared count)"
    )
    for layout in [name for name in args.layouts.split(",") if name]:
        actor_cfg = default_section(
            "actor_rollout_ref.actor",
            **dict(
                ppo_mini_batch_size=len(batch),
                ppo_micro_batch_size_per_gpu=args.micro_batch,
                use_dynamic_bsz=False,
                use_remove_padding=layout == "packed",
                use_shared_prompt=layout == "shared",
                clip_ratio=0.2,
                loss_agg_mode="token-mean",
                entropy_coeff=0.0,
                grad_clip=1.0,
                ppo_epochs=1,
                shuffle=False,
            ),
        )
        actor = DataParallelPPOActor(actor_cfg, model, optimizer)
        batch.meta_info.update(micro_batch_size=args.micro_batch, use_dynamic_bsz=False)
        old, _ = actor.compute_log_prob(batch)
        batch.batch["old_log_probs"] = old
        median, times = time_update(actor, batch, args.steps, args.warmup)
        used = mfu(flops, median, peak)
        peak_mem = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
        results["update"][layout] = dict(median_s=median, times_s=times, mfu=used, max_mem_gib=peak_mem)
        save()
        print(
            f"update pass, {layout:6s}: median {median:.3f} s, "
            f"{flops / median / 1e12:.1f} TFLOP/s, MFU {100 * used:.1f}% of {peak / 1e12:.0f} TFLOP/s bf16, "
            f"max allocated {peak_mem:.1f} GiB"
        )

    gen_batch = DataProto.from_dict(
        tensors=dict(
            input_ids=batch.batch["prompts"][:: args.n],
            attention_mask=batch.batch["attention_mask"][:: args.n, : -args.response_length],
            position_ids=batch.batch["position_ids"][:: args.n, : -args.response_length],
        ),
        meta_info=dict(n=args.n, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id or 0),
    )
    results["rollout"] = {}
    for layer in layers:  # the rollout runs the layers uncompiled (its own static-cache compile is a variant)
        layer._compiled_call_impl = None
    if args.attn_implementation != "sdpa":  # generation decodes with sdpa (a KV cache, no packing)
        model.set_attn_implementation("sdpa")
    for variant in [name for name in args.rollouts.split(",") if name]:
        rollout = HFRollout(
            model,
            default_section(
                "actor_rollout_ref.rollout",
                **dict(
                    response_length=args.response_length,
                    temperature=1.0,
                    top_k=-1,
                    top_p=1.0,
                    do_sample=True,
                    dtype="bfloat16" if args.mixed_precision == "bf16" else "float32",
                    micro_batch_size=args.rollout_micro_batch,
                    shared_prefill=variant == "shared_prefill",
                    cache_implementation="static" if variant == "static" else None,
                ),
            ),
            tokenizer,
        )
        if variant == "wrapped":
            rollout.decode_copy = None  # decode through the FSDP2 wrapper (hooks at every layer and token)
        gen_times, gen_tokens = [], []
        for i in range(1 + args.rollout_steps):  # the first call warms up (and compiles the static cache's decode)
            _sync()
            start = time.perf_counter()
            out = rollout.generate_sequences(gen_batch)
            _sync()
            if i >= 1:
                gen_times.append(time.perf_counter() - start)
                gen_tokens.append(int(out.batch["response_mask"].sum()))
            else:
                first_s = time.perf_counter() - start
        tok_s = sum(gen_tokens) / sum(gen_times)
        results["rollout"][variant] = dict(
            times_s=gen_times, tokens=gen_tokens, tokens_per_s=tok_s, first_call_s=first_s
        )
        save()
        print(
            f"HF rollout, {variant}: {len(gen_batch) * args.n} sequences, up to {args.response_length} new tokens, "
            f"micro-batch {args.rollout_micro_batch} prompts: {tok_s:.0f} generated tokens/s (mean of "
            f"{args.rollout_steps} after a first call of {first_s:.1f} s)"
        )
    save()


if __name__ == "__main__":
    main()
