"""The direction of imports (docs/architecture.md): the engine, server, CLI and formatting import
no model family, and the layers, audio and tokenizers import nothing from ``oasr.models``.
Walks every import statement of the package, function-level ones included."""

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
    _files("engine", "models", "server", "layers", "audio", "tokenizers", "formatting.py"),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_only_the_cli_imports_the_scale_out_layer(path):
    """``oasr.serving`` (Ray) sits above the server and the engine: only ``oasr.cli`` may call it."""
    found = _imports(path)
    bad = [f"{path.relative_to(PACKAGE)}:{line}: {name}" for line, name in found if name.startswith("oasr.serving")]
    assert not bad, bad
