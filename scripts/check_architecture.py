"""Measure the dependency structure of the package code against the target layering. Standard library only (ast).

    python scripts/check_architecture.py                        # human-readable report, exit 0
    python scripts/check_architecture.py --json report.json     # also write a JSON summary
    python scripts/check_architecture.py --strict               # exit 1 when any count is above 0
    python scripts/check_architecture.py --max-counts max.json  # exit 1 naming each count above its allowed maximum

What is checked: every ``.py`` file under the packages ``verl/``, ``agent_system/`` and ``rlvcr/`` (package code
only; ``tests/``, ``benchmarks/``, ``scripts/`` and ``examples/`` are not read). Every import is collected, at
module level (including class bodies and ``if``/``try`` blocks, which run at import time) and inside functions and
methods (run later, but still a dependency), plus ``importlib.import_module("literal")`` / ``__import__("literal")``
calls. Relative imports are resolved against the importing module; ``from X import Y`` counts as an import of the
module ``X.Y`` when ``X/Y.py`` or ``X/Y/__init__.py`` exists, else of ``X``; an import of a module that does not
exist inside the repository resolves to its longest existing prefix (``verl.utils.foo.bar`` -> ``verl.utils.foo``).
Imports of anything outside the three packages (stdlib, third party) are ignored. Parent packages that Python runs
implicitly (``verl/__init__.py`` before ``verl.utils``) are not counted as edges; ``if TYPE_CHECKING:`` imports
are counted like any other.

The rules (the project's target layering: a bottom layer, packages built on it, one composition layer):

1. Layers (reported as *upward edges*, one per import statement):
   - ``verl`` is the bottom layer, and within it ``verl.utils`` and ``verl.protocol`` import nothing above them:
     only ``verl`` (its ``__init__``), ``verl.utils.*`` and ``verl.protocol``; no other ``verl.*`` subpackage,
     nothing from ``agent_system`` or ``rlvcr``.
   - ``agent_system`` and ``rlvcr`` build on ``verl``; only the composition layer ``verl.trainer`` (entry points,
     trainer wiring) may import ``agent_system`` or ``rlvcr`` from inside ``verl``.
   - ``agent_system`` never imports ``rlvcr``.
   - no package imports the research record (``experiments``) or the benchmarks (``benchmarks``).
2. No import cycle anywhere, counting function-level imports: every strongly connected component (Tarjan) of the
   module graph with more than one module is reported with one example cycle through it.
3. No package file over 600 lines.
4. No package file citing a path outside the repository: lines matching ``../shared``, ``shared/specs``,
   ``shared/seeds``, ``specs/<name>.md`` (unless that path is under ``docs/`` or exists in the repository) or
   ``seed 0NN`` (case-insensitive, also with the number in backticks or quotes) — design documents that are not in
   the repository.
5. No project-internal reference a reader cannot follow in the user-facing text: shell scripts (``*.sh``), configs
   (``*.yaml``), ``README.md`` files and ``docs/`` — lines naming an issue (``issue 12``, ``issues 3 and 5``), an
   "item" of the lab notebook (``item 6``), a design document (``seed 003``, ``the seed's``, ``§3.2`` of one) or the
   design's "Option A". Papers' sections stay cited: a ``§`` on a line that cites ``arXiv`` is not counted. The
   research record (``experiments/``: its scripts, run folders, lab notebook and results summary) is not read, and
   neither are hidden folders (``.venv``) or what runs write (``outputs/``, ``checkpoints/``).

Counts (``counts`` in the JSON, the keys of a ``--max-counts`` file): ``upward_edges``, ``cycles`` (components),
``cycle_modules`` (modules inside those components), ``long_files``, ``outside_citations`` and
``internal_references`` (lines).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
import itertools

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("verl", "agent_system", "rlvcr")
MAX_LINES = 600
COUNT_KEYS = ("upward_edges", "cycles", "cycle_modules", "long_files", "outside_citations", "internal_references")

# verl's own bottom: what verl.utils / verl.protocol may import from inside the repository
BASE_LAYER = ("verl.utils", "verl.protocol")
BASE_ALLOWED = ("verl", "verl.utils", "verl.protocol")
COMPOSITION_LAYER = "verl.trainer"

CITATION_PATTERNS = (
    ("../shared", re.compile(r"\.\./shared")),
    ("shared/specs", re.compile(r"shared/specs")),
    ("shared/seeds", re.compile(r"shared/seeds")),
    ("specs/*.md", re.compile(r"[\w./-]*specs/[a-z_]+\.md")),
    ("seed 0NN", re.compile(r"seed\s*[`'\"]*0\d\d", re.IGNORECASE)),
)

REFERENCE_PATTERNS = (
    ("issue N", re.compile(r"\bissues? #?\d+", re.IGNORECASE)),
    ("item N", re.compile(r"\bitems? \d+", re.IGNORECASE)),
    ("seed", re.compile(r"\bseed\s*[`'\"]*0\d\d|\bthe seed'?s\b", re.IGNORECASE)),
    ("Option A", re.compile(r"\bOption A\b")),
    ("§ (not a paper's)", re.compile(r"§")),
)
RESEARCH_RECORD = ("experiments/",)
OUTSIDE_PRODUCT = ("experiments", "benchmarks")  # top-level folders no package may import
RUN_FOLDERS = ("outputs/", "checkpoints/", "runs/", "wandb/")  # what runs write (git-ignored): not the project's text


@dataclass(frozen=True)
class ImportEdge:
    """One import statement (or literal dynamic import) of one repository module by another."""

    importer: str
    imported: str
    path: str  # importer's file, relative to the root
    line: int
    function_level: bool  # inside a function or method body (runs when called, not at import)
    dynamic: bool = False  # importlib.import_module("...") / __import__("...")

    def describe(self) -> str:
        """``importer -> imported (line N, function-level)``."""
        where = "function-level" if self.function_level else "module-level"
        extra = ", dynamic" if self.dynamic else ""
        return f"{self.importer} -> {self.imported} (line {self.line}, {where}{extra})"


def _in(module: str, prefix: str) -> bool:
    """True when ``module`` is ``prefix`` or inside it."""
    return module == prefix or module.startswith(prefix + ".")


def discover_modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Module name -> file of every ``.py`` file under the ``packages`` folders of ``root`` (sorted by name)."""
    modules: dict[str, Path] = {}
    for package in packages:
        base = root / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(root)
            if "__pycache__" in rel.parts:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return dict(sorted(modules.items()))


