"""Where the update pass spends its time on a GPU, and what bf16 weights, the fused LM head, FlexAttention and a static
KV cache buy (issue 24; needs a CUDA GPU). Writes ``$OUT/explore.json`` and ``$OUT/prof_*.txt`` (torch.profiler tables
of one update). One Qwen2-0.5B-shaped model with random weights, 8 RLLA prompts x 4, R = 512 (``bench_gpu_mfu``'s
batch), micro-batch 8, median of 2 updates after 1 warm-up; rollouts: 32 rows x 256 new tokens, bf16 weights.

    OUT=/tmp/explore python benchmarks/gpu_explore.py [TOKENIZER_DIR_OR_PRESET]

Results of 2026-11-25 (H100): ``benchmarks/results/h100_explore_20261125.json``.
"""
import json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, transformers
from transformers import AutoTokenizer
import bench_gpu_mfu as B
from verl.trainer.config_utils import default_section
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.utils.flops_counter import gpu_bf16_peak_flops, mfu, train_flops

OUT = os.environ.get("OUT", "/tmp")
res = {}
class A: pass
args = A(); args.prompts, args.n, args.response_length = 8, 4, 512
from verl.utils.model_presets import prepare_model

tok = AutoTokenizer.from_pretrained(prepare_model(sys.argv[1] if len(sys.argv) > 1 else "tiny"))
dev = torch.device("cuda")
peak = gpu_bf16_peak_flops(torch.cuda.get_device_name())
cfg = transformers.Qwen2Config(**B.QWEN2_05B)
batch, prompts, seq_lens, resp = B.build_batch(args, tok, dev)
flops = train_flops(cfg, seq_lens, logit_positions=resp)


def make(dtype=torch.float32, attn="sdpa"):
    torch.manual_seed(0)
    m = transformers.Qwen2ForCausalLM._from_config(cfg, attn_implementation=attn).to(dev, dtype)
    return m, torch.optim.AdamW(m.parameters(), lr=1e-6, weight_decay=0.01)


def run(name, dtype=torch.float32, fused=False, layout="padded", attn="sdpa", steps=2, profile=False, mb=8):
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    try:
        m, opt = make(dtype, attn)
        ac = default_section("actor_rollout_ref.actor", **dict(
            ppo_mini_batch_size=len(batch), ppo_micro_batch_size_per_gpu=mb, use_dynamic_bsz=False,
            use_remove_padding=layout == "packed", use_shared_prompt=layout == "shared", compute_dtype="bfloat16",
            clip_ratio=0.2, loss_agg_mode="token-mean", entropy_coeff=0.0, grad_clip=1.0, ppo_epochs=1, shuffle=False,
            use_fused_kernels=fused))
        actor = DataParallelPPOActor(ac, m, opt)
        batch.meta_info.update(micro_batch_size=mb, use_dynamic_bsz=False)
        old, _ = actor.compute_log_prob(batch)
        batch.batch["old_log_probs"] = old
        med, times = B.time_update(actor, batch, steps, 1)
        r = dict(median_s=med, mfu=mfu(flops, med, peak), mem=torch.cuda.max_memory_allocated() / 2**30)
        if profile:
            from torch.profiler import profile as P, ProfilerActivity
            with P(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                actor.update_policy(batch); torch.cuda.synchronize()
            t = prof.key_averages().table(sort_by="cuda_time_total", row_limit=35)
            open(f"{OUT}/prof_{name}.txt", "w").write(t + "\n\nSELF CPU\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        del actor, m, opt
    except Exception as e:  # keep going
        import traceback; r = dict(error=repr(e)[:500], tb=traceback.format_exc()[-1500:])
    res[name] = r
    print(name, r, flush=True)
    json.dump(res, open(f"{OUT}/explore.json", "w"), indent=1)


run("fp32w_padded", profile=True)
run("bf16w_padded", dtype=torch.bfloat16, profile=True)
run("fp32w_padded_fused", fused=True)
run("bf16w_padded_fused", dtype=torch.bfloat16, fused=True)
run("bf16w_packed", dtype=torch.bfloat16, layout="packed", profile=True)
run("bf16w_shared", dtype=torch.bfloat16, layout="shared")
run("bf16w_packed_fused", dtype=torch.bfloat16, layout="packed", fused=True)
run("bf16w_packed_flex", dtype=torch.bfloat16, layout="packed", attn="flex_attention")
run("bf16w_padded_fused_mb16", dtype=torch.bfloat16, fused=True, mb=16)

# rollout: plain generate vs static cache + compile, bf16 weights, 32 rows, 256 new tokens
def gen_time(m, ids, am, **kw):
    torch.cuda.synchronize(); s = time.perf_counter()
    out = m.generate(input_ids=ids, attention_mask=am, max_new_tokens=256, min_new_tokens=256, do_sample=True,
                     top_k=0, top_p=1.0, pad_token_id=0, **kw)
    torch.cuda.synchronize(); return time.perf_counter() - s, out.shape[1] - ids.shape[1]

try:
    m, _ = make(torch.bfloat16); m.eval()
    P = batch.batch["prompts"][::4]
    am = batch.batch["attention_mask"][::4, :P.shape[1]]
    ids = P.repeat_interleave(4, 0); am = am.repeat_interleave(4, 0)
    for name, kw in [("plain", {}), ("static", dict(cache_implementation="static")),
                     ("static_compiled", dict(cache_implementation="static", compile_config=None))]:
        if name == "static_compiled":
            m.forward = torch.compile(m.forward, mode="reduce-overhead", fullgraph=False)
        ts = []
        for i in range(3):
            t, n = gen_time(m, ids, am, **kw); ts.append(t)
        res["gen_" + name] = dict(times=ts, tokens_per_s=32 * 256 / min(ts[1:]))
        print("gen", name, res["gen_" + name], flush=True)
        json.dump(res, open(f"{OUT}/explore.json", "w"), indent=1)
except Exception as e:
    import traceback; res["gen_error"] = traceback.format_exc()[-2000:]; print(res["gen_error"])
json.dump(res, open(f"{OUT}/explore.json", "w"), indent=1)
