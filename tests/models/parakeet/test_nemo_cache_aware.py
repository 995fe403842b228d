"""NeMo's cache-aware streaming FastConformer (``fastconformer_*_streaming`` configs: causal
``dw_striding`` subsampling, ``chunked_limited`` attention with the multi-lookahead
``att_context_size`` list, causal layer-norm convolutions, no feature normalisation) shrunk to two
layers of width 32, CTC and RNN-T, built by NeMo's classes and saved by ``save_to``, held to NeMo:

- offline, for each trained context (NeMo's ``set_default_att_context_size``; oasr's
  ``att_context_size`` option): the encoder in float64 and the greedy tokens;
- streaming through ``ASREngine.open_stream``, ``oasr stream`` and the WebSocket: the tokens and
  text of NeMo's cache-aware streaming as its ``speech_to_text_cache_aware_streaming_infer.py``
  example runs it (``CacheAwareStreamingAudioBuffer`` + ``conformer_stream_step``), for the
  default lookahead and a short one.

Skipped where ``nemo-toolkit`` is not installed.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import oasr
from oasr.models.base import LoadError
from oasr.models.loaders import load_pretrained
from tests.models.parakeet.conftest import ctc_collapse, parity

# The multi-lookahead contexts of NeMo's hybrid cache-aware streaming release: [left, right] frames.
CONTEXTS = [[70, 13], [70, 6], [70, 1], [70, 0]]
KINDS = ("ctc", "rnnt")


def _nemo():
    return pytest.importorskip(
        "nemo.collections.asr", reason="nemo-toolkit is not installed (the reference of the cache-aware tests)"
    )


def cache_aware(cfg: dict) -> None:
    """A release-shaped config made cache-aware as NeMo's streaming configs are."""
    cfg["preprocessor"]["normalize"] = "NA"
    cfg["encoder"].update(
        causal_downsampling=True,
        att_context_size=CONTEXTS,
        att_context_style="chunked_limited",
        conv_context_size="causal",
        conv_norm_type="layer_norm",
    )
    if "joint" in cfg:
        cfg["decoding"]["greedy"]["max_symbols"] = 2


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """kind -> (.nemo path, NeMo model in float32, eval)."""
    _nemo()
    from tests.models.parakeet import nemo_reference

    root = tmp_path_factory.mktemp("nemo_cache_aware")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in KINDS:
            path, model = nemo_reference.build(kind, root, edit=cache_aware, blank_bias=1.5)
            with torch.no_grad():
                # Features are not normalised: a first convolution blind to the absolute level (as a
                # trained one nearly is) keeps the random encoder's output varied along time.
                w = model.encoder.pre_encode.conv[0].weight
                w.sub_(w.mean(dim=(2, 3), keepdim=True))
            model.save_to(str(path))
            out[kind] = (path, model.eval().requires_grad_(False))
    return out


# Feature frames of the clip each context streams. NeMo's streaming buffer holds one more (its front
# end's last, masked frame): 1005 = 105 + 8 x 112 + 4 and 333 = 9 + 20 x 16 + 4, 4 past the last whole
# chunk, fewer than the subsampling factor, which NeMo's buffer drops. The longer clip outlasts the
# 70-frame attention history.
CLIP_FRAMES = {(70, 13): 1004, (70, 1): 332}


