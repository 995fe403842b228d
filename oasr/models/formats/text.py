"""The small text files checkpoints carry beside their weights: YAML / JSON configs and
``<symbol> <id>`` tables (WeNet's ``units.txt``, icefall's ``tokens.txt``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from oasr.models.base import LoadError


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """A config file's top-level mapping: JSON for a ``.json`` file, YAML otherwise.

    Args:
        path: the file.
        what: what it should be, for the error ("a WeNet training config").

    Raises:
        LoadError: not valid JSON / YAML, not a mapping, or PyYAML missing (naming the file).
    """
    if path.suffix == ".json":
        parse, error, kind = json.loads, json.JSONDecodeError, "JSON"
    else:
        try:
            import yaml
        except ImportError as e:  # pragma: no cover - PyYAML ships with transformers / huggingface_hub
            raise LoadError(f"reading {path} needs PyYAML (pip install pyyaml)") from e
        parse, error, kind = yaml.safe_load, yaml.YAMLError, "YAML"
    try:
        data = parse(path.read_text(encoding="utf-8"))
    except error as e:
        raise LoadError(f"{path} is not valid {kind}: {e}") from e
    if not isinstance(data, dict):
        raise LoadError(f"{path} is not {what} (not a mapping)")
    return data


def read_symbol_table(path: Path) -> dict[int, str]:
    """A ``<symbol> <id>`` table, one pair a line (blank lines skipped), as id -> symbol.

    Raises:
        LoadError: a line that is not a symbol and a whole-number id (naming the file and line).
    """
    table: dict[int, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise LoadError(f"{path}:{n}: expected '<symbol> <id>', got {line!r}")
        table[int(parts[1])] = parts[0]
    return table


__all__ = ["read_mapping", "read_symbol_table"]
