"""The HF rollout's plain decoding copy of a one-rank FSDP2 actor (``verl/workers/rollout/decode_copy.py``): the same
tokens and sampling log-probs as decoding through the FSDP2 wrapper, greedy and seeded sampling, shared prefill on and
off, after the actor's weights change too; building it draws nothing from the RNGs. In a spawned process: the one-rank
process group stays out of the test process."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).parent))  # the spawned process imports this file


def _rank(rank, model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.protocol import DataProto
    from verl.trainer.config_utils import default_section
    from verl.utils.mixed_precision import init_single_rank_group, mixed_precision_policy
    from verl.utils.model_utils import apply_fsdp2
    from verl.utils.torch_functional import compute_position_id_with_mask
    from verl.workers.rollout.decode_copy import DecodeCopy
    from verl.workers.rollout.hf_rollout import HFRollout

    torch.set_num_threads(1)
    init_single_rank_group("cpu")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    enc = tokenizer(["hello", "a longer prompt than the first one", "tool call?"], return_tensors="pt", padding=True)
    tensors = {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        "position_ids": compute_position_id_with_mask(enc["attention_mask"]),
    }
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    apply_fsdp2(model, "cpu", mp_policy=mixed_precision_policy({"param_dtype": "bf16"}, "cpu", "mixed_precision"))
    assert DecodeCopy.applicable(model, world_size=1) and not DecodeCopy.applicable(model, world_size=2)

    def generate(use_copy: bool, shared: bool, **meta):
        config = default_section(
            "actor_rollout_ref.rollout",
            response_length=8,
            temperature=1.0,
            top_k=-1,
            top_p=1.0,
            do_sample=True,
            micro_batch_size=4,
            dtype="bfloat16",
            shared_prefill=shared,
            calculate_log_probs=True,
        )
        rollout = HFRollout(model, config, tokenizer)
        if not use_copy:
            rollout.decode_copy = None  # today's path: decode through the FSDP2 wrapper
        torch.manual_seed(7)
        data = DataProto.from_dict(tensors={k: v.clone() for k, v in tensors.items()}, meta_info={"n": 2} | meta)
        out = rollout.generate_sequences(data).batch
        assert (rollout.decode_copy is not None) == use_copy
        return out["responses"], out["rollout_log_probs"], torch.get_rng_state()

    def same_both_ways():
        for shared in (False, True):
            for meta in ({"do_sample": False, "n": 1}, {}):  # greedy (one sample: HF refuses more), sampling
                new, old = generate(True, shared, **meta), generate(False, shared, **meta)
                for a, b in zip(new, old):  # tokens, their log-probs, and the RNG state after the call
                    assert torch.equal(a, b), (shared, meta)
        return new[0]

    before = same_both_ways()
    with torch.no_grad():  # an optimizer step's worth of change: the copy must follow the actor's weights
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    after = same_both_ways()
    assert not torch.equal(before, after)


def test_the_decoding_copy_decodes_what_the_fsdp2_actor_decodes(tiny_model_dir):
    mp.spawn(_rank, args=(tiny_model_dir,), nprocs=1, join=True)
