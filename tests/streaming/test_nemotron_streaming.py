"""Nemotron 3.5 ASR cache-aware streaming over the paged runtime, against transformers.

The tiny ``Nemotron3_5AsrForRNNT`` of the parity tests (float64, lookahead 3: chunks of 4 output
frames = 32 feature frames, a trained window of 12 frames) is saved in its Hugging Face layout
and loaded through oasr's loader. transformers runs its own cache-aware streaming: the encoder
called chunk by chunk with its K/V and convolution caches (``use_cache=True``), the first chunk
``1 + 8 * lookahead`` mel frames, then ``8 * (lookahead + 1)``, the last one zero-padded, which is
also what its streaming ``generate`` takes from a generator of mel chunks.

* each chunk's encoder output equals transformers' chunk for chunk, valid frames: the conformer
  stack to 1e-12 (float64 rounding), and through the prompt projector and the joint's encoder
  projection to the offline parity test's 1e-6 (the folded prompt table is float32);
* three streams at different positions with different prompts, batched in one call per step,
  equal each stream alone; a chunk of two attention chunks gives the same frames as two chunks;
* an endpoint reset rewinds the encoder state but keeps the stream's prompt;
* chunk sizes that are not whole attention chunks, and ``left_chunks``, are refused;
* tokens through ``ASREngine.open_stream`` fed uneven pieces equal transformers' streaming
  ``generate``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import oasr
from oasr.engine.streaming.runtime import build_runtime
from tests.models.nemotron.conftest import (
    DEFAULT_PROMPT,
    TINY_ENCODER,
    generated_labels,
    parity,
    save_nemotron_checkpoint,
)

LOOKAHEAD = TINY_ENCODER["default_num_lookahead_tokens"]
SUB = 8
WINDOW = SUB * (LOOKAHEAD + 1)  # feature frames per chunk
HEAD = SUB - 1  # the chunk grid starts this many frames before the audio
TOL_COS, TOL_ABS = 0.99999, 1e-6
CLIPS = ("speechbrain_spk1_snt1.wav", "sense_and_sensibility_01_austen_64kb-0890.wav")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return save_nemotron_checkpoint(tmp_path_factory.mktemp("nemotron_streaming_tiny"))


@pytest.fixture(scope="module")
def model(reference):
    loaded = oasr.load_pretrained(reference.path)
    assert loaded.report.ok and not loaded.report.dropped, loaded.report.summary()
    return loaded.model.double().eval()


@pytest.fixture(scope="module")
def features(reference, manifest):
    """transformers' mel frames (float64) of the clips, (T, F) each."""
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    out = []
    for name in CLIPS:
        fe = reference.feature_extractor(load_audio(by_name[name]), sampling_rate=16000, return_tensors="pt")
        out.append(fe.input_features[0, : int(fe.attention_mask.sum())].double())
    return out


def _runtime(model, max_streams: int = 3, chunk_ms: float | None = None):
    return build_runtime(
        model, chunk_ms=chunk_ms, left_chunks=None, max_streams=max_streams, feature_shift_s=0.01, block_size=4
    )


def _windows(feats: torch.Tensor, window: int = WINDOW) -> list[tuple[torch.Tensor, int]]:
    """The core's windows of one stream: its head frames, then the frames, cut every ``window``
    frames, the last one zero-padded; (window, real frames in it)."""
    buf = torch.cat([feats.new_zeros(HEAD, feats.shape[1]), feats])
    out = []
    for i in range(0, buf.shape[0], window):
        w = buf[i : i + window]
        out.append((torch.cat([w, w.new_zeros(window - w.shape[0], w.shape[1])]), w.shape[0]))
    return out


def _stream_alone(model, feats: torch.Tensor, prompt: int, chunk_ms: float | None = None) -> list[torch.Tensor]:
    """Each chunk's valid frames for one stream on a fresh runtime."""
    rt = _runtime(model, 1, chunk_ms)
    slot = rt.admit({"prompt_id": float(prompt)})
    out = []
    with torch.no_grad():
        for w, n in _windows(feats, rt.plan.window_frames):
            assert not rt.reserve([slot])
            enc, lens = rt.encode([slot], w[None], torch.tensor([n]), [n < rt.plan.window_frames])
            out.append(enc[0, : int(lens[0])])
    return out


