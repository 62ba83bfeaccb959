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
    "loreguard.memory": "memory",
    "loreguard.server": "server",
    "loreguard.client": "client",
}
#: The governance stages and the orchestration around them: what a model backend may not know.
STAGES = (
    "interaction", "expectancy", "contract", "snapshot", "prompt", "parsing", "gate", "mutation", "fallback",
    "retry", "lifecycle", "attempt", "run", "preparation", "streaming", "judge", "checks", "hygiene",
)  # fmt: skip


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


def test_inference_imports_no_governance_stage() -> None:
    """Backends sit below the stages they serve: a prompt reaches them as `loreguard.schemas.prompt`."""
    stages = {f"loreguard.server.pipeline.{stage}" for stage in STAGES}
    graph = _graph()
    for name, imported in graph.items():
        if name.startswith("loreguard.server.pipeline.inference"):
            assert not imported & stages, f"{name} imports {sorted(imported & stages)}"
            above = {
                m
                for m in imported
                if m.startswith("loreguard.server.") and not m.startswith("loreguard.server.pipeline.inference")
            }
            assert not above, f"{name} imports {sorted(above)}"


def test_a_backend_loads_no_stage() -> None:
    loaded = _modules_after_import("loreguard.server.pipeline.inference.llama_backend")
    assert not {m for m in loaded if m in {f"loreguard.server.pipeline.{stage}" for stage in STAGES}}


def test_no_server_module_over_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "server").rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


def test_no_pipeline_function_over_80_lines_without_a_reason() -> None:
    """A function of the governance pipeline longer than 80 lines says why in its docstring
    (a line starting "Long because")."""
    long = []
    for path in (ROOT / "server" / "pipeline").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > 80 and "Long because" not in (ast.get_docstring(node) or ""):
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
