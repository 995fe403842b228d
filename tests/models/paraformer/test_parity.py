"""Parity with funasr 1.4.16: per stage in float64 through oasr's loader, then tokens and
CIF timestamps of ``AutoModel.generate`` through ``oasr.ASREngine``."""

from __future__ import annotations

import copy

import pytest
import torch

import oasr
from oasr.audio.frontends import build_frontend
from oasr.engine.decode.paraformer.strategy import decode_batch
from tests.models.paraformer._funasr_format import assert_close

KINDS = ("Paraformer", "BiCifParaformer")


@pytest.mark.parametrize("kind", KINDS)
def test_stages_match_funasr_in_float64(kind, funasr_dirs, funasr_models, zh_audio):
    loaded = oasr.load_pretrained(str(funasr_dirs[kind]))
    model = loaded.model.double().eval()
    auto = funasr_models[kind]
    ref = copy.deepcopy(auto.model).double().eval()
    wav = torch.from_numpy(zh_audio[: 16000 * 3])

    # front end: kaldi fbank + LFR (oasr's front end) + CMVN (oasr's encoder buffers)
    ref_feats, ref_lens = auto.kwargs["frontend"](wav[None].clone(), torch.tensor([wav.numel()]))
    lfr = build_frontend(loaded.feature_spec).compute(wav, torch.float64)
    assert_close("front end", model.encoder.normalize(lfr), ref_feats[0], 1e-3)  # funasr's fbank is float32

    feats = model.encoder.normalize(lfr)[None]
    lens = torch.tensor([feats.shape[1]])
    with torch.no_grad():
        ref_enc, ref_enc_lens = ref.encode(feats, lens)
        enc, enc_lens = model.encode_offline(lfr[None], lens)
        assert_close("encoder", enc, ref_enc, 1e-9)
        assert enc_lens.tolist() == ref_enc_lens.tolist()

        embeds, token_num, alphas, peaks = ref.calc_predictor(ref_enc, ref_enc_lens)[:4]
        cif = model.cif(ref_enc, ref_enc_lens)
        assert cif.token_lens.tolist() == token_num.round().long().tolist() and int(cif.token_lens[0]) > 3
        assert_close("CIF alphas", cif.alphas, alphas, 1e-7)
        # BiCif integrates in funasr's float32 loop; V2's prefix sum runs in the model's float64
        assert_close("CIF acoustic embeddings", cif.embeds, embeds, 1e-9 if kind == "Paraformer" else 1e-4)

        ref_logp = ref.cal_decoder_with_predictor(ref_enc, ref_enc_lens, embeds, token_num.round().long())[0]
        assert_close("decoder log-probs", model.decode_cif(ref_enc, ref_enc_lens, cif), ref_logp, 1e-4)
        if kind == "BiCifParaformer":
            us_alphas = ref.calc_predictor_timestamp(ref_enc, ref_enc_lens, token_num.round().long())[2]
            ours = model.predictor.upsampled_alphas(ref_enc, ref_enc_lens, cif.token_lens)
            assert_close("BiCif timestamp alphas", ours, us_alphas, 1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_tokens_and_timestamps_match_generate(kind, funasr_dirs, funasr_models, zh_audio):
    engine = oasr.ASREngine(str(funasr_dirs[kind]))
    for seconds in (3.0, 5.5):
        wav = zh_audio[: int(16000 * seconds)]
        (ref,) = funasr_models[kind].generate(input=wav, output_timestamp=True, disable_pbar=True)
        out = engine.transcribe(wav, word_timestamps=True)
        words = [w for s in out.segments for w in s.words]
        assert len(ref["text"].split()) > 3
        assert [w.word.strip() for w in words] == ref["text"].split()
        assert out.text == ref["text"].replace(" ", "")  # CJK without spurious spaces
        assert [[round(w.start * 1000), round(w.end * 1000)] for w in words] == ref["timestamp"]


@pytest.mark.parametrize("kind", KINDS)
def test_token_times_are_funasrs_timestamp(kind, funasr_dirs, funasr_models, zh_audio):
    """Every segment carries its tokens' CIF times in seconds (``Segment.token_times``, with or
    without word timestamps): funasr's ``timestamp`` in ms, one pair per token (the fixture's
    tokens are CJK characters, so funasr's per-word list is its per-token list)."""
    engine = oasr.ASREngine(str(funasr_dirs[kind]))
    for seconds in (3.0, 5.5):
        wav = zh_audio[: int(16000 * seconds)]
        (ref,) = funasr_models[kind].generate(input=wav, output_timestamp=True, disable_pbar=True)
        out = engine.transcribe(wav)
        assert all(s.words is None and len(s.token_times) == len(s.tokens) for s in out.segments)
        times = [t for s in out.segments for t in s.token_times]
        assert len(times) == len(ref["timestamp"]) > 3
        assert [[round(a * 1000), round(b * 1000)] for a, b in times] == ref["timestamp"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_of_unequal_lengths_decodes_as_each_alone(kind, funasr_dirs, zh_audio):
    loaded = oasr.load_pretrained(str(funasr_dirs[kind]))
    frontend = build_frontend(loaded.feature_spec)
    feats = [frontend(zh_audio[: int(16000 * s)]) for s in (3.1, 1.7, 5.5)]
    model = loaded.model.eval()
    with torch.inference_mode():
        batch = decode_batch(model, feats, torch.device("cpu"), torch.float32)
        alone = [decode_batch(model, [f], torch.device("cpu"), torch.float32)[0] for f in feats]
    for (ids, probs, spans), (ids1, probs1, spans1) in zip(batch, alone):
        assert ids == ids1 and spans == spans1 and len(ids) > 3
        assert probs == pytest.approx(probs1, abs=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_keeps_the_cif_in_float32_and_the_tokens(kind, funasr_dirs, zh_audio):
    bf16 = oasr.load_pretrained(str(funasr_dirs[kind]), dtype=torch.bfloat16)
    fp32 = oasr.load_pretrained(str(funasr_dirs[kind]))
    assert bf16.model.compute_dtype == torch.bfloat16
    assert {p.dtype for p in bf16.model.predictor.parameters()} == {torch.float32}
    feats = [build_frontend(fp32.feature_spec)(zh_audio[: 16000 * 3])]
    with torch.inference_mode():
        (ids, _, spans), *_ = decode_batch(bf16.model, feats, torch.device("cpu"), torch.bfloat16)
        (ids32, _, spans32), *_ = decode_batch(fp32.model, feats, torch.device("cpu"), torch.float32)
    assert len(ids) == len(ids32) and sum(a == b for a, b in zip(ids, ids32)) >= 0.8 * len(ids32)
    assert spans == spans32
