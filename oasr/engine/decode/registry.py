"""The decode-strategy registry: decode-type names -> strategy classes, built-ins and plugins alike.

A strategy is registered with a lazy ``"module:Class"`` string, so its modules are imported only
when an engine asks for it. The built-in strategies register through the same
``register_decode_strategy`` call as everyone else. Out-of-tree strategies arrive through the
``oasr.decode_strategies`` entry-point group: an entry point is a callable that registers, or a
module whose import registers; a broken plugin warns and is skipped, never taking the built-ins
down. A plugin decode type names what a model must have to be decoded by it with
``oasr.models.interfaces.register_capability``, called from its ``oasr.models`` entry point
(the model layer checks a checkpoint's capabilities when it loads it).
"""

from __future__ import annotations

import importlib
from typing import Any

from oasr.models.registry import PluginTable

ENTRY_POINT_GROUP = "oasr.decode_strategies"

_BUILTIN: tuple[tuple[str, str], ...] = (
    ("aed", "oasr.engine.decode.aed:AedDecodeStrategy"),
    ("llm", "oasr.engine.decode.llm:LlmDecodeStrategy"),
    ("ctc", "oasr.engine.decode.ctc:CtcDecodeStrategy"),
    ("ctc_aed_rescoring", "oasr.engine.decode.ctc:CtcRescoringStrategy"),
    ("transducer", "oasr.engine.decode.transducer:TransducerDecodeStrategy"),
    ("paraformer", "oasr.engine.decode.paraformer:ParaformerDecodeStrategy"),
    ("multitask", "oasr.engine.decode.multitask:MultitaskDecodeStrategy"),
    ("rich_ctc", "oasr.engine.decode.ctc.rich:RichCtcStrategy"),
)


def _register_builtin_strategies() -> None:
    for name, ref in _BUILTIN:
        register_decode_strategy(name, ref, overwrite=True)


_TABLE = PluginTable(ENTRY_POINT_GROUP, "decode-strategy", _register_builtin_strategies)


def register_decode_strategy(name: str, strategy: str | type, *, overwrite: bool = False) -> None:
    """Register the strategy that decodes decode type ``name``.

    Args:
        name: the decode-type name (``EngineConfig.decode_type``, a model's capabilities).
        strategy: a ``DecodeStrategy`` subclass, or ``"module:Class"`` imported when first used.
        overwrite: replace an existing registration instead of refusing.

    Raises:
        ValueError: ``name`` is taken (and not ``overwrite``), or ``strategy`` is malformed.
    """
    if isinstance(strategy, str) and ":" not in strategy:
        raise ValueError(f"strategy reference {strategy!r} must be 'module:Class'")
    _TABLE.put(str(name), strategy, overwrite=overwrite, kind="decode strategy")


def reload_decode_strategies() -> None:
    """Forget all registrations and discover the built-ins and plugins again (after installing one)."""
    _TABLE.reload()


def list_decode_strategies() -> list[str]:
    """The registered decode-type names."""
    return list(_TABLE.loaded())


def decode_strategy_class(name: str) -> Any:
    """The strategy class registered for ``name`` (imported on first use).

    Raises:
        KeyError: nothing is registered under ``name``.
    """
    table = _TABLE.loaded()
    ref = table[str(name)]
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        ref = getattr(importlib.import_module(module), attr)
        with _TABLE.lock:
            table[str(name)] = ref
    return ref


def strategies_taking(option: str) -> list[str]:
    """The registered decode types whose strategy reads ``option`` (its options dataclass has it);
    a strategy that cannot be imported is left out."""
    takers = []
    for name in list_decode_strategies():
        try:
            options_class = decode_strategy_class(name).options_class
        except Exception:  # a broken plugin: not a taker
            continue
        if option in options_class.field_names():
            takers.append(name)
    return takers


__all__ = [
    "ENTRY_POINT_GROUP",
    "decode_strategy_class",
    "list_decode_strategies",
    "strategies_taking",
    "register_decode_strategy",
    "reload_decode_strategies",
]
