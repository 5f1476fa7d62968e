"""The RLLA data: ToolRL's row schema, the project's default splits, and where the trainer finds them.

Row schema (ToolRL ``dataset/rlla_4k_raw/rlla.py``; ``docs/verl_compat.md`` "RLLA row schema")::

    data_source  = "rlla"
    prompt       = [{"role": "system", "content": instruction}, {"role": "user", "content": input}]
    ability      = "math"
    reward_model = {"style": "rule", "ground_truth": output}
    extra_info   = {"split", "index", "instruction", "input", "output"}

The Arrow types (:data:`RLLA_ARROW_SCHEMA`) are those of ToolRL's published ``test.parquet`` (struct fields in
alphabetical order, ``int64`` index), so files written here read back with exactly the shared file's schema.

Default splits (:func:`build_default_rlla_splits`). ToolRL's 4k RL JSON is not in the shared reference folder; what
is there is its 400-row SFT set (full reasoning) and the 80-row processed test split. The project therefore trains on
the SFT rows in ToolRL's RL form: the reasoning inside ``<think>…</think>`` is replaced by the placeholder sentence
that ToolRL's RL ground truths carry (ToolRL README: "the RL data contains only placeholders in the thought field").
The two sentences below were read from the 80 shared ground truths (71 tool-call rows, 9 response rows). Which one
applies is decided from the text after ``</think>``, since 17 SFT thoughts quote the literal ``<tool_call>``.

Discovery (:func:`resolve_rlla_data_dir`) looks, in order, at: the explicit directory (argument, then ``$DATA_DIR``),
the repository's git-ignored ``dataset/rlla_4k/``, a build from the shared reference folder (``$TOOLRL_SHARED``, by
default the folder ``shared`` beside the checkout) into ``dataset/rlla_4k/``, and a download of ToolRL's published
parquet files (the full 3,920-row train split) into ``dataset/rlla_4k/``. Set ``TOOLRL_OFFLINE=1`` to skip the download.

CLI: ``python -m verl.utils.dataset.rlla_data [--data-dir DIR]`` prints the resolved directory (for shell scripts:
``DATA_DIR=$(python -m verl.utils.dataset.rlla_data)``).
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from verl.utils.fs import atomic_path, temp_sibling
from verl.utils.jsonl import load_json_file

logger = logging.getLogger(__name__)

DATA_SOURCE = "rlla"
ABILITY = "math"  # ToolRL labels every RLLA row "math"; kept for compatibility.
TOOLRL_SEED = 31415
TOOLRL_TEST_FRAC = 0.02

# Exact think blocks of ToolRL's RL ground truths (read from the shared folder's data/rlla_4k/test.parquet).
TOOL_CALL_THINK_PLACEHOLDER = "I should use the appropriate tool with proper parameters to respond to the user's need."
RESPONSE_THINK_PLACEHOLDER = "I should directly respond to the user's need."

SPLIT_FILES = {"train": "train.parquet", "test": "test.parquet", "sft_full": "sft_full.parquet"}
REQUIRED_FILES = ("train.parquet", "test.parquet")

# ToolRL's published processed files, pinned to a commit so the bytes cannot change under us. The train checksum is
# the one other public reproductions pin for this revision; the test checksum is not pinned (logged instead).
TOOLRL_REVISION = "8cee13ec0ca72f0461da372a93a6fd8140dbb840"
TOOLRL_BASE_URL = f"https://raw.githubusercontent.com/qiancheng0/ToolRL/{TOOLRL_REVISION}/dataset/rlla_4k"
TOOLRL_SHA256 = {"train.parquet": "f2e728ad4a379550887711870db5f97154a0ecc45efbe5d43db8a99dc3b9e1c8",
                 "test.parquet": None}

RLLA_ARROW_SCHEMA = pa.schema([
    ("data_source", pa.string()),
    ("prompt", pa.list_(pa.field("element", pa.struct([("content", pa.string()), ("role", pa.string())])))),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
    ("extra_info", pa.struct([("index", pa.int64()), ("input", pa.string()), ("instruction", pa.string()),
                              ("output", pa.string()), ("split", pa.string())])),
])

_THINK_RE = re.compile(r"\s*<think>(.*?)</think>", re.DOTALL)

Downloader = Callable[[str, Path], None]


# ---------------------------------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------------------------------
def load_raw_records(path: str | os.PathLike) -> list[dict]:
    """Read a raw RLLA JSON file: a list of ``{instruction, input, output}`` objects.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        JsonInputError: the file is not UTF-8 or not JSON (a ``ValueError``; file, line and column named).
        ValueError: the JSON is not a list of objects, or a record lacks a non-empty string field (the message names
            file, row and key).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"raw RLLA file {path} not found")
    records = load_json_file(path)
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of {{instruction, input, output}} objects, got "
                         f"{type(records).__name__}")
    for i, rec in enumerate(records):
        _check_raw_record(rec, f"{path}:{i}")
    return records