def resolve_module(name: str, modules: dict[str, Path]) -> str | None:
    """The repository module that importing ``name`` loads: itself, else its longest existing prefix; ``None`` for
    anything outside the repository's packages."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _relative_base(importer: str, is_package: bool, level: int, module: str | None) -> str | None:
    """Absolute name of ``from <level dots><module> import ...`` inside ``importer`` (``None`` if it climbs too far)."""
    parts = importer.split(".")
    package = parts if is_package else parts[:-1]
    if level - 1 > len(package) - 1:
        return None
    base = package[: len(package) - (level - 1)]
    if module:
        base = base + module.split(".")
    return ".".join(base) if base else None


class _ImportVisitor(ast.NodeVisitor):
    """Collects ``(absolute module, line, function_level, dynamic, names)`` for every import in one file."""

    def __init__(self, importer: str, is_package: bool):
        self.importer = importer
        self.is_package = is_package
        self.depth = 0
        self.found: list[tuple[str, int, bool, bool, tuple[str, ...]]] = []

    def _function(self, node: ast.AST) -> None:
        # decorators and default values run at definition time (module level); only the body is deferred
        for child in getattr(node, "decorator_list", []):
            self.visit(child)
        self.visit(node.args)
        self.depth += 1
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, node.lineno, self.depth > 0, False, ()))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = _relative_base(self.importer, self.is_package, node.level, node.module)
        else:
            base = node.module
        if base:
            self.found.append((base, node.lineno, self.depth > 0, False, tuple(a.name for a in node.names)))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if (
            name in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            self.found.append((node.args[0].value, node.lineno, self.depth > 0, True, ()))
        self.generic_visit(node)


def collect_imports(root: Path = ROOT, modules: dict[str, Path] | None = None) -> list[ImportEdge]:
    """Every import of a repository module by a repository module (self-imports dropped), in file and line order."""
    modules = discover_modules(root) if modules is None else modules
    edges: list[ImportEdge] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        visitor = _ImportVisitor(importer, path.name == "__init__.py")
        visitor.visit(tree)
        rel = path.relative_to(root).as_posix()
        for base, line, function_level, dynamic, names in visitor.found:
            targets: list[str] = []
            submodules = [f"{base}.{n}" for n in names if n != "*" and f"{base}.{n}" in modules]
            targets.extend(submodules)
            if len(submodules) < len(names) or not names:  # some names are attributes of base itself
                resolved = resolve_module(base, modules)
                if resolved is not None:
                    targets.append(resolved)
            for target in dict.fromkeys(targets):
                if target != importer:
                    edges.append(ImportEdge(importer, target, rel, line, function_level, dynamic))
    return edges


def layer_violation(importer: str, imported: str) -> str | None:
    """The layer rule that ``importer -> imported`` breaks, or ``None`` when the edge is allowed."""
    if any(_in(importer, p) for p in BASE_LAYER) and not (
        imported == "verl" or any(_in(imported, p) for p in BASE_LAYER)
    ):
        return "verl.utils / verl.protocol may import only verl.utils, verl.protocol and verl"
    top_importer, top_imported = importer.split(".")[0], imported.split(".")[0]
    if top_importer == "verl" and top_imported in ("agent_system", "rlvcr") and not _in(importer, COMPOSITION_LAYER):
        return "only verl.trainer may import agent_system / rlvcr from verl"
    if top_importer == "agent_system" and top_imported == "rlvcr":
        return "agent_system never imports rlvcr"
    return None


def find_outside_imports(root: Path = ROOT, modules: dict[str, Path] | None = None) -> list[tuple[ImportEdge, str]]:
    """Each import of ``experiments`` or ``benchmarks`` (or a module inside them) by a package file, with the rule."""
    modules = discover_modules(root) if modules is None else modules
    out = []
    for importer, path in modules.items():
        visitor = _ImportVisitor(importer, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for base, line, function_level, dynamic, _names in visitor.found:
            if base.split(".")[0] in OUTSIDE_PRODUCT:
                edge = ImportEdge(importer, base, path.relative_to(root).as_posix(), line, function_level, dynamic)
                out.append((edge, "no package imports the research record or the benchmarks"))
    return out


def find_upward_edges(edges: list[ImportEdge]) -> list[tuple[ImportEdge, str]]:
    """Each edge that breaks a layer rule, with the rule."""
    out = []
    for edge in edges:
        rule = layer_violation(edge.importer, edge.imported)
        if rule:
            out.append((edge, rule))
    return out


def build_graph(edges: list[ImportEdge], modules: dict[str, Path] | None = None) -> dict[str, list[str]]:
    """Module -> sorted list of modules it imports (every module of ``modules`` is a node)."""
    graph: dict[str, set[str]] = {m: set() for m in (modules or {})}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    return {m: sorted(targets) for m, targets in sorted(graph.items())}


def strongly_connected_components(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit): every component, each sorted, in discovery order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def example_cycle(graph: dict[str, list[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component: ``[a, b, ..., a]``."""
    members = set(component)
    start = component[0]
    parent: dict[str, str] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        for child in graph.get(node, ()):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return list(reversed(path)) + [start]
            if child not in seen:
                seen.add(child)
                parent[child] = node
                queue.append(child)
    return [start]


