"""Greedy decoding: oasr against transformers' ``generate`` on the tiny reference.

Two levels, because oasr's engine follows faster-whisper (CTranslate2) where
transformers' ``generate`` differs:

* **model level** -- transformers' own input features (``WhisperFeatureExtractor``:
  the audio is zero-padded to 30 s *before* the log-mel) go to both sides; oasr runs
  a greedy loop written here over its model surface (``encode_offline``, ``prefill``,
  ``step``, ``select``) with its logit filters (``apply_filters``) configured from the
  checkpoint's generation config: the same suppress / begin-suppress lists and
  ``max_initial_timestamp_index``. Tokens must be identical.
* **engine level** -- ``ASREngine.transcribe`` end to end. The engine computes
  faster-whisper's features: the log-mel of the audio alone (plus 160 samples), sliced
  per window and zero-padded *in feature space*, so its windows differ from
  ``WhisperFeatureExtractor``'s in the frames at and after the end of speech (log-mel
  of silence is ``(max - 8 + 4) / 4``, not 0). transformers is therefore given the
  engine's window features. The rules coincide with faster-whisper's under these
  options: greedy at temperature 0 without fallback (every threshold off), no previous
  text, ``suppress_tokens=[-1]`` (which expands to exactly the generation config's
  ``suppress_tokens``), ``suppress_blank`` (= ``begin_suppress_tokens``) and
  ``max_initial_timestamp=1.0`` (= index 50). Every window the engine decodes is
  compared with one ``generate`` call on the same features.

  What legitimately differs and is not compared: long-form seeking. For clips under
  30 s, transformers decodes the whole padded 3000-frame input and, with timestamps,
  keeps seeking inside the padding; faster-whisper stops at the end of the audio
  content. Hence ``force_unique_generate_call=True`` (one decode per window) on the
  transformers side, and the engine's segments are checked against faster-whisper's
  split rule applied to its own (transformers-verified) window tokens. Also the budget:
  transformers may generate up to 448 positions, faster-whisper up to 224 tokens; the
  reference's decodes end long before either.

  Inputs longer than 30 s are compared window by window the same way (each window's
  features and its own ``generate`` call), as is language detection.

  The engine's windows are also decoded by CTranslate2's own runtime (what
  faster-whisper runs) on the converted reference: the same tokens again.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from tests.models.whisper import _reference as ref

MODES = [
    pytest.param("en", "transcribe", False, id="en-transcribe"),
    pytest.param("de", "translate", False, id="de-translate"),
    pytest.param("en", "transcribe", True, id="en-timestamps"),
]


def _hf_lists(hf_model):
    gc = hf_model.generation_config
    return list(gc.suppress_tokens), list(gc.begin_suppress_tokens)


def _check_lengths(seqs):
    lens = [len(s) for s in seqs]
    assert all(5 <= n <= 40 for n in lens), f"decode lengths {lens}: the eot bias of the reference is off"
    return lens


# ---------------------------------------------------------------------------
# Model level


@pytest.mark.parametrize("batch", [1, 4], ids=["b1", "b4"])
@pytest.mark.parametrize("language,task,timestamps", MODES)
def test_model_greedy_matches_generate(oasr_hf, hf_model, hf_features, batch, language, task, timestamps):
    feats = hf_features[:batch]
    expected = ref.hf_greedy(hf_model, feats, language, task, timestamps)
    suppress, begin = _hf_lists(hf_model)
    got = ref.oasr_greedy(
        oasr_hf.model,
        feats,
        ref.hf_prompt(language, task, timestamps),
        suppress=suppress,
        begin_suppress=begin,
        timestamps=timestamps,
    )
    _check_lengths(expected)
    ref.assert_same_tokens(got, expected, f"model greedy vs generate, {language}-{task}-ts{int(timestamps)}-b{batch}")
    if timestamps:
        assert all(s[0] >= ref.TIMESTAMP_BEGIN for s in got), "the first token must be a timestamp"
        assert any(t >= ref.TIMESTAMP_BEGIN for s in got for t in s[1:])


# ---------------------------------------------------------------------------
# Engine level


def _engine_mel(audio):
    """faster-whisper's features of a whole input, computed here independently of the
    engine: the log-mel of the audio + 160 zero samples; (mel, content frames)."""
    from oasr.audio import log_mel_spectrogram

    mel = log_mel_spectrogram(torch.from_numpy(audio), ref.N_MELS, padding=160)
    return mel, mel.shape[-1] - 1


def _window(mel, start, size):
    """Frames [start, start + size) zero-padded *in feature space* to 3000."""
    return torch.nn.functional.pad(mel[:, start : start + size], (0, 3000 - size))


@pytest.fixture(scope="module")
def engines(oasr_hf):
    """``max_batch_size -> (engine, record)``, built on first use, with spies that change
    no behaviour: the raw tokens of every finished decode task (the public output drops
    end-of-text and re-splits windows) and every encoder input. The engines share the
    loaded model and one record (tests run one at a time and clear it)."""
    import oasr

    record = {"windows": [], "features": []}
    model = oasr_hf.model
    encode = model.encode_offline

    def spy_encode(feats, *a, **k):
        record["features"].extend(feats.detach().clone())
        return encode(feats, *a, **k)

    model.encode_offline = spy_encode
    built = {}

    def get(max_batch_size):
        if max_batch_size not in built:
            eng = oasr.ASREngine(oasr_hf, max_batch_size=max_batch_size)
            task_done = eng.strategy._task_done

            def spy_task_done(task, events):
                tokens = list(task.search.result()[0])
                record["windows"].append((task.req.rid, task.req.window.seek, task.temperature, tokens))
                return task_done(task, events)

            eng.strategy._task_done = spy_task_done
            built[max_batch_size] = eng
        record["windows"].clear()
        record["features"].clear()
        return built[max_batch_size], record

    yield get
    del model.encode_offline


ENGINE_OPTIONS = dict(
    beam_size=1,
    temperature=0.0,
    condition_on_previous_text=False,
    compression_ratio_threshold=None,
    log_prob_threshold=None,
    no_speech_threshold=None,
    suppress_tokens=[-1],
    suppress_blank=True,
    max_initial_timestamp=1.0,
)


def test_engine_filter_lists_equal_generation_config(oasr_hf, hf_model):
    from oasr.models.whisper.tokenizer import WhisperTokenizer

    tok = WhisperTokenizer.from_tokenizer(oasr_hf.tokenizer)
    sp = tok.special
    expanded = set(tok.non_speech_tokens) | {sp.transcribe, sp.translate, sp.sot, sp.sot_prev, sp.sot_lm, sp.no_speech}
    suppress, begin = _hf_lists(hf_model)
    assert expanded == set(suppress)
    assert list(oasr_hf.decoding_spec.params["begin_suppress_tokens"]) == begin


_HF_CACHE: dict = {}


def _check_engine_run(eng, outs, record, audio, task, timestamps, hf_model, ct2_runtime, what):
    """Every window the engine decoded (raw tokens, from the spy) equals transformers'
    ``generate`` and CTranslate2's ``generate`` on the same window features, and the
    public segments are faster-whisper's split of those tokens, window after window."""
    index = {o.request_id: i for i, o in enumerate(outs)}
    windows = sorted((index[rid], seek, temp, toks) for rid, seek, temp, toks in record["windows"])
    assert all(temp == 0.0 for _, _, temp, _ in windows)
    assert sorted({i for i, *_ in windows}) == list(range(len(audio)))
    mels = [_engine_mel(a) for a in audio]
    sizes = [min(3000, mels[i][1] - seek) for i, seek, *_ in windows]
    feats = torch.stack([_window(mels[i][0], seek, size) for (i, seek, *_), size in zip(windows, sizes)])
    for f in feats:  # the engine encoded exactly these windows
        assert any(torch.equal(f, g) for g in record["features"])
    languages = [outs[i].language for i, *_ in windows]

    key = (tuple(languages), task, timestamps, hashlib.sha1(feats.numpy().tobytes()).hexdigest())
    if key not in _HF_CACHE:
        _HF_CACHE[key] = ref.hf_greedy(hf_model, feats, languages, task, timestamps)
    expected = _HF_CACHE[key]
    got = [toks for *_, toks in windows]
    _check_lengths(expected)
    ref.assert_same_tokens(got, expected, f"engine windows vs generate, {what}")
    # The engine's semantics are CTranslate2's: its own runtime agrees on the same windows.
    ct2 = ref.ct2_greedy(ct2_runtime, feats, [ref.hf_prompt(lang, task, timestamps) for lang in languages])
    ref.assert_same_tokens(got, ct2, f"engine windows vs CTranslate2, {what}")

    # The public output is faster-whisper's split of those (verified) window tokens.
    for i, out in enumerate(outs):
        mine = [(seek, toks, size) for (j, seek, _, toks), size in zip(windows, sizes) if j == i]
        segs, seek = [], 0
        for w_seek, toks, size in mine:
            assert w_seek == seek, "the engine decoded a window faster-whisper would not"
            split, seek = ref.split_window(toks, w_seek, size)
            segs += [s for s in split if s[0] != s[1] and eng.strategy.tok.decode(s[2]).strip()]
        assert seek >= mels[i][1], "the engine stopped before the end of the audio"
        assert [s.tokens for s in out.segments] == [s[2] for s in segs]
        times = [t for s in out.segments for t in (s.start, s.end)]
        assert times == pytest.approx([t for s in segs for t in s[:2]], abs=1e-6)
        assert out.task == task
    return windows


