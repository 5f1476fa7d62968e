"""What a lent GPU machine needs to run the GPU suite, built on this machine, and the device call that runs it.

    python benchmarks/device_kit.py           # builds .whl/ and .devcache/, checks dataset/rlla_4k, prints the call
    python benchmarks/device_kit.py --check   # builds nothing: says what is missing and what the call would carry

The lent machines (an H200 or H100, Python 3.12, PyTorch, Triton and transformers, no network, no Ray, no vLLM)
lack some of this project's requirements and TRL's; they travel as wheels for CPython 3.12 on x86-64 Linux in
``.whl/`` (:data:`WHEELS`, pinned; ``antlr4-python3-runtime`` 4.9.3, which Hydra needs and PyPI has only as a source
archive, is built into a wheel here). The SmolLM2 tokenizer travels in ``.devcache/`` (the suite's models are
SmolLM2-135M-shaped with seeded random weights, ``--train-model random:smollm2-135m``: the real weights' 93 MB do
not fit a call) and the RLLA data in ``dataset/rlla_4k/`` (built from the shared reference data by the first run of
any RLLA recipe here). All three are git-ignored, so they travel only where the call names them in ``carry``;
together with the tree they must stay under the 64 MiB a call may carry.

The printed call installs the wheels into ``/tmp/site``, points ``TOOLRL_CACHE`` at ``.devcache`` and runs
``bash benchmarks/gpu_suite.sh`` with its JSON and log under ``$OUT``; copy the JSON to
``benchmarks/results/gpu_<date>.json`` and commit it with a reading.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# what the main job imports beyond the GPU machines' image (the image's package list as read there in 2026-11 has
# torch 2.11, transformers 5.17, accelerate, peft, pandas, pyarrow, psutil, safetensors, tokenizers, tensorboard,
# matplotlib, huggingface-hub, fsspec, xxhash, pyyaml, cloudpickle, requests, httpx, filelock; its typing-extensions
# version is not known), the main environment's versions; then TRL's GRPOTrainer and
# what it needs beyond that image, with the oldest datasets TRL 1.16 takes (it asks least of the image's pyarrow,
# >= 21, and fsspec)
WHEELS = {
    "hydra-core": "1.3.8",
    "omegaconf": "2.3.1",
    "antlr4-python3-runtime": "4.9.3",
    "tensordict": "0.15.3",
    "pyvers": "0.2.3",
    "pydantic": "2.14.4",
    "pydantic-core": "2.50.5",
    "annotated-types": "0.8.0",
    "typing-inspection": "0.4.5",
    "typing-extensions": "4.16.0",  # pydantic 2.14 needs >= 4.16
    "trl": "1.16.0",
    "datasets": "4.7.0",
    "dill": "0.4.0",
    "multiprocess": "0.70.18",
}
SOURCE_ONLY = {"antlr4-python3-runtime"}  # no wheel on PyPI: built here (pure Python)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
CARRY_LIMIT = 64 * 2**20
WHEEL_DIR, CACHE_DIR, DATA_DIR = REPO_ROOT / ".whl", REPO_ROOT / ".devcache", REPO_ROOT / "dataset" / "rlla_4k"
SUITE = "bash benchmarks/gpu_suite.sh --train-model random:smollm2-135m --output $OUT/gpu_suite.json"


def have_wheel(name: str, version: str) -> bool:
    stem = f"{name.replace('-', '_')}-{version}-"
    return any(p.name.lower().startswith(stem.lower()) for p in WHEEL_DIR.glob("*.whl"))


def build_wheels() -> None:
    """Download (or build) every wheel of :data:`WHEELS` not yet in ``.whl/``. Raises CalledProcessError when pip
    cannot (its output names the package)."""
    WHEEL_DIR.mkdir(exist_ok=True)
    for name, version in WHEELS.items():
        if have_wheel(name, version):
            continue
        if name in SOURCE_ONLY:
            cmd = ["wheel", "--no-deps", "-w", str(WHEEL_DIR), f"{name}=={version}"]
        else:
            cmd = [
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "cp",
                *(f"--platform={p}" for p in PLATFORMS),
                "-d",
                str(WHEEL_DIR),
                f"{name}=={version}",
            ]
        subprocess.run([sys.executable, "-m", "pip", "-q", *cmd], check=True)


def build_cache() -> None:
    """``.devcache/tokenizers``: the SmolLM2 tokenizer as this project prepares it (``prepare_tokenizer``)."""
    from verl.utils.model_presets import prepare_tokenizer

    source = Path(prepare_tokenizer())
    target = CACHE_DIR / source.relative_to(source.parents[1])
    if not target.is_dir():
        shutil.copytree(source, target)


def build_data() -> None:
    """``dataset/rlla_4k``: the RLLA data discovery (built from the shared reference data when missing)."""
    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

    resolve_rlla_data_dir()


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def tree_size() -> int:
    """Bytes of what travels without ``carry``: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return sum(
        (REPO_ROOT / name.decode()).stat().st_size for name in listed if name and (REPO_ROOT / name.decode()).is_file()
    )


def device_call(tree: str) -> dict:
    """The arguments of the device tool's ``run`` for the suite on this tree (``tree``: its commit)."""
    command = (
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "
        "/tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; "
        f"export TOOLRL_CACHE=$PWD/.devcache TOOLRL_OFFLINE=1 PYTHONUNBUFFERED=1 GPU_SUITE_TREE={tree}; "
        f"set -o pipefail; {SUITE} 2>&1 | tee $OUT/gpu_suite.log"
    )
    return {"command": command, "carry": [".whl", ".devcache", "dataset/rlla_4k"], "timeout_s": 600}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="build nothing; report what is missing and the sizes")
    args = parser.parse_args(argv)
    if not args.check:
        build_wheels()
        build_cache()
        build_data()
    missing = [f".whl/{n}=={v}" for n, v in WHEELS.items() if not have_wheel(n, v)]
    missing += [] if (CACHE_DIR / "tokenizers").is_dir() else [".devcache/tokenizers"]
    missing += [] if (DATA_DIR / "train.parquet").is_file() else ["dataset/rlla_4k"]
    sizes = {
        "tree": tree_size(),
        ".whl": size(WHEEL_DIR),
        ".devcache": size(CACHE_DIR),
        "dataset/rlla_4k": size(DATA_DIR),
    }
    total = sum(sizes.values())
    print(
        "sizes (MiB): "
        + ", ".join(f"{k} {v / 2**20:.1f}" for k, v in sizes.items())
        + f"; total {total / 2**20:.1f} of {CARRY_LIMIT / 2**20:.0f}"
    )
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    print("device run call:\n" + json.dumps(device_call(head.stdout.strip() or "unknown"), indent=1))
    if missing:
        print(f"missing: {', '.join(missing)}", file=sys.stderr)
    if total > CARRY_LIMIT:
        print(f"too large to carry: {total / 2**20:.1f} MiB > 64 MiB", file=sys.stderr)
    return 1 if missing or total > CARRY_LIMIT else 0


if __name__ == "__main__":
    raise SystemExit(main())
