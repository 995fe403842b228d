"""Canary's searches, NeMo's arithmetic (``GreedySequenceGenerator`` and
``BeamSearchSequenceGenerator`` of ``nemo.collections.asr.modules.transformer``) over a batch.

Each row's transcript is what NeMo's decoding gives that clip alone: NeMo caps a batch's
transcripts by the batch's padded encoder length (``max_generation_delta``) and, in batched beam
search, tiles its cached decoder states across the batch in another order than its beams (every
element after the first reads another element's prompt states); here each clip has its own
limit and its own states, as in a batch of one.

Greedy: argmax of the head, until ``<|endoftext|>`` or ``max_sequence_length - prompt`` tokens
(``min(max_sequence_length, frames + max_generation_delta)`` with a delta >= 0).

Beam (``beam_size`` k, ``length_penalty`` a): the first step takes the top k of the prompt's
last position; each further step takes, per beam, its top k tokens (a finished beam, one ending in
end-of-text or padding, continues with padding at an unchanged score, its other candidates at
-10000 times their log-prob), divides the sums by the GNMT penalty ((5 + n) / 6) ** a of each
beam's length n (its non-padding tokens, the prompt's included, plus one), keeps the top k of the
k * k and multiplies them back by the penalties of the beams in those positions (NeMo's order);
the search ends when every beam has finished or after ``1 + max_sequence_length - prompt``
tokens, and returns the beam with the best penalised score.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NEG_INF = -10000.0  # NeMo's masking constant (``nemo.collections.common.parts.NEG_INF``)


@dataclass(frozen=True)
class SearchParams:
    """``beam_size`` 1 with ``greedy``: NeMo's greedy; else its beam search."""

    greedy: bool = True
    beam_size: int = 1
    length_penalty: float = 0.0
    max_generation_delta: int = -1


def _limits(prompt_len: int, enc_lens: list[int], max_seq: int, delta: int) -> list[int]:
    """Each row's positions cap minus its prompt: the tokens NeMo's loop may run."""
    return [(max_seq if delta < 0 else min(max_seq, n + delta)) - prompt_len for n in enc_lens]


