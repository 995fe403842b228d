"""Word timestamps from cross-attention: alignment heads -> DTW -> word spans.

The alignment is a second, teacher-forced decoder pass over
``sot-sequence <|notimestamps|> text <|endoftext|>`` that returns the
pre-softmax cross-attention scores of the checkpoint's alignment heads. Scores
are cut to the window's real frames and softmaxed over them, standardised over
the token axis, median-filtered over time (width 7, reflect), averaged over
heads; dynamic time warping over the negated matrix gives a monotonic
token -> frame path whose jumps are the token start times. The word grouping and
the duration heuristics that follow are faster-whisper's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from oasr.engine.decode.aed.vocabulary import AedVocabulary

TOKENS_PER_SECOND = 50  # encoder frames per second
SENTENCE_END_MARKS = ".。!！?？"


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median over the last axis with reflect padding (unchanged when too short).

    Shapes:
        x: (..., T) -> (..., T)
    """
    r = width // 2
    t = x.shape[-1]
    if t <= r:
        return x
    idx = torch.arange(t, device=x.device)[:, None] + torch.arange(-r, r + 1, device=x.device)[None, :]
    idx = idx.abs()
    idx = torch.where(idx >= t, 2 * t - idx - 2, idx)
    return x[..., idx].median(dim=-1).values


