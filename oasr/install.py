"""The install command for an optional extra, as it works where oasr is installed.

oasr's distribution (``oasr-engine`` in pyproject.toml) is not on PyPI: it is used from a clone,
usually installed editable (``pip install -e .``). A hint that names the distribution with an extra
as if from PyPI would send such a user to a package that does not exist, so ``install_hint`` looks at how this
oasr is installed: from a source checkout (the imported package sits in a tree whose pyproject.toml
declares the distribution, or pip recorded an editable install) it gives
``pip install -e '<checkout>[extra]'`` with the real path; otherwise it names the PyPI packages the
extra stands for (read from the installed metadata) and the form for a clone. Nothing here imports
torch or any other oasr module: every layer may use it.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

DIST_NAME = "oasr-engine"
"""The distribution name pyproject.toml declares (``[project] name``); not published on PyPI."""

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # the folder holding the imported ``oasr/``
_NAME_LINE = re.compile(r"""^\s*name\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _distribution() -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        return None


def _declares_oasr(root: Path) -> bool:
    """Whether ``root/pyproject.toml`` is oasr's own (its first ``name =`` is the distribution)."""
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    m = _NAME_LINE.search(text)
    return m is not None and m.group(1) == DIST_NAME


def source_checkout() -> Path | None:
    """The source tree this oasr runs from, or None for an ordinary (wheel) install.

    The imported package's own tree wins (it is what runs, also when a checkout is put on
    ``PYTHONPATH`` beside another install); else the directory of an editable install that pip
    recorded in the distribution's ``direct_url.json`` (``dir_info.editable``).
    """
    if _declares_oasr(_PACKAGE_ROOT):
        return _PACKAGE_ROOT
    dist = _distribution()
    if dist is None:
        return None
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(direct, dict) or not direct.get("dir_info", {}).get("editable"):
        return None
    url = urlparse(direct.get("url", ""))
    return Path(url2pathname(unquote(url.path))) if url.scheme == "file" else None


def extra_requirements(extra: str) -> list[str]:
    """The requirements the installed distribution declares for ``extra`` (empty when unknown)."""
    dist = _distribution()
    reqs = []
    for req in (dist.requires or []) if dist is not None else []:
        spec, _, marker = req.partition(";")
        if extra in _EXTRA_MARKER.findall(marker):
            reqs.append(spec.strip().replace(" ", ""))
    return reqs


def install_hint(extra: str, packages: Sequence[str] = ()) -> str:
    """The command that installs oasr's optional ``extra``, for the way oasr is installed here.

    Args:
        extra: the extra's name in pyproject.toml (``vad``, ``server``, ``lm``, ``whisper-base``...).
        packages: the PyPI packages the extra stands for, used when the installed metadata does not
            list them (oasr run from a tree that is neither a checkout nor installed).

    Returns:
        ``pip install -e '<checkout>[extra]'`` from a source checkout; otherwise
        ``pip install <packages>`` with the clone's form beside it.
    """
    root = source_checkout()
    if root is not None:
        return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    pkgs = extra_requirements(extra) or list(packages)
    clone = f"from a clone of oasr: pip install -e '.[{extra}]'"
    if not pkgs:
        return clone
    return f"pip install {' '.join(shlex.quote(p) for p in pkgs)}  (oasr's [{extra}] extra; {clone})"
