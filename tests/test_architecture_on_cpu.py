"""Architecture ratchet (the architecture issue): ``scripts/check_architecture.py`` measures upward imports across
the layers, import cycles, files over 600 lines and citations of documents outside the repository. The counts of
this checkout may only go down; the detectors themselves are shown to work on a tiny synthetic package.

    python -m pytest tests/test_architecture_on_cpu.py -q
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_architecture", REPO_ROOT / "scripts" / "check_architecture.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


arch = _load_checker()

# Every count reached 0 (``scripts/check_architecture.py --strict`` passes): no upward import, no import cycle (imports
# inside functions counted), no package file over 600 lines, no citation of a path outside the repository, no issue /
# item / design-document reference in scripts, configs, READMEs or docs. A change that adds one fails here with the
# report naming it.
BASELINE = {
    "upward_edges": 0,
    "cycles": 0,
    "cycle_modules": 0,
    "long_files": 0,
    "outside_citations": 0,
    "internal_references": 0,
}


def test_repository_counts_do_not_grow():
    summary = arch.analyse(REPO_ROOT)
    assert set(summary["counts"]) == set(BASELINE)
    grown = arch.exceeded(summary["counts"], BASELINE)
    assert not grown, "architecture got worse (" + "; ".join(grown) + "):\n" + arch.format_report(summary)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture()
def synthetic(tmp_path: Path) -> Path:
    """A tiny repository with exactly one problem of each kind (and allowed look-alikes next to each)."""
    _write(tmp_path, "verl/__init__.py", "")
    _write(tmp_path, "verl/protocol.py", "import json\nimport verl.utils\n")
    _write(tmp_path, "verl/utils/__init__.py", "")
    # upward edge: verl.utils reaches up into agent_system (line 3, module level)
    _write(tmp_path, "verl/utils/helpers.py", "import os\nfrom verl.protocol import json\nfrom agent_system import a\n")
    # allowed: the composition layer wires agent_system and rlvcr in
    _write(tmp_path, "verl/trainer/__init__.py", "")
    _write(tmp_path, "verl/trainer/main.py", "import agent_system.a\nfrom rlvcr import big\n")
    _write(tmp_path, "agent_system/__init__.py", "")
    # cycle a <-> b, the way back only through a function-level relative import
    _write(tmp_path, "agent_system/a.py", "from agent_system import b\nfrom verl import protocol\n")
    _write(tmp_path, "agent_system/b.py", "import verl\n\n\ndef f():\n    from . import a\n    return a\n")
    _write(
        tmp_path,
        "rlvcr/__init__.py",
        '"""Spec: ``../shared/specs/x.md``.\n\nOur own notes: ``docs/specs/ok.md``."""\nimport agent_system\n',
    )
    _write(tmp_path, "rlvcr/big.py", "x = 1\n" * 601)
    _write(tmp_path, "rlvcr/fits.py", "x = 1\n" * 600)
    # not package code: never read
    _write(tmp_path, "tests/test_x.py", "import rlvcr\n# ../shared/specs/y.md\n" + "x = 1\n" * 700)
    return tmp_path


def test_collects_module_and_function_level_imports(synthetic):
    edges = arch.collect_imports(synthetic)
    found = {(e.importer, e.imported, e.line, e.function_level) for e in edges}
    assert ("agent_system.b", "agent_system.a", 5, True) in found  # relative, inside a function
    assert ("agent_system.a", "agent_system.b", 1, False) in found  # from X import <submodule>
    assert ("verl.utils.helpers", "verl.protocol", 2, False) in found  # from X import <attribute> -> X
    assert ("verl.trainer.main", "agent_system.a", 1, False) in found
    assert not any(e.importer.startswith("tests") for e in edges)


def test_detects_upward_edge(synthetic):
    summary = arch.analyse(synthetic)
    assert [e["text"] for e in summary["upward_edges"]] == [
        "verl.utils.helpers -> agent_system.a (line 3, module-level)"
    ]
    assert "verl.utils" in summary["upward_edges"][0]["rule"]
    assert arch.layer_violation("agent_system.x", "rlvcr.y") == "agent_system never imports rlvcr"
    assert arch.layer_violation("verl.workers.x", "agent_system.y")
    assert arch.layer_violation("verl.protocol", "verl.workers.x")
    assert arch.layer_violation("verl.trainer.ppo.x", "rlvcr.y") is None
    assert arch.layer_violation("rlvcr.x", "agent_system.y") is None
    assert arch.layer_violation("verl.utils.x", "verl") is None


def test_detects_cycle_through_function_level_import(synthetic):
    cycles = arch.analyse(synthetic)["cycles"]
    assert len(cycles) == 1
    assert cycles[0]["modules"] == ["agent_system.a", "agent_system.b"]
    assert cycles[0]["example"] == ["agent_system.a", "agent_system.b", "agent_system.a"]
    assert "agent_system.b -> agent_system.a (line 5, function-level)" in cycles[0]["hops"]


def test_tarjan_components_and_deep_graphs():
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": ["e"], "e": ["d"], "f": ["a"]}
    components = sorted(c for c in arch.strongly_connected_components(graph) if len(c) > 1)
    assert components == [["a", "b", "c"], ["d", "e"]]
    assert arch.example_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    ring = {f"m{i}": [f"m{(i + 1) % 5000}"] for i in range(5000)}  # far deeper than the recursion limit
    assert [len(c) for c in arch.strongly_connected_components(ring)] == [5000]


def test_detects_long_file(synthetic):
    assert arch.analyse(synthetic)["long_files"] == [{"path": "rlvcr/big.py", "lines": 601}]


def test_detects_outside_citation(synthetic):
    citations = arch.analyse(synthetic)["outside_citations"]
    assert [(c["path"], c["line"]) for c in citations] == [("rlvcr/__init__.py", 1)]
    assert {"../shared", "shared/specs", "specs/*.md"} <= set(citations[0]["patterns"])


def test_seed_and_spec_patterns(tmp_path):
    _write(
        tmp_path,
        "rlvcr/__init__.py",
        '"""seed ``001``.\nSeed 004 notes.\nspecs/router.md\ndocs/specs/a.md\n'
        'shared/seeds/x.txt\nseeds 12 and seed 1234\n"""\n',
    )
    lines = [c["line"] for c in arch.analyse(tmp_path)["outside_citations"]]
    assert lines == [1, 2, 3, 5]


