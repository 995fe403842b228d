"""WeNet U2++ streaming against WeNet's own outputs (the tiny causal fixture,
``wenet-u2pp-tiny-causal``): the masked offline encoder, the paged runtime fed chunk by
chunk as ``forward_chunk_by_chunk`` (alone and as rows at different cache lengths of one
batch), the resumable CTC prefix beam, and the engine's three streaming decodes token for
token."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.conftest import AUDIO_DIR, FIXTURES_DIR

CAUSAL = FIXTURES_DIR / "wenet-u2pp-tiny-causal"
FULL = FIXTURES_DIR / "wenet-u2pp-tiny"  # non-causal conv module, dynamic-chunk trained
CLIP = AUDIO_DIR / "sense_and_sensibility_01_austen_64kb-0870.wav"
SETTINGS = [(4, -1), (4, 2), (8, 1), (16, -1)]  # WeNet (decoding_chunk_size, num_decoding_left_chunks)
FRAME_SHIFT_S = 0.01


@pytest.fixture(scope="module")
def loaded():
    if not (CAUSAL / "train.yaml").is_file() or not CLIP.is_file():
        pytest.skip(f"WeNet fixture not found at {CAUSAL}")
    import oasr

    return oasr.load_pretrained(CAUSAL)


@pytest.fixture(scope="module")
def reference(loaded) -> dict[str, np.ndarray]:
    out = {}
    for name in ("reference.npz", "reference_streaming.npz"):
        with np.load(CAUSAL / name) as z:
            out.update({k: z[k] for k in z.files})
    return out


@pytest.fixture(scope="module")
def expected(loaded) -> dict:
    return json.loads((CAUSAL / "expected.json").read_text(encoding="utf-8"))


def _runtime(model, chunk: int, left: int, max_streams: int = 1, **kw):
    from oasr.engine.streaming.runtime import build_runtime

    return build_runtime(
        model,
        chunk_ms=chunk * 40,
        left_chunks=None if left < 0 else left,
        max_streams=max_streams,
        feature_shift_s=FRAME_SHIFT_S,
        max_stream_frames=2048,
        **kw,
    )


def _windows(plan, n_frames: int) -> list[tuple[int, int]]:
    """(start, valid frames) of each chunk, as WeNet's ``forward_chunk_by_chunk`` cuts them."""
    context = plan.min_final_frames
    return [
        (cur, min(plan.window_frames, n_frames - cur)) for cur in range(0, n_frames - context + 1, plan.stride_frames)
    ]


def _stream_alone(runtime, fbank: torch.Tensor) -> torch.Tensor:
    """One stream through the paged runtime, chunk by chunk. -> (T', D)"""
    plan = runtime.plan
    slot = runtime.admit()
    outs = []
    with torch.inference_mode():
        for start, valid in _windows(plan, fbank.shape[0]):
            window = torch.full((plan.window_frames, fbank.shape[1]), plan.pad_value)
            window[:valid] = fbank[start : start + valid]
            assert runtime.reserve([slot]) == []
            out, lens = runtime.encode([slot], window[None], torch.tensor([valid]), [valid < plan.window_frames])
            outs.append(out[0, : int(lens[0])])
    runtime.release(slot)
    return torch.cat(outs)


@pytest.mark.parametrize(("chunk", "left"), SETTINGS)
def test_masked_offline_forward_reproduces_wenet(loaded, reference, chunk, left):
    fbank = torch.from_numpy(reference["fbank"])
    with torch.inference_mode():
        enc, lens = loaded.model.encode_offline(fbank[None], torch.tensor([fbank.shape[0]]), chunk, left)
    want = reference[f"encoder_out_chunk{chunk}_left{left}_masked"]
    assert int(lens[0]) == want.shape[0]
    assert np.abs(enc[0].numpy() - want).max() <= 1e-5