def _check_raw_record(rec: object, where: str) -> None:
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where}: expected an object with instruction/input/output, got {type(rec).__name__}")
    for key in ("instruction", "input", "output"):
        value = rec.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: {key}: expected a non-empty string, got {value!r:.80}")


def make_rlla_row(example: Mapping, index: int, split: str) -> dict:
    """One raw ``{instruction, input, output}`` record → one row in ToolRL's schema (see module docstring).

    ``index`` is the row's position within its split (ToolRL maps each split with indices; the shared test split has
    indices 0..79). Raises ValueError when a field is missing or empty.
    """
    _check_raw_record(example, f"{split} row {index}")
    instruction, input_text, output = example["instruction"], example["input"], example["output"]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "system", "content": instruction}, {"role": "user", "content": input_text}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": output},
        "extra_info": {"split": split, "index": int(index), "instruction": instruction, "input": input_text,
                       "output": output},
    }


def shuffle_and_split(records: Sequence, seed: int = TOOLRL_SEED, test_frac: float = TOOLRL_TEST_FRAC
                      ) -> tuple[list, list]:
    """ToolRL's split: ``np.random.seed(seed)`` + ``np.random.shuffle``, then the last ``int(test_frac·N)`` → test.

    A private ``RandomState(seed)`` draws the same permutation as the seeded global generator without touching global
    state. Unlike ToolRL's ``dataset[:-k]`` slicing, ``k == 0`` keeps every row in train (ToolRL's gave an empty train).
    Returns ``(train, test)`` lists; the input is not modified.
    """
    if not 0.0 <= test_frac < 1.0:
        raise ValueError(f"test_frac must be in [0, 1), got {test_frac}")
    shuffled = list(records)
    np.random.RandomState(seed).shuffle(shuffled)
    n_test = int(test_frac * len(shuffled))
    cut = len(shuffled) - n_test
    return shuffled[:cut], shuffled[cut:]


def placeholder_think(output: str, where: str = "output") -> str:
    """Replace the reasoning in ``<think>…</think>`` with ToolRL's RL placeholder, keeping everything after it.

    The tool-call sentence is used when the text *after* ``</think>`` contains ``<tool_call>`` (tool calls win when a
    ground truth has both), the response sentence when it contains only ``<response>``.

    Raises:
        ValueError: no leading ``<think>…</think>`` block, or neither ``<tool_call>`` nor ``<response>`` after it.
    """
    match = _THINK_RE.match(output)
    if match is None:
        raise ValueError(f"{where}: expected the output to start with <think>…</think>, got {output[:80]!r}")
    after = output[match.end():]
    if "<tool_call>" in after:
        sentence = TOOL_CALL_THINK_PLACEHOLDER
    elif "<response>" in after:
        sentence = RESPONSE_THINK_PLACEHOLDER
    else:
        raise ValueError(f"{where}: neither <tool_call> nor <response> follows </think>")
    return f"<think> {sentence} </think>{after}"


def prompt_signature(prompt: Iterable[Mapping]) -> tuple[tuple[str, str], ...]:
    """Hashable ``((role, content), …)`` of a chat prompt, used to compare prompts across splits."""
    return tuple((str(m["role"]), str(m["content"])) for m in prompt)


