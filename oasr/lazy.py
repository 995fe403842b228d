"""Names a package exports without importing their modules until first use (PEP 562), so that
`oasr --help`, `oasr models` and the registry listing start without torch.

A package sets ``__getattr__ = lazy_exports(__name__, {name: defining module, ...})``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: a name of ``exports`` is imported from its
    module on first access and kept in the package; a public submodule name imports the submodule
    (as an eager import would have left it bound); anything else is an ``AttributeError``."""
    exports = dict(exports)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


__all__ = ["lazy_exports"]