@pytest.mark.parametrize(("chunk", "left"), SETTINGS)
def test_paged_runtime_reproduces_wenet_forward_chunk_by_chunk(loaded, reference, chunk, left):
    runtime = _runtime(loaded.model, chunk, left)
    assert runtime.kind == "paged" and runtime.plan.window_frames == (chunk - 1) * 4 + 7
    got = _stream_alone(runtime, torch.from_numpy(reference["fbank"]))
    want = reference[f"encoder_out_chunk{chunk}_left{left}_cached"]
    assert got.shape == want.shape
    assert np.abs(got.numpy() - want).max() <= 1e-5


@pytest.mark.parametrize("block_size", [3, 64])
def test_pool_block_size_does_not_change_the_output(loaded, reference, block_size):
    """Blocks smaller than a chunk (a chunk's K/V spans blocks, history freed block by block)
    and larger than the history window give WeNet's output alike."""
    runtime = _runtime(loaded.model, 4, 2, block_size=block_size)
    got = _stream_alone(runtime, torch.from_numpy(reference["fbank"]))
    assert np.abs(got.numpy() - reference["encoder_out_chunk4_left2_cached"]).max() <= 1e-5


@pytest.mark.parametrize(("chunk", "left", "unwritten"), [(4, -1, 0.0), (4, 2, 0.0), (4, -1, float("nan"))])
def test_streams_at_different_cache_lengths_share_a_batch(loaded, reference, chunk, left, unwritten):
    """Three streams of different lengths joining at different steps (so one batch holds
    rows at different cache lengths, and short final windows beside full ones) each get
    what they get alone. The pool is allocated unwritten (its pages commit as streams fill
    blocks): NaN in it before any stream writes (what an allocator may hand over) changes
    nothing."""
    fbank = torch.from_numpy(reference["fbank"])
    clips = [fbank, fbank[37:530], fbank[200:433]]  # 708, 493 and 233 frames: different final windows
    joins = [0, 3, 7]  # the step each stream starts at
    alone = [_stream_alone(_runtime(loaded.model, chunk, left), c) for c in clips]

    runtime = _runtime(loaded.model, chunk, left, max_streams=3)
    runtime.k.fill_(unwritten)
    runtime.v.fill_(unwritten)
    plan = runtime.plan
    cuts = [_windows(plan, c.shape[0]) for c in clips]
    slots: dict[int, int] = {}
    outs: list[list[torch.Tensor]] = [[] for _ in clips]
    step = 0
    with torch.inference_mode():
        while any(len(o) < len(c) for o, c in zip(outs, cuts)):
            rows = [i for i in range(len(clips)) if joins[i] <= step and len(outs[i]) < len(cuts[i])]
            for i in rows:
                if i not in slots:
                    slots[i] = runtime.admit()
            feats = torch.full((len(rows), plan.window_frames, fbank.shape[1]), plan.pad_value)
            valid = []
            for r, i in enumerate(rows):
                start, n = cuts[i][len(outs[i])]
                feats[r, :n] = clips[i][start : start + n]
                valid.append(n)
            assert runtime.reserve([slots[i] for i in rows]) == []
            out, lens = runtime.encode(
                [slots[i] for i in rows], feats, torch.tensor(valid), [n < plan.window_frames for n in valid]
            )
            for r, i in enumerate(rows):
                outs[i].append(out[r, : int(lens[r])])
            step += 1
    for i, want in enumerate(alone):
        got = torch.cat(outs[i])
        assert got.shape == want.shape
        assert (got - want).abs().max() <= 1e-5, i


@pytest.mark.parametrize("path", [CAUSAL, FULL], ids=["causal", "non_causal"])
def test_one_chunk_over_the_whole_clip_is_the_full_context_forward(path, reference):
    """A chunk as long as the clip sees all of it, so the paged forward is the offline
    full-context one (the non-causal fixture checks the chunk-local convolution path)."""
    if not (path / "train.yaml").is_file():
        pytest.skip(f"WeNet fixture not found at {path}")
    import oasr

    model = oasr.load_pretrained(path).model
    fbank = torch.from_numpy(reference["fbank"])
    n_out = (fbank.shape[0] - 7) // 4 + 1
    got = _stream_alone(_runtime(model, n_out, -1), fbank)
    with torch.inference_mode():
        want, _ = model.encode_offline(fbank[None], torch.tensor([fbank.shape[0]]))
    assert got.shape == want[0].shape
    assert (got - want[0]).abs().max() <= 1e-5


