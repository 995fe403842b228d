"""oasr's LASR against transformers' ``LasrForCTC`` / ``LasrFeatureExtractor``: a tiny
random checkpoint saved by transformers, loaded by both, compared in float64 on real speech."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.models.lasr._reference import cosine, max_abs

# transformers' own depthwise conv (padding="same", even kernel) warns about a padded copy.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")

COS_MIN = 0.99999
ABS_MAX = 1e-4


def _collapse(ids: list[int], blank: int, skip: set[int]) -> list[int]:
    """CTC greedy collapse as transformers' LasrTokenizer decodes: merge repeats, drop the blank,
    then drop the other specials."""
    return [i for i, _ in itertools.groupby(ids) if i != blank and i not in skip]


def _hf_generate(hf_model, feats: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad():
        return hf_model.generate(feats.to(torch.float64), attention_mask=mask)


def test_encoder_and_log_probs_match(hf_model, loaded, hf_batch):
    feats, mask = hf_batch
    n = int(mask[0].sum())
    x = feats[:1, :n].to(torch.float64)  # jfk alone, as the extractor makes it
    with torch.no_grad():
        hf_enc = hf_model.encoder(x).last_hidden_state
        hf_lp = hf_model(x).logits.log_softmax(-1)
        enc, enc_lens = loaded.model.encode_offline(x, torch.tensor([n]))
        lp, lp_lens = loaded.model.forward_offline(x, torch.tensor([n]))
    assert enc.shape == hf_enc.shape and lp.shape == hf_lp.shape
    assert int(enc_lens[0]) == int(lp_lens[0]) == hf_enc.shape[1]
    assert lp.dtype == torch.float32
    assert cosine(enc, hf_enc) >= COS_MIN and max_abs(enc, hf_enc) <= ABS_MAX
    assert cosine(lp, hf_lp) >= COS_MIN and max_abs(lp, hf_lp) <= ABS_MAX
    # Greedy: the same frame-level argmax as transformers' generate, the same tokens and text.
    hf_ids = _hf_generate(hf_model, x)[0].tolist()
    assert lp[0].argmax(-1).tolist() == hf_ids
    spec = loaded.tokenizer_spec
    ours = _collapse(hf_ids, loaded.model.blank_id, set(spec.special_ids))
    assert len(ours) > 5  # a random model still emits a real token sequence
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(spec.path.rsplit("/", 1)[0])
    assert loaded.tokenizer.decode(ours) == processor.batch_decode([hf_ids], skip_special_tokens=True)[0]


def test_padded_batch_matches_transformers(hf_model, loaded, hf_batch):
    feats, mask = hf_batch
    x = feats.to(torch.float64)
    with torch.no_grad():
        hf_lp = hf_model(x, attention_mask=mask).logits.log_softmax(-1)
        hf_ids = _hf_generate(hf_model, x, mask)
        lp, lens = loaded.model.forward_offline(x, mask.sum(-1))
    assert lens.tolist() == hf_model._get_subsampling_output_length(mask.sum(-1)).tolist()
    for i, n in enumerate(lens.tolist()):
        assert cosine(lp[i, :n], hf_lp[i, :n]) >= COS_MIN
        assert max_abs(lp[i, :n], hf_lp[i, :n]) <= ABS_MAX
        assert lp[i, :n].argmax(-1).tolist() == hf_ids[i, :n].tolist()


def test_padded_batch_equals_one_at_a_time(loaded, clips):
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(loaded.feature_spec)
    feats, lens = frontend.compute_batch(clips)
    assert len(set(lens.tolist())) == len(clips)
    model = loaded.model
    blank, skip = model.blank_id, set(loaded.tokenizer_spec.special_ids)
    with torch.no_grad():
        enc_b, enc_lens = model.encode_offline(feats.to(torch.float64), lens)
        lp_b = model.ctc_log_probs(enc_b)
        for i, wav in enumerate(clips):
            one = frontend(wav)[None].to(torch.float64)
            enc_1, len_1 = model.encode_offline(one, torch.tensor([one.shape[1]]))
            n = int(len_1[0])
            assert n == int(enc_lens[i]) == enc_1.shape[1]
            assert max_abs(enc_b[i, :n], enc_1[0]) <= 1e-9
            tokens_b = _collapse(lp_b[i, :n].argmax(-1).tolist(), blank, skip)
            tokens_1 = _collapse(model.ctc_log_probs(enc_1)[0].argmax(-1).tolist(), blank, skip)
            assert tokens_b == tokens_1 and tokens_1


def test_front_end_float64_matches_the_extractor(loaded, clips, hf_batch):
    from oasr.audio.frontends import build_frontend

    feats, mask = hf_batch
    frontend = build_frontend(loaded.feature_spec)
    for i, wav in enumerate(clips):
        n = int(mask[i].sum())
        ours = frontend.log_mel(wav, torch.float64)
        assert ours.shape == (n, 128)
        assert max_abs(ours, feats[i, :n]) <= 1e-6  # the extractor rounds its float64 result to float32
    # Before that rounding the two agree to float64 precision.
    from transformers import LasrFeatureExtractor

    internal = LasrFeatureExtractor()._torch_extract_fbank_features(torch.as_tensor(clips[0])[None].float())[0]
    assert max_abs(frontend.log_mel(clips[0], torch.float64), internal) <= 1e-12


def test_front_end_float32_path(loaded, clips, hf_batch):
    from oasr.audio.frontends import build_frontend
    from oasr.models.base import FeatureSpec

    feats, mask = hf_batch
    spec = loaded.feature_spec
    frontend = build_frontend(FeatureSpec(spec.kind, spec.sampling_rate, {**spec.params, "dtype": "float32"}))
    for i, wav in enumerate(clips):
        n = int(mask[i].sum())
        ours = frontend(wav)
        assert ours.dtype == torch.float32 and ours.shape == (n, 128)
        assert max_abs(ours, feats[i, :n]) <= 2e-3


def test_short_input_gives_no_frames_and_no_nan(loaded):
    """Fewer feature frames than one output frame needs: zero length, finite values,
    and the other rows of the batch unaffected."""
    model = loaded.model
    need = model.config.min_input_frames
    x = torch.randn(2, need + 40, 128, dtype=torch.float64)
    with torch.no_grad():
        lp, lens = model.forward_offline(x, torch.tensor([need + 40, need - 1]))
        lp_1, _ = model.forward_offline(x[:1], torch.tensor([need + 40]))
        lp_short, lens_short = model.forward_offline(x[:1, : need - 1], torch.tensor([need - 1]))
    assert lens[1] == 0 and lens_short.tolist() == [0]
    assert torch.isfinite(lp).all() and torch.isfinite(lp_short).all()
    assert max_abs(lp[0, : int(lens[0])], lp_1[0]) <= 1e-6


@pytest.mark.parametrize("length", [13, 14, 17, 100, 101])
def test_output_lengths_follow_the_reference(hf_model, loaded, length):
    ours = loaded.model.encoder.output_lengths(torch.tensor([length]))
    assert ours.tolist() == hf_model._get_subsampling_output_length(torch.tensor([length])).tolist()
    assert loaded.model.encoder.subsampling_rate == 4
