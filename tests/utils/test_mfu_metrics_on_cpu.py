"""perf/mfu_* accounting: a hand-counted one-layer model, the config switches, and the measured CPU peak."""

from __future__ import annotations

import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config_utils import load_default_config
from verl.trainer.ppo.metric_utils import MfuMeter, compute_mfu_metrics
from verl.utils.flops_counter import measure_matmul_peak

# 1 layer, hidden 4, 2 heads of size 2 (2 kv heads), MLP width 8, vocabulary 10
CONFIG = {
    "num_hidden_layers": 1,
    "hidden_size": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 8,
    "vocab_size": 10,
}


def _batch():
    """One row: 2 prompt tokens + 1 response token valid (left/right padding around them)."""
    attention = torch.tensor([[0, 1, 1, 1, 0]])
    return DataProto.from_single_dict({"attention_mask": attention, "response_mask": torch.tensor([[1, 0]])})


def test_hand_counted_flops_and_mfu():
    # s = 3: projections 2*3*(16 + 32 + 16) = 384, MLP 2*3*3*4*8 = 576, attention 2*2*4*(3*4/2) = 96,
    # output projection 2*4*10 for the one response position = 80 -> forward 1136 FLOPs
    timing = {"gen": 1.0, "old_log_prob": 0.5, "update_actor": 2.0, "step": 9.0}
    metrics = compute_mfu_metrics(_batch(), timing, CONFIG, peak_flops_per_s=1000.0, n_workers=2, ppo_epochs=2)
    assert metrics["perf/model_tflops_gen"] == pytest.approx(1136e-12)
    assert metrics["perf/mfu_gen"] == pytest.approx(1136 / 1.0 / 2000)
    assert metrics["perf/mfu_old_log_prob"] == pytest.approx(1136 / 0.5 / 2000)
    assert metrics["perf/model_tflops_update_actor"] == pytest.approx(2 * 3 * 1136e-12)  # 2 epochs x fwd+bwd
    assert metrics["perf/mfu_update_actor"] == pytest.approx(6816 / 2.0 / 2000)
    assert "perf/mfu_ref" not in metrics  # untimed phases are left out


def test_shared_prompt_counts_each_prompt_once():
    """Two rows with the same 2-token prompt and 1-token responses, one row with another prompt: with
    ``use_shared_prompt`` the first prompt is counted once (the work the shared layout and prefill do)."""
    from verl.utils.flops_counter import forward_flops, shared_prompt_forward_flops

    input_ids = torch.tensor([[0, 5, 6, 7, 0], [0, 5, 6, 8, 0], [0, 9, 6, 7, 0]])
    attention = torch.tensor([[0, 1, 1, 1, 0]] * 3)
    batch = DataProto.from_single_dict(
        {"input_ids": input_ids, "attention_mask": attention, "response_mask": torch.tensor([[1, 0]] * 3)}
    )
    timing = {"gen": 1.0}
    shared = compute_mfu_metrics(batch, timing, CONFIG, 1000.0, 1, shared_prompt=True)
    unshared = compute_mfu_metrics(batch, timing, CONFIG, 1000.0, 1)
    assert shared["perf/model_tflops_gen"] == pytest.approx(
        shared_prompt_forward_flops(CONFIG, [(2, [1, 1]), (2, [1])], 3) * 1e-12
    )
    assert unshared["perf/model_tflops_gen"] == pytest.approx(forward_flops(CONFIG, [3, 3, 3], 3) * 1e-12)
    assert shared["perf/model_tflops_gen"] < unshared["perf/model_tflops_gen"]


def test_meter_switches(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 4, '
        '"num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10}'
    )
    config = load_default_config(
        [
            f"actor_rollout_ref.model.path={tmp_path}",
            "trainer.log_mfu=true",
            "trainer.peak_flops_per_s=1000.0",
            "trainer.device=cpu",
        ]
    )
    meter = MfuMeter.from_config(config)
    assert meter.peak_flops_per_s == 1000.0
    metrics = meter(_batch(), {"gen": 1.0}, n_workers=1)
    assert metrics["perf/mfu_gen"] == pytest.approx(1136 / 1000) and metrics["perf/peak_tflops_per_worker"] == 1e-9
    config.trainer.log_mfu = False
    assert MfuMeter.from_config(config) is None
    config.trainer.log_mfu = True
    config.actor_rollout_ref.model.path = str(tmp_path / "missing")
    assert MfuMeter.from_config(config) is None  # unreadable model config: metrics off, the run goes on


def test_measured_cpu_peak_is_plausible():
    peak = measure_matmul_peak(seconds=0.1, size=256)
    assert 1e8 < peak < 1e14  # between 0.1 GFLOP/s and 100 TFLOP/s on any CPU this runs on
    with pytest.raises(ValueError, match="positive"):
        measure_matmul_peak(seconds=0)
