"""The English predecessor, transformers' ``NemotronAsrStreamingForRNNT`` (``nemotron_asr_streaming``):
the same encoder and transducer without the prompt projector, read by the same family."""

from __future__ import annotations

import pytest
import torch

import oasr
from tests.models.nemotron.conftest import TINY_ENCODER, generated_labels, hf_features, parity, shape_transducer_
from tests.models.parakeet.conftest import randomize_, train_tokenizer

LOOKAHEAD = 3


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from transformers import (
        NemotronAsrStreamingConfig,
        NemotronAsrStreamingFeatureExtractor,
        NemotronAsrStreamingForRNNT,
        NemotronAsrStreamingProcessor,
    )

    path = tmp_path_factory.mktemp("nemotron_streaming_en_tiny")
    tokenizer = train_tokenizer()
    config = NemotronAsrStreamingConfig(
        encoder_config={k: v for k, v in TINY_ENCODER.items() if k != "model_type"},
        vocab_size=len(tokenizer) + 1,
        blank_token_id=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        decoder_hidden_size=24,
        max_symbols_per_step=5,
    )
    torch.manual_seed(3)
    model = NemotronAsrStreamingForRNNT(config).eval()
    randomize_(model, 3)
    shape_transducer_(model, 4, blank_bias=5.0)
    model.save_pretrained(path)
    fe = NemotronAsrStreamingFeatureExtractor()
    NemotronAsrStreamingProcessor(feature_extractor=fe, tokenizer=tokenizer).save_pretrained(path)
    return path, model.double(), fe


def test_loads_without_a_prompt_and_matches_generate(reference, waveforms):
    path, ref, fe = reference
    loaded = oasr.load_pretrained(path)
    assert loaded.report.ok and not loaded.report.dropped, loaded.report.summary()
    model = loaded.model.double()
    assert model.architecture == "nemotron" and model.prompt_projector is None
    assert model.encoder_options == frozenset() and loaded.decoding_spec.params["languages"] == ("en",)
    with pytest.raises(ValueError, match="no language prompt"):
        model.resolve_prompt_id("en")
    feats, mask = hf_features(fe, waveforms[1:])
    feats = feats.double()
    blank = ref.config.blank_token_id
    with torch.no_grad():
        theirs = ref.get_audio_features(input_features=feats, attention_mask=mask, num_lookahead_tokens=LOOKAHEAD)
        hidden, lens = model.encode_offline(feats, mask.sum(-1))
        projected = model.joiner.project_encoder(hidden)
        for row, n in enumerate(lens.tolist()):
            cos, err = parity(projected[row, :n], theirs.pooler_output[row, :n])
            assert cos >= 0.99999 and err <= 1e-6, (row, cos, err)
        out = ref.generate(
            input_features=feats,
            attention_mask=mask,
            decoder_start_token_id=blank,
            max_new_tokens=8 * feats.shape[1],
            num_lookahead_tokens=LOOKAHEAD,
        )
    expected = generated_labels(out.sequences, out.durations, lens, blank)
    mine = model.greedy_decode(feats, mask.sum(-1))
    assert [(t, f) for t, f, _ in expected] == list(zip(mine.tokens, mine.frames))
    assert sum(map(len, mine.tokens)) > 20
