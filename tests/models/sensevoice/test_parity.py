"""Parity with funasr 1.4.16's SenseVoiceSmall: stage by stage in float64 through oasr's loader
(front end, prompt queries, every encoder block, CTC log-probs), then the tokens, text and tags
of ``AutoModel.generate`` through ``oasr.ASREngine``, three clips of different lengths decoded in
one batch, each row against funasr alone on it."""

from __future__ import annotations

import copy

import pytest
import torch

import oasr
from oasr.audio.frontends import build_frontend
from oasr.engine.decode.ctc.search import ctc_greedy_search
from oasr.models.paraformer.encoder import funasr_sinusoids
from oasr.models.sensevoice.tags import read_rich_transcript
from tests.models.paraformer._funasr_format import assert_close
from tests.models.sensevoice.conftest import CLIPS

EMOJI = "😊😔😡😰🤢😮🎼👏😀😭🤧😷❓"


def _funasr_plain(raw: str) -> str:
    """funasr's ``rich_transcription_postprocess`` with its emoji left out."""
    from funasr.utils.postprocess_utils import rich_transcription_postprocess

    return rich_transcription_postprocess(raw).translate({ord(c): None for c in EMOJI}).strip()


@pytest.mark.parametrize(("language", "itn"), [("auto", False), ("en", True)])
def test_stages_match_funasr_in_float64(language, itn, funasr_dir, funasr_model, clips):
    loaded = oasr.load_pretrained(str(funasr_dir))
    model = loaded.model.double().eval()
    ref = copy.deepcopy(funasr_model.model).double().eval()
    wav = torch.from_numpy(clips[CLIPS[2]])

    # front end: kaldi fbank + LFR (oasr's front end) + CMVN (oasr's encoder buffers)
    ref_feats, _ = funasr_model.kwargs["frontend"](wav[None].clone(), torch.tensor([wav.numel()]))
    lfr = build_frontend(loaded.feature_spec).compute(wav, torch.float64)
    assert_close("front end", model.encoder.normalize(lfr), ref_feats[0], 1e-3)  # funasr's fbank is float32

    with torch.no_grad():
        # the prompt: funasr's inference builds language, event / emotion, text-norm queries in that order
        prompt = model.rich_prompt(None if language == "auto" else language, itn)
        lid = ref.lid_dict[language]
        tn = ref.textnorm_dict["withitn" if itn else "woitn"]
        ref_queries = torch.cat([ref.embed(torch.tensor([[lid]])), ref.embed(torch.tensor([[1, 2]]))], 1)
        ref_queries = torch.cat([ref_queries, ref.embed(torch.tensor([[tn]]))], 1)
        queries = model.embed(torch.tensor([prompt]))
        assert_close("prompt queries", queries, ref_queries, 0.0)

        # every encoder block, from the same input (funasr's normalised features behind the queries)
        x = torch.cat([ref_queries, ref_feats.double()], 1)
        lens = torch.tensor([x.shape[1]])
        mask = torch.ones(1, 1, x.shape[1], dtype=torch.float64)
        ours_x = x * model.config.encoder.output_size**0.5
        ours_x = ours_x + funasr_sinusoids(x.shape[1], x.shape[2], x.dtype, x.device)
        ref_x = ref.encoder.embed(x * ref.encoder.output_size() ** 0.5)
        assert_close("scaled input + sinusoids", ours_x, ref_x, 1e-9)
        ours_mask = torch.ones(1, x.shape[1], 1, dtype=torch.float64)
        enc = model.encoder
        stages = [
            *(("encoders0", a, b) for a, b in zip(enc.encoders0, ref.encoder.encoders0)),
            *(("encoders", a, b) for a, b in zip(enc.encoders, ref.encoder.encoders)),
            ("after_norm", enc.after_norm, ref.encoder.after_norm),
            *(("tp_encoders", a, b) for a, b in zip(enc.tp_encoders, ref.encoder.tp_encoders)),
            ("tp_norm", enc.tp_norm, ref.encoder.tp_norm),
        ]
        assert len(stages) == 1 + 2 + 1 + 2 + 1
        for i, (name, ours_layer, ref_layer) in enumerate(stages):
            if name.endswith("norm"):
                ours_x, ref_x = ours_layer(ours_x), ref_layer(ref_x)
            else:
                ours_x, ref_x = ours_layer(ours_x, ours_mask, lens), ref_layer(ref_x, mask)[0]
            # funasr's SenseVoice LayerNorm computes in float32 whatever its input: ~1e-6 per block
            assert_close(f"{name} (stage {i})", ours_x, ref_x, 1e-4)

        # the whole model, and the CTC log-probs
        hidden, hidden_lens = model.encode_rich(lfr[None], torch.tensor([lfr.shape[0]]), [prompt])
        ref_hidden, ref_lens = ref.encoder(x.clone(), lens.clone())
        assert hidden_lens.tolist() == ref_lens.tolist() == [lfr.shape[0] + 4]
        assert_close("encoder", hidden, ref_hidden, 1e-3)
        # oasr's CTC head takes its log-softmax in float32 (CtcProjection), whatever the model's dtype
        assert_close("CTC log-probs", model.ctc_log_probs(ref_hidden), ref.ctc.log_softmax(ref_hidden), 1e-5)


