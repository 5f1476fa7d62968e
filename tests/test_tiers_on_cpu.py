"""The test tiers of tests/README.md (markers set in conftest.py from each file's path): every file the tier lists
name exists, every test has exactly one tier, and ``run_tests.sh --fast`` selects the unit tier."""

from __future__ import annotations

import subprocess
import sys

from conftest import E2E_FILES, EVIDENCE_FILES, REPO_ROOT, TIERS, tier_of

TESTS = REPO_ROOT / "tests"


def test_every_listed_file_exists_and_is_listed_once():
    missing = sorted(name for name in E2E_FILES | EVIDENCE_FILES if not (TESTS / name).is_file())
    assert not missing, f"tier lists in tests/conftest.py name files that do not exist: {missing}"
    assert not E2E_FILES & EVIDENCE_FILES


def test_tiers_by_path():
    assert tier_of(TESTS / "trainer/test_kill_resume_on_cpu.py") == "e2e"
    assert tier_of(TESTS / "router/test_does_it_learn_summary_on_cpu.py") == "evidence"
    assert tier_of(TESTS / "utils/test_torch_functional.py") == "unit"


def test_each_collected_test_has_one_tier(request):
    for item in request.session.items:
        marks = {m.name for m in item.iter_markers() if m.name in TIERS}
        assert len(marks) == 1, (item.nodeid, marks)


def test_the_fast_lane_is_the_unit_tier():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-m",
            "unit",
            "tests/trainer/test_kill_resume_on_cpu.py",
            "tests/utils/test_torch_functional.py",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    collected = [line for line in out.stdout.splitlines() if "::" in line]
    assert collected and all(line.startswith("tests/utils/test_torch_functional.py") for line in collected), out.stdout
    script = (REPO_ROOT / "run_tests.sh").read_text()
    assert "tier=(-m unit)" in script and '"--fast"' in script
