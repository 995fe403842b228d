"""Causal Zipformer streaming against icefall's own streaming (the ``zipformer`` package) on a
tiny causal hybrid checkpoint (chunk 16, left context 128) loaded with
``architecture="transducer"``:

* encoder: the slot runtime and the stateful runtime give, window by window, what the package's
  ``StreamingEncoderWrapper`` (``get_init_states`` / ``streaming_forward``) gives, in float64,
  for windows cut as icefall's ``streaming_decode.py`` cuts them (2 * chunk + 13 frames at a
  stride of 2 * chunk, 13 + 30 LOG_EPS frames of tail, a short last window padded with LOG_EPS);
  four streams of different lengths sharing steps get what each gets alone;
* search: ``TransducerStreamSearch`` over chunks, four streams batched, equals the offline
  greedy / modified beam search over each stream's whole encoder output (tokens, frames, scores);
* engine: ``open_stream`` on a transducer fed audio in uneven pieces gives the tokens of the
  package's ``streaming_greedy_search`` / ``streaming_modified_beam_search`` (beam 4) run the
  icefall way, and four streams at once give what each gives alone.

icefall's recipe starts a greedy stream at ``[-1] * (context - 1) + [blank]`` and, in its
streaming modified beam search only, at ``[blank] * context``; oasr starts every search at the
first (its offline searches and icefall's offline ones do), so the reference beam stream is
started there too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import oasr
from oasr.engine.streaming.runtime import build_runtime
from oasr.engine.streaming.transducer import TransducerStreamSearch
from oasr.models.base import StreamingNotSupported
from oasr.models.transducer.search import greedy_search, modified_beam_search
from tests.models.zipformer.conftest import (
    _REFERENCES,
    Reference,
    build_reference,
    calibrate_blank_,
    features,  # noqa: F401 (fixture)
    save_icefall,
)

LOG_EPS = math.log(1e-10)
TAIL = 13 + 30  # icefall's DecodeStream pad_length + streaming_decode.py's tail_pad_len
FRAME_SHIFT_S = 0.01


@pytest.fixture(scope="module")
def causal(tmp_path_factory, features) -> Reference:  # noqa: F811 (the imported fixture)
    """The causal tiny hybrid (shared with the Zipformer tests' session cache)."""
    if True not in _REFERENCES:
        model = build_reference(True)
        calibrate_blank_(model, features[0])
        path = save_icefall(model, tmp_path_factory.mktemp("causal"))
        _REFERENCES[True] = Reference(path=path, model=model.double(), causal=True)
    return _REFERENCES[True]


@pytest.fixture(scope="module")
def ours(causal):
    loaded = oasr.load_pretrained(causal.path, architecture="transducer")
    assert loaded.report.ok
    return loaded.model.double().eval()


@pytest.fixture(scope="module")
def streams(features) -> list[torch.Tensor]:  # noqa: F811 (the imported fixture)
    """Four streams of different lengths (3.3 s, past the 128-frame left context; 2.9 s; 1.3 s; 0.7 s)."""
    return [*features, features[1][:70]]


def windows(feats: torch.Tensor, chunk: int) -> list[torch.Tensor]:
    """icefall's streaming_decode.py windows of one utterance. (T, F) -> [(2 chunk + 13, F)]"""
    x = torch.nn.functional.pad(feats, (0, 0, 0, TAIL), value=LOG_EPS)
    w = 2 * chunk + 13
    out = []
    for p in range(0, x.shape[0], 2 * chunk):
        win = x[p : p + w]
        out.append(torch.nn.functional.pad(win, (0, 0, 0, w - win.shape[0]), value=LOG_EPS))
    return out


_ICEFALL_CHUNKS: dict[tuple[int, int, int], list[torch.Tensor]] = {}


def icefall_encoder_chunks(causal: Reference, feats: torch.Tensor, chunk: int) -> list[torch.Tensor]:
    """The package's streaming encoder over one stream alone: each window's output (1, chunk / 2, D)
    (computed once per stream and chunk)."""
    key = (id(feats), feats.shape[0], chunk)
    if key not in _ICEFALL_CHUNKS:
        _ICEFALL_CHUNKS[key] = _icefall_encoder_chunks(causal, feats, chunk)
    return _ICEFALL_CHUNKS[key]


def _icefall_encoder_chunks(causal: Reference, feats: torch.Tensor, chunk: int) -> list[torch.Tensor]:
    from zipformer.modules.model import StreamingEncoderWrapper

    wrapper = StreamingEncoderWrapper(causal.model.encoder, causal.model.encoder_embed)
    wrapper.chunk_size = chunk
    states = [s.double() if s.is_floating_point() else s for s in wrapper.get_init_states(1)]
    outs = []
    with torch.no_grad():
        for win in windows(feats, chunk):
            out, _, states = wrapper(win[None], torch.tensor([win.shape[0]]), states)
            outs.append(out)
    return outs


def test_contract(ours, causal):
    enc = ours.encoder
    assert enc.streaming_kind == "slot" and not enc.streaming_left_chunks
    assert enc.streaming_chunk_size(None, FRAME_SHIFT_S) == 16
    assert enc.streaming_chunk_size(320, FRAME_SHIFT_S) == 16
    g = enc.streaming_geometry(16)
    assert (g.window_frames, g.stride_frames) == (45, 32)
    assert (enc.streaming_pad_value, enc.streaming_tail_frames, enc.streaming_min_final_frames) == (LOG_EPS, TAIL, 1)
    with pytest.raises(ValueError, match="multiple of 4"):
        enc.streaming_geometry(6)  # the stacks downsample by 1, 2, 4
    with pytest.raises(ValueError, match="left_chunks"):
        build_runtime(ours, chunk_ms=320, left_chunks=2, max_streams=1, feature_shift_s=FRAME_SHIFT_S)
    # The specs are icefall's states, in its order, each with its batch axis as the slot axis.
    from zipformer.modules.model import StreamingEncoderWrapper

    ref_states = StreamingEncoderWrapper(causal.model.encoder, causal.model.encoder_embed).get_init_states(3)
    specs = enc.streaming_state_specs
    assert len(specs) == len(ref_states)
    for spec, ref, mine in zip(specs, ref_states, enc.get_streaming_init_states(3), strict=True):
        assert ref.shape[spec.slot_axis] == 3 and tuple(mine.shape) == tuple(ref.shape), spec.name
    full = oasr.load_pretrained(_full_path(causal), architecture="transducer").model.encoder
    assert full.streaming_kind == "none" and full.streaming_state_specs == ()
    with pytest.raises(StreamingNotSupported):
        full.streaming_geometry(16)


def _full_path(causal: Reference):
    """A full-context save of the same architecture (the converter tells it from its convolutions)."""
    path = causal.path.parent / "full-context"
    if not (path / "pretrained.pt").exists():
        save_icefall(build_reference(False), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["slot", "stateful"])
@pytest.mark.parametrize("chunk", [16, 8])
def test_runtime_equals_icefall_streaming_chunk_by_chunk(ours, causal, streams, kind, chunk):
    """Each stream's windows through the runtime, the four streams batched (a stream leaves the
    batch when its windows run out), against the package's encoder over each stream alone."""
    runtime = build_runtime(
        ours, kind, chunk_ms=chunk * 20, left_chunks=None, max_streams=4, feature_shift_s=FRAME_SHIFT_S
    )
    assert runtime.kind == kind and runtime.plan.window_frames == 2 * chunk + 13
    wins = [windows(f, chunk) for f in streams]
    want = [icefall_encoder_chunks(causal, f, chunk) for f in streams]
    slots = [runtime.admit() for _ in streams]
    worst = 0.0
    with torch.inference_mode():
        for step in range(max(len(w) for w in wins)):
            rows = [i for i, w in enumerate(wins) if step < len(w)]
            feats = torch.stack([wins[i][step] for i in rows])
            lens = torch.full((len(rows),), feats.shape[1])
            out, out_lens = runtime.encode([slots[i] for i in rows], feats, lens, [False] * len(rows))
            assert out_lens.tolist() == [chunk // 2] * len(rows)
            for j, i in enumerate(rows):
                diff = float((out[j] - want[i][step][0]).abs().max())
                worst = max(worst, diff)
                assert diff < 1e-9, (kind, chunk, i, step, diff)
    print(f"{kind} chunk {chunk}: max-abs {worst:.2e} over {sum(len(w) for w in wins)} windows")
    # An endpoint reset rewinds the stream: its next window is a first window again.
    runtime.reset(slots[0])
    with torch.inference_mode():
        out, _ = runtime.encode([slots[0]], wins[0][0][None], torch.tensor([wins[0][0].shape[0]]), [False])
    assert float((out[0] - want[0][0][0]).abs().max()) < 1e-9


def _search_options(beam: int, max_sym: int | None = None):
    from oasr.engine.decode.transducer.strategy import TransducerOptions

    return TransducerOptions(beam_size=beam, max_sym_per_frame=max_sym)


@pytest.mark.parametrize(("beam", "max_sym"), [(1, 1), (1, 3), (4, None)])
def test_search_over_chunks_equals_search_over_the_whole(ours, beam, max_sym):
    """Four streams of 37, 20, 9 and 0 frames in chunks of 8, batched: each gets the offline
    search of its whole encoder output (tokens, frames, score)."""
    torch.manual_seed(1)
    lengths = [37, 20, 9, 0]
    enc = [torch.randn(n, ours.encoder.output_size, dtype=torch.float64) * 3 for n in lengths]
    search = TransducerStreamSearch(ours, ours.blank_id, frozenset(), {})
    states = [search.new_state(_search_options(beam, max_sym)) for _ in lengths]
    chunk = 8
    for at in range(0, max(lengths), chunk):
        rows = [i for i, n in enumerate(lengths) if at < n or (at == 0 and n == 0)]
        part = [enc[i][at : at + chunk] for i in rows]
        batch = torch.zeros(len(rows), chunk, enc[0].shape[1], dtype=torch.float64)
        for j, p in enumerate(part):
            batch[j, : p.shape[0]] = p
        search.advance([states[i] for i in rows], batch, torch.tensor([p.shape[0] for p in part]))
    for i, n in enumerate(lengths):
        whole = enc[i][None] if n else torch.zeros(1, 1, enc[0].shape[1], dtype=torch.float64)
        if beam == 1:
            want = greedy_search(ours, whole, torch.tensor([n]), max_sym_per_frame=max_sym)
        else:
            want = modified_beam_search(ours, whole, torch.tensor([n]), beam=beam)
        got = search.finalize(states[i])
        assert got.tokens == want.tokens[0] and got.frames == want.frames[0], (i, got, want)
        assert got.score == pytest.approx(want.scores[0], abs=1e-9)
        assert search.frames(states[i]) == n
        last = got.frames[-1] if got.frames else -1
        assert search.trailing_blanks(states[i]) == n - 1 - last
    assert any(search.partial(st).tokens for st in states)
    # After an endpoint the segment starts over: the same frames give the same result again.
    first = search.finalize(states[0])
    search.reset(states[0])
    assert search.frames(states[0]) == 0 and not search.partial(states[0]).tokens
    search.advance([states[0]], enc[0][None], torch.tensor([lengths[0]]))
    again = search.finalize(states[0])
    assert (again.tokens, again.frames) == (first.tokens, first.frames)


def icefall_streaming_tokens(causal: Reference, feats: torch.Tensor, beam: int, chunk: int = 16) -> list[int]:
    """The package's streaming decode of one utterance, as icefall's streaming_decode.py runs it."""
    from zipformer.decode.search import streaming_greedy_search, streaming_modified_beam_search
    from zipformer.decode.stream import DecodeStream, Hypothesis, HypothesisList
    from zipformer.modules.model import StreamingEncoderWrapper
    from zipformer.utils import AttributeDict

    model = causal.model
    model.device = torch.device("cpu")
    context, blank = model.decoder.context_size, model.decoder.blank_id
    params = AttributeDict(
        blank_id=blank,
        context_size=context,
        decoding_method="greedy_search" if beam == 1 else "modified_beam_search",
    )
    wrapper = StreamingEncoderWrapper(model.encoder, model.encoder_embed)
    wrapper.chunk_size = chunk
    states = [s.double() if s.is_floating_point() else s for s in wrapper.get_init_states(1)]
    stream = DecodeStream(params, "x", states, pad_length=wrapper.pad_length)
    start = [-1] * (context - 1) + [blank]
    if beam == 1:
        stream.hyp = list(start)
    else:
        stream.hyps = HypothesisList()
        stream.hyps.add(Hypothesis(ys=list(start), log_prob=torch.zeros(1, dtype=torch.float64)))
    stream.set_features(torch.nn.functional.pad(feats, (0, 0, 0, 30), value=LOG_EPS))  # + its own 13
    window = 2 * chunk + wrapper.pad_length
    with torch.no_grad():
        while not stream.done:
            win, _ = stream.get_feature_frames(2 * chunk)
            win = torch.nn.functional.pad(win, (0, 0, 0, window - win.shape[0]), value=LOG_EPS)
            enc, _, stream.states = wrapper(win[None], torch.tensor([window]), stream.states)
            enc = model.joiner.encoder_proj(enc)
            if beam == 1:
                streaming_greedy_search(model, enc, [stream])
            else:
                streaming_modified_beam_search(model, enc, [stream], num_active_paths=beam)
    return stream.decoding_result()


@pytest.fixture(scope="module")
def engine(causal):
    return oasr.ASREngine(str(causal.path), architecture="transducer", dtype="float32", max_streams=4)


def _pieces(audio: np.ndarray, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    cuts = np.cumsum(rng.integers(50, 6000, size=len(audio) // 50 + 1))
    return [p for p in np.split(audio, cuts[cuts < len(audio)]) if p.size]


def _stream_tokens(engine, audio_list: list[np.ndarray], beam: int) -> list[list[int]]:
    """Open one stream per audio, feed them interleaved in uneven pieces, finish: each one's tokens."""
    opened = [engine.open_stream(beam_size=beam) for _ in audio_list]
    pieces = [_pieces(a, seed) for seed, a in enumerate(audio_list)]
    for step in range(max(len(p) for p in pieces)):
        for stream, p in zip(opened, pieces):
            if step < len(p):
                stream.feed(p[step])
    for stream in opened:
        stream.finish()
    assert all(s.done and s.output is not None for s in opened)
    return [[t for seg in s.output.segments for t in seg.tokens] for s in opened]


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_open_stream_equals_icefall_streaming_decode(engine, causal, audio_dir, beam):
    from oasr.audio import load_audio
    from oasr.audio.fbank import KaldiFbank
    from oasr.models.base import FeatureSpec
    from oasr.models.zipformer.convert import FBANK_PARAMS
    from tests.models.zipformer.conftest import CLIPS

    fbank = KaldiFbank.from_spec(FeatureSpec("kaldi_fbank", 16000, FBANK_PARAMS))
    audio = [load_audio(str(audio_dir / c)) for c in CLIPS]
    audio.append(audio[1][: 16000 * 7 // 10])  # a fourth, short stream
    skip = engine._streaming().skip_ids
    together = _stream_tokens(engine, audio, beam)
    for i, a in enumerate(audio):
        want = [
            t for t in icefall_streaming_tokens(causal, fbank.compute(a, dtype=torch.float64), beam) if t not in skip
        ]
        assert want, "the reference decodes nothing: the check would be empty"
        assert together[i] == want, (beam, i)
        assert _stream_tokens(engine, [a], beam)[0] == together[i]  # alone == in a batch of four


def test_ctc_model_streams_the_shared_encoder(causal, streams, audio_dir):
    """The same causal checkpoint loaded as the icefall CTC model streams too: its stream's
    tokens are the greedy CTC path of the package's streaming encoder output through its CTC head."""
    from oasr.audio import load_audio
    from tests.models.zipformer.conftest import CLIPS

    engine = oasr.ASREngine(str(causal.path), dtype="float32")
    assert engine.strategy.decode_type.value == "ctc"
    audio = load_audio(str(audio_dir / CLIPS[0]))
    got = _stream_tokens(engine, [audio], beam=1)[0]
    with torch.no_grad():
        enc = torch.cat(icefall_encoder_chunks(causal, streams[0], 16), dim=1)
        path = causal.model.ctc_output(enc)[0].argmax(dim=-1).tolist()
    skip = engine._streaming().skip_ids
    want = [t for j, t in enumerate(path) if t != 0 and (j == 0 or t != path[j - 1]) and t not in skip]
    assert want and got == want


@pytest.mark.parametrize("name", ["nemotron", "parakeet_transducer"])
def test_search_is_generic_over_recurrent_predictors_and_tdt(name):
    """The same search over an LSTM predictor (RNN-T, and TDT whose durations can jump past a
    chunk's end): chunks of 5 frames, three streams batched, equal NeMo's greedy decode over the
    whole output (tokens, frames)."""
    from oasr.models.nemotron.search import nemo_transducer_search
    from oasr.models.registry import get_model_info
    from tests.models.tiny_configs import TINY_CONFIGS

    torch.manual_seed(0)
    model = get_model_info(name).model_class().from_config(TINY_CONFIGS[name]()).double().eval()
    with torch.no_grad():  # sharpen the random joint so that it emits on some frames, not all
        model.joiner.head.weight.mul_(8.0)
    lengths = [23, 11, 6]
    enc = [torch.randn(n, model.encoder.output_size, dtype=torch.float64) for n in lengths]
    search = TransducerStreamSearch(model, model.blank_id, frozenset(), {})
    states = [search.new_state(_search_options(1)) for _ in lengths]
    for at in range(0, max(lengths), 5):
        rows = [i for i, n in enumerate(lengths) if at < n]
        part = [enc[i][at : at + 5] for i in rows]
        batch = torch.zeros(len(rows), 5, enc[0].shape[1], dtype=torch.float64)
        for j, p in enumerate(part):
            batch[j, : p.shape[0]] = p
        search.advance([states[i] for i in rows], batch, torch.tensor([p.shape[0] for p in part]))
    emitted = 0
    for i, n in enumerate(lengths):
        want = nemo_transducer_search(
            model, enc[i][None], torch.tensor([n]), beam_size=1, max_sym_per_frame=None, blank_penalty=0.0
        )
        got = search.finalize(states[i])
        assert got.tokens == want.tokens[0] and got.frames == want.frames[0], (name, i)
        emitted += len(got.tokens)
    assert emitted
    with pytest.raises(ValueError, match="beam_size=4"):
        search.new_state(_search_options(4))  # TDT, or a recurrent predictor: greedy only