def find_cycles(edges: list[ImportEdge], modules: dict[str, Path] | None = None) -> list[dict]:
    """Each component of more than one module: its modules, an example cycle, and each hop's import statement
    (module-level preferred)."""
    graph = build_graph(edges, modules)
    by_pair: dict[tuple[str, str], ImportEdge] = {}
    for edge in edges:
        key = (edge.importer, edge.imported)
        if key not in by_pair or (by_pair[key].function_level and not edge.function_level):
            by_pair[key] = edge
    cycles = []
    for component in strongly_connected_components(graph):
        if len(component) < 2:
            continue
        path = example_cycle(graph, component)
        hops = [by_pair[(a, b)].describe() for a, b in itertools.pairwise(path)]
        cycles.append({"size": len(component), "modules": component, "example": path, "hops": hops})
    return sorted(cycles, key=lambda c: (-c["size"], c["modules"]))


def find_long_files(modules: dict[str, Path], root: Path = ROOT, max_lines: int = MAX_LINES) -> list[dict]:
    """Files with more than ``max_lines`` lines, longest first."""
    out = []
    for path in modules.values():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > max_lines:
            out.append({"path": path.relative_to(root).as_posix(), "lines": lines})
    return sorted(out, key=lambda f: (-f["lines"], f["path"]))


