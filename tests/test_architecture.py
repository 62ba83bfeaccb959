"""Layering the code relies on, checked in a fresh interpreter so nothing imported earlier hides a violation."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def _modules_after_import(module: str) -> set[str]:
    script = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_the_pipeline_knows_no_audit_package() -> None:
    """The pipeline talks to a recorder only through its own `AuditSink` protocol."""
    loaded = _modules_after_import("loreguard.server.pipeline.lifecycle")
    assert not {m for m in loaded if m.startswith("loreguard.server.audit")}


def test_memory_knows_nothing_above_it() -> None:
    loaded = _modules_after_import("loreguard.memory")
    assert not {m for m in loaded if m.startswith(("loreguard.server", "loreguard.client"))}


def test_the_client_needs_no_sidecar_code() -> None:
    loaded = _modules_after_import("loreguard.client")
    assert not {m for m in loaded if m.startswith(("loreguard.server", "loreguard.memory"))}


# --- the import graph, read from the source (every import, module-level or inside a function) ---

ROOT = Path(__file__).resolve().parent.parent
#: Each installed package and the folder it comes from (pyproject's package-dir).
PACKAGES = {
    "loreguard.schemas": "schemas",
    "loreguard.text": "text",
    "loreguard.memory": "memory",
    "loreguard.server": "server",
    "loreguard.client": "client",
}
#: The layers, lowest first: a module may import its own package and any layer below it, never one
#: above (`test_the_layers_are_a_ladder`). Within a layer, packages do not import each other.
LADDER: tuple[tuple[str, ...], ...] = (
    ("loreguard.schemas",),
    ("loreguard.text",),
    ("loreguard.memory", "loreguard.client"),
    ("loreguard.server.inference",),
    ("loreguard.server.models",),
    ("loreguard.server.pipeline",),
    ("loreguard.server.scene",),
    ("loreguard.server.audit",),
    ("loreguard.server.sidecar",),
    ("loreguard.server.demo",),
    ("loreguard.server.shipping",),
    ("loreguard.server.bench",),
    ("loreguard.server.cli", "loreguard.server"),
)
#: Entry points, above every layer: the frozen bundle's main runs the CLI.
ENTRY_POINTS = frozenset({"loreguard.server.shipping.frozen_main"})


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports. `from package import module` counts as the module
    alone: the package's `__init__` runs for any import from it, so it is no dependency edge."""
    wanted: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                wanted.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    found = set()
    for module in wanted:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        if module and module != name:
            found.add(module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def _layer(module: str) -> int:
    """The rung of `module`: its longest package prefix in `LADDER`."""
    best, rung = "", -1
    for i, packages in enumerate(LADDER):
        for package in packages:
            if (module == package or module.startswith(package + ".")) and len(package) > len(best):
                best, rung = package, i
    return len(LADDER) if module in ENTRY_POINTS else rung


def _package(module: str) -> str:
    found = ""
    for packages in LADDER:
        for package in packages:
            if (module == package or module.startswith(package + ".")) and len(package) > len(found):
                found = package
    return found


def _rungs_broken(graph: dict[str, set[str]]) -> list[str]:
    broken = []
    for name, imported in sorted(graph.items()):
        for other in sorted(imported):
            if _package(other) == _package(name):
                continue
            if _layer(other) >= _layer(name):
                broken.append(f"{name} -> {other}")
    return broken


def test_every_module_is_on_the_ladder() -> None:
    assert [name for name in _graph() if _layer(name) < 0] == []


def test_the_layers_are_a_ladder() -> None:
    """No import goes up the ladder or sideways into another package of the same rung: memory
    knows no server code, inference no stage, the pipeline no sidecar or audit package."""
    assert _rungs_broken(_graph()) == []


def test_the_ladder_check_finds_an_edge_up() -> None:
    graph = {
        "loreguard.server.inference.base": {"loreguard.server.pipeline.gate.validation"},  # up
        "loreguard.memory.store": {"loreguard.client.calls"},  # sideways
        "loreguard.server.pipeline.prompt": {"loreguard.server.inference.base", "loreguard.schemas.text"},  # down
    }
    assert _rungs_broken(graph) == [
        "loreguard.memory.store -> loreguard.client.calls",
        "loreguard.server.inference.base -> loreguard.server.pipeline.gate.validation",
    ]


def test_the_pipeline_folder_is_its_stage_list() -> None:
    """`ls server/pipeline` is `loreguard.server.pipeline.LISTING` (a package counts as one), the
    module docstring names each entry, and the listing stays short enough to read at a glance."""
    from loreguard.server import pipeline

    folder = ROOT / "server" / "pipeline"
    found = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | {p.parent.name for p in folder.glob("*/__init__.py")}
    assert sorted(found) == sorted(pipeline.LISTING) and len(set(pipeline.LISTING)) == len(pipeline.LISTING)
    assert len(found) <= 20, sorted(found)
    doc = pipeline.__doc__ or ""
    assert [name for name in found if f"{name}" not in doc] == []
    for package in ("running", "turn"):
        listed = (folder / package / "__init__.py").read_text(encoding="utf-8")
        modules = {p.stem for p in (folder / package).glob("*.py")} - {"__init__"}
        assert [name for name in sorted(modules) if f"`{name}`" not in listed] == [], package


def test_reading_text_has_one_home() -> None:
    """One negation list (and the denials built on it), one question detector, one stemmer: in
    `loreguard.text`, and nowhere else."""
    found = {}
    for folder in PACKAGES.values():
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                names = [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else []
                if isinstance(node, ast.FunctionDef):
                    names = [node.name]
                for name in names:
                    if name.lstrip("_") in {"NEGATIONS", "DENIALS", "NEGATING_WORDS", "is_question", "stem", "QUESTION_OPENERS"}:
                        found.setdefault(name.lstrip("_"), []).append(str(path.relative_to(ROOT)))
    assert found == {
        "NEGATIONS": ["text/negation.py"],
        "DENIALS": ["text/negation.py"],
        "QUESTION_OPENERS": ["text/questions.py"],
        "is_question": ["text/questions.py"],
        "stem": ["text/words.py"],
    }


def test_the_gates_checks_are_in_its_folder() -> None:
    from loreguard.server.pipeline import gate

    checks = {p.stem for p in (ROOT / "server" / "pipeline" / "gate").glob("*.py")} - {"__init__", "validation"}
    assert [name for name in sorted(checks) if f"`{name}`" not in (gate.__doc__ or "")] == []


def test_a_backend_loads_no_stage() -> None:
    loaded = _modules_after_import("loreguard.server.inference.llama_backend")
    assert not {m for m in loaded if m.startswith("loreguard.server.pipeline")}


#: The caps, with headroom under the limits the code must never reach (500 lines, 80 a function):
#: a module near its cap is split by job before the cap decides where the next line goes.
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 70


def test_no_module_over_450_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for folder in PACKAGES.values()
        for p in (ROOT / folder).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_over_70_lines() -> None:
    long = []
    for folder in PACKAGES.values():
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


# --- the same caps over GDScript: the addon, its tests and the demo project ---

#: The most lines a .gd file may have, and one of its functions (headroom under the Python caps'
#: 500: a script near its cap is split by job before the cap decides where code goes).
GD_MAX_LINES = 450
GD_MAX_FUNCTION_LINES = 80


def _gdscripts() -> list[Path]:
    """Every script once: demo_project/addons/loreguard is a link to the addon."""
    addon = sorted((ROOT / "godot_addon").rglob("*.gd"))
    demo = sorted(p for p in (ROOT / "demo_project").rglob("*.gd") if "addons" not in p.relative_to(ROOT / "demo_project").parts)
    return [p for p in addon + demo if ".godot" not in p.parts]


def _gd_functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function of a script: from its `func` line to its last
    indented line (a `##` doc comment at the left margin opens the next one)."""
    lines = text.splitlines()
    found = []
    for start, line in enumerate(lines):
        if not line.startswith(("func ", "static func ")):
            continue
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
            end += 1
        while lines[end - 1].strip() == "":
            end -= 1
        found.append((line.split("func ", 1)[1].split("(", 1)[0], start + 1, end - start))
    return found


def test_no_gdscript_over_450_lines_or_a_function_over_80() -> None:
    long = []
    for path in _gdscripts():
        text = path.read_text(encoding="utf-8")
        if (n := len(text.splitlines())) > GD_MAX_LINES:
            long.append(f"{path.relative_to(ROOT)}: {n} lines")
        long += [
            f"{path.relative_to(ROOT)}:{first} {name} ({n} lines)"
            for name, first, n in _gd_functions(text)
            if n > GD_MAX_FUNCTION_LINES
        ]
    assert long == [], "split by job: " + "; ".join(long)


def test_the_gdscript_function_reader_finds_a_long_function() -> None:
    body = "\n".join(f"\tprint({i})" for i in range(81))
    text = f"extends Node\n\n\nfunc short() -> void:\n\tpass\n\n\n## doc\nfunc long() -> void:\n{body}\n\n\nvar x := 1\n"
    assert _gd_functions(text) == [("short", 4, 2), ("long", 9, 82)]


def test_every_installed_package_is_on_the_ladder_and_in_the_bundle() -> None:
    """pyproject's package-dir, this test's packages and the folders the frozen bundle carries
    (`build_bundle.PROJECT_PACKAGES`) name the same folders: a new package missing from the
    bundle fails here, not in a player's launch."""
    import tomllib

    from loreguard.server.shipping.build_bundle import PROJECT_PACKAGES

    installed = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    assert installed == PACKAGES
    assert sorted(PROJECT_PACKAGES) == sorted(PACKAGES.values())
