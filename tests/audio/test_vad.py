"""Silero VAD spans on real speech laid out with silences, the packing of spans into
chunks of at most 30 s, and the mapping of chunk times back to the recording."""

from __future__ import annotations

import re
import sys
import threading

import numpy as np
import pytest
import soxr
import torch

from oasr.audio.vad import (
    CHUNK_S,
    SileroNet,
    SpeechChunk,
    SpeechProbabilityStream,
    VadOptions,
    merge_spans,
    require_silero,
    speech_probabilities,
    speech_spans,
)
from oasr.audio.vad import _BatchedSilero as BatchedSilero
from tests.conftest import checkout_hint

SR = 16000


def _silero_or_skip():
    try:
        require_silero()
    except ImportError:
        pytest.skip("silero-vad is not installed (oasr's vad extra)")


# -- packing and mapping (no model) ---------------------------------------------------------


def test_merge_spans_packs_in_order_up_to_the_limit():
    spans = [(0, 10 * SR), (12 * SR, 25 * SR), (30 * SR, 40 * SR), (40 * SR, 45 * SR)]
    chunks = merge_spans(spans, SR, 30.0)
    assert [c.spans for c in chunks] == [
        ((0, 10 * SR), (12 * SR, 25 * SR)),
        ((30 * SR, 45 * SR),),  # touching spans become one
    ]
    assert [c.duration for c in chunks] == [23.0, 15.0]
    assert (chunks[0].start, chunks[0].end) == (0.0, 25.0)


def test_merge_spans_cuts_a_span_longer_than_a_chunk():
    chunks = merge_spans([(SR, 71 * SR), (75 * SR, 80 * SR)], SR)
    assert all(c.duration <= CHUNK_S for c in chunks)
    assert [c.spans for c in chunks] == [
        ((SR, 31 * SR),),
        ((31 * SR, 61 * SR),),
        ((61 * SR, 71 * SR), (75 * SR, 80 * SR)),
    ]


def test_merge_spans_refuses_overlapping_spans():
    with pytest.raises(ValueError, match="in order"):
        merge_spans([(0, 10), (5, 20)], SR)
    assert merge_spans([], SR) == []


def test_chunk_time_maps_through_removed_silences():
    chunk = SpeechChunk(((SR, 2 * SR), (4 * SR, 6 * SR)), SR)  # 1 s + 2 s of audio
    assert chunk.to_global(0.0) == 1.0
    assert chunk.to_global(0.5) == 1.5
    assert chunk.to_global(1.0) == 4.0  # a start on the seam: the next span
    assert chunk.to_global(1.0, is_end=True) == 2.0  # an end on the seam: the span before
    assert chunk.to_global(2.5) == 5.5
    assert chunk.to_global(-1.0) == 1.0 and chunk.to_global(30.0) == 6.0  # clamped
    audio = np.arange(8 * SR, dtype=np.float32)
    np.testing.assert_array_equal(chunk.audio(audio), np.concatenate([audio[SR : 2 * SR], audio[4 * SR : 6 * SR]]))


def test_vad_options_are_validated():
    assert VadOptions.from_parameters({"threshold": 0.3}) == VadOptions(threshold=0.3)
    with pytest.raises(ValueError, match="unknown vad_parameters"):
        VadOptions.from_parameters({"treshold": 0.3})
    with pytest.raises(ValueError, match="threshold"):
        VadOptions(threshold=1.5)
    with pytest.raises(ValueError, match="speech_pad_ms"):
        VadOptions(speech_pad_ms=-1)
    with pytest.raises(ValueError, match="max_speech_duration_s"):
        VadOptions(max_speech_duration_s=0.5, speech_pad_ms=400)


def test_missing_silero_is_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "silero_vad", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=re.escape(checkout_hint("vad"))):
        require_silero()
    with pytest.raises(ImportError, match=re.escape(checkout_hint("vad"))):
        speech_spans(np.zeros(SR, dtype=np.float32))


# -- the model on real speech --------------------------------------------------------------


@pytest.fixture(scope="module")
def spans(vad_recording):
    _silero_or_skip()
    return speech_spans(vad_recording.audio, SR)


def test_batched_model_matches_the_package_window_by_window(vad_recording, spans):
    """The one-pass probabilities equal the packaged model stepped window by window (its
    64-sample context and LSTM state carried), and the spans equal the package's own
    get_speech_timestamps, at 16 and 8 kHz; audio not a whole number of windows included."""
    silero_vad = require_silero()
    package_model = silero_vad.load_silero_vad()
    for rate, window in ((16000, 512), (8000, 256)):
        audio = vad_recording.audio[: 12 * SR + 100]
        if rate != SR:
            audio = soxr.resample(audio, SR, rate).astype(np.float32)
        package_model.reset_states()
        samples = torch.from_numpy(audio)
        expected = []
        for i in range(0, len(samples), window):
            piece = torch.nn.functional.pad(samples[i : i + window], (0, max(0, i + window - len(samples))))
            expected.append(package_model(piece, rate).item())
        probs = speech_probabilities(audio, rate)
        assert probs.shape == (len(expected),)
        np.testing.assert_allclose(probs, expected, atol=1e-4)
    opts = VadOptions()
    reference = silero_vad.get_speech_timestamps(
        torch.from_numpy(vad_recording.audio),
        package_model,
        threshold=opts.threshold,
        min_speech_duration_ms=opts.min_speech_duration_ms,
        max_speech_duration_s=opts.max_speech_duration_s,
        min_silence_duration_ms=opts.min_silence_duration_ms,
        speech_pad_ms=opts.speech_pad_ms,
    )
    assert spans == [(r["start"], r["end"]) for r in reference]
    with pytest.raises(ValueError, match="8000 or 16000"):
        speech_probabilities(audio, 44100)


