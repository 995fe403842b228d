"""Nemotron 3 Diarization offline: each stage equal to transformers' float64 model on a tiny random
checkpoint saved by transformers, the turns equal to its processor's, a padded batch row equal to
the clip alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from oasr.diarization import Diarization
from oasr.diarization.nemotron3 import detect, load
from oasr.diarization.nemotron3.diarizer import activity_runs, turns_from_runs
from oasr.models.base import LoadError


@pytest.fixture(scope="module")
def ref_inputs(ref, clip):
    _, processor = ref
    return processor(clip, sampling_rate=16000)


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


def test_detect_reads_only_its_layout(tiny_dir, tmp_path):
    assert detect(tiny_dir)
    assert not detect(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "parakeet_ctc"}))
    assert not detect(tmp_path)


def test_features_equal_the_feature_extractor(tiny_dir, clip, ref_inputs):
    ref_feats = ref_inputs["input_features"][0]
    for dtype, tol in ((torch.float32, 2e-5), (torch.float64, 2e-4)):
        feats, frames = load(tiny_dir, dtype=dtype).features([clip])
        n = int(ref_inputs["attention_mask"].sum())
        assert int(frames[0]) == n and feats.shape[1] == ref_feats.shape[0] == n + 1
        assert torch.allclose(feats[0].double(), ref_feats.double(), atol=tol, rtol=0)
        assert _cos(feats[0].double(), ref_feats.double()) > 1 - 1e-10


def test_encoder_equals_the_audio_tower(ref, mine, ref_inputs):
    model, _ = ref
    feats = ref_inputs["input_features"].double()
    with torch.no_grad():
        embeds = model.model.audio_tower.embedder(feats)[:, :12]
        expected = model.model.audio_tower(inputs_embeds=embeds).last_hidden_state
        got_embeds = mine.model.embed(feats)[:, :12]
        got = mine.model.model.audio_tower.encode(got_embeds, None)
    assert torch.equal(got_embeds, embeds)
    assert (got - expected).abs().max() < 1e-12


def test_probabilities_equal_transformers(ref, mine, clip, ref_inputs):
    model, _ = ref
    n = int(ref_inputs["attention_mask"].sum())
    with torch.no_grad():
        logits = model(
            input_features=ref_inputs["input_features"].double(), attention_mask=ref_inputs["attention_mask"]
        ).logits
        same_feats = mine.model.forward_offline(ref_inputs["input_features"].double(), torch.tensor([n]))
    expected = logits.sigmoid()[0, :n].numpy()
    # the chunked forward with the speaker cache, given the same features: to rounding
    assert np.abs(same_feats.sigmoid()[0, :n].numpy() - expected).max() < 1e-12
    # from the waveform (oasr's float64 front end vs transformers' float32 one)
    probs = mine.speaker_probabilities([clip])[0]
    assert probs.shape == expected.shape == (n, 4)
    assert np.abs(probs - expected).max() < 1e-4
    assert 0.2 < (expected > 0.5).mean() < 0.8  # a fixture whose slots switch on and off


def test_turns_equal_the_processors_speaker_dict(ref, mine, clip, ref_inputs):
    model, processor = ref
    with torch.no_grad():
        logits = model(
            input_features=ref_inputs["input_features"].double(), attention_mask=ref_inputs["attention_mask"]
        ).logits
    expected = processor.extract_speaker_dict(logits, ref_inputs["attention_mask"])[0]
    result = mine.diarize([clip])[0]
    names: dict[int, str] = {}
    for seg in expected:
        names.setdefault(seg["Speaker"], f"SPEAKER_{len(names):02d}")
    want = sorted((seg["Start"], seg["End"], names[seg["Speaker"]]) for seg in expected)
    assert [(t.start, t.end, t.speaker) for t in result.turns] == want
    assert result.duration == pytest.approx(4.0) and len(result.speakers) == 4


def test_a_padded_batch_row_equals_the_clip_alone(mine, clip):
    # 400 valid frames (a multiple of 8: the extra frame is an encoder frame of its own), 233, 101
    clips = [clip, clip[: 16000 * 233 // 100 + 37], clip[16000 : 17000 + 15200]]
    batched = mine.speaker_probabilities(clips)
    for c, got in zip(clips, batched, strict=True):
        alone = mine.speaker_probabilities([c])[0]
        assert got.shape == alone.shape
        assert np.abs(got - alone).max() < 1e-12
    assert [d.turns for d in mine.diarize(clips)] == [mine.diarize([c])[0].turns for c in clips]


def test_speaker_counts_keep_the_most_active_slots(mine, clip):
    probs = mine.speaker_probabilities([clip])[0]
    active = (probs > 0.5).sum(axis=0)
    top2 = set(np.argsort(-active, kind="stable")[:2].tolist())
    runs = [r for r in activity_runs(probs, 0.5) if r[2] in top2]
    want = Diarization(turns_from_runs(runs, 0.01), 4.0).turns
    assert mine.diarize([clip], num_speakers=2)[0].turns == want
    assert mine.diarize([clip], max_speakers=2)[0].turns == want
    assert len(mine.diarize([clip], min_speakers=1)[0].speakers) == 4
    # At most 6 of a model that tracks 4: met as it stands (Sortformer's rule too: SpeakerConstraints).
    assert mine.diarize([clip], max_speakers=6)[0].turns == mine.diarize([clip])[0].turns
    for bad in (
        {"num_speakers": 5},
        {"min_speakers": 5},
        {"max_speakers": 0},
        {"min_speakers": 3, "max_speakers": 2},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            mine.diarize([clip], **bad)


def test_short_and_bad_input(mine, clip):
    empty, tiny = mine.diarize([np.zeros(0, np.float32), clip[:100]])
    assert empty.turns == [] and tiny.turns == [] and tiny.duration == pytest.approx(100 / 16000)
    with pytest.raises(ValueError, match="1-D float"):
        mine.diarize([np.zeros((2, 100), np.float32)])
    with pytest.raises(ValueError, match="NaN"):
        mine.diarize([np.full(1600, np.nan, np.float32)])


def test_load_refuses_weights_that_do_not_fit(tiny_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    for name in ("config.json", "processor_config.json"):
        (tmp_path / name).write_bytes((tiny_dir / name).read_bytes())
    state = load_file(str(tiny_dir / "model.safetensors"))
    state.pop("silence_embeds")
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(LoadError, match="silence_embeds"):
        load(tmp_path)