@pytest.fixture(scope="module")
def clips(waveforms, tmp_path_factory) -> dict:
    """context -> (the first 10 s / 3.3 s of the 11-s clip as PCM16 values, a WAV file of exactly them)."""
    import wave as wavfile

    out = {}
    for ctx, frames in CLIP_FRAMES.items():
        pcm = np.clip(np.round(waveforms[0][: frames * 160] * 32768), -32768, 32767).astype(np.int16)
        path = tmp_path_factory.mktemp("clip") / f"clip_{frames}.wav"
        with wavfile.open(str(path), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(16000)
            f.writeframes(pcm.tobytes())
        out[ctx] = (pcm.astype(np.float32) / 32768.0, path)
    return out


@torch.no_grad()
def test_offline_equals_nemo_for_the_chosen_context(archives, clips):
    """NeMo's default (the first of the list) and a short lookahead (``set_default_att_context_size``)."""
    from tests.models.parakeet.test_nemo_archive import _exact_filters, _nemo_features, _nemo_greedy

    emitted = 0
    for kind in KINDS:
        path, ref = archives[kind]
        ref = _exact_filters(ref.double())
        lm = load_pretrained(path)
        assert lm.architecture == {"ctc": "parakeet_cache_aware", "rnnt": "parakeet_cache_aware_transducer"}[kind]
        model = lm.model.double()
        assert model.encoder.config.att_context_size == tuple(CONTEXTS[0])  # NeMo's default: the first
        for ctx, (wave, _) in clips.items():
            feats, n = _nemo_features(ref, wave)
            ref.encoder.set_default_att_context_size(ctx)
            model.encoder.set_attention(None, tuple(ctx))
            want, want_len = ref.encoder(audio_signal=feats.transpose(1, 2), length=n)
            enc, enc_len = model.encode_offline(feats, n)
            assert int(enc_len[0]) == int(want_len[0])
            cos, err = parity(enc, want.transpose(1, 2))
            assert cos > 1 - 1e-12 and err < 1e-6, (kind, ctx, cos, err)
            head = "ctc" if kind == "ctc" else "transducer"
            tokens, _ = _nemo_greedy(ref, kind, want, want_len, head)
            if kind == "ctc":
                _, best, out_len = model.forward_offline_best_path(feats, n)
                got = ctc_collapse(best[0, : int(out_len[0])], model.blank_id)
            else:
                got = list(model.greedy_decode(feats, n).tokens[0])
            assert got == tokens, (kind, ctx)
            emitted += len(tokens)
        ref.encoder.set_default_att_context_size(CONTEXTS[0])
        ref.float()
    assert emitted > 40, "the comparison is vacuous without labels"


def nemo_streaming(model, wave: np.ndarray, ctx: list[int]) -> tuple[list[int], str]:
    """NeMo's cache-aware streaming decode of ``wave`` with ``ctx``, as its example script runs it."""
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    model.encoder.set_default_att_context_size(ctx)
    buffer = CacheAwareStreamingAudioBuffer(model=model, online_normalization=False, pad_and_drop_preencoded=False)
    buffer.append_audio(wave)
    channel, time, channel_len = model.encoder.get_initial_cache_state(batch_size=1)
    hyps = pred = texts = None
    with torch.inference_mode():
        for step, (chunk, lengths) in enumerate(buffer):
            drop = 0 if step == 0 else model.encoder.streaming_cfg.drop_extra_pre_encoded
            pred, texts, channel, time, channel_len, hyps = model.conformer_stream_step(
                processed_signal=chunk,
                processed_signal_length=lengths,
                cache_last_channel=channel,
                cache_last_time=time,
                cache_last_channel_len=channel_len,
                keep_all_outputs=buffer.is_buffer_empty(),
                previous_hypotheses=hyps,
                previous_pred_out=pred,
                drop_extra_pre_encoded=drop,
                return_transcription=True,
            )
    model.encoder.set_default_att_context_size(CONTEXTS[0])
    if hyps is not None:
        return [int(t) for t in hyps[0].y_sequence], hyps[0].text
    return ctc_collapse(pred[0], model.tokenizer.vocab_size), texts[0].text


@pytest.fixture(scope="module")
def nemo_streamed(archives, clips):
    """(kind, context) -> NeMo's streaming (tokens, text) of the context's clip."""
    return {
        (kind, ctx): nemo_streaming(archives[kind][1], wave, list(ctx))
        for kind in KINDS
        for ctx, (wave, _) in clips.items()
    }


def _stream_tokens(engine, wave: np.ndarray, piece: int = 16000) -> tuple[list[int], str]:
    stream = engine.open_stream(sample_rate=16000)
    events = []
    for i in range(0, len(wave), piece):
        events += stream.feed(wave[i : i + piece])
    events += stream.finish()
    finals = [e for e in events if e.type == "final"]
    return [t for e in finals for t in e.tokens], " ".join(e.text.strip() for e in finals).strip()


@pytest.mark.parametrize("kind", KINDS)
def test_open_stream_equals_nemo_cache_aware_streaming(kind, archives, clips, nemo_streamed):
    path, _ = archives[kind]
    emitted = 0
    for ctx, (wave, _) in clips.items():
        engine = oasr.ASREngine(str(path), att_context_size=ctx)
        want_tokens, want_text = nemo_streamed[(kind, ctx)]
        tokens, text = _stream_tokens(engine, wave)
        assert tokens == want_tokens, (kind, ctx)
        assert text == want_text.strip(), (kind, ctx)
        emitted += len(tokens)
    # Two attention chunks a step (--chunk-ms): the same tokens (NeMo steps one at a time).
    engine = oasr.ASREngine(str(path), stream_chunk_ms=2 * 14 * 80)
    want_tokens, want_text = nemo_streamed[(kind, (70, 13))]
    assert _stream_tokens(engine, clips[(70, 13)][0]) == (want_tokens, want_text.strip())
    assert emitted > 40, "the comparison is vacuous without labels"


def test_oasr_stream_and_the_websocket_equal_nemo_streaming(archives, clips, nemo_streamed, capsys):
    from oasr.cli.main import main

    path, _ = archives["rnnt"]
    _, want = nemo_streamed[("rnnt", (70, 1))]
    assert main(["stream", str(clips[(70, 1)][1]), "--model", str(path), "-q", "--att-context-size", "70,1"]) == 0
    assert capsys.readouterr().out.strip() == want.strip()

    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    args = build_parser().parse_args(["serve", "--model", str(path)])  # the default context
    engine = build_engine(settings_from_args(args))
    want_tokens, _ = nemo_streamed[("rnnt", (70, 13))]
    try:
        with TestClient(create_app(settings_from_args(args), engine)) as client:
            with client.websocket_connect("/v1/audio/stream") as ws:
                ws.send_text(json.dumps({"sample_rate": 16000, "sample_format": "float32"}))
                wave = clips[(70, 13)][0]
                for i in range(0, len(wave), 16000):
                    ws.send_bytes(wave[i : i + 16000].astype("<f4").tobytes())
                ws.send_text("done")
                events = []
                while not events or events[-1]["type"] != "done":
                    events.append(ws.receive_json())
    finally:
        engine.shutdown()
    assert [t for e in events if e["type"] == "final" for t in e["tokens"]] == want_tokens


def test_an_untrained_context_and_a_non_causal_subsampling_are_refused(archives, tmp_path):
    from tests.models.parakeet.test_nemo_archive import _repack

    path, _ = archives["ctc"]
    with pytest.raises(ValueError, match=r"att_context_size=\[70, 3\] is not one this checkpoint was trained with"):
        oasr.ASREngine(str(path), att_context_size=(70, 3))
    with pytest.raises(ValueError, match="rel_pos_local_attn"):
        oasr.ASREngine(str(path), attention_model="rel_pos_local_attn", att_context_size=(128, 128))

    def edit(cfg):
        cfg["encoder"]["causal_downsampling"] = False

    with pytest.raises(LoadError, match=r"causal_downsampling=False with att_context_style='chunked_limited'"):
        load_pretrained(_repack(path, tmp_path / "noncausal.nemo", edit))


@torch.no_grad()
def test_regular_style_decodes_offline_as_nemo_and_streams_only_by_local_agreement(archives, clips, tmp_path):
    """``att_context_style: regular`` with a [left, right] band: NeMo's band mask offline; NeMo
    streams it only by recomputing its lookahead, which oasr does not do: its encoder is offline
    (``streaming_kind`` "none"), so a live stream is the offline model's local-agreement policy."""
    from tests.models.parakeet import nemo_reference
    from tests.models.parakeet.test_nemo_archive import _exact_filters, _nemo_features, _repack

    path, _ = archives["ctc"]

    def edit(cfg):
        cfg["encoder"].update(att_context_style="regular", att_context_size=[16, 4])

    regular = _repack(path, tmp_path / "regular.nemo", edit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = nemo_reference.model_class("ctc").restore_from(str(regular), map_location="cpu")
    ref = _exact_filters(ref.double().eval())
    model = load_pretrained(regular).model.double()
    feats, n = _nemo_features(ref, clips[(70, 13)][0])
    want, _ = ref.encoder(audio_signal=feats.transpose(1, 2), length=n)
    cos, err = parity(model.encode_offline(feats, n)[0], want.transpose(1, 2))
    assert cos > 1 - 1e-12 and err < 1e-6, (cos, err)
    from oasr.engine.streaming.local_agreement import LocalAgreementCore

    assert model.encoder.streaming_kind == "none"
    engine = oasr.ASREngine(str(regular))
    engine.open_stream(sample_rate=16000).close()
    assert isinstance(engine._streaming(), LocalAgreementCore)
