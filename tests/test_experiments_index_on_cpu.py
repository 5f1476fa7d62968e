"""experiments/README.md's index of runs against the files present: one row per run folder and one folder per row,
every file a row links and every script its command names exist, and each row's commit, date and verdict well formed.
"""

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO_ROOT / "experiments"
COLUMNS = ["id", "what it tested", "command", "commit", "date", "headline figure", "verdict"]
VERDICTS = {"pass", "fail", "met", "not met", "descriptive"}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def index_rows(text: str) -> list[dict]:
    """The rows of the table that follows the ``<!-- index`` comment, as dicts keyed by :data:`COLUMNS`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("<!-- index"))
    header = _cells(lines[start + 1])
    assert header == COLUMNS, f"experiments/README.md: index columns {header}, expected {COLUMNS}"
    rows = []
    for line in lines[start + 3 :]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        assert len(cells) == len(COLUMNS), f"experiments/README.md: {len(cells)} cells in {line[:60]!r}"
        rows.append(dict(zip(COLUMNS, cells)))
    return rows


ROWS = index_rows((EXPERIMENTS / "README.md").read_text())


def test_the_index_has_one_row_per_run_folder_and_nothing_else_in_runs():
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids)), "a run id is listed twice"
    runs = EXPERIMENTS / "runs"
    folders = sorted(p.name for p in runs.iterdir() if p.is_dir())
    assert sorted(ids) == folders
    assert not [p.name for p in runs.iterdir() if p.is_file()], "result files belong in a run's folder"
    for rid in ids:
        assert any(p.is_file() for p in (runs / rid).rglob("*")), f"runs/{rid} holds no file"


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_each_row_links_files_that_exist_and_is_well_formed(row):
    links = re.findall(r"\]\((runs/[^)]+)\)", row["headline figure"] + row["command"])
    assert links, f"{row['id']}: the headline figure links no result file"
    for link in links:
        assert link.startswith(f"runs/{row['id']}/"), f"{row['id']} links another run's file: {link}"
        assert (EXPERIMENTS / link).is_file(), f"{row['id']}: {link} does not exist"
    assert re.fullmatch(r"[0-9a-f]{7,40}", row["commit"]), row["commit"]
    assert re.fullmatch(r"2\d{3}-\d{2}-\d{2}", row["date"]), row["date"]
    assert row["verdict"] in VERDICTS, f"{row['id']}: verdict {row['verdict']!r} not in {sorted(VERDICTS)}"


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_every_script_a_command_names_exists(row):
    scripts = re.findall(
        r"(?:experiments/scripts|scripts|examples/[\w/]+)/[\w.-]+\.(?:sh|py)|run_router_training\.sh", row["command"]
    )
    named_module = re.findall(r"python -m ([\w.]+)", row["command"])
    assert (
        scripts
        or named_module
        or "progress.json" in row["command"]
        or "prereg.txt" in row["command"]
        or "probe.json" in row["command"]
        or "'s command" in row["command"]
    ), f"{row['id']}: no command"
    for script in scripts:
        assert (REPO_ROOT / script).is_file(), f"{row['id']}: {script} does not exist"
    for module in named_module:
        assert (REPO_ROOT / (module.replace(".", "/") + ".py")).is_file(), f"{row['id']}: {module} does not exist"


def test_each_commit_is_in_the_history_when_the_history_is_there():
    probe = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    if probe.returncode != 0 or probe.stdout.strip() != "false":
        pytest.skip("no full git history here (not a clone, or a shallow one)")
    for row in ROWS:
        found = subprocess.run(
            ["git", "cat-file", "-e", f"{row['commit']}^{{commit}}"], cwd=REPO_ROOT, capture_output=True
        )
        assert found.returncode == 0, f"{row['id']}: commit {row['commit']} is not in the history"


def test_the_product_never_names_a_moved_result_path():
    """After the move no product file points into the old result folder for a research run (the benchmarks'
    own figures stay in benchmarks/results/)."""
    listed = subprocess.run(["git", "ls-files", "benchmarks/results"], cwd=REPO_ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    kept = {Path(p).name for p in listed.stdout.split()}
    # a benchmark's figures are named after the benchmark; a research run's belong in experiments/runs/<id>/
    benchmark = re.compile(r"README\.md|(gpu_|async_vs_sync|kill_campaign|lora_vs_full|h100_|bench_grpo_vs_trl).*")
    assert all(benchmark.fullmatch(name) for name in kept), sorted(n for n in kept if not benchmark.fullmatch(n))
