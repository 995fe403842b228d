"""oasr's Granite Speech 5 against transformers' ``GraniteSpeech5ForCTC`` /
``GraniteSpeech5FeatureExtractor`` / processor: a tiny random checkpoint saved by
transformers, compared in float64 stage by stage on real speech, every batch row against
transformers run on that clip alone."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

from tests.models.lasr._reference import cosine, max_abs

COS_MIN = 0.99999
ABS_MAX = 1e-9  # float64 against float64


def _collapse(ids: list[int], blank: int) -> list[int]:
    return [i for i, _ in itertools.groupby(ids) if i != blank]


def test_front_end_matches_the_extractor(loaded, hf_model, clips, hf_alone):
    import torchaudio

    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(loaded.feature_spec)
    for wav, ref in zip(clips, hf_alone):
        ours = frontend.features(wav, torch.float64)
        assert ours.shape == ref["feats"].shape
        assert max_abs(ours, ref["feats"]) <= 1e-4  # the extractor computes in float32
        assert torch.equal(frontend(wav), frontend.features(wav, torch.float32).float())
    # The extractor's own recipe (torchaudio) in float64: torchaudio builds its mel bank in
    # float32, which bounds the agreement; the deltas agree to rounding.
    from oasr.audio.fbank import htk_mel_filters

    bank = torchaudio.functional.melscale_fbanks(257, 0.0, 8000.0, 80, 16000).double()
    assert max_abs(htk_mel_filters(80, 512, 16000), bank) <= 1e-5
    wav = torch.as_tensor(clips[2], dtype=torch.float64)[None]
    mel = torchaudio.transforms.MelSpectrogram(n_fft=512, win_length=400, hop_length=160, n_mels=80).double()(wav)
    ours_mel = frontend.log_mel(clips[2], torch.float64)
    theirs = mel[0, :, : ours_mel.shape[0]].clamp_min(1e-10).log10()
    theirs = torch.maximum(theirs, theirs.max() - 8.0) / 4 + 1
    assert max_abs(ours_mel, theirs.T) <= 1e-5
    deltas = torchaudio.functional.compute_deltas(ours_mel.T.contiguous(), win_length=3)
    assert max_abs(frontend.deltas(ours_mel), deltas.T) <= 1e-12


def test_encoder_blocks_and_logits_match(loaded, hf_alone):
    """Each block's output (before the self-conditioning injection, as transformers records
    it), the encoder output and the CTC logits of one clip, in float64."""
    ref = hf_alone[0]
    enc = loaded.model.encoder
    x = ref["feats"][None]
    with torch.no_grad():
        h = enc.input_linear(x)
        for i, (layer, theirs) in enumerate(zip(enc.layers, ref["hidden"])):
            h = layer(h, None)
            assert h.shape == theirs.shape
            assert cosine(h, theirs) >= COS_MIN and max_abs(h, theirs) <= ABS_MAX, f"block {i}"
            if i == enc.cfg.self_conditioning_layer:
                h = h + enc.out_mid(enc.out(h).softmax(-1))
        hidden, lens = loaded.model.encode_offline(x, torch.tensor([x.shape[1]]))
        logits = loaded.model.ctc_projection.logits(hidden)[0]
    assert max_abs(hidden, h) <= ABS_MAX and int(lens[0]) == ref["logits"].shape[0]
    assert cosine(logits, ref["logits"]) >= COS_MIN and max_abs(logits, ref["logits"]) <= 1e-8


def test_padded_batch_rows_equal_transformers_alone(loaded, clips, hf_alone, processor):
    """oasr's front end and encoder on the clips as one padded batch; each row against
    transformers on that clip alone: the logits, generate's frame ids, the tokens and the text."""
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(loaded.feature_spec)
    feats = [frontend.features(w, torch.float64) for w in clips]
    lens = torch.tensor([f.shape[0] for f in feats])
    assert len(set(lens.tolist())) == len(clips)
    batch = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    model = loaded.model
    with torch.no_grad():
        hidden, out_lens = model.encode_offline(batch, lens)
        logits = model.ctc_projection.logits(hidden)
    for i, ref in enumerate(hf_alone):
        n = int(out_lens[i])
        assert n == ref["logits"].shape[0]
        # our float64 features against the extractor's float32 ones bound the agreement
        assert cosine(logits[i, :n], ref["logits"]) >= COS_MIN and max_abs(logits[i, :n], ref["logits"]) <= 1e-4
        ids = logits[i, :n].argmax(-1)
        assert ids.tolist() == ref["ids"].tolist()
        tokens = _collapse(ids.tolist(), model.blank_id)
        assert len(tokens) > 5 or i in (2, 3)  # the two ~1-s clips give few frames
        assert loaded.tokenizer.decode(tokens) == ref["text"]