def test_prefix_beam_resumed_over_chunks_is_the_search_over_their_concatenation(reference):
    from oasr.engine.decode.ctc.search import CtcPrefixBeam, ctc_prefix_beam_search

    log_probs = torch.from_numpy(reference["ctc_log_probs"])
    whole = ctc_prefix_beam_search(log_probs, 4, 0, skip_ids=(63,))
    rng = np.random.default_rng(0)
    for _ in range(3):
        cuts = np.sort(rng.choice(np.arange(1, log_probs.shape[0]), size=9, replace=False))
        beam = CtcPrefixBeam(4, 0, skip_ids=(63,))
        for piece in torch.tensor_split(log_probs, cuts.tolist()):
            beam.feed(piece)
        beam.feed(log_probs[:0])  # an empty chunk changes nothing
        assert beam.frames == log_probs.shape[0]
        assert beam.nbest() == whole  # tokens, spike frames and scores, bit for bit
        assert [h.ctc_score for h in beam.nbest()] == [h.ctc_score for h in whole]


def test_engine_features_match_wenet_fbank(loaded, reference):
    from oasr.audio import load_audio
    from oasr.audio.frontends import build_frontend
    from oasr.audio.streaming import FeatureStream

    wav = load_audio(CLIP)
    features = FeatureStream(build_frontend(loaded.feature_spec))
    pieces = [features.push(wav[i : i + 1234]) for i in range(0, len(wav), 1234)]
    got = torch.cat([*pieces, features.finish()]).double().numpy()
    want = reference["fbank"].astype(np.float64)
    assert got.shape == want.shape
    diff = np.abs(got - want)
    assert diff.max() <= 1e-3 and np.median(diff) <= 1e-5  # the offline front end's tolerance to WeNet


_METHODS = {
    "ctc_greedy_search": ("ctc", dict(beam_size=1)),
    "ctc_prefix_beam_search": ("ctc", dict(beam_size=4)),
    "attention_rescoring": ("ctc_aed_rescoring", dict(beam_size=4, ctc_weight=0.3, reverse_weight=0.3)),
}


@pytest.mark.parametrize(("chunk", "left"), SETTINGS)
@pytest.mark.parametrize("method", list(_METHODS))
def test_engine_stream_reproduces_wenet_streaming_decodes(loaded, expected, chunk, left, method):
    from oasr.audio import load_audio
    from oasr.engine import ASREngine

    decode_type, options = _METHODS[method]
    engine = ASREngine(
        str(CAUSAL),
        stream_chunk_ms=chunk * 40,
        stream_left_chunks=None if left < 0 else left,
        decode_type=decode_type,
        max_streams=2,
    )
    wav = load_audio(CLIP)
    stream = engine.open_stream(**options)
    events = []
    rng = np.random.default_rng(chunk * 10 + left)
    i = 0
    while i < len(wav):  # uneven pieces
        n = int(rng.integers(50, 6000))
        events += stream.feed(wav[i : i + n])
        i += n
    events += stream.finish()
    assert events[-1].type == "done"
    finals = [e for e in events if e.type == "final"]
    want = expected["streaming"][f"chunk{chunk}_left{left}_cached"][method]
    assert [t for e in finals for t in e.tokens] == want
    assert "".join(e.text for e in finals) == expected["text"][f"chunk{chunk}_left{left}_cached_{method}"]


def test_stream_refuses_hotwords(loaded):
    from oasr.engine import ASREngine

    engine = ASREngine(str(CAUSAL), stream_chunk_ms=160, max_streams=1)
    with pytest.raises(ValueError, match="hotwords"):
        engine.open_stream(beam_size=4, hotwords="elinor")


