"""Model presets: both load with AutoModelForCausalLM/AutoTokenizer and generate through the chat template on CPU,
the tiny preset is deterministic, and the SmolLM2 conversion keeps the GGUF model's behaviour."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.utils import model_presets


def _chat_generate(path: str, question: str, new_tokens: int = 12) -> tuple[str, torch.Tensor]:
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    assert tok.decode(ids["input_ids"][0]).endswith("<|im_start|>assistant\n")  # ChatML generation prompt
    out = model.generate(**ids, max_new_tokens=new_tokens, do_sample=False)
    return tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True), out


def test_tiny_preset_loads_generates_and_is_deterministic(tmp_path, monkeypatch, tiny_model_dir):
    text, out = _chat_generate(tiny_model_dir, "What is 2 + 2?")
    assert out.shape[1] > 0
    config = AutoModelForCausalLM.from_pretrained(tiny_model_dir).config
    assert config.hidden_size == model_presets.TINY_CONFIG["hidden_size"] and config.vocab_size == 49152
    # a second build in a fresh cache gives byte-identical weights
    monkeypatch.setenv("TOOLRL_CACHE", str(tmp_path))
    rebuilt = model_presets.prepare_model("tiny")
    assert rebuilt.startswith(str(tmp_path))
    digest = [
        hashlib.sha256((Path(p) / "model.safetensors").read_bytes()).hexdigest() for p in (tiny_model_dir, rebuilt)
    ]
    assert digest[0] == digest[1]


def test_unknown_names_pass_through(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    assert model_presets.prepare_model(str(tmp_path)) == str(tmp_path)  # a model folder as is
    monkeypatch.setattr(model_presets, "hub_reachable", lambda: True)
    assert model_presets.prepare_model("org/some-model") == "org/some-model"  # a hub id, untouched when reachable
    monkeypatch.setattr(model_presets, "hub_reachable", lambda: False)
    with pytest.raises(model_presets.ModelPathError, match="cannot be fetched"):
        model_presets.prepare_model("org/some-model")


def test_tiny_sft_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLRL_CACHE", str(tmp_path))
    # a user's error (main_ppo / main_async print it as one `error:` line), naming the key
    with pytest.raises(model_presets.ModelPathError, match="model.path=tiny-sft: preset not built yet.*sft_presets"):
        model_presets.prepare_model("tiny-sft", key="model.path")
    with pytest.raises(model_presets.ModelPathError, match="SFT_PRESET=smollm2-135m-sft python -m verl.trainer"):
        model_presets.prepare_model("smollm2-135m-sft")


def test_smollm2_conversion_matches_gguf():
    path = model_presets.prepare_model("smollm2-135m")
    assert (Path(path) / "model.safetensors").is_file()
    converted = AutoModelForCausalLM.from_pretrained(path)
    assert 130e6 < sum(p.numel() for p in converted.parameters()) < 140e6
    # plain fp32, not marked GGUF-quantised (save_pretrained, i.e. every checkpoint's HF export, would refuse it)
    assert "quantization_config" not in (Path(path) / "config.json").read_text()
    assert getattr(converted, "hf_quantizer", None) is None
    gguf = model_presets._gguf_path()
    original = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(converted(ids).logits, original(ids).logits, atol=1e-4)
    text, _ = _chat_generate(path, "What is the capital of France? Answer in one word.")
    assert "paris" in text.lower(), text


def test_every_sft_preset_is_a_preset():
    """``resolve_model_path`` and the resume pre-check tell a preset by ``PRESETS`` alone."""
    assert set(model_presets.SFT_PRESETS) <= set(model_presets.PRESETS)
