"""oasr's wav2vec2 family against transformers (``Wav2Vec2ForCTC`` group-norm post-norm and
layer-norm stable-layer-norm, ``HubertForCTC``, ``Data2VecAudioForCTC``): tiny random
checkpoints saved by transformers, loaded by both, compared in float64 stage by stage on real
speech, then greedy decoding through ``ASREngine`` against transformers' argmax +
``processor.batch_decode``, on a batch of different lengths."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.models.wav2vec2._reference import cosine, max_abs

COS_MIN = 0.999999
ABS_MAX = 1e-5  # the position convolution's weight norm is folded to float32 at load


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _record(modules: dict) -> tuple[dict, list]:
    seen, handles = {}, []
    for name, module in modules.items():
        handles.append(module.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, _first(o))))
    return seen, handles


def test_every_stage_matches_transformers(hf_model, loaded, processor, clips):
    x = processor(clips[2], sampling_rate=16000, return_tensors="pt").input_values.to(torch.float64)
    base, enc = hf_model.base_model, loaded.model.encoder
    stages = ["feature_extractor", "feature_projection", "pos_conv_embed"]
    layers = [f"layer{i}" for i in range(len(enc.layers))]
    theirs, h1 = _record(
        {
            "feature_extractor": base.feature_extractor,
            "feature_projection": base.feature_projection,
            "pos_conv_embed": base.encoder.pos_conv_embed,
            **{f"layer{i}": layer for i, layer in enumerate(base.encoder.layers)},
        }
    )
    ours, h2 = _record(
        {
            "feature_extractor": enc.feature_extractor,
            "feature_projection": enc.feature_projection,
            "pos_conv_embed": enc.pos_conv_embed,
            **{f"layer{i}": layer for i, layer in enumerate(enc.layers)},
        }
    )
    with torch.no_grad():
        hf_lp = hf_model(x).logits.log_softmax(-1)
        lp, lens = loaded.model.forward_offline(x[..., None], torch.tensor([x.shape[1]]))
    for h in h1 + h2:
        h.remove()
    theirs["feature_extractor"] = theirs["feature_extractor"].transpose(1, 2)  # (B, C, T) -> (B, T, C)
    report = {}
    for name in [*stages, *layers]:
        a, b = ours[name], theirs[name]
        assert a.shape == b.shape, name
        report[name] = (cosine(a, b), max_abs(a, b))
    assert lp.shape == hf_lp.shape and int(lens[0]) == hf_lp.shape[1]
    report["log_probs"] = (cosine(lp, hf_lp), max_abs(lp, hf_lp))
    bad = {k: v for k, v in report.items() if v[0] < COS_MIN or v[1] > ABS_MAX}
    assert not bad, f"stages off the reference (cosine, max-abs): {bad}; all: {report}"


def test_front_end_matches_the_feature_extractor(loaded, processor, clips):
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(loaded.feature_spec)
    for wav in clips:
        theirs = processor(wav, sampling_rate=16000, return_tensors="pt").input_values[0]
        ours = frontend(wav)
        assert ours.shape == (len(wav), 1) and ours.dtype == torch.float32
        assert max_abs(ours[:, 0], theirs) <= 1e-5


def test_padded_batch_row_equals_the_row_alone(loaded, clips):
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(loaded.feature_spec)
    feats, lens = frontend.compute_batch(clips)
    model = loaded.model
    with torch.no_grad():
        lp_b, lens_b = model.forward_offline(feats.to(torch.float64), lens)
        for i, wav in enumerate(clips):
            one = frontend(wav)[None].to(torch.float64)
            lp_1, lens_1 = model.forward_offline(one, torch.tensor([one.shape[1]]))
            n = int(lens_1[0])
            assert n == int(lens_b[i]) == lp_1.shape[1]
            assert max_abs(lp_b[i, :n], lp_1[0]) <= 1e-9


def _hf_greedy(hf_model, processor, wav) -> tuple[str, list[int]]:
    """transformers' greedy CTC of one clip alone (float32, as the engine): argmax, ``batch_decode`` (its defaults), and
    the collapsed ids without the blank."""
    x = processor(wav, sampling_rate=16000, return_tensors="pt").input_values
    with torch.no_grad():
        ids = hf_model(x).logits.argmax(-1)
    text = processor.batch_decode(ids)[0]
    pad = processor.tokenizer.pad_token_id
    return text, [i for i, _ in itertools.groupby(ids[0].tolist()) if i != pad]


@pytest.mark.parametrize("packing", [False, True])
def test_engine_greedy_equals_transformers(hf_dir, hf_model, processor, clips, packing):
    import copy

    import oasr

    hf32 = copy.deepcopy(hf_model).float()  # the engine runs float32
    engine = oasr.ASREngine(str(hf_dir), device="cpu", sequence_packing=packing)
    outs = engine.transcribe([c.copy() for c in clips])
    assert engine.strategy.stats()["packed_batches"] == (1 if packing else 0)
    delimiter = processor.tokenizer.word_delimiter_token_id
    for out, wav in zip(outs, clips):
        text, ids = _hf_greedy(hf32, processor, wav)
        assert len(ids) > 5  # a random model still emits a real token sequence
        # oasr's text is its words joined by single spaces; transformers writes each "|" as one
        assert out.text.strip() == " ".join(text.split())
        tokens = [t for s in out.segments for t in s.tokens]
        assert [t for t in tokens if t != delimiter] == [t for t in ids if t != delimiter]


def test_short_rows_give_no_frames_and_leave_the_others_alone(loaded):
    """A row shorter than the conv front's receptive field has no frame; the batch stays finite
    and its other rows are what they are alone."""
    model = loaded.model
    need = model.config.receptive_field
    x = torch.randn(2, 4000, 1, dtype=torch.float64)
    with torch.no_grad():
        lp, lens = model.forward_offline(x, torch.tensor([4000, need - 1]))
        lp_1, _ = model.forward_offline(x[:1], torch.tensor([4000]))
        lp_short, lens_short = model.forward_offline(x[:1, : need - 1], torch.tensor([need - 1]))
    assert int(lens[1]) == 0 and lens_short.tolist() == [0] and int(lens[0]) == lp_1.shape[1]
    assert torch.isfinite(lp).all() and torch.isfinite(lp_short).all()
    assert max_abs(lp[0, : int(lens[0])], lp_1[0]) <= 1e-9


def test_half_precision_group_norm_keeps_float32_statistics():
    from oasr.layers import MaskedGroupNorm

    norm = MaskedGroupNorm(4)
    x = 300.0 * torch.randn(2, 4, 3000)  # a float16 sum of a row overflows
    mask = torch.arange(3000)[None] < torch.tensor([[3000], [1700]])
    with torch.no_grad():
        want = norm(x, mask)
        got = norm(x.half(), mask)
    assert torch.isfinite(got).all() and max_abs(got[1, :, :1700], want[1, :, :1700]) < 1e-2


def test_attention_takes_an_additive_bias(loaded):
    """The hook a relative-position family uses: an additive (B, H, T, T) bias, combined with
    the key mask; a bias of zeros is no bias, and -inf on keys is masking them."""
    if loaded.architecture != "wav2vec2":  # WavLM's layers take their position table through it
        pytest.skip("the hook of wav2vec2's own attention")
    enc = loaded.model.encoder
    layer = enc.layers[0]
    h = enc.cfg.num_attention_heads
    x = torch.randn(2, 9, enc.cfg.hidden_size, dtype=torch.float64)
    lens = torch.tensor([9, 6])
    with torch.no_grad():
        plain = layer(x, lens)
        assert max_abs(layer(x, lens, None, torch.zeros(2, h, 9, 9, dtype=torch.float64)), plain) == 0.0
        cut = torch.zeros(1, h, 9, 9, dtype=torch.float64)
        cut[..., 6:] = float("-inf")
        assert max_abs(layer(x, None, None, cut)[1, :6], plain[1, :6]) <= 1e-12