def _repo_path(token: str, root: Path) -> bool:
    """True when a cited ``.../specs/x.md`` token is under ``docs/`` or names a file of the repository."""
    if token.startswith("../"):
        return False
    clean = token.removeprefix("./")
    return clean.startswith("docs/") or "/docs/" in clean or (root / clean).is_file()


def find_outside_citations(modules: dict[str, Path], root: Path = ROOT) -> list[dict]:
    """Lines citing documents outside the repository: file, line number, the patterns matched and the text."""
    out = []
    for path in modules.values():
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            matched = []
            for label, pattern in CITATION_PATTERNS:
                hits = pattern.findall(text)
                if label == "specs/*.md":
                    hits = [h for h in hits if not _repo_path(h, root)]
                if hits:
                    matched.append(label)
            if matched:
                out.append(
                    {
                        "path": path.relative_to(root).as_posix(),
                        "line": number,
                        "patterns": matched,
                        "text": text.strip(),
                    }
                )
    return out


def user_facing_files(root: Path = ROOT) -> list[Path]:
    """The files rule 5 reads: ``*.sh``, ``*.yaml``, every ``README.md`` and ``docs/*.md``, outside the research
    record and virtual environments."""
    found = (
        set(root.rglob("*.sh"))
        | set(root.rglob("*.yaml"))
        | set(root.rglob("README.md"))
        | set((root / "docs").glob("**/*.md"))
    )
    keep = []
    for path in found:
        rel = path.relative_to(root).as_posix()
        if (
            path.is_file()
            and not rel.startswith(RESEARCH_RECORD + RUN_FOLDERS)
            and not any(part.startswith(".") for part in Path(rel).parts[:-1])
        ):
            keep.append(path)
    return sorted(keep)


def find_internal_references(root: Path = ROOT) -> list[dict]:
    """Rule 5's lines: file, line number, the patterns matched and the text."""
    out = []
    for path in user_facing_files(root):
        for number, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            matched = [label for label, pattern in REFERENCE_PATTERNS if pattern.search(text)]
            if "§ (not a paper's)" in matched and "arxiv" in text.lower():
                matched.remove("§ (not a paper's)")
            if matched:
                out.append(
                    {
                        "path": path.relative_to(root).as_posix(),
                        "line": number,
                        "patterns": matched,
                        "text": text.strip(),
                    }
                )
    return out


