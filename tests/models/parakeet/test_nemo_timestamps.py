"""Word and segment times of NeMo-saved Parakeet models equal NeMo's ``transcribe(..., timestamps=True)``.

The fixtures are ``nemo_reference``'s tiny release-shaped models (built by NeMo's classes, saved by
``save_to``) with a tokenizer trained on punctuated sentences, so that the vocabulary holds ``. , ! ?
:`` and NeMo's punctuation rules apply (CTC / TDT refinements, punctuation joined to the word before
it, segments closed at ``. ? !``); their output biases favour word starts and punctuation a little, so
that random weights emit many words and several segments. The RNN-T archive sets
``decoding.segment_gap_threshold`` (segments cut at gaps between words instead). oasr loads each
archive (``ASREngine("x.nemo")``), transcribes the repository's clips with ``word_timestamps=True``
and its words and segments must equal NeMo's exactly: text, start and end (NeMo's frame offsets, and
the seconds NeMo gives, to the millisecond oasr rounds every time to), through ``verbose_json`` too,
and the transcript equals NeMo's text. Skipped where ``nemo-toolkit`` is not installed.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import oasr
from oasr.engine.decode.nemo_times import best_path_run_starts, ctc_offsets, transducer_offsets
from oasr.formatting import verbose_json_dict

PUNCTUATED = (
    "and so, my fellow americans: ask not what your country can do for you.",
    "ask what you can do for your country!",
    "mister john dashwood had then leisure to consider how much there might be in his power?",
    "the quick brown fox jumps over the lazy dog.",
    "she sells sea shells, by the sea shore.",
)
CLIPS = ("jfk.wav", "sense_and_sensibility_01_austen_64kb-0890.wav", "speechbrain_spk1_snt1.wav")
FRAME_S = 0.08  # window_stride 0.01 x subsampling_factor 8
GAP_FRAMES = 2  # the RNN-T archive's decoding.segment_gap_threshold

# (fixture kind, oasr decode type, NeMo decoder type)
CASES = (
    ("ctc", None, None),
    ("rnnt", None, None),
    ("tdt", None, None),
    ("hybrid_tdt_ctc", "transducer", "rnnt"),
    ("hybrid_tdt_ctc", "ctc", "ctc"),
)


def _favour_words(model) -> None:
    """Raise the output biases of word starts (+1) and punctuation (+0.3), on every head but the
    RNN-T's (whose recurrent predictor then emits one label at every step)."""
    vocab = model.tokenizer.vocab
    ctc_heads = (model.decoder, getattr(model, "ctc_decoder", None))
    heads = [h.decoder_layers[0].bias for h in ctc_heads if hasattr(h, "decoder_layers")]
    if hasattr(model, "joint") and model.cfg.decoding.get("model_type") == "tdt":
        heads.append(model.joint.joint_net[-1].bias)
    with torch.no_grad():
        for bias in heads:
            for i, piece in enumerate(vocab):
                if piece.startswith("\u2581") and len(piece) > 1:
                    bias[i] += 1.0
                elif piece in (".", ",", "!", "?"):
                    bias[i] += 0.3


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """kind -> (.nemo path, NeMo model in float32, eval)."""
    pytest.importorskip("nemo.collections.asr", reason="nemo-toolkit is not installed (the timestamps' reference)")
    from omegaconf import open_dict

    from tests.models.parakeet import nemo_reference

    root = tmp_path_factory.mktemp("nemo_timestamps")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in ("ctc", "rnnt", "tdt", "hybrid_tdt_ctc"):
            path, model = nemo_reference.build(kind, root, sentences=PUNCTUATED)
            _favour_words(model)
            if kind == "rnnt":  # its predictor favours one label: two a frame (not ten) keep it quick
                with open_dict(model.cfg):
                    model.cfg.decoding.segment_gap_threshold = GAP_FRAMES
                    model.cfg.decoding.greedy.max_symbols = 2
            model.save_to(str(path))
            out[kind] = (path, model.float().eval())
    return out


