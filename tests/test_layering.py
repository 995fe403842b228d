"""The direction of imports (docs/architecture.md): cli -> serving -> server / compat -> engine ->
postprocess -> models -> layers / audio / tokenizers. The engine, server, CLI and formatting import no model
family; the layers, audio and tokenizers import nothing from ``oasr.models``; nothing imports the
CLI, and only the CLI imports ``oasr.serving``; no two modules import each other, directly or
round a circle. Walks every import statement of the package, function-level ones included (a
lazy import is still an import)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "oasr"
# The model layer's family-neutral modules, which the engine may use.
NEUTRAL = {"base", "interfaces", "loaders", "registry", "decoders", "bundled", "formats"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module == "oasr.models":  # from oasr.models import whisper (a package, not a name)
                found += [
                    (node.lineno, f"oasr.models.{alias.name}")
                    for alias in node.names
                    if (PACKAGE / "models" / alias.name).is_dir()
                ]
    return found


def _files(*parts: str) -> list[Path]:
    out = []
    for part in parts:
        target = PACKAGE / part
        out += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return out


@pytest.mark.parametrize(
    "path", _files("engine", "server", "cli", "serving", "formatting.py"), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_engine_and_surfaces_import_no_family(path):
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {name}"
        for line, name in _imports(path)
        if name.startswith("oasr.models.") and name.split(".")[2] not in NEUTRAL
    ]
    assert not bad, bad


@pytest.mark.parametrize("path", _files("layers", "audio", "tokenizers"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_lower_layers_import_nothing_from_models(path):
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {name}" for line, name in _imports(path) if name.startswith("oasr.models")
    ]
    assert not bad, bad


@pytest.mark.parametrize(
    "path",
    _files("engine", "postprocess", "models", "server", "layers", "audio", "tokenizers", "formatting.py"),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_only_the_cli_imports_the_scale_out_layer(path):
    """``oasr.serving`` (Ray) sits above the server and the engine: only ``oasr.cli`` may call it."""
    found = _imports(path)
    bad = [f"{path.relative_to(PACKAGE)}:{line}: {name}" for line, name in found if name.startswith("oasr.serving")]
    assert not bad, bad


@pytest.mark.parametrize(
    "path",
    [p for p in _files(".") if "cli" not in p.relative_to(PACKAGE).parts[:1]],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_nothing_below_the_cli_imports_it(path):
    """``oasr.cli`` is the top layer: what it shares with ``oasr.serving`` lives in ``serving/common.py``."""
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {name}" for line, name in _imports(path) if name.startswith("oasr.cli")
    ]
    assert not bad, bad


@pytest.mark.parametrize(
    "path",
    _files("engine", "postprocess", "models", "layers", "audio", "tokenizers", "formatting.py"),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_the_engine_and_below_import_no_surface(path):
    """The HTTP server and the faster-whisper drop-in sit on the engine, never under it."""
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {name}"
        for line, name in _imports(path)
        if name.startswith(("oasr.server", "oasr.compat"))
    ]
    assert not bad, bad


@pytest.mark.parametrize(
    "path", _files("postprocess", "models", "layers", "audio", "tokenizers"), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_post_processors_sit_between_the_engine_and_the_models(path):
    """``oasr.postprocess`` (punctuation) runs on the engine's finished transcripts and builds on
    the models' blocks: it imports no engine, and nothing under it imports it."""
    above = "oasr.engine" if path.is_relative_to(PACKAGE / "postprocess") else "oasr.postprocess"
    bad = [f"{path.relative_to(PACKAGE)}:{line}: {name}" for line, name in _imports(path) if name.startswith(above)]
    assert not bad, bad


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from a import b`` counts ``a.b`` when ``b``
    is a module; an imported name resolves to the module that defines it)."""
    modules = {_module(p): p for p in _files(".")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            targets |= {resolve(n) for n in names if n.split(".")[0] == "oasr"}
        graph[module] = targets - {None, module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
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
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
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


def test_no_import_circles():
    """No module imports one that imports it back (directly or round a circle): the layers are one-way."""
    assert _circles(_import_graph()) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