def test_rescoring_search_rescores_each_segment_over_its_own_encoder_output(loaded, reference, expected):
    """Two streams advanced together in uneven, padded chunks: each segment's result is the
    offline prefix beam + attention rescoring over that segment's encoder output alone, and
    a reset (an endpoint) starts the next segment afresh."""
    from oasr.engine.decode.ctc.rescoring import attention_rescoring
    from oasr.engine.decode.ctc.search import ctc_prefix_beam_search
    from oasr.engine.streaming.ctc import CtcRescoringStreamSearch

    model = loaded.model
    params = dict(loaded.decoding_spec.params)
    search = CtcRescoringStreamSearch(model, 0, frozenset({63}), params)
    options = SimpleNamespace(beam_size=4, ctc_weight=None, reverse_weight=None, hotwords=None)  # checkpoint weights
    enc = torch.from_numpy(reference["encoder_out_chunk8_left1_cached"])
    segments = [enc, enc[40:150]]  # stream 0, and stream 1's first segment
    second = enc[100:]  # stream 1's segment after a reset

    def offline(e: torch.Tensor) -> list[int]:
        with torch.inference_mode():
            nbest = ctc_prefix_beam_search(model.ctc_log_probs(e[None])[0], 4, 0, skip_ids=(63,))
            return list(attention_rescoring(model.decoder, e[None], e.shape[0], nbest, 0.3, 0.3).tokens)

    states = [search.new_state(options), search.new_state(options)]
    pos = [0, 0]
    with torch.inference_mode():
        while pos[0] < segments[0].shape[0] or pos[1] < segments[1].shape[0]:
            rows = [i for i in (0, 1) if pos[i] < segments[i].shape[0]]
            takes = [min(8 - i * 3, segments[i].shape[0] - pos[i]) for i in rows]  # chunks of 8 and 5
            batch = torch.zeros(len(rows), 8, enc.shape[1])
            for r, (i, n) in enumerate(zip(rows, takes)):
                batch[r, :n] = segments[i][pos[i] : pos[i] + n]
                pos[i] += n
            search.advance([states[i] for i in rows], batch, torch.tensor(takes))
        assert search.frames(states[0]) == enc.shape[0]
        assert search.finalize(states[0]).tokens == offline(enc)
        assert search.finalize(states[0]).tokens == expected["streaming"]["chunk8_left1_cached"]["attention_rescoring"]
        assert search.finalize(states[1]).tokens == offline(segments[1])
        search.reset(states[1])
        assert search.frames(states[1]) == 0 and search.finalize(states[1]).tokens == []
        for i in range(0, second.shape[0], 6):
            piece = second[i : i + 6]
            search.advance([states[1]], piece[None], torch.tensor([piece.shape[0]]))
        assert search.finalize(states[1]).tokens == offline(second)


def test_greedy_and_beam_streams_advance_in_one_batch(loaded, reference, expected):
    """A greedy and a beam-4 stream share each chunk's CTC head call and get their own results."""
    from oasr.engine.streaming.ctc import CtcStreamSearch

    search = CtcStreamSearch(loaded.model, 0, frozenset({63}), {})
    enc = torch.from_numpy(reference["encoder_out_chunk4_left2_cached"])
    states = [search.new_state(SimpleNamespace(beam_size=b, hotwords=None)) for b in (1, 4)]
    with torch.inference_mode():
        for i in range(0, enc.shape[0], 4):
            piece = enc[i : i + 4]
            search.advance(states, torch.stack([piece, piece]), torch.tensor([piece.shape[0]] * 2))
    want = expected["streaming"]["chunk4_left2_cached"]
    assert search.finalize(states[0]).tokens == want["ctc_greedy_search"]
    assert search.finalize(states[1]).tokens == want["ctc_prefix_beam_search"]
    assert search.frames(states[0]) == search.frames(states[1]) == enc.shape[0]
