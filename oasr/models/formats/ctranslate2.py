"""Reader for CTranslate2 ``model.bin`` files (binary format version 6 and earlier).

Layout (little-endian), as CTranslate2's ``ModelSpec._serialize`` writes it:

    u32 binary_version
    str spec_name, u32 spec_revision             (version >= 2)
    u32 n_variables
      str name, u8 rank, u32 dims[rank], u8 dtype_id, u32 n_bytes, bytes data
    u32 n_aliases                                (version >= 3)
      str alias, str variable_name

``str`` is a u16 length (including a trailing NUL) followed by the bytes.
A model may be split into ``model.bin.part1``, ``model.bin.part2``, ... (byte-wise
pieces of one file), possibly shipped in different directories; ``find_model_parts``
locates them.
"""

from __future__ import annotations

import ctypes
import mmap
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

# Order of CTranslate2's DataType enum (include/ctranslate2/types.h).
_DTYPES: tuple[tuple[str, torch.dtype], ...] = (
    ("float32", torch.float32),
    ("int8", torch.int8),
    ("int16", torch.int16),
    ("int32", torch.int32),
    ("float16", torch.float16),
    ("bfloat16", torch.bfloat16),
)


class CT2FormatError(ValueError):
    """A file is not a readable CTranslate2 model."""


class CT2Truncated(CT2FormatError):
    """The bytes end inside the model's data."""


class CT2MissingPart(FileNotFoundError, CT2FormatError):
    """A split model.bin whose pieces end inside its data: a later part is missing."""


@dataclass
class CT2Model:
    """The contents of a ``model.bin``.

    Attributes:
        spec_name: e.g. "WhisperSpec"; spec_revision: its revision.
        variables: name -> tensor (CPU, stored dtype).
        aliases: alias name -> variable name.
        maps: the parts' copy-on-write maps the variables are views of.
    """

    binary_version: int
    spec_name: str
    spec_revision: int
    variables: dict[str, torch.Tensor]
    aliases: dict[str, str]
    maps: list[mmap.mmap] = field(default_factory=list)

    def release(self, tensor: torch.Tensor) -> None:
        """Drop the resident pages under ``tensor``, whose contents were copied out: they leave
        the process's RSS, and are read from the file again should anything touch them (the map
        is copy-on-write and the reader never writes it, so nothing is lost). A tensor outside
        the maps (a copy across two parts) is left to the garbage collector."""
        if tensor.numel() == 0:
            return
        lo = tensor.data_ptr()
        hi = lo + tensor.numel() * tensor.element_size()
        for m in self.maps:
            base = _address(m)
            if base <= lo and hi <= base + len(m):
                first = -(-(lo - base) // mmap.PAGESIZE) * mmap.PAGESIZE  # the whole pages inside it only
                last = (hi - base) // mmap.PAGESIZE * mmap.PAGESIZE
                if last > first:
                    m.madvise(mmap.MADV_DONTNEED, first, last - first)
                return

    def get(self, name: str) -> torch.Tensor:
        """A variable by name or alias."""
        if name in self.variables:
            return self.variables[name]
        if name in self.aliases:
            return self.variables[self.aliases[name]]
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return name in self.variables or name in self.aliases


def _address(m: mmap.mmap) -> int:
    view = ctypes.c_char.from_buffer(m)
    try:
        return ctypes.addressof(view)
    finally:
        del view  # the export pins the map while it lives


_PART_RE = re.compile(r"^model\.bin\.part(\d+)$")


def _stem(name: str) -> str:
    return re.sub(r"\d+$", "", name)


def find_model_parts(directory: str | Path, extra_dirs: Iterable[str | Path] = ()) -> list[Path]:
    """Locate ``model.bin`` or its numbered parts.

    Parts are looked for in ``directory``, then in ``extra_dirs``, then in sibling
    directories whose names differ only in a trailing number (``model_part1`` ->
    ``model_part2``), directly or one level down (``pkg_part1/data`` ->
    ``pkg_part2/data``) -- how per-part pip packages install side by side.

    Raises:
        FileNotFoundError: naming the parts that could not be found.
    """
    directory = Path(directory)
    whole = directory / "model.bin"
    if whole.is_file():
        return [whole]
    numbers = [int(m.group(1)) for p in directory.glob("model.bin.part*") if (m := _PART_RE.match(p.name))]
    if not numbers:
        raise FileNotFoundError(f"no model.bin (or model.bin.part1, ...) in {directory}")
    search = [directory, *map(Path, extra_dirs)]
    for level in (directory, directory.parent):
        stem = _stem(level.name)
        if not stem or stem == level.name:
            continue
        rel = directory.relative_to(level)
        for sib in sorted(level.parent.glob(glob_escape(stem) + "*")):
            if sib != level and _stem(sib.name) == stem and (sib / rel).is_dir():
                search.append(sib / rel)
    found: dict[int, Path] = {}
    for d in search:
        for cand in d.glob("model.bin.part*"):
            m = _PART_RE.match(cand.name)
            if m and int(m.group(1)) not in found:
                found[int(m.group(1))] = cand
    n = max(found)
    missing = [i for i in range(1, n + 1) if i not in found]
    if missing or n < 2:
        raise FileNotFoundError(
            f"{directory} holds a split model.bin but "
            f"{', '.join(f'model.bin.part{i}' for i in (missing or [n + 1]))} was not found "
            f"(looked in {[str(d) for d in search]})"
        )
    return [found[i] for i in range(1, n + 1)]


def glob_escape(text: str) -> str:
    return re.sub(r"([*?[])", r"[\1]", text)


class _Reader:
    """Reads the concatenation of the parts' bytes: a take inside one part is a view of its map,
    one across a part boundary a copy of its own."""

    def __init__(self, bufs: Sequence[memoryview]) -> None:
        self.bufs = list(bufs)
        self.ends: list[int] = []
        total = 0
        for b in self.bufs:
            total += len(b)
            self.ends.append(total)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > (self.ends[-1] if self.ends else 0):
            raise CT2Truncated(f"unexpected end of data at byte {self.pos} (needed {n} more)")
        pieces = []
        for buf, stop in zip(self.bufs, self.ends):
            start = stop - len(buf)
            if self.pos < stop and end > start:
                pieces.append(buf[max(self.pos, start) - start : min(end, stop) - start])
        self.pos = end
        if len(pieces) == 1:
            return pieces[0]
        return memoryview(bytearray(b"".join(pieces)))  # writable, as the views are

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))

    def string(self) -> str:
        (n,) = self.unpack("<H")
        raw = bytes(self.take(n))
        return raw.rstrip(b"\x00").decode("utf-8")