@pytest.fixture(scope="module")
def clips(manifest):
    from oasr.audio import load_audio

    by_name = {row["audio"]: row["path"] for row in manifest}
    return [load_audio(by_name[name]) for name in CLIPS]


def _nemo_hypotheses(model, waves, decoder: str | None):
    if decoder is not None:
        model.change_decoding_strategy(decoder_type=decoder, verbose=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.transcribe([w.astype(np.float32) for w in waves], batch_size=1, timestamps=True, verbose=False)
    return out[0] if isinstance(out, tuple) else out


def _timed(entries, key: str, duration: float) -> list[tuple[str, int, int, float, float]]:
    """NeMo's words or segments with text: (text, start / end offsets, start / end seconds to the
    ms; oasr ends a time past the end of the audio with the audio)."""
    return [
        (
            e[key].strip(),
            int(e["start_offset"]),
            min(int(e["end_offset"]), round(duration / FRAME_S)),
            round(min(float(e["start"]), duration), 3),
            round(min(float(e["end"]), duration), 3),
        )
        for e in entries
        if e[key].strip()
    ]


@pytest.mark.parametrize(
    ("kind", "decode_type", "nemo_decoder"), CASES, ids=[f"{k}-{d or 'default'}" for k, d, _ in CASES]
)
def test_word_and_segment_times_equal_nemo_transcribe_timestamps(archives, clips, kind, decode_type, nemo_decoder):
    path, ref = archives[kind]
    hyps = _nemo_hypotheses(ref, clips, nemo_decoder)
    engine = oasr.ASREngine(str(path), dtype="float32", **({"decode_type": decode_type} if decode_type else {}))
    outs = engine.transcribe(clips, word_timestamps=True)
    n_words = n_segments = 0
    for out, hyp in zip(outs, hyps):
        want_words = _timed(hyp.timestamp["word"], "word", out.duration)
        want_segments = _timed(hyp.timestamp["segment"], "segment", out.duration)
        words = [w for seg in out.segments for w in seg.words]
        got_words = [(w.word.strip(), round(w.start / FRAME_S), round(w.end / FRAME_S), w.start, w.end) for w in words]
        got_segments = [
            (s.text.strip(), round(s.start / FRAME_S), round(s.end / FRAME_S), s.start, s.end) for s in out.segments
        ]
        assert got_words == want_words, kind
        assert got_segments == want_segments, kind
        assert out.text == hyp.text.strip(), kind
        doc = verbose_json_dict(out, words=True)
        assert [(w["word"], w["start"], w["end"]) for w in doc["words"]] == [(w, s, e) for w, _, _, s, e in want_words]
        assert [(s["start"], s["end"]) for s in doc["segments"]] == [(s, e) for _, _, _, s, e in want_segments]
        n_words += len(want_words)
        n_segments += len(want_segments)
    assert n_words >= 10 and n_segments >= 3, (kind, n_words, n_segments)


def test_token_offsets_follow_nemos_arithmetic():
    """NeMo's CTC token ends where its run starts and starts where the token before it started (the
    first one frame before its own run); RNN-T tokens take their frame, TDT ones their duration (0
    allowed). The fixtures' first tokens sit at frame 0 or 1, so the first-token rule is pinned here."""
    blank = 9
    best = [blank, blank, blank, 4, 4, blank, 4, 7, 7, blank, 7, 3]
    starts = best_path_run_starts(best, blank)
    assert starts == [3, 6, 7, 10, 11]
    assert ctc_offsets(starts) == [(2, 3), (3, 6), (6, 7), (7, 10), (10, 11)]
    assert ctc_offsets([0, 4]) == [(0, 0), (0, 4)]
    assert best_path_run_starts([5, 5, 2, 5], blank, skip_ids=frozenset({2})) == [0, 3]
    assert transducer_offsets([0, 0, 3], None) == [(0, 1), (0, 1), (3, 4)]
    assert transducer_offsets([0, 0, 3], [0, 2, 4]) == [(0, 0), (0, 2), (3, 7)]
