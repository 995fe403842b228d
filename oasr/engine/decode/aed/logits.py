"""Logit filters of Whisper decoding, applied to a whole decode batch at once.

Each row carries its hypothesis so far and its group's rules. The filters run on
raw logits in this order (faster-whisper's CTranslate2 backend order):
repetition penalty, no-repeat n-gram, suppressed tokens, begin suppression (the
first free step only), then the timestamp rules -- whose "timestamp mass beats
every text token" test reads a log-softmax taken after all of this step's other
filters. Disabled logits become -inf.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

NEG_INF = float("-inf")


@dataclass
class FilterRules:
    """The filters of one decode task (shared by all its hypothesis rows).

    Attributes:
        suppress: ids disabled at every step.
        begin_suppress: ids disabled at the first free step (``sample_begin``).
        sample_begin: index of the first free (not forced) token.
        timestamp_rules: apply Whisper's timestamp grammar.
        max_initial_id: the latest timestamp id allowed as the first token.
        repetition_penalty: > 1 discourages tokens already generated.
        no_repeat_ngram_size: forbid repeating n-grams of this size.
    """

    suppress: tuple[int, ...]
    begin_suppress: tuple[int, ...]
    sample_begin: int
    timestamp_rules: bool
    max_initial_id: int
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    _suppress_t: dict = field(default_factory=dict, repr=False)

    def suppress_tensor(self, device: torch.device) -> torch.Tensor:
        t = self._suppress_t.get(device)
        if t is None:
            t = self._suppress_t[device] = torch.tensor(self.suppress, dtype=torch.long, device=device)
        return t


@dataclass(frozen=True)
class TimestampIds:
    eot: int
    no_timestamps: int
    timestamp_begin: int


def _penalize_repetitions(logits: torch.Tensor, r: int, seq: Sequence[int], penalty: float) -> None:
    ids = torch.tensor(sorted(set(seq)), dtype=torch.long, device=logits.device)
    x = logits[r, ids]
    logits[r, ids] = torch.where(x < 0, x * penalty, x / penalty)


def _banned_ngram_tokens(seq: Sequence[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already present in ``seq``."""
    if len(seq) < n:
        return []
    tail = list(seq[len(seq) - n + 1 :])
    return [seq[i + n - 1] for i in range(len(seq) - n + 1) if list(seq[i : i + n - 1]) == tail]


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
    n = logits.shape[0]
    dev = logits.device
    tsb = ids.timestamp_begin

    # Repetition penalty and n-gram blocking are rare: handle them row by row.
    for r, (rules, seq) in enumerate(rows):
        if rules.repetition_penalty != 1.0 and seq:
            _penalize_repetitions(logits, r, seq, rules.repetition_penalty)
        if rules.no_repeat_ngram_size > 0:
            banned = _banned_ngram_tokens(seq, rules.no_repeat_ngram_size)
            if banned:
                logits[r, banned] = NEG_INF

    # Suppressed ids: one indexed write per distinct list.
    by_rules: dict[int, list[int]] = {}
    for r, (rules, _) in enumerate(rows):
        if rules.suppress:
            by_rules.setdefault(id(rules), []).append(r)
    for rows_idx in by_rules.values():
        sup = rows[rows_idx[0]][0].suppress_tensor(dev)
        if len(rows_idx) == n:
            logits[:, sup] = NEG_INF
        else:
            ri = torch.tensor(rows_idx, device=dev)
            logits[ri[:, None], sup[None, :]] = NEG_INF

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