def test_packed_rows_equal_padded_rows(loaded, clips):
    """Sequence packing: the rows laid end to end (one too short for any frame, one whose
    length is odd at a subsampling block) give what the padded batch gives each row."""
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(loaded.feature_spec)
    feats = [frontend.features(w, torch.float64) for w in clips] + [torch.randn(3, 320, dtype=torch.float64)]
    lens = torch.tensor([f.shape[0] for f in feats])
    assert any(n % 2 for n in lens.tolist()) and any(n // 2 % 2 for n in lens.tolist())
    model = loaded.model
    with torch.no_grad():
        lp, out_lens = model.forward_offline(torch.nn.utils.rnn.pad_sequence(feats, batch_first=True), lens)
        packed, cu = model.forward_offline_packed(torch.cat(feats), torch.nn.functional.pad(lens.cumsum(0), (1, 0)))
    assert cu.diff().tolist() == out_lens.tolist() and out_lens[-1] == 0
    for i, row in enumerate(packed.split(out_lens.tolist())[:-1]):
        assert max_abs(row, lp[i, : int(out_lens[i])]) <= 1e-6  # float32 log-probs


@pytest.mark.parametrize("packing", [False, True])
def test_engine_greedy_text_and_word_times(hf_dir, hf_model, processor, clips, packing):
    """The engine (float32, padded or packed batch) gives transformers' greedy text for every
    clip, and word times from the CTC spikes, in order, inside the clip."""
    import oasr

    engine = oasr.ASREngine(str(hf_dir), device="cpu", sequence_packing=packing)
    outs = engine.transcribe([c.copy() for c in clips], word_timestamps=True)
    assert engine.strategy.stats()["packed_batches"] == (1 if packing else 0)
    hf32 = copy.deepcopy(hf_model).float()
    for out, wav in zip(outs, clips):
        inputs = processor(wav, sampling_rate=16000, return_tensors="pt")
        with torch.no_grad():
            ids = hf32.generate(inputs.input_features, attention_mask=inputs.attention_mask)
        text = processor.batch_decode(ids, skip_special_tokens=True)[0]
        assert out.text.strip() == text.strip()
        words = [w for s in out.segments for w in s.words]
        assert [w.word.strip() for w in words] == text.split()
        assert all(0.0 <= w.start <= w.end <= len(wav) / 16000 + 1e-3 for w in words)  # times in ms
        assert all(a.end <= b.start + 1e-6 for a, b in zip(words, words[1:]))


def test_int8_is_close_to_float32(hf_dir, clips):
    from oasr.audio.frontends import build_frontend
    from oasr.layers.quant import Int8Linear
    from oasr.models.registry import build_model_from_checkpoint

    model32, bundle, _ = build_model_from_checkpoint(hf_dir)
    model8, _, report = build_model_from_checkpoint(hf_dir, quantize="int8")
    assert report.ok and sum(isinstance(m, Int8Linear) for m in model8.modules()) >= 20
    feats, lens = build_frontend(bundle.features).compute_batch(clips[:1])
    with torch.no_grad():
        lp32, n32 = model32.forward_offline(feats, lens)
        lp8, n8 = model8.forward_offline(feats, lens)
    assert torch.equal(n32, n8)
    assert cosine(lp8.exp(), lp32.exp()) > 0.99
    assert (lp8.argmax(-1) == lp32.argmax(-1)).double().mean() > 0.9


def test_tied_head_and_bad_configs(hf_dir, tmp_path):
    """The release's tied CTC head loads from ``encoder.out``; an untied config without the
    head, or a mismatched encoder vocabulary, is refused by name."""
    import json
    import shutil

    import oasr
    from oasr.models.base import LoadError

    lm = oasr.load_pretrained(hf_dir)
    assert torch.equal(lm.model.ctc_projection.weight[: lm.model.vocab_size], lm.model.encoder.out.weight)
    bad = tmp_path / "untied"
    shutil.copytree(hf_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
    with pytest.raises(LoadError, match="ctc_head.weight is missing"):
        oasr.load_pretrained(bad)
    cfg["encoder_config"]["vocab_size"] = cfg["vocab_size"] + 1
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(LoadError, match="encoder vocab_size"):
        oasr.load_pretrained(bad)


def test_beam_search_lm_free_and_hotwords(hf_dir, clips):
    """The ``ctc`` strategy's prefix beam and hotword boosting apply unchanged."""
    import oasr

    engine = oasr.ASREngine(str(hf_dir), device="cpu")
    greedy = engine.transcribe(clips[2].copy())
    beam = engine.transcribe(clips[2].copy(), beam_size=4)
    word = greedy.text.split()[-1]
    boosted = engine.transcribe(clips[2].copy(), beam_size=4, hotwords=word, hotword_weight=5.0)
    assert greedy.text and beam.text
    assert boosted.text.count(word) >= beam.text.count(word)