def _map_parts(parts: Sequence[Path]) -> list[mmap.mmap]:
    """Each non-empty part mapped copy-on-write: pages are read as tensors touch them, never written back."""
    maps = []
    for p in parts:
        with open(p, "rb") as f:
            if p.stat().st_size:
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))
    return maps


def read_ct2_model(parts: Sequence[str | Path] | str | Path) -> CT2Model:
    """Read a ``model.bin`` (or the ordered list of its parts).

    Returns:
        the model's variables as CPU tensors in their stored dtype: views into the
        parts' bytes, mapped copy-on-write (a tensor across two parts of a split model is
        a copy). ``CT2Model.release`` hands a copied-out tensor's pages back.

    Raises:
        CT2FormatError: the bytes are not a CTranslate2 model this reader understands.
    """
    if isinstance(parts, (str, Path)):
        parts = [Path(parts)]
    parts = [Path(p) for p in parts]
    maps = _map_parts(parts)
    try:
        model = _parse(_Reader([memoryview(m) for m in maps]), parts)
    except CT2Truncated as e:
        names = ", ".join(p.name for p in parts)
        if len(parts) > 1:
            raise CT2MissingPart(
                f"{parts[0].parent}: the split model ({names}) ends inside its data: "
                f"model.bin.part{len(parts) + 1} (or a later part) is missing"
            ) from e
        raise CT2FormatError(f"{parts[0]}: truncated CTranslate2 model ({e})") from e
    model.maps = maps
    return model


def _parse(r: _Reader, parts: list[Path]) -> CT2Model:
    (version,) = r.unpack("<I")
    if version < 1 or version > 6:
        raise CT2FormatError(f"{parts[0]}: unsupported CTranslate2 binary version {version} (expected 1-6)")
    spec_name, revision = "", 1
    if version >= 2:
        spec_name = r.string()
        (revision,) = r.unpack("<I")
    (n_vars,) = r.unpack("<I")
    variables: dict[str, torch.Tensor] = {}
    for _ in range(n_vars):
        name = r.string()
        (rank,) = r.unpack("<B")
        dims = r.unpack(f"<{rank}I") if rank else ()
        if version >= 4:
            (type_id,) = r.unpack("<B")
            (n_bytes,) = r.unpack("<I")
        else:
            (item_size,) = r.unpack("<B")
            (n_elems,) = r.unpack("<I")
            type_id = {4: 0, 1: 1, 2: 2}.get(item_size)
            if type_id is None:
                raise CT2FormatError(f"{name}: unsupported item size {item_size} in binary v{version}")
            n_bytes = n_elems * item_size
        if type_id >= len(_DTYPES):
            raise CT2FormatError(f"{name}: unknown dtype id {type_id}")
        dtype = _DTYPES[type_id][1]
        data = r.take(n_bytes)
        expected = int(np.prod(dims, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        if n_bytes != expected:
            raise CT2FormatError(f"{name}: {n_bytes} bytes for shape {tuple(dims)} of {_DTYPES[type_id][0]}")
        t = torch.frombuffer(data, dtype=dtype) if n_bytes else torch.empty(0, dtype=dtype)
        variables[name] = t.reshape(dims)
    aliases: dict[str, str] = {}
    if version >= 3:
        (n_alias,) = r.unpack("<I")
        for _ in range(n_alias):
            alias = r.string()
            aliases[alias] = r.string()
    return CT2Model(version, spec_name, revision, variables, aliases)
