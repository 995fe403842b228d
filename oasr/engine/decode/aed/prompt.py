"""Whisper prompts: what is fed before the first sampled token.

``build_prompt`` lays out previous text / hotwords, the start-of-transcript
sequence, and an optional forced prefix (faster-whisper's ``get_prompt``);
``plan_prompt`` splits it the way the decode loop consumes it: everything up to
the last special token is one prefill, forced prefix tokens follow, and the
token budget of the window is derived from where sampling starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oasr.engine.decode.aed.vocabulary import AedVocabulary

MAX_LENGTH = 448  # Whisper's decoder context


def build_prompt(
    tok: AedVocabulary,
    previous_tokens: Sequence[int],
    *,
    language: str | None,
    task: str,
    without_timestamps: bool = False,
    prefix: str | None = None,
    hotwords: str | None = None,
    max_length: int = MAX_LENGTH,
) -> list[int]:
    """``[<|startofprev|> hotwords previous] sot-sequence [<|notimestamps|>] [<|0.00|> prefix]``.

    Previous text keeps its last ``max_length // 2 - 1`` tokens; hotwords and the
    prefix are cut to the same budget. Hotwords are not used when a prefix is.
    """
    half = max_length // 2
    prompt: list[int] = []
    use_hotwords = bool(hotwords) and not prefix
    if previous_tokens or use_hotwords:
        if tok.special.sot_prev is None:
            raise ValueError("this vocabulary has no <|startofprev|>: previous-text prompts are not possible")
        prompt.append(tok.special.sot_prev)
        if use_hotwords:
            hw = tok.encode_text(" " + hotwords.strip())  # type: ignore[union-attr]
            prompt.extend(hw[: half - 1] if len(hw) >= half else hw)
        if previous_tokens:
            prompt.extend(list(previous_tokens)[-(half - 1) :])
    prompt.extend(tok.sot_sequence(language, task))
    if without_timestamps:
        prompt.append(tok.special.no_timestamps)
    if prefix:
        px = tok.encode_text(" " + prefix.strip())
        if len(px) >= half:
            px = px[: half - 1]
        if not without_timestamps:
            prompt.append(tok.timestamp_begin)
        prompt.extend(px)
    return prompt


@dataclass(frozen=True)
class PromptPlan:
    """How a prompt is decoded.

    Attributes:
        prefill: tokens run in one forward (the prompt through its last special
            token, then the forced prefix); logits at its last position choose the
            first free token.
        sot_index: position of <|startoftranscript|> (no-speech is read from the
            logits there).
        prefix: forced tokens (they count in the hypothesis length, score 0).
        decode_max: tokens the window may return, forced prefix included.
        timestamp_rules: timestamps are being sampled (the start token is not
            <|notimestamps|>).
    """

    prefill: tuple[int, ...]
    sot_index: int
    prefix: tuple[int, ...]
    decode_max: int
    timestamp_rules: bool


def plan_prompt(prompt: Sequence[int], tok: AedVocabulary, max_length: int = MAX_LENGTH) -> PromptPlan:
    """Split a prompt into prefill / forced prefix and derive the window's token budget.

    The budget is ``min(max_length // 2, max_length - start)`` where ``start`` is the
    number of prompt tokens before the last special token, as faster-whisper's
    CTranslate2 backend computes it.

    Raises:
        ValueError: the prompt has no <|startoftranscript|> or leaves no room to decode.
    """
    sot, no_ts = tok.special.sot, tok.special.no_timestamps
    prompt = list(prompt)
    if sot not in prompt:
        raise ValueError("a Whisper prompt must contain <|startoftranscript|>")
    sot_index = prompt.index(sot)
    end = sot_index
    while end < len(prompt) and sot <= prompt[end] <= no_ts:
        end += 1
    start_step = end - 1
    decode_max = min(max_length // 2, max_length - start_step)
    if decode_max <= 0:
        raise ValueError(f"the prompt leaves no room to decode ({start_step} prompt tokens, max_length={max_length})")
    prefix = tuple(prompt[end:])
    return PromptPlan(
        prefill=tuple(prompt[:end]) + prefix,
        sot_index=sot_index,
        prefix=prefix,
        decode_max=decode_max,
        timestamp_rules=prompt[end - 1] != no_ts,
    )
