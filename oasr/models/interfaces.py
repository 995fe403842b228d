"""What a model must implement to serve each decode family.

``CAPABILITIES`` is declarative: for each decode family, the dotted model-attribute
paths its decode strategy calls, with a one-line why. ``require_capability`` checks
them once, when the engine builds its decode strategy, so a checkpoint that
advertises a capability it cannot serve fails at construction naming the missing
members, instead of on its first request.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from oasr.models.base import DecodeType, is_unimplemented


@dataclass(frozen=True)
class Capability:
    """Required members of one decode family."""

    requires: tuple[str, ...]
    why: str


# What the K/V-pool scheduler (autoregressive.py) calls on a decoder: the AED and LLM strategies share it.
_POOLED_DECODER = (
    "decoder.new_pool",
    "decoder.prefill",
    "decoder.step",
    "decoder.select",
    "decoder.merge",
    "decoder.can_merge",
)

CAPABILITIES: dict[DecodeType, Capability] = {
    DecodeType.CTC: Capability(
        requires=("forward_offline", "forward_offline_best_path", "blank_id", "encoder.subsampling_rate"),
        why="CTC decoding reads log-probs from the fused encoder+head forward, collapses "
        "them around the model's blank id, and times tokens by the subsampling rate",
    ),
    DecodeType.CTC_AED_RESCORING: Capability(
        requires=("forward_offline", "encode_offline", "ctc_log_probs", "blank_id", "decoder.score_hypotheses"),
        why="attention rescoring runs CTC prefix beam search, then scores the n-best "
        "teacher-forced through the attention decoder over the encoder output",
    ),
    DecodeType.TRANSDUCER: Capability(
        requires=(
            "encode_offline",
            "predictor.init_state",
            "predictor.predict",
            "predictor.advance",
            "joiner",
            "transducer_search",
        ),
        why="frame-synchronous search advances an opaque predictor state and joins it with each encoder frame; "
        "the model runs it over a batch (transducer_search), the engine times and formats its emissions",
    ),
    DecodeType.AED: Capability(
        requires=(
            "encode_offline",
            *_POOLED_DECODER,
            "aed_vocabulary",
            "default_alignment_heads",
            "window_frames",
            "n_mels",
        ),
        why="label-synchronous decoding prefills prompts over the encoder window into a "
        "per-row K/V pool, steps one token per row, and selects / merges rows for beams "
        "and continuous batching; the model supplies its vocabulary's prompts and specials, "
        "its word-timing heads and its window geometry, so the engine imports no family",
    ),
    DecodeType.MULTITASK: Capability(
        requires=("encode_offline", "prompt", "default_language", "multitask_search", "search_params"),
        why="a prompted encoder-decoder (NeMo's Canary) encodes each clip, builds its task prompt from the "
        "request's languages and flags, and runs the model's own search (greedy or beam) to end-of-text",
    ),
    DecodeType.PARAFORMER: Capability(
        requires=("encode_offline", "predictor", "decoder"),
        why="non-autoregressive decoding fires CIF token embeddings from the encoder and "
        "decodes them in one parallel pass",
    ),
    DecodeType.RICH_CTC: Capability(
        requires=(
            "rich_prompt",
            "forward_rich",
            "prompt_frames",
            "rich_transcript",
            "is_tag",
            "blank_id",
            "encoder.subsampling_rate",
        ),
        why="rich CTC (SenseVoice) puts each request's query rows (language, text normalisation) in front of "
        "its audio, searches the CTC output of both, and has the model read the tags the prompt frames wrote "
        "(language, emotion, events) and the text without them; the prompt frames and tag pieces are not timed",
    ),
    DecodeType.LLM: Capability(
        requires=(
            "encode_offline",
            "embed_prompt",
            *_POOLED_DECODER,
        ),
        why="a speech-LLM embeds the chat prompt with audio states spliced in, then samples "
        "from the causal LM over a per-row K/V pool",
    ),
}


class CapabilityError(ValueError):
    """A model cannot serve the decode family it was asked for (or claims)."""


_MISSING = object()


def _resolve(obj: Any, path: str) -> Any:
    """Follow ``a.b.c`` without calling the last member; ``_MISSING`` if absent or unimplemented."""
    *parents, leaf = path.split(".")
    for part in parents:
        obj = getattr(obj, part, None)
        if obj is None:
            return _MISSING
    try:
        static = inspect.getattr_static(obj, leaf)
    except AttributeError:
        # nn.Module keeps submodules and parameters out of __dict__-based static lookup.
        static = getattr(obj, leaf, _MISSING)
    if static is _MISSING or static is None or is_unimplemented(static):
        return _MISSING
    if isinstance(static, (property, staticmethod, classmethod)) or inspect.isfunction(static):
        return static
    value = getattr(obj, leaf, _MISSING)
    return _MISSING if value is None else value


_PLUGIN_CAPABILITIES: dict[str, Capability] = {}


def register_capability(name: str, requires: tuple[str, ...], why: str) -> None:
    """Declare what a model must have to be decoded by a plugin decode type ``name`` (the
    built-in ones are in ``CAPABILITIES``)."""
    if name in {d.value for d in DecodeType}:
        raise ValueError(f"{name!r} is a built-in decode type; its requirements are in CAPABILITIES")
    _PLUGIN_CAPABILITIES[str(name)] = Capability(tuple(requires), why)


def capability(decode_type: DecodeType | str) -> Capability | None:
    """The requirements of ``decode_type`` (built-in or registered), or None if it has none."""
    name = str(decode_type)
    for dt, cap in CAPABILITIES.items():
        if dt.value == name:
            return cap
    return _PLUGIN_CAPABILITIES.get(name)


def missing_members(model: Any, decode_type: DecodeType | str) -> list[str]:
    """The members of ``decode_type``'s requirements that ``model`` does not provide."""
    cap = capability(decode_type)
    if cap is None:
        raise CapabilityError(f"unknown decode type {str(decode_type)!r}; known: {known_decode_types()}")
    return [p for p in cap.requires if _resolve(model, p) is _MISSING]


def known_decode_types() -> list[str]:
    return [d.value for d in DecodeType] + list(_PLUGIN_CAPABILITIES)


def require_capability(model: Any, decode_type: DecodeType | str) -> None:
    """Check that ``model`` advertises and can serve ``decode_type``.

    Raises:
        CapabilityError: naming the decode type, the model, and the missing members
            (or the capabilities it does advertise).
    """
    dt = str(decode_type)
    cap = capability(dt)
    if cap is None:
        raise CapabilityError(f"unknown decode type {dt!r}; expected one of {known_decode_types()}")
    name = type(model).__name__
    advertised = {str(d) for d in getattr(model, "capabilities", ())}
    if dt not in advertised:
        raise CapabilityError(f"{name} does not serve decode type {dt!r}; it serves {sorted(advertised) or 'nothing'}")
    missing = missing_members(model, dt)
    if missing:
        raise CapabilityError(f"{name} advertises {dt!r} but lacks {missing} ({cap.why})")


def validate_capabilities(model: Any) -> None:
    """``require_capability`` for every capability the model advertises, and a check
    that its default decode type is one of them."""
    caps = frozenset(getattr(model, "capabilities", ()))
    if not caps:
        raise CapabilityError(f"{type(model).__name__} advertises no decode type")
    default = getattr(model, "default_decode_type", None)
    if default is None or str(default) not in {str(d) for d in caps}:
        raise CapabilityError(
            f"{type(model).__name__}.default_decode_type={default!r} is not among its capabilities "
            f"{sorted(str(d) for d in caps)}"
        )
    for dt in caps:
        require_capability(model, dt)