def test_silero_net_runs_the_packaged_weights_as_the_packaged_model(vad_recording):
    """``SileroNet`` (the eager network other Silero weights load into) holding the package's
    weights gives the package's TorchScript network's probabilities, at both rates."""
    _silero_or_skip()
    package_model = require_silero().load_silero_vad()
    samples = torch.from_numpy(vad_recording.audio[: 20 * SR + 77])
    for sub, window in ((package_model._model, 512), (package_model._model_8k, 256)):
        net = SileroNet.from_state_dict(dict(sub.state_dict()))
        assert net.context_size_samples == sub.context_size_samples
        np.testing.assert_allclose(
            BatchedSilero(net, window)(samples).numpy(), BatchedSilero(sub, window)(samples).numpy(), atol=1e-6
        )
    state = dict(package_model._model.state_dict())
    with pytest.raises(ValueError, match="not Silero VAD"):
        SileroNet.from_state_dict({k: v for k, v in state.items() if k != "decoder.rnn.weight_hh"})
    with pytest.raises(ValueError, match="not Silero VAD"):
        SileroNet.from_state_dict({"encoder.0.reparam_conv.weight": torch.zeros(3)})


def test_spans_cover_each_clip_and_skip_the_silences(vad_recording, spans):
    rec = vad_recording
    assert spans == sorted(spans) and all(b > a for a, b in spans)
    for a, b in spans:  # every span lies in one clip (VAD pads by 0.4 s)
        assert rec.clip_at(a / SR) is not None and rec.clip_at(a / SR) == rec.clip_at(b / SR), (a / SR, b / SR)
    for i, (a, b) in enumerate(rec.spans):
        covered = sum(max(0, min(b, e / SR) - max(a, s / SR)) for s, e in spans)
        assert covered > 0.8 * (b - a), (i, covered, b - a)
    gaps = [(0.0, rec.spans[0][0])] + [(rec.spans[i][1], rec.spans[i + 1][0]) for i in range(len(rec.spans) - 1)]
    for a, b in gaps:  # the middle of every silence is left out
        mid = (a + b) / 2
        assert not any(s / SR <= mid <= e / SR for s, e in spans), (a, b)


def test_chunks_hold_at_most_30_s_and_keep_every_span(vad_recording, spans):
    chunks = merge_spans(spans, SR)
    assert len(chunks) >= 2  # 37 s of speech
    assert all(c.duration <= CHUNK_S for c in chunks)
    assert _coalesced([s for c in chunks for s in c.spans]) == _coalesced(spans)
    starts = [c.start for c in chunks]
    assert starts == sorted(starts)


def test_silence_and_faint_noise_have_no_speech():
    _silero_or_skip()
    assert speech_spans(np.zeros(5 * SR, dtype=np.float32), SR) == []
    noise = np.random.default_rng(0).standard_normal(5 * SR).astype(np.float32) * 1e-3
    assert speech_spans(noise, SR) == []


def test_a_long_stretch_of_speech_is_split_under_30_s(vad_recording):
    _silero_or_skip()
    continuous = np.concatenate(vad_recording.clips)  # 37 s without a long pause
    opts = VadOptions(min_silence_duration_ms=2000)  # pauses inside do not end a span ...
    split = speech_spans(continuous, SR, opts)
    assert all((b - a) / SR <= CHUNK_S for a, b in split)  # ... max_speech_duration_s does
    whole = speech_spans(continuous, SR, VadOptions(min_silence_duration_ms=2000, max_speech_duration_s=float("inf")))
    assert max(b - a for a, b in whole) / SR > CHUNK_S
    chunks = merge_spans(whole, SR)
    assert len(chunks) >= 2 and all(c.duration <= CHUNK_S for c in chunks)


def test_threads_and_other_rates(vad_recording, spans):
    """Threads get the same spans (they share one stateless model); torch's thread count is left as
    it was; 44.1 kHz input (resampled for the model) gives the same spans in its own samples."""
    threads = torch.get_num_threads()
    audio = vad_recording.audio[: 20 * SR]
    results: dict[int, list] = {}

    def run(i: int) -> None:
        results[i] = speech_spans(audio, SR)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert results[0] == results[1] == speech_spans(audio, SR)
    assert results[0][0] == spans[0]
    assert torch.get_num_threads() == threads
    wide = speech_spans(soxr.resample(audio, SR, 44100).astype(np.float32), 44100)
    assert len(wide) == len(results[0])
    for (a, b), (c, d) in zip(wide, results[0]):
        assert abs(a / 44100 - c / SR) < 0.1 and abs(b / 44100 - d / SR) < 0.1


def _coalesced(spans):
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


@pytest.mark.parametrize("rate", [16000, 8000])
def test_probabilities_fed_piece_by_piece_equal_the_whole(vad_recording, rate, monkeypatch):
    """VAD run on the pieces of audio as they are decoded (pieces of 1, 37 and 9,999 samples,
    blocks of 64 windows so that many blocks run) gives the whole-array probabilities."""
    _silero_or_skip()
    audio = vad_recording.audio[: 40 * SR]
    if rate != SR:
        audio = soxr.resample(audio, SR, rate).astype(np.float32)
    whole = speech_probabilities(audio, rate)
    stream = SpeechProbabilityStream(rate)
    monkeypatch.setattr(stream.net, "BLOCK", 64)
    sizes, at = [1, 37, 9999], 0
    while at < len(audio):
        n = sizes[at % 3]
        stream.feed(audio[at : at + n])
        at += n
    pieces = stream.finish()
    assert pieces.shape == whole.shape
    np.testing.assert_allclose(pieces, whole, atol=1e-5, rtol=0)