def analyse(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES, max_lines: int = MAX_LINES) -> dict:
    """The whole measurement as the JSON summary: upward_edges, cycles, long_files, outside_citations, counts."""
    root = Path(root)
    modules = discover_modules(root, packages)
    edges = collect_imports(root, modules)
    upward = [
        dict(asdict(edge), rule=rule, text=edge.describe())
        for edge, rule in find_upward_edges(edges) + find_outside_imports(root, modules)
    ]
    cycles = find_cycles(edges, modules)
    long_files = find_long_files(modules, root, max_lines)
    citations = find_outside_citations(modules, root)
    references = find_internal_references(root)
    counts = {
        "upward_edges": len(upward),
        "cycles": len(cycles),
        "cycle_modules": sum(c["size"] for c in cycles),
        "long_files": len(long_files),
        "outside_citations": len(citations),
        "internal_references": len(references),
    }
    return {
        "upward_edges": upward,
        "cycles": cycles,
        "long_files": long_files,
        "outside_citations": citations,
        "internal_references": references,
        "counts": counts,
        "modules": len(modules),
        "imports": len(edges),
    }


def format_report(summary: dict) -> str:
    """The human-readable report of :func:`analyse`'s summary."""
    lines = [f"Architecture check: {summary['modules']} modules, {summary['imports']} internal imports", ""]
    lines.append(f"(1) Upward edges: {len(summary['upward_edges'])}")
    for rule in dict.fromkeys(e["rule"] for e in summary["upward_edges"]):
        lines.append(f"  [{rule}]")
        lines.extend(f"    {e['text']}" for e in summary["upward_edges"] if e["rule"] == rule)
    lines += ["", f"(2) Import cycles (components > 1 module): {len(summary['cycles'])}"]
    for i, cycle in enumerate(summary["cycles"], 1):
        lines.append(f"  #{i} ({cycle['size']} modules): {', '.join(cycle['modules'])}")
        lines.append(f"     example: {' -> '.join(cycle['example'])}")
        lines.extend(f"       {hop}" for hop in cycle["hops"])
    lines += ["", f"(3) Files over {MAX_LINES} lines: {len(summary['long_files'])}"]
    lines.extend(f"  {f['path']}: {f['lines']} lines" for f in summary["long_files"])
    lines += ["", f"(4) Lines citing paths outside the repository: {len(summary['outside_citations'])}"]
    for c in summary["outside_citations"]:
        lines.append(f"  {c['path']}:{c['line']} [{', '.join(c['patterns'])}] {c['text'][:140]}")
    lines += [
        "",
        f"(5) Internal references in scripts, configs, READMEs and docs: {len(summary['internal_references'])}",
    ]
    for c in summary["internal_references"]:
        lines.append(f"  {c['path']}:{c['line']} [{', '.join(c['patterns'])}] {c['text'][:140]}")
    lines += ["", "Counts: " + ", ".join(f"{k}={v}" for k, v in summary["counts"].items())]
    return "\n".join(lines)


def exceeded(counts: dict, maxima: dict) -> list[str]:
    """``"name: count > maximum"`` for each count above its maximum (counts missing from ``maxima`` are not limited;
    unknown names in ``maxima`` raise KeyError)."""
    unknown = sorted(set(maxima) - set(counts))
    if unknown:
        raise KeyError(f"unknown count name(s) {unknown}; known: {list(counts)}")
    return [f"{k}: {counts[k]} > {maxima[k]}" for k in counts if k in maxima and counts[k] > maxima[k]]


def main(argv: list[str] | None = None) -> int:
    """Command line: print the report; 0 unless ``--strict`` or ``--max-counts`` finds a count too high."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON summary here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when any count is above 0")
    parser.add_argument("--max-counts", type=Path, metavar="FILE", help="JSON of allowed maxima per count")
    parser.add_argument("--quiet", action="store_true", help="print only the counts and failures")
    args = parser.parse_args(argv)

    summary = analyse(args.root)
    if args.quiet:
        print("Counts: " + ", ".join(f"{k}={v}" for k, v in summary["counts"].items()))
    else:
        print(format_report(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    failures: list[str] = []
    if args.strict:
        failures += [f"{k}: {v} > 0" for k, v in summary["counts"].items() if v > 0]
    if args.max_counts:
        failures += exceeded(summary["counts"], json.loads(args.max_counts.read_text()))
    if failures:
        print("FAIL: " + "; ".join(dict.fromkeys(failures)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
