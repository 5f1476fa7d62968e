"""Pack a ``router_route_qa`` recipe run into the research record: the run's summary and plot, the router's steps
(from its ``metrics.jsonl``) and the warm start's record (the preset's ``warm_start.json``, ``copy_warmup.jsonl`` and
SFT ``metrics.jsonl``).

    python experiments/scripts/route_qa_pack_run.py --run RUN_DIR --preset PRESET_DIR --out experiments/runs/ID/NAME \
        --command "the launch" --wall_s SECONDS [--machine "..."]

writes ``NAME.json`` (command, wall time, machine, warm start, router steps, the test table's accuracy per setting
and subkind, summary), ``NAME_summary.json`` (the
run's ``summary.json``) and ``NAME_route_qa.png`` (its ``plots/route_qa.png``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def warm_start_record(preset: Path) -> dict:
    """The warm start's settings and seconds, its warm-up loss every 100 steps and its SFT loss every 50."""
    record = json.loads((preset / "warm_start.json").read_text())
    copy = _jsonl(preset / "copy_warmup.jsonl")
    sft = [m for m in _jsonl(preset / "metrics.jsonl") if "train/loss" in m]
    record["copy_loss_every_100"] = {
        str(r["step"]): round(r["loss"], 4) for r in copy if r["step"] == 1 or r["step"] % 100 == 0
    }
    record["sft_loss_every_50"] = {
        str(m["step"]): round(m["train/loss"], 4) for m in sft if m["step"] == 1 or m["step"] % 50 == 0
    }
    return record


def router_steps(run: Path) -> list[dict]:
    """Per router step: λ, the policy's expected cost, the mean score and the step's seconds."""
    keys = {"lambda": "router/lambda", "policy_cost": "router/policy_cost", "score": "critic/score/mean"}
    out = []
    for m in _jsonl(run / "metrics.jsonl"):
        if "router/lambda" not in m:
            continue
        row = {"step": m["step"], **{k: round(float(m[v]), 4) for k, v in keys.items() if v in m}}
        if "timing_s/step" in m:
            row["s"] = round(float(m["timing_s/step"]), 2)
        out.append(row)
    return out


def table_accuracy(run: Path) -> dict:
    """The played test table's accuracy per ``setting/subkind`` (``setting/kind`` for an older table; an empty dict
    without a table)."""
    path = run / "test_table.parquet"
    if not path.is_file():
        return {}
    import pandas as pd

    frame = pd.read_parquet(path)
    by = "subkind" if "subkind" in frame.columns else "kind"  # tables played before evaluate kept the subkind
    means = frame.groupby(["setting", by])["correct"].mean()
    return {f"{setting}/{subkind}": round(float(v), 4) for (setting, subkind), v in means.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="the run's folder (trainer.run_dir)")
    parser.add_argument("--preset", required=True, help="the tiny-route-qa preset folder the run used")
    parser.add_argument("--out", required=True, help="experiments/runs/<id>/<name> (no suffix)")
    parser.add_argument("--command", required=True)
    parser.add_argument("--wall_s", type=float, required=True)
    parser.add_argument("--machine", default="2 CPU cores (this sandbox)")
    args = parser.parse_args()
    run, out = Path(args.run), Path(args.out)
    record = {
        "command": args.command,
        "wall_s": args.wall_s,
        "machine": args.machine,
        "warm_start": warm_start_record(Path(args.preset)),
        "router_steps": router_steps(run),
        "test_accuracy": table_accuracy(run),
        "summary": f"{out.name}_summary.json",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(record, indent=1) + "\n")
    shutil.copyfile(run / "summary.json", f"{out}_summary.json")
    shutil.copyfile(run / "plots" / "route_qa.png", f"{out}_route_qa.png")
    print(f"{out}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