def _transformers_chunks(feats: torch.Tensor) -> list[torch.Tensor]:
    """The mel chunks transformers' cache-aware streaming takes: 1 + 8 * lookahead frames, then
    8 * (lookahead + 1), the last zero-padded. (1, T, F) each."""
    first = 1 + SUB * LOOKAHEAD
    chunks = [feats[:first]]
    for i in range(first, feats.shape[0], WINDOW):
        c = feats[i : i + WINDOW]
        chunks.append(torch.cat([c, c.new_zeros(WINDOW - c.shape[0], c.shape[1])]))
    return [c[None] for c in chunks]


@pytest.mark.parametrize("clip, prompt", [(0, 2), (1, DEFAULT_PROMPT)])
def test_streamed_encoder_equals_transformers_chunk_by_chunk(reference, model, features, monkeypatch, clip, prompt):
    feats = features[clip]
    hf = reference.model
    cache = padding_cache = None
    theirs, theirs_encoder = [], []
    with torch.no_grad():
        for chunk in _transformers_chunks(feats):
            out = hf.get_audio_features(
                input_features=chunk,
                cache=cache,
                padding_cache=padding_cache,
                num_lookahead_tokens=LOOKAHEAD,
                use_cache=True,
                output_attention_mask=False,
                prompt_ids=torch.tensor([prompt]),
            )
            cache, padding_cache = out.cache, out.padding_cache
            theirs.append(out.pooler_output[0])
            theirs_encoder.append(out.last_hidden_state[0])
        ours = [model.joiner.project_encoder(x) for x in _stream_alone(model, feats, prompt)]
        # The conformer stack alone, before the prompt projector (whose prompt table oasr folds
        # from the float32 checkpoint at load: within a float32 rounding of transformers' concat).
        monkeypatch.setattr(model, "encode_chunk_paged", model.encoder.forward_chunk_paged)
        ours_encoder = _stream_alone(model, feats, prompt)
    for mine, ref in zip(ours_encoder, theirs_encoder, strict=True):
        torch.testing.assert_close(mine, ref[: mine.shape[0]], rtol=0, atol=1e-12)
    assert len(ours) == len(theirs) > 3
    assert sum(x.shape[0] for x in ours) == int(model.encoder.output_lengths(torch.tensor(feats.shape[0])))
    for k, (mine, ref) in enumerate(zip(ours, theirs, strict=True)):
        assert mine.shape[0] == ref.shape[0] or k == len(ours) - 1
        cos, err = parity(mine, ref[: mine.shape[0]])
        assert cos >= TOL_COS and err <= TOL_ABS, (k, cos, err)


def test_english_release_without_a_prompt_streams_as_transformers(tmp_path, reference, features):
    """``nemotron_asr_streaming`` (no prompt projector): no prompt state, no language taken."""
    from transformers import NemotronAsrStreamingConfig, NemotronAsrStreamingForRNNT, NemotronAsrStreamingProcessor

    config = NemotronAsrStreamingConfig(
        encoder_config={k: v for k, v in TINY_ENCODER.items() if k != "model_type"},
        vocab_size=reference.model.config.vocab_size,
        blank_token_id=reference.blank_id,
        pad_token_id=reference.tokenizer.pad_token_id,
        decoder_hidden_size=24,
    )
    torch.manual_seed(5)
    hf = NemotronAsrStreamingForRNNT(config).eval()
    hf.save_pretrained(tmp_path)
    NemotronAsrStreamingProcessor(
        feature_extractor=reference.feature_extractor, tokenizer=reference.tokenizer
    ).save_pretrained(tmp_path)
    english = oasr.load_pretrained(tmp_path).model.double().eval()
    hf = hf.double()
    assert [s.name for s in english.cache_spec.stream_states] == ["subsampling.0", "subsampling.1", "subsampling.2"]
    assert english.streaming_conditioning(type("Options", (), {"language": None})()) == {}
    # "en", its only language (the engine refuses any other), sets no prompt state either
    assert english.streaming_conditioning(type("Options", (), {"language": "en"})()) == {}
    engine = oasr.ASREngine(str(tmp_path), max_streams=1)
    engine.open_stream(sample_rate=16000, language="English").close()
    with pytest.raises(ValueError, match=r"'de' \(German\) is not a language of NemotronRnntModel; it has: en \("):
        engine.open_stream(sample_rate=16000, language="de")
    feats = features[0]
    rt = _runtime(english, 1)
    slot = rt.admit()
    cache = padding_cache = None
    with torch.no_grad():
        for (w, n), chunk in zip(_windows(feats), _transformers_chunks(feats), strict=True):
            out = hf.get_audio_features(
                input_features=chunk,
                cache=cache,
                padding_cache=padding_cache,
                num_lookahead_tokens=LOOKAHEAD,
                use_cache=True,
                output_attention_mask=False,
            )
            cache, padding_cache = out.cache, out.padding_cache
            assert not rt.reserve([slot])
            enc, lens = rt.encode([slot], w[None], torch.tensor([n]), [n < WINDOW])
            cos, err = parity(
                english.joiner.project_encoder(enc[0, : int(lens[0])]), out.pooler_output[0, : int(lens[0])]
            )
            assert cos >= TOL_COS and err <= TOL_ABS, (cos, err)