# ---------------------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------------------
def write_parquet_atomic(table: pa.Table, path: str | os.PathLike) -> Path:
    """Write ``table`` to ``path`` atomically (:func:`verl.utils.fs.atomic_path`: a temporary file in the same folder,
    created if missing, then ``os.replace``; the temporary file never outlives a failure). Returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def write_rlla_parquet(rows: Sequence[Mapping], path: str | os.PathLike) -> Path:
    """Write rows in :data:`RLLA_ARROW_SCHEMA` atomically (temporary file in the same folder, then ``os.replace``).

    The output is byte-for-byte deterministic for the same rows and pyarrow version (no pandas metadata, one row
    group). Raises ValueError when a row does not fit the schema.
    """
    path = Path(path)
    try:
        table = pa.Table.from_pylist(list(rows), schema=RLLA_ARROW_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: rows do not match the RLLA schema: {exc}") from exc
    return write_parquet_atomic(table, path)


def _atomic_copy(src: Path, dst: Path) -> Path:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
    return dst


# ---------------------------------------------------------------------------------------------------------------------
# The project's default splits
# ---------------------------------------------------------------------------------------------------------------------
def build_default_rlla_splits(shared_data_dir: str | os.PathLike, out_dir: str | os.PathLike,
                              which: Iterable[str] = ("train", "test", "sft_full")) -> dict[str, Path]:
    """Build ``train.parquet``, ``test.parquet`` and ``sft_full.parquet`` from ``shared/data`` into ``out_dir``.

    - ``test``: ``rlla_4k/test.parquet`` copied unchanged (ToolRL's 80-row validation split).
    - ``train``: the rows of ``rlla_4k_raw/rlla_sft.json`` in file order, ground truth's think replaced by ToolRL's
      placeholder (:func:`placeholder_think`); ``extra_info.output`` equals the ground truth as in ToolRL's RL rows.
    - ``sft_full``: the same rows with the full reasoning kept, for SFT.

    Rows whose prompt equals a validation prompt are dropped from train and sft_full (the count is logged);
    ``extra_info.index`` is then 0..n-1 and ``split`` is ``"train"``. ``which`` selects the files to write (others are
    left untouched). Output is deterministic; every file is written atomically.

    Raises:
        FileNotFoundError: a source file is missing.  ValueError: a source row is malformed (names file and row).
    """
    shared_data_dir, out_dir = Path(shared_data_dir), Path(out_dir)
    which = tuple(which)
    unknown = set(which) - set(SPLIT_FILES)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; expected a subset of {sorted(SPLIT_FILES)}")
    test_src = shared_data_dir / "rlla_4k" / "test.parquet"
    raw_src = shared_data_dir / "rlla_4k_raw" / "rlla_sft.json"
    for src in (test_src, raw_src):
        if not src.is_file():
            raise FileNotFoundError(f"cannot build the RLLA splits: {src} not found")

    val_table = pq.read_table(test_src, columns=["prompt"])
    val_prompts = {prompt_signature(p) for p in val_table.column("prompt").to_pylist()}
    records = load_raw_records(raw_src)
    kept = []
    for rec in records:
        prompt = [{"role": "system", "content": rec["instruction"]}, {"role": "user", "content": rec["input"]}]
        if prompt_signature(prompt) not in val_prompts:
            kept.append(rec)
    logger.info("RLLA default splits: dropped %d of %d SFT rows whose prompt is also a validation prompt",
                len(records) - len(kept), len(records))

    written: dict[str, Path] = {}
    if "test" in which:
        written["test"] = _atomic_copy(test_src, out_dir / SPLIT_FILES["test"])
    if "train" in which:
        rl_rows = [make_rlla_row({**rec, "output": placeholder_think(rec["output"], f"{raw_src}:{i}")}, i, "train")
                   for i, rec in enumerate(kept)]
        written["train"] = write_rlla_parquet(rl_rows, out_dir / SPLIT_FILES["train"])
    if "sft_full" in which:
        written["sft_full"] = write_rlla_parquet([make_rlla_row(rec, i, "train") for i, rec in enumerate(kept)],
                                                 out_dir / SPLIT_FILES["sft_full"])
    logger.info("RLLA default splits written to %s: %s", out_dir, ", ".join(p.name for p in written.values()))
    return written


# ---------------------------------------------------------------------------------------------------------------------
# Download of ToolRL's published files
# ---------------------------------------------------------------------------------------------------------------------
def urllib_download(url: str, dest: Path, timeout: float = 60.0) -> None:
    """Fetch ``url`` into ``dest`` with a tqdm progress bar (urllib; raises ``urllib.error.URLError``/``OSError``)."""
    from tqdm import tqdm

    with urllib.request.urlopen(url, timeout=timeout) as response, open(dest, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=Path(url).name) as bar:
            while chunk := response.read(1 << 16):
                out.write(chunk)
                bar.update(len(chunk))


def download_toolrl_rlla(out_dir: str | os.PathLike, downloader: Downloader | None = None) -> Path:
    """Download ToolRL's ``train.parquet`` and ``test.parquet`` (pinned revision) into ``out_dir``.

    Both files are fetched to temporary names, checked (sha256 where pinned, readable parquet with the RLLA columns)
    and only then renamed into place, so a failed download never leaves a half-written split.

    Raises:
        OSError / urllib.error.URLError: the fetch failed.  ValueError: a checksum or column check failed.
    """
    out_dir = Path(out_dir)
    downloader = downloader or urllib_download
    staged: list[tuple[Path, Path]] = []
    try:
        for name in REQUIRED_FILES:
            dest = out_dir / name
            tmp = temp_sibling(dest)
            staged.append((tmp, dest))
            url = f"{TOOLRL_BASE_URL}/{name}"
            logger.info("downloading %s", url)
            downloader(url, tmp)
            digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
            expected = TOOLRL_SHA256.get(name)
            if expected is not None and digest != expected:
                raise ValueError(f"{url}: sha256 {digest} differs from the pinned {expected}")
            missing = set(RLLA_ARROW_SCHEMA.names) - set(pq.read_schema(tmp).names)
            if missing:
                raise ValueError(f"{url}: not an RLLA parquet file (missing columns {sorted(missing)})")
            logger.info("%s: sha256 %s", name, digest)
        for tmp, dest in staged:
            os.replace(tmp, dest)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    return out_dir


# ---------------------------------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------------------------------
def repo_root() -> Path:
    """The checkout this module lives in (``verl/utils/dataset/`` → three levels up)."""
    return Path(__file__).resolve().parents[3]


def default_shared_dir(root: Path | None = None) -> Path:
    """``$TOOLRL_SHARED`` if set, else the folder ``shared`` beside the checkout (a sibling of the repository root)."""
    env = os.environ.get("TOOLRL_SHARED")
    return Path(env).expanduser() if env else (root or repo_root()).parent / "shared"


def _has_files(directory: Path, names: Iterable[str]) -> bool:
    return all((directory / n).is_file() for n in names)


def resolve_rlla_data_dir(explicit: str | os.PathLike | None = None, *, root: Path | None = None,
                          shared_dir: str | os.PathLike | None = None, download: bool | None = None,
                          downloader: Downloader | None = None, need: Iterable[str] = REQUIRED_FILES) -> Path:
    """Return a directory holding ``train.parquet`` and ``test.parquet`` (or the files named in ``need``).

    Looks, in order, at:

    1. ``explicit`` (e.g. ``data.train_files``' folder) and then ``$DATA_DIR``; an explicit folder that lacks the
       files raises at once (a mistyped path must not silently train on other data), except the repository's own
       ``dataset/rlla_4k`` (ToolRL's scripts set ``DATA_DIR=./dataset/rlla_4k``), which is built as below;
    2. ``<root>/dataset/rlla_4k/`` (git-ignored; ``root`` defaults to this checkout);
    3. a build from ``<shared_dir>/data`` (:func:`build_default_rlla_splits`; ``shared_dir`` defaults to
       :func:`default_shared_dir`) into ``<root>/dataset/rlla_4k/``, writing only the files missing there (a
       downloaded split is never overwritten);
    4. a download of ToolRL's files into ``<root>/dataset/rlla_4k/`` unless ``download`` is False (default: enabled
       unless ``$TOOLRL_OFFLINE`` is ``1``/``true``); ``downloader(url, dest)`` replaces urllib (tests inject one).

    Raises:
        FileNotFoundError: an explicit folder lacks the files, or nothing worked (the message lists every place looked
            at and why each failed).
    """
    need = tuple(need)
    root = Path(root) if root is not None else repo_root()
    repo_dir = (root / "dataset" / "rlla_4k").resolve()
    looked: list[str] = []

    candidates = [(explicit, "explicit data dir"), (os.environ.get("DATA_DIR") or None, "$DATA_DIR")]
    seen: set[Path] = set()
    for value, label in candidates + [(repo_dir, "repository dataset/rlla_4k")]:
        if value is None:
            continue
        path = Path(value).expanduser().resolve()
        if path in seen:
            continue
        seen.add(path)
        if _has_files(path, need):
            logger.info("RLLA data: using %s (%s)", path, label)
            return path
        missing = [n for n in need if not (path / n).is_file()]
        looked.append(f"{label} {path}: missing {', '.join(missing)}")
        if path != repo_dir:
            # an explicit location that lacks the files is a user error: never fall back silently to other data
            raise FileNotFoundError(f"RLLA data: {label} {path} lacks {', '.join(missing)} (unset it to use the "
                                    f"default search: {repo_dir}, then the shared folder, then ToolRL's files)")

    shared = Path(shared_dir) if shared_dir is not None else default_shared_dir(root)
    buildable = [k for k, n in SPLIT_FILES.items() if not (repo_dir / n).is_file()]
    try:
        build_default_rlla_splits(shared / "data", repo_dir, which=buildable)
        if _has_files(repo_dir, need):
            return repo_dir
        looked.append(f"build from {shared / 'data'}: did not produce {', '.join(need)}")
    except OSError as exc:  # missing shared files, or an unwritable checkout
        looked.append(f"build from {shared / 'data'} (set TOOLRL_SHARED): {exc}")

    if download is None:
        download = os.environ.get("TOOLRL_OFFLINE", "").lower() not in ("1", "true", "yes")
    if not download:
        looked.append("download from ToolRL: disabled (TOOLRL_OFFLINE or download=False)")
    elif not set(need) <= set(REQUIRED_FILES):
        looked.append(f"download from ToolRL: it does not publish {', '.join(sorted(set(need) - set(REQUIRED_FILES)))}")
    else:
        try:
            download_toolrl_rlla(repo_dir, downloader)
            return repo_dir
        except (OSError, urllib.error.URLError, ValueError) as exc:
            looked.append(f"download from {TOOLRL_BASE_URL}: {exc}")

    raise FileNotFoundError("RLLA data not found (need " + ", ".join(need) + "). Looked at:\n  - "
                            + "\n  - ".join(looked)
                            + "\nSet DATA_DIR or data.train_files/val_files, or TOOLRL_SHARED to the shared/ folder.")


def resolve_rlla_file(name: str, explicit: str | os.PathLike | None = None, **kwargs) -> Path:
    """Path of one RLLA file: ``train``, ``test`` or ``sft_full`` (with or without ``.parquet``).

    Same search as :func:`resolve_rlla_data_dir` but requiring only that file (``sft_full`` cannot be downloaded: it
    is built from the shared SFT rows). Raises ValueError for an unknown name, FileNotFoundError when not found.
    """
    key = name[: -len(".parquet")] if name.endswith(".parquet") else name
    if key not in SPLIT_FILES:
        raise ValueError(f"unknown RLLA file {name!r}; expected one of {sorted(SPLIT_FILES)}")
    filename = SPLIT_FILES[key]
    return resolve_rlla_data_dir(explicit, need=(filename,), **kwargs) / filename


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print the resolved RLLA data directory (building or downloading it when needed)."""
    parser = argparse.ArgumentParser(description="Find (or build/download) the RLLA train/test parquet files.")
    parser.add_argument("--data-dir", default=None, help="explicit directory to try first")
    parser.add_argument("--offline", action="store_true", help="never download")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        path = resolve_rlla_data_dir(args.data_dir, download=False if args.offline else None)
    except FileNotFoundError as exc:
        print(exc)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