# (clips, engine max_batch_size): one clip; four clips in one batch; four clips through
# three slots, so the fourth joins a running batch (prefill + merge) as a slot frees.
LONG_CLIP = "moonshine_two_cities_16k.wav"  # 44 s: two or more windows
ENGINE_BATCHES = [pytest.param(1, 4, id="b1"), pytest.param(4, 4, id="b4"), pytest.param(4, 3, id="b4-join")]


@pytest.mark.parametrize("batch,max_batch_size", ENGINE_BATCHES)
@pytest.mark.parametrize("language,task,timestamps", MODES)
def test_engine_greedy_matches_generate(
    engines, hf_model, ct2_runtime, clips, batch, max_batch_size, language, task, timestamps
):
    eng, record = engines(max_batch_size)
    joins = eng.strategy.counters.joins_running
    audio = clips[:batch]
    outs = eng.transcribe(
        list(audio), language=language, task=task, without_timestamps=not timestamps, **ENGINE_OPTIONS
    )
    if max_batch_size < batch:
        assert eng.strategy.counters.joins_running > joins, "no request joined a running batch"
    assert all(o.language == language for o in outs)
    what = f"{language}-{task}-ts{int(timestamps)}-b{batch}-slots{max_batch_size}"
    windows = _check_engine_run(eng, outs, record, audio, task, timestamps, hf_model, ct2_runtime, what)
    assert len(windows) == batch  # under 30 s, the decodes seek past the end of the audio
    assert len(record["features"]) == batch