def test_command_line_exit_status(synthetic, tmp_path, capsys):
    out = tmp_path / "summary.json"
    assert arch.main(["--root", str(synthetic), "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["counts"] == {
        "upward_edges": 1,
        "cycles": 1,
        "cycle_modules": 2,
        "long_files": 1,
        "outside_citations": 1,
        "internal_references": 0,
    }
    assert set(summary) >= {"upward_edges", "cycles", "long_files", "outside_citations", "counts"}
    assert "Upward edges: 1" in capsys.readouterr().out

    assert arch.main(["--root", str(synthetic), "--strict", "--quiet"]) == 1
    assert "outside_citations: 1 > 0" in capsys.readouterr().err
    maxima = tmp_path / "max.json"
    maxima.write_text(json.dumps({"upward_edges": 1, "cycles": 0, "long_files": 5}))
    assert arch.main(["--root", str(synthetic), "--max-counts", str(maxima), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "cycles: 1 > 0" in err and "upward_edges" not in err and "long_files" not in err
    maxima.write_text(json.dumps({"upward_edges": 1, "cycles": 1}))
    assert arch.main(["--root", str(synthetic), "--max-counts", str(maxima), "--quiet"]) == 0


def test_internal_references_in_user_facing_text(tmp_path):
    """Rule 5: an issue, a notebook item, a design document or its "Option A" in a script, config, README or docs page
    is counted; a paper's section (a ``§`` beside ``arXiv``) and the research record are not."""
    _write(tmp_path, "run.sh", "# the run of issue 12\necho ok\n")
    _write(tmp_path, "conf/x.yaml", "a: 1   # as the seed's Option A says\nb: 2  # DAPO (arXiv 2503.14476 §3.2)\n")
    _write(tmp_path, "README.md", "Items 3 and 4 hold.\nSee §2 of the design.\n")
    _write(tmp_path, "docs/page.md", "Plain text.\nseed 003 says so.\n")
    _write(tmp_path, "experiments/notebook.md", "item 6: the ridge head\n")
    _write(tmp_path, "experiments/scripts/study.sh", "# issue 19\n")
    _write(tmp_path, ".venv/lib/README.md", "issue 1\n")
    found = {(r["path"], r["line"]) for r in arch.analyse(tmp_path)["internal_references"]}
    assert found == {("run.sh", 1), ("conf/x.yaml", 1), ("README.md", 1), ("README.md", 2), ("docs/page.md", 2)}
