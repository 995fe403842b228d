"""Logit filters of Whisper decoding, applied to a whole decode batch at once (the shared
processors of ``oasr.engine.decode.logits`` plus Whisper's begin suppression and timestamp grammar).

Each row carries its hypothesis so far and its group's rules. The filters run on
raw logits in this order (faster-whisper's CTranslate2 backend order):
repetition penalty, no-repeat n-gram, suppressed tokens, begin suppression (the
first free step only), then the timestamp rules -- whose "timestamp mass beats
every text token" test reads a log-softmax taken after all of this step's other
filters. Disabled logits become -inf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from oasr.engine.decode.logits import NEG_INF, TokenRules, apply_token_rules


@dataclass(kw_only=True)
class FilterRules(TokenRules):
    """The filters of one decode task (shared by all its hypothesis rows): the shared
    ``TokenRules`` (suppression, repetition penalty, n-gram ban) plus Whisper's own.

    Attributes:
        begin_suppress: ids disabled at the first free step (``sample_begin``).
        sample_begin: index of the first free (not forced) token.
        timestamp_rules: apply Whisper's timestamp grammar.
        max_initial_id: the latest timestamp id allowed as the first token.
    """

    begin_suppress: tuple[int, ...]
    sample_begin: int
    timestamp_rules: bool
    max_initial_id: int


@dataclass(frozen=True)
class TimestampIds:
    eot: int
    no_timestamps: int
    timestamp_begin: int


def apply_filters(
    logits: torch.Tensor,
    rows: Sequence[tuple[FilterRules, Sequence[int]]],
    ids: TimestampIds,
) -> torch.Tensor:
    """Filter a batch of next-token logits in place.

    Args:
        logits: (n, V) raw logits of the rows.
        rows: per row, its task's rules and the tokens it generated so far (forced
            prefix included); the step index is ``len(tokens)``.
        ids: the vocabulary's special ids.

    Returns:
        ``logits`` (modified in place).
    """
    dev = logits.device
    tsb = ids.timestamp_begin
    apply_token_rules(logits, rows)

    check: list[int] = []
    for r, (rules, seq) in enumerate(rows):
        step = len(seq)
        if step == rules.sample_begin and rules.begin_suppress:
            logits[r, list(rules.begin_suppress)] = NEG_INF
        if not rules.timestamp_rules:
            continue
        logits[r, ids.no_timestamps] = NEG_INF
        sb = rules.sample_begin
        if step == sb == 0:
            # The first token must be a timestamp no later than max_initial_id.
            logits[r, :tsb] = NEG_INF
            logits[r, rules.max_initial_id + 1 :] = NEG_INF
        elif step > sb:
            last = seq[-1]
            if last >= tsb:
                penult = seq[-2] if step - 1 > sb else last
                if penult >= tsb:
                    # Two timestamps in a row close a segment: text or end-of-text next.
                    logits[r, tsb:] = NEG_INF
                else:
                    # Text then a timestamp: the closing timestamp or end-of-text.
                    logits[r, : ids.eot] = NEG_INF
                    logits[r, tsb:last] = NEG_INF
                    check.append(r)
            else:
                check.append(r)
                for t in reversed(seq[sb:]):
                    if t >= tsb:
                        # Timestamps must strictly increase.
                        logits[r, tsb : t + 1] = NEG_INF
                        break
    if check:
        ci = torch.tensor(check, device=dev)
        lp = torch.log_softmax(logits.index_select(0, ci).float(), dim=-1)
        ts_mass = torch.logsumexp(lp[:, tsb:], dim=-1)
        text_max = lp[:, :tsb].max(dim=-1).values
        force = ci[ts_mass > text_max]
        if force.numel():
            logits[force, :tsb] = NEG_INF
    return logits