@torch.inference_mode()
def canary_search(
    model, memory: torch.Tensor, memory_lens: torch.Tensor, prompts: list[list[int]], params: SearchParams
) -> list[list[int]]:
    """Transcripts (token ids after the prompt, end-of-text and padding stripped) of a batch.

    Shapes:
        memory: (B, T', D) the projected encoder output, memory_lens: (B,), prompts: B lists
    """
    out: list[list[int] | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    for rows in by_len.values():
        idx = torch.tensor(rows, device=memory.device)
        mem, lens = memory.index_select(0, idx), memory_lens.index_select(0, idx)
        ids = torch.tensor([prompts[i] for i in rows], device=memory.device)
        if params.greedy:
            got = _greedy(model, mem, lens, ids, params)
        else:
            got = _beam(model, mem, lens, ids, params)
        for i, g in zip(rows, got):
            out[i] = g
    return [o if o is not None else [] for o in out]


def _greedy(model, memory, memory_lens, prompts, params) -> list[list[int]]:
    dec, tok = model.decoder, model.tokenizer
    b, p = prompts.shape
    limits = _limits(p, memory_lens.tolist(), dec.cfg.max_sequence_length, params.max_generation_delta)
    cache = dec.new_cache(memory, memory_lens)
    logp = dec(prompts, cache)
    alive = list(range(b))  # rows of the batch still decoding, in cache order
    tokens: list[list[int]] = [[] for _ in range(b)]
    while alive:
        best = logp.argmax(-1).tolist()
        keep = []
        for j, (row, t) in enumerate(zip(alive, best)):
            if limits[row] <= 0:
                continue
            if t == tok.eos_id:
                continue
            tokens[row].append(t)
            if len(tokens[row]) < limits[row]:
                keep.append(j)
        if not keep:
            break
        if len(keep) != len(alive):
            cache = cache.select(torch.tensor(keep, device=memory.device))
        nxt = torch.tensor([[best[j]] for j in keep], device=memory.device)
        alive = [alive[j] for j in keep]
        logp = dec(nxt, cache)
    return [_strip(t, tok) for t in tokens]


def _strip(ids: list[int], tok) -> list[int]:
    """NeMo's ``format_hypotheses``: trailing end-of-text and padding off."""
    end = len(ids)
    while end and ids[end - 1] in (tok.eos_id, tok.pad_id):
        end -= 1
    return ids[:end]


def _penalty(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    return ((5 + lengths) / 6).pow(alpha)


def _beam(model, memory, memory_lens, prompts, params) -> list[list[int]]:
    dec, tok = model.decoder, model.tokenizer
    k, alpha = params.beam_size, params.length_penalty
    pad, eos = tok.pad_id, tok.eos_id
    b, p = prompts.shape
    limits = _limits(p, memory_lens.tolist(), dec.cfg.max_sequence_length, params.max_generation_delta)
    dev = memory.device
    cache = dec.new_cache(memory, memory_lens)
    logp = dec(prompts, cache).float()  # (B, V); scores in float32 at least (NEG_INF * a log-prob)
    scores, first = torch.topk(logp, k, dim=-1)  # (B, k)
    scores, first = scores.reshape(-1, 1), first.reshape(-1, 1)  # (B*k, 1), element-major
    rows = torch.arange(b, device=dev).repeat_interleave(k)
    cache = cache.select(rows)
    prefixes = torch.cat([prompts.index_select(0, rows), first], dim=1)  # (B*k, P+1)
    lengths = torch.full_like(scores, prefixes.shape[1] + 1)
    pad_profile = torch.zeros_like(scores, dtype=torch.long)
    done = torch.tensor([lim <= 0 for lim in limits], device=dev)  # per element
    steps = 0
    while not bool(done.all()):
        steps += 1
        pad_mask = pad_profile.repeat(1, k)  # (B*k, k)
        logp = dec(prefixes[:, -1:], cache).float()  # (B*k, V)
        scores_i, tokens_i = torch.topk(logp, k, dim=-1)
        tokens_i = pad * pad_mask + tokens_i * (1 - pad_mask)
        pad_mask = pad_mask.to(scores.dtype)
        pad_mask[:, 1:] = pad_mask[:, 1:] * NEG_INF
        cand = scores + scores_i * (1 - pad_mask)
        penalties = _penalty(lengths, alpha)
        cand = cand / penalties
        best, picked = torch.topk(cand.view(b, k * k), k, dim=1)  # (B, k)
        new_scores = best.reshape(-1, 1) * penalties
        parents = (picked // k + torch.arange(b, device=dev)[:, None] * k).reshape(-1)  # (B*k,)
        new_tokens = tokens_i.view(b, k * k).gather(1, picked).reshape(-1, 1)
        # An element that finished (or reached its limit) stays as it was: a batch of one had stopped.
        frozen = done.repeat_interleave(k)
        keep_rows = torch.arange(b * k, device=dev)
        parents = torch.where(frozen, keep_rows, parents)
        new_tokens = torch.where(frozen[:, None], torch.full_like(new_tokens, pad), new_tokens)
        scores = torch.where(frozen[:, None], scores, new_scores)
        prefixes = torch.cat([prefixes.index_select(0, parents), new_tokens], dim=1)
        cache = cache.select(parents)
        not_end = prefixes.ne(eos) & prefixes.ne(pad)
        lengths = torch.where(frozen[:, None], lengths, 1 + not_end.sum(dim=1, keepdim=True).to(scores.dtype))
        pad_profile = (~not_end[:, -1:]).long()
        finished = pad_profile.view(b, k).bool().all(dim=1)
        reached = torch.tensor([steps >= lim for lim in limits], device=dev)
        done = done | finished | reached
    final = (scores / _penalty(lengths, alpha)).view(b, k)
    choice = final.argmax(dim=1)
    out = []
    for e in range(b):
        seq = prefixes[e * k + int(choice[e])].tolist()[p:]
        out.append(_strip(seq, tok))
    return out


__all__ = ["SearchParams", "canary_search"]