def _funasr_tokens(funasr_model, wav, **options) -> tuple[str, list[int]]:
    """funasr's raw text of ``wav`` alone and the token ids it decoded it from."""
    from funasr.tokenizer.sentencepiece_tokenizer import SentencepiecesTokenizer

    seen: list[list[int]] = []
    decode = SentencepiecesTokenizer.decode
    SentencepiecesTokenizer.decode = lambda self, ids, **kw: seen.append(list(ids)) or decode(self, ids, **kw)
    try:
        (res,) = funasr_model.generate(input=wav, disable_pbar=True, **options)
    finally:
        SentencepiecesTokenizer.decode = decode
    assert len(seen) == 1
    return res["text"], seen[-1]


@pytest.mark.parametrize(("language", "itn"), [(None, None), ("auto", True), ("en", False), ("zh", True)], ids=str)
def test_a_batch_decodes_each_row_as_funasr_generate_alone(language, itn, funasr_dir, funasr_model, clips):
    """Tokens, text (``rich_transcription_postprocess`` without emoji) and tags of each clip in one
    batch of three are funasr's for that clip alone, for auto and a given language, with and without ITN."""
    engine = oasr.ASREngine(str(funasr_dir), max_batch_size=4)
    options = {k: v for k, v in (("language", language), ("itn", itn)) if v is not None}
    ref_options = {"language": language or "auto", "use_itn": bool(itn)}
    waves = [clips[c] for c in CLIPS]
    outs = engine.transcribe(waves, word_timestamps=True, **options)
    assert engine.strategy.counters.batches == 1 and engine.strategy.counters.windows_encoded == 3

    model, tokenizer = engine.loaded.model, engine.loaded.tokenizer
    prompt = model.rich_prompt(None if language in (None, "auto") else language, bool(itn))
    for wav, out in zip(waves, outs):
        raw, ref_ids = _funasr_tokens(funasr_model, wav, **ref_options)
        with torch.inference_mode():
            feats = build_frontend(engine.loaded.feature_spec)(wav)[None]
            log_probs, _ = model.forward_rich(feats, torch.tensor([feats.shape[1]]), [prompt])
        hyp = ctc_greedy_search(log_probs[0], model.blank_id, tokenizer.special_ids)
        assert list(hyp.tokens) == [t for t in ref_ids if t not in tokenizer.special_ids]
        assert tokenizer.decode(list(hyp.tokens)) == raw

        tags = read_rich_transcript(raw)
        assert out.text == tags.text == _funasr_plain(raw) != ""
        assert out.language == (language if language not in (None, "auto") else tags.language)
        assert (out.emotion, out.audio_events) == (tags.emotion, list(tags.audio_events))
        spoken = [
            t
            for t, f in zip(hyp.tokens, hyp.frames)
            if f >= model.prompt_frames and not model.is_tag(tokenizer.id_to_token(t))
        ]
        (segment,) = out.segments
        assert segment.tokens == spoken and len(segment.token_times) == len(spoken)
        starts = [a for a, _ in segment.token_times]
        assert starts == sorted(starts) and 0.0 <= starts[0] and segment.token_times[-1][1] <= out.duration
        assert "".join(w.word for w in segment.words).strip().replace(" ", "") == "".join(
            tokenizer.decode([t]).strip() for t in spoken
        ).replace(" ", "")


def test_long_audio_in_windows_is_funasrs_segments_joined(funasr_dir, funasr_model, clips):
    """Audio longer than ``ctc_window_s`` is decoded window by window, each with its own prompt, and
    read as funasr's VAD segments are joined before ``rich_transcription_postprocess``."""
    from oasr.engine.decode.windowed import plan_windows

    engine = oasr.ASREngine(str(funasr_dir), ctc_window_s=1.5)
    wav = clips[CLIPS[2]]
    windows = plan_windows(wav, 16000, 1.5)
    assert len(windows) == 3
    raws = [_funasr_tokens(funasr_model, wav[a:b], language="auto", use_itn=False)[0] for a, b in windows]
    out = engine.transcribe(wav)
    joined = read_rich_transcript(" ".join(raws))
    assert out.text == joined.text == _funasr_plain(" ".join(raws)) != ""
    assert (out.language, out.emotion, out.audio_events) == (joined.language, joined.emotion, list(joined.audio_events))
    assert [s.text.strip() for s in out.segments] == [t for r in raws if (t := read_rich_transcript(r).text)]