def test_three_streams_in_one_batch_equal_each_alone(model, features):
    streams = [(features[1], 0), (features[0], 2), (features[1][37:], 5)]
    alone = [_stream_alone(model, f, p) for f, p in streams]
    rt = _runtime(model)
    slots: list[int | None] = [None] * 3
    pending = [_windows(f) for f, _ in streams]
    got: list[list[torch.Tensor]] = [[] for _ in streams]
    step = 0
    with torch.no_grad():
        while any(pending):
            rows = []
            for i, (_, prompt) in enumerate(streams):
                if slots[i] is None and step >= i:  # streams join one step apart: rows at different positions
                    slots[i] = rt.admit({"prompt_id": float(prompt)})
                if slots[i] is not None and pending[i]:
                    rows.append(i)
            batch = [pending[i].pop(0) for i in rows]
            assert not rt.reserve([slots[i] for i in rows])
            enc, lens = rt.encode(
                [slots[i] for i in rows],
                torch.stack([w for w, _ in batch]),
                torch.tensor([n for _, n in batch]),
                [n < WINDOW for _, n in batch],
            )
            for row, i in enumerate(rows):
                got[i].append(enc[row, : int(lens[row])])
                if not pending[i]:
                    rt.release(slots[i])
            step += 1
    for i in range(3):
        assert len(got[i]) == len(alone[i])
        for a, b in zip(got[i], alone[i], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_a_chunk_of_two_attention_chunks_gives_the_same_frames(model, features):
    one = torch.cat(_stream_alone(model, features[0], 2))
    two = torch.cat(_stream_alone(model, features[0], 2, chunk_ms=2 * (LOOKAHEAD + 1) * 80))
    assert two.shape == one.shape
    torch.testing.assert_close(two, one, rtol=0, atol=1e-12)


def test_endpoint_reset_keeps_the_prompt_and_rewinds_the_audio(model, features):
    feats = features[1]
    cut = 3 * WINDOW - HEAD  # the frames of three chunks, then the reset
    rt = _runtime(model, 2)
    slot = rt.admit({"prompt_id": 5.0})
    with torch.no_grad():
        for w, n in _windows(feats[:cut])[:3]:
            assert not rt.reserve([slot])
            rt.encode([slot], w[None], torch.tensor([n]), [False])
        assert int(rt.cache_lens[slot]) == 3 * (LOOKAHEAD + 1)
        rt.reset(slot)
        assert int(rt.cache_lens[slot]) == 0 and int(rt.states.buffers["prompt_id"][slot]) == 5
        for spec in model.encoder.streaming_state_specs:
            assert not rt.states.buffers[spec.name][slot].any()
        after = []
        for w, n in _windows(feats[cut:]):
            assert not rt.reserve([slot])
            enc, lens = rt.encode([slot], w[None], torch.tensor([n]), [n < WINDOW])
            after.append(enc[0, : int(lens[0])])
    fresh = _stream_alone(model, feats[cut:], 5)
    other_prompt = _stream_alone(model, feats[cut:], 0)
    torch.testing.assert_close(torch.cat(after), torch.cat(fresh), rtol=0, atol=1e-12)
    assert (torch.cat(after) - torch.cat(other_prompt)).abs().max() > 1e-3
    # a stream that names no language starts from the checkpoint's default prompt
    assert int(rt.states.buffers["prompt_id"][rt.admit()]) == DEFAULT_PROMPT


def test_streaming_geometry_refusals(model):
    enc = model.encoder
    assert enc.streaming_chunk_size(None, 0.01) == LOOKAHEAD + 1
    assert enc.streaming_geometry(2 * (LOOKAHEAD + 1)).window_frames == 2 * WINDOW
    with pytest.raises(ValueError, match="whole number of its trained attention chunks"):
        _runtime(model, chunk_ms=160)  # 2 frames: half an attention chunk
    with pytest.raises(ValueError, match="whole number"):
        _runtime(model, chunk_ms=100)  # not a whole number of 80-ms frames
    with pytest.raises(ValueError, match="left_chunks is not taken"):
        build_runtime(model, chunk_ms=None, left_chunks=2, max_streams=1, feature_shift_s=0.01)
    with pytest.raises(ValueError, match="'xx' is not a language of this checkpoint"):
        model.streaming_conditioning(type("Options", (), {"language": "xx"})())
    assert model.streaming_conditioning(type("Options", (), {"language": "de"})()) == {"prompt_id": 2.0}


def _transformers_stream_features(fe, audio: np.ndarray) -> list[torch.Tensor]:
    """The mel chunks of transformers' feature extractor in its streaming mode: the first chunk
    centred, then each chunk's samples from ``n_fft // 2`` before its first frame, uncentred, the
    last one with ``is_last_audio_chunk`` and zero-padded to the chunk. (1, T, F) each."""
    hop, half = fe.hop_length, fe.n_fft // 2
    total = audio.size // hop
    end = 1 + SUB * LOOKAHEAD
    chunks = [fe(audio[: end * hop + half], sampling_rate=16000, return_tensors="pt").input_features[0, :end]]
    while end < total:
        start, end = end, end + WINDOW
        if end < total:
            piece = fe(
                audio[start * hop - half : (end - 1) * hop + half],
                sampling_rate=16000,
                center=False,
                return_tensors="pt",
            )
            chunks.append(piece.input_features[0])
        else:
            last = fe(
                audio[start * hop - half :],
                sampling_rate=16000,
                center=False,
                is_last_audio_chunk=True,
                return_tensors="pt",
            )
            c = last.input_features[0, : int(last.attention_mask.sum())]
            chunks.append(torch.cat([c, c.new_zeros(WINDOW - c.shape[0], c.shape[1])]))
    assert sum(c.shape[0] for c in chunks) >= total
    return [c[None] for c in chunks]


def _pieces(x: np.ndarray, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out, i = [], 0
    while i < x.size:
        n = int(rng.integers(1, 4000))
        out.append(x[i : i + n])
        i += n
    return out


@pytest.mark.parametrize("language, prompt", [("de", 2), (None, DEFAULT_PROMPT)])
def test_engine_stream_tokens_equal_transformers_streaming_generate(reference, manifest, language, prompt):
    from transformers import Nemotron3_5AsrForRNNT

    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    audio = load_audio(by_name[CLIPS[1]])
    engine = oasr.ASREngine(str(reference.path))
    stream = engine.open_stream(**({"language": language} if language else {}))
    for piece in _pieces(audio, 7):
        stream.feed(piece)
    events = stream.finish()
    assert events[-1].type == "done"
    mine = [t for seg in stream.output.segments for t in seg.tokens]

    hf = Nemotron3_5AsrForRNNT.from_pretrained(Path(reference.path)).eval()  # float32, as the engine
    chunks = _transformers_stream_features(reference.feature_extractor, audio)
    blank = reference.blank_id
    with torch.no_grad():
        out = hf.generate(
            input_features=(c for c in chunks),
            num_lookahead_tokens=LOOKAHEAD,
            decoder_start_token_id=blank,
            prompt_ids=torch.tensor([prompt]),
            max_new_tokens=audio.size // 160,  # symbols: blanks and labels, room for every frame's cap
        )
    n = int(hf.encoder._get_subsampling_output_length(torch.tensor([audio.size // 160]))[0])
    ((expected, _, _),) = generated_labels(out.sequences, out.durations, [n], blank)
    assert len(expected) > 10
    assert mine == expected
