"""Kill campaign, CI version (issue 22): ``benchmarks/kill_campaign.py`` with 3 kills.

The campaign's own functions: an uninterrupted 3-step reference run, then the same job killed with SIGKILL in the
generation of step 2 (a fresh start: step 1 is checkpointed first), in the actor update of step 2 (resumed from step
1) and in the save of step 2 the moment the checkpoint is published, before the step's metrics are logged
(``save_published``: resumed from step 1), then a start that finishes (resumed from step 2, whose metrics record it
restores from the checkpoint), then a start whose step-3 checkpoint the disk refuses (ENOSPC injected where its files
are written: the start fails with "no space left", no partial folder, step 2 kept), then a start that finishes.
Killing in the middle of writing a checkpoint (``save_partial``) is covered by
``test_kill_resume_on_cpu.py`` and the full campaign.
Every checkpoint and ``metrics.jsonl`` must equal the reference's bitwise (timing metrics excepted). The second test
shows the comparison fails on a one-ulp change of an Adam moment, of λ, or of a logged loss, and on a lost record.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import shutil

import pytest
import torch

from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("kill_campaign", REPO_ROOT / "benchmarks" / "kill_campaign.py")
kc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kc)

STEPS = 3
PLAN = [
    {"kind": "fault", "phase": "gen", "step": 2},
    {"kind": "fault", "phase": "update_actor", "step": 2},
    {"kind": "fault", "phase": "save_published", "step": 2},
    {"kind": "disk", "errno": "ENOSPC", "step": 3},  # the disk is full while the step-3 checkpoint is written
]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """``(workdir, run_campaign's result)`` after the reference run and the 3-kill campaign."""
    root = tmp_path_factory.mktemp("kill_campaign")
    data = kc.prepare_data(root / "data")
    timing = kc.run_reference(root / "reference", data, STEPS, timeout=600)
    result = kc.run_campaign(root / "campaign", data, STEPS, PLAN, timing, random.Random(0), timeout=600)
    return root, result


def test_three_kills_end_bitwise_equal(campaign):
    """3 kills (generation, actor update, just after a save), each start resumed from the newest valid checkpoint, and the
    end state (every checkpoint, metrics.jsonl) bitwise equal to the uninterrupted run's."""
    root, result = campaign
    starts = result["starts"]
    print("kill campaign:", json.dumps(starts))
    assert result["problems"] == [], result["problems"]
    assert result["kills"] == 3 and [s["killed"] for s in starts] == [True, True, True, False, False]
    assert [(s["kind"], s.get("phase"), s.get("step")) for s in starts[:4]] == [
        ("fault", "gen", 2),
        ("fault", "update_actor", 2),
        ("fault", "save_published", 2),
        ("disk", "save_partial", 3),
    ]
    assert result["disk_faults"] == 1 and starts[3]["told"] and starts[3]["rc"] != 0
    assert starts[2].get("unlogged_checkpoint")  # killed between the step-2 save and its log line
    # each start resumed from the newest valid checkpoint, and the checkpoints advanced
    assert [s["resumed_from"] for s in starts] == [None, 1, 1, 2, 2]
    assert [s["checkpoint_after"] for s in starts] == [1, 1, 2, 2, 3]
    assert result["resumes"] == 4 and starts[-1]["rc"] == 0
    metrics, order, _ = kc.read_metrics(root / "campaign" / "run")
    assert order == [1, 2, 3] and any(m["actor/grad_norm"] > 0 for m in metrics.values())  # the actor trained
    assert kc.compare_runs(root / "reference", root / "campaign", STEPS) == []


def test_comparison_detects_a_mismatch(campaign, tmp_path):
    """The comparison can fail: one ulp in an Adam moment, in λ or in a logged loss, or a lost metrics record, is
    reported; a changed wall-clock metric is not."""
    root, _ = campaign
    ref_step = root / "reference" / "ckpt" / "global_step_3"
    bad = tmp_path / "global_step_3"
    shutil.copytree(root / "campaign" / "ckpt" / "global_step_3", bad)
    assert kc.compare_checkpoint(ref_step, bad) == []

    optim_path = bad / "actor" / "optim_world_size_1_rank_0.pt"
    optim = torch.load(optim_path, weights_only=False)
    moment = next(iter(optim["state"].values()))["exp_avg"]
    moment.view(-1)[0] = torch.nextafter(moment.view(-1)[0], torch.tensor(math.inf))
    torch.save(optim, optim_path)
    data = torch.load(bad / "data.pt", weights_only=False)
    data["router"]["lagrange"]["lambda"] = math.nextafter(data["router"]["lagrange"]["lambda"], 1.0)
    torch.save(data, bad / "data.pt")
    found = kc.compare_checkpoint(ref_step, bad)
    print("checkpoint mismatches:", found)
    assert any("optim_world_size_1_rank_0.pt/state/" in m and "exp_avg" in m for m in found), found
    assert any("data.pt/router/lagrange/lambda" in m for m in found), found

    run = tmp_path / "run"
    run.mkdir()
    records = [json.loads(line) for line in (root / "campaign" / "run" / "metrics.jsonl").read_text().splitlines()]
    records[1]["timing_s/gen"] += 1.0  # wall-clock metrics are not compared
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert kc.compare_metrics(root / "reference" / "run", run, STEPS) == []
    records[1]["actor/pg_loss"] = math.nextafter(records[1]["actor/pg_loss"], math.inf)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:2]))
    found = kc.compare_metrics(root / "reference" / "run", run, STEPS)
    print("metrics mismatches:", found)
    assert any(m.startswith("metrics step 2 actor/pg_loss") for m in found), found
    assert "metrics step 3: missing in the campaign run" in found and any("steps logged [1, 2]" in m for m in found)