def dtw(cost_matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Monotonic alignment of rows (tokens) to columns (frames) minimising the summed cost.

    Ties prefer a step in time, then a token step (the order CTranslate2 and
    openai-whisper use). The recurrence is evaluated one anti-diagonal at a time.

    Returns:
        (text_indices, time_indices) of the path, in order.
    """
    x = np.asarray(cost_matrix, dtype=np.float32)
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    cost[0, 0] = 0.0
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0 = cost[i - 1, j - 1]
        c1 = cost[i - 1, j]
        c2 = cost[i, j - 1]
        t = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))
        c = np.where(t == 0, c0, np.where(t == 1, c1, c2))
        cost[i, j] = x[i - 1, j - 1] + c
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    path_i, path_j = [], []
    while i > 0 or j > 0:
        path_i.append(i - 1)
        path_j.append(j - 1)
        t = trace[i, j]
        if t == 0:
            i -= 1
            j -= 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return np.array(path_i[::-1]), np.array(path_j[::-1])


def alignment_matrix(probs: torch.Tensor, medfilt_width: int = 7) -> torch.Tensor:
    """Cross-attention probabilities of the alignment heads -> the (tokens, frames) matrix.

    Shapes:
        probs: (heads, T_in, frames), softmaxed over the window's real frames -> (T_in, frames)
    """
    w = probs.float()
    mean = w.mean(dim=-2, keepdim=True)
    var = ((w * w).mean(dim=-2, keepdim=True) - mean * mean).clamp(min=0)
    w = (w - mean) / var.sqrt()
    w = median_filter(w, medfilt_width)
    return w.mean(dim=0)


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def find_alignment(
    decoder,
    tok: AedVocabulary,
    memory: torch.Tensor,
    sot_sequence: Sequence[int],
    text_tokens: Sequence[int],
    num_frames: int,
    heads: Sequence[tuple[int, int]],
    language: str | None,
) -> list[WordTiming]:
    """Word timings (seconds from the window start) for the text tokens of one window.

    Args:
        decoder: a decoder with ``cross_attention``.
        memory: (1, Tk, D) the window's encoder output.
        sot_sequence: the start sequence without previous text.
        text_tokens: the window's text tokens (no timestamps).
        num_frames: mel frames of real audio in the window.
        heads: (layer, head) alignment heads.
    """
    eot = tok.eot
    n_frames = num_frames // 2
    if not text_tokens or n_frames == 0:
        return []
    inp = list(sot_sequence) + [tok.special.no_timestamps] + list(text_tokens) + [eot]
    s = len(sot_sequence)
    tokens_t = torch.tensor([inp], device=memory.device)
    with torch.no_grad():
        probs_heads, logits = decoder.cross_attention(
            memory, tokens_t, torch.tensor([len(inp)], device=memory.device), heads, max_frames=n_frames
        )
    n = len(text_tokens)
    probs = torch.softmax(logits[0, s : s + n, :eot].float(), dim=-1)
    text_probs = probs[torch.arange(n), torch.tensor(list(text_tokens))].double().cpu().numpy()
    words, word_tokens = tok.split_to_word_tokens(list(text_tokens) + [eot], language)
    if len(word_tokens) <= 1 or n_frames == 0:
        return []
    matrix = alignment_matrix(probs_heads[0])[s : s + n + 1]
    text_idx, time_idx = dtw(-matrix.double().cpu().numpy())
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_SECOND
    starts = jump_times[boundaries[:-1]]
    ends = jump_times[boundaries[1:]]
    probabilities = [float(np.mean(text_probs[i:j])) for i, j in zip(boundaries[:-1], boundaries[1:])]
    return [
        WordTiming(word, list(toks), float(st), float(en), p)
        for word, toks, st, en, p in zip(words, word_tokens, starts, ends, probabilities)
    ]


def merge_punctuations(alignment: list[WordTiming], prepended: str, appended: str) -> None:
    """Attach leading punctuation to the next word and trailing punctuation to the previous one."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        prev, foll = alignment[i], alignment[j]
        if prev.word.startswith(" ") and prev.word.strip() in prepended:
            foll.word = prev.word + foll.word
            foll.tokens = prev.tokens + foll.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        prev, foll = alignment[i], alignment[j]
        if not prev.word.endswith(" ") and foll.word in appended:
            prev.word = prev.word + foll.word
            prev.tokens = prev.tokens + foll.tokens
            foll.word, foll.tokens = "", []
        else:
            i = j
        j += 1


def _round2(x: float) -> float:
    return float(np.round(np.float64(x), 2))


def add_word_timestamps(
    subsegments: list[dict],
    alignment: list[WordTiming],
    time_offset: float,
    prepend_punctuations: str,
    append_punctuations: str,
    last_speech_timestamp: float,
    eot: int,
) -> float:
    """Give each sub-segment of one window its words, clipping implausible durations
    (faster-whisper's heuristics); moves segment starts/ends onto word times.

    Args:
        subsegments: dicts with "start", "end", "tokens" (mutated: "words" added).
        alignment: the window's word timings (seconds from the window start).
        time_offset: the window start in seconds.
        eot: end-of-text id (tokens at or above it are not text).

    Returns:
        the updated last speech timestamp.
    """
    durations = np.array([w.end - w.start for w in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    max_d = median * 2
    if len(durations):
        for i in range(1, len(alignment)):
            if alignment[i].end - alignment[i].start > max_d:
                if alignment[i].word in SENTENCE_END_MARKS:
                    alignment[i].end = alignment[i].start + max_d
                elif alignment[i - 1].word in SENTENCE_END_MARKS:
                    alignment[i].start = alignment[i].end - max_d
    merge_punctuations(alignment, prepend_punctuations, append_punctuations)

    word_index = 0
    for sub in subsegments:
        n_text = sum(1 for t in sub["tokens"] if t < eot)
        saved = 0
        words: list[dict] = []
        while word_index < len(alignment) and saved < n_text:
            timing = alignment[word_index]
            if timing.word:
                words.append(
                    dict(
                        word=timing.word,
                        start=_round2(time_offset + timing.start),
                        end=_round2(time_offset + timing.end),
                        probability=timing.probability,
                    )
                )
            saved += len(timing.tokens)
            word_index += 1
        if words:
            if words[0]["end"] - last_speech_timestamp > median * 4 and (
                words[0]["end"] - words[0]["start"] > max_d
                or (len(words) > 1 and words[1]["end"] - words[0]["start"] > max_d * 2)
            ):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > max_d:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - max_d)
                    words[0]["end"] = words[1]["start"] = boundary
                words[0]["start"] = max(0, words[0]["end"] - max_d)
            if sub["start"] < words[0]["end"] and sub["start"] - 0.5 > words[0]["start"]:
                words[0]["start"] = max(0, min(words[0]["end"] - median, sub["start"]))
            else:
                sub["start"] = words[0]["start"]
            if sub["end"] > words[-1]["start"] and sub["end"] + 0.5 < words[-1]["end"]:
                words[-1]["end"] = max(words[-1]["start"] + median, sub["end"])
            else:
                sub["end"] = words[-1]["end"]
            last_speech_timestamp = sub["end"]
        sub["words"] = words
    return last_speech_timestamp
