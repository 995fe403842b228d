"""Whisper's budget, repetition penalty and seed on the tiny reference, against CTranslate2
(faster-whisper's runtime) on the same windows:

* a window whose decode reaches its length limit says so: ``finish_reason="length"`` exactly
  where CTranslate2 cuts the same window at the same ``max_length`` short of the end-of-text it
  reaches without the limit; "stop" elsewhere;
* ``repetition_penalty`` gives CTranslate2's tokens;
* sampled decodes (the temperature fallback, ``best_of``) without a seed are independent draws
  per request, as CTranslate2 seeds from the OS; a given seed replays."""

from __future__ import annotations

import pytest
import torch

from tests.models.whisper import _reference as ref
from tests.models.whisper.test_greedy_parity import ENGINE_OPTIONS, _engine_mel, _window

NO_FALLBACK = {k: v for k, v in ENGINE_OPTIONS.items() if k not in ("beam_size", "temperature")}


@pytest.fixture(scope="module")
def engine(oasr_hf):
    import oasr

    return oasr.ASREngine(oasr_hf, max_batch_size=4)


def test_windows_cut_at_their_length_are_length(engine, ct2_runtime, clips):
    audio = clips[:3]  # under 30 s: one window each
    mels = [_engine_mel(a) for a in audio]
    feats = torch.stack([_window(mel, 0, min(3000, n)) for mel, n in mels])
    prompt = ref.hf_prompt("en", "transcribe", False)
    full = ref.ct2_greedy(ct2_runtime, feats, [prompt] * len(audio))
    options = dict(language="en", without_timestamps=True, **ENGINE_OPTIONS)

    free = engine.transcribe(list(audio), **options)
    assert [[t for s in o.segments for t in s.tokens] for o in free] == full
    assert [o.finish_reason for o in free] == ["stop"] * len(audio)  # each decode ended on end-of-text

    # A window budget (tokens the decode may write) that lands strictly between the decodes'
    # lengths: the shortest ends by itself, the longer ones are cut.
    lengths = sorted(len(t) for t in full)
    budget = next(n + 1 for n in lengths if n + 1 not in lengths)
    assert budget <= lengths[-1], f"decode lengths {lengths}: no window would be cut"
    max_new_tokens = 2 * budget - len(prompt)  # faster-whisper generates at most half of prompt + max_new_tokens
    cut = ref.ct2_greedy(ct2_runtime, feats, [prompt] * len(audio), max_length=len(prompt) + max_new_tokens)
    outs = engine.transcribe(list(audio), max_new_tokens=max_new_tokens, **options)
    assert [[t for s in o.segments for t in s.tokens] for o in outs] == cut
    reasons = [o.finish_reason for o in outs]
    assert reasons == ["length" if c != f else "stop" for c, f in zip(cut, full)]
    assert set(reasons) == {"stop", "length"}


@pytest.mark.parametrize("timestamps", [False, True], ids=["text", "timestamps"])
def test_repetition_penalty_matches_ctranslate2(engine, ct2_runtime, clips, timestamps):
    """faster-whisper's ``repetition_penalty`` (CTranslate2's) on the same windows: the same tokens."""
    audio = clips[:3]
    mels = [_engine_mel(a) for a in audio]
    feats = torch.stack([_window(mel, 0, min(3000, n)) for mel, n in mels])
    prompt = ref.hf_prompt("en", "transcribe", timestamps)
    options = dict(language="en", without_timestamps=not timestamps, **ENGINE_OPTIONS)
    plain = ref.ct2_greedy(ct2_runtime, feats, [prompt] * len(audio))
    want = ref.ct2_greedy(ct2_runtime, feats, [prompt] * len(audio), repetition_penalty=3.0)
    assert want != plain, "the penalty should change these decodes; the check is vacuous otherwise"
    outs = engine.transcribe(list(audio), repetition_penalty=3.0, **options)
    if timestamps:
        got = [ref.split_window(w, 0, min(3000, n))[0] for w, (_, n) in zip(want, mels)]
        assert [[s.tokens for s in o.segments] for o in outs] == [[s[2] for s in g] for g in got]
    else:
        assert [[t for s in o.segments for t in s.tokens] for o in outs] == want


def test_sampling_without_a_seed_draws_afresh(engine, clips):
    """At temperature 1 over Whisper's 51865-token vocabulary, the tiny random model's decodes of
    two independent draws (5 samples each, at least 5 tokens each) are equal with negligible
    probability."""
    options = dict(language="en", temperature=1.0, best_of=5, without_timestamps=True, **NO_FALLBACK)

    def tokens(**extra):
        return [t for s in engine.transcribe(clips[0], **options, **extra).segments for t in s.tokens]

    first, second = tokens(), tokens()
    assert first and second and first != second
    assert tokens(seed=3) == tokens(seed=3)