def test_engine_long_form_windows_match_generate(engines, hf_model, ct2_runtime, clips):
    """A 44-s input: the engine seeks window by window (by its timestamps, or by whole
    windows without them); every window is compared with ``generate`` on its features."""
    from oasr.audio import load_audio
    from tests.conftest import AUDIO_DIR

    path = AUDIO_DIR / LONG_CLIP
    if not path.is_file():
        pytest.skip(f"{path} not found")
    audio = [load_audio(str(path)), clips[2]]
    eng, record = engines(4)
    for timestamps in (True, False):
        record["windows"].clear()
        record["features"].clear()
        outs = eng.transcribe(audio, language="en", without_timestamps=not timestamps, **ENGINE_OPTIONS)
        windows = _check_engine_run(
            eng, outs, record, audio, "transcribe", timestamps, hf_model, ct2_runtime, f"long-form-ts{int(timestamps)}"
        )
        assert len([w for w in windows if w[0] == 0]) >= 2


def test_engine_language_detection_matches(engines, hf_model, ct2_runtime, clips):
    """Without a language: the engine detects it on the first 30 s (faster-whisper's
    features, which here keep the frame past the content), as transformers'
    ``detect_language`` and CTranslate2's ``detect_language`` do on those features; then
    every window decodes as ``generate`` does in the detected language."""
    import ctranslate2
    import numpy as np

    eng, record = engines(4)
    outs = eng.transcribe(list(clips), task="transcribe", without_timestamps=True, **ENGINE_OPTIONS)
    mels = [_engine_mel(a)[0] for a in clips]
    det = torch.stack([_window(m, 0, min(3000, m.shape[-1])) for m in mels])
    hf_langs = [ref.language_code(t) for t in hf_model.detect_language(input_features=det).tolist()]
    assert [o.language for o in outs] == hf_langs
    ct2 = ct2_runtime.detect_language(ctranslate2.StorageView.from_array(np.ascontiguousarray(det.numpy())))
    for out, row in zip(outs, ct2):
        theirs = {tok.strip("<|>"): p for tok, p in row}
        assert out.language == max(theirs, key=theirs.get)
        codes = sorted(theirs)
        ref.assert_parity(
            torch.tensor([out.language_probs[c] for c in codes]),
            torch.tensor([theirs[c] for c in codes]),
            f"language probabilities vs CTranslate2 ({out.request_id})",
        )
    # The detection windows were encoded besides the decode windows.
    record["features"] = [f for f in record["features"] if not any(torch.equal(f, d) for d in det)]
    _check_engine_run(eng, outs, record, clips, "transcribe", False, hf_model, ct2_runtime, "detected-language")
