"""Transcript deltas: the text a strategy sends as it decodes (``StepEvent(kind="delta")``).

Shared by every strategy that streams text (``DecodeStrategy.streams_text``): the speech-LLM
one (``llm``) and Whisper's (``aed``). Two pieces:

* ``TranscriptDeltas``: the transcript so far in, the new part out. What was sent is never
  taken back: a transcript that does not extend it stops the deltas of the request (logged).
* ``TextStream``: token ids in, deltas out, never half a UTF-8 character (a character split
  across byte-level BPE tokens is held until its last byte arrives).

The deltas of a request concatenate exactly to the last transcript given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

log = logging.getLogger("oasr.engine")


def complete_utf8_prefix(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a multi-byte
    UTF-8 character that more bytes could still complete."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b & 0xC0 == 0x80:  # a continuation byte: keep looking for its lead byte
            continue
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return n - back if back < need else n
    return n


class TranscriptDeltas:
    """The deltas of one request's transcript, given the transcript so far each time.

    Attributes:
        sent: the text sent so far (the concatenated deltas).
        diverged: a transcript did not extend ``sent``; no more deltas are sent.
    """

    def __init__(self) -> None:
        self.sent = ""
        self.diverged = False

    def extend(self, transcript: str) -> str:
        """The part of ``transcript`` not sent yet ("" if none); ``transcript`` must start
        with what was sent (one that does not stops the deltas of this request)."""
        if self.diverged:
            return ""
        if not transcript.startswith(self.sent):
            self.diverged = True
            log.warning("streamed transcript diverged from the decoded text; deltas stop for this request")
            return ""
        delta = transcript[len(self.sent) :]
        self.sent = transcript
        return delta


class TextStream(TranscriptDeltas):
    """Transcript deltas of a sequence of token ids, never half a character.

    Args:
        decode_bytes: ids -> UTF-8 bytes (``Tokenizer.decode_bytes``).
        parse: raw generated text -> (language or None, transcript) (``model.parse_output``
            for a speech-LLM; the identity with no language for plain text).
        hold_until_language: send nothing until ``parse`` reports a language (the
            model writes a language preamble first).
    """

    def __init__(
        self,
        decode_bytes: Callable[[Sequence[int]], bytes],
        parse: Callable[[str], tuple[str | None, str]] = lambda text: (None, text),
        *,
        hold_until_language: bool = False,
    ) -> None:
        super().__init__()
        self.decode_bytes = decode_bytes
        self.parse = parse
        self.hold = hold_until_language
        self.ids: list[int] = []

    def push(self, token: int) -> str:
        """Add a generated id; returns the new transcript text ("" if none)."""
        self.ids.append(int(token))
        data = self.decode_bytes(self.ids)
        text = data[: complete_utf8_prefix(data)].decode("utf-8", errors="replace")
        language, transcript = self.parse(text)
        if self.hold and language is None:
            return ""
        return self.extend(transcript)

    def finish(self) -> tuple[str | None, str, str]:
        """The whole generation: (language, transcript, the last delta)."""
        text = self.decode_bytes(self.ids).decode("utf-8", errors="replace")
        language, transcript = self.parse(text)
        return language, transcript, self.extend(transcript)


__all__ = ["TextStream", "TranscriptDeltas", "complete_utf8_prefix"]
