"""The layout's rules (docs/architecture.md), read from the source: no import cycle anywhere in
the project (function-local imports included), no module importing another module's private
names, the inference package importing no particular law, and no module of the library over
about 600 lines."""
from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bayes_scaling", "training", "scaleout")
#: Script folders whose modules import each other by bare name (they put themselves on sys.path).
SCRIPTS = ("analyses", "benchmarks")
MAX_LINES = 600


def project_modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``)."""
    mods = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    for folder in SCRIPTS:
        for path in (ROOT / folder).glob("*.py"):
            mods[path.stem] = (path, False)
    return mods


def _owner(name: str, mods) -> str | None:
    """The project module that defines ``name`` (a module, or the module holding an attribute)."""
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in mods else None


def import_edges(mods) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """Every import between project modules wherever it stands (module level or inside a
    function), and the private names imported from another module: ``(importer, module, name)``."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for mod, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [(_owner(a.name, mods), None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                targets = []
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append((sub, None) if sub in mods else (_owner(base, mods), alias.name))
            else:
                continue
            for target, name in targets:
                if target is None or target == mod:
                    continue
                graph[mod].add(target)
                if name and name.startswith("_") and not name.startswith("__"):
                    private.append((mod, target, name))
    return graph, private


@pytest.fixture(scope="module")
def project():
    mods = project_modules()
    return (mods, *import_edges(mods))


def test_the_scan_sees_the_projects_imports(project):
    mods, graph, _ = project
    assert len(mods) > 60
    assert "bayes_scaling.bayes.api" in graph["bayes_scaling.bayes"]
    assert "scaleout" in graph["bayes_scaling.calibration"]
    # a function-local import is an edge too (Ray is imported only when asked for)
    assert "scaleout.ray_executor" in graph["scaleout"]


def test_no_import_cycle_anywhere_in_the_project(project):
    _, graph, _ = project
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"import cycle: {' -> '.join(e.args[1])}")


def test_no_module_imports_another_modules_private_names(project):
    _, _, private = project
    assert private == [], "\n".join(f"{a} imports {n} from {b}" for a, b, n in private)


def test_the_inference_package_imports_no_particular_law(project):
    _, graph, _ = project
    laws = {m for m in graph if m.startswith("bayes_scaling.laws.")}
    bad = sorted((m, t) for m, targets in graph.items() if m.startswith("bayes_scaling.bayes")
                 for t in targets & laws)
    assert bad == [], f"the inference package reads laws through bayes_scaling.laws only: {bad}"


def test_no_library_module_over_about_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in (ROOT / "bayes_scaling").rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
