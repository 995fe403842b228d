"""Checkpoint conversion: both layouts, both published sizes from the config alone, the specs a
directory carries, and the refusals."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from oasr.models.base import DecodeType, LoadError
from oasr.models.qwen3_asr import QWEN3_ASR_SIZES, Qwen3AsrConfig
from oasr.models.registry import detect_architecture
from tests.models.qwen3_asr.conftest import ASR_TEXT, SPECIAL_TOKENS, hf_features

# The published configs (the parts that set the architecture), in both layouts.
_AUDIO = {
    "0.6B": dict(d_model=896, encoder_layers=18, encoder_attention_heads=14, encoder_ffn_dim=3584, output_dim=1024),
    "1.7B": dict(d_model=1024, encoder_layers=24, encoder_attention_heads=16, encoder_ffn_dim=4096, output_dim=2048),
}
_TEXT = {"0.6B": dict(hidden_size=1024, intermediate_size=3072), "1.7B": dict(hidden_size=2048, intermediate_size=6144)}
_COMMON_AUDIO = dict(num_mel_bins=128, downsample_hidden_size=480, n_window=50, n_window_infer=800)
_COMMON_TEXT = dict(
    vocab_size=151936,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=65536,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)


def _original_config(size: str) -> dict:
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "thinker_config": {
            "model_type": "qwen3_asr_thinker",
            "audio_token_id": 151676,
            "audio_start_token_id": 151669,
            "audio_end_token_id": 151670,
            "audio_config": {
                **_COMMON_AUDIO,
                **_AUDIO[size],
                "model_type": "qwen3_asr_audio_encoder",
                "max_source_positions": 1500,
                "conv_chunksize": 500,
            },
            "text_config": {
                **_COMMON_TEXT,
                **_TEXT[size],
                "model_type": "qwen3_asr_text",
                "rope_theta": 1000000,
                "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True},
            },
        },
    }


def _hf_config(size: str) -> dict:
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "audio_token_id": 151676,
        "eos_token_id": [151643, 151645],
        "audio_config": {**_COMMON_AUDIO, **_AUDIO[size], "model_type": "qwen3_asr_encoder"},
        "text_config": {
            **_COMMON_TEXT,
            **_TEXT[size],
            "model_type": "qwen3",
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        },
    }


@pytest.mark.parametrize("size", ["0.6B", "1.7B"])
@pytest.mark.parametrize("layout", [_original_config, _hf_config])
def test_published_sizes_from_the_config_alone(size, layout):
    from oasr.models.qwen3_asr.model import Qwen3AsrModel

    config = Qwen3AsrConfig.from_hf(layout(size))
    assert config == QWEN3_ASR_SIZES[size]
    assert config.audio.window_tokens == 104 and config.audio.chunk_tokens == 13 and config.audio.freq_bins == 16
    with torch.device("meta"):
        model = Qwen3AsrModel(config)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    d, h = _AUDIO[size]["d_model"], _TEXT[size]["hidden_size"]
    assert shapes["encoder.conv_out.weight"] == (d, 480 * 16)
    assert shapes["encoder.proj2.weight"] == (h, d)
    assert shapes["decoder.layers.27.self_attn.q_proj.weight"] == (16 * 128, h)
    assert shapes["decoder.layers.27.self_attn.k_proj.weight"] == (8 * 128, h)
    assert shapes["decoder.layers.0.self_attn.q_norm.weight"] == (128,)
    assert f"encoder.layers.{_AUDIO[size]['encoder_layers'] - 1}.fc1.weight" in shapes
    assert "decoder.lm_head.weight" not in shapes  # tied


def test_config_round_trips_through_a_dict(loaded):
    config = loaded.model.config
    assert Qwen3AsrConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert Qwen3AsrConfig() == QWEN3_ASR_SIZES["1.7B"]


def test_omitted_fields_take_each_layouts_defaults():
    hf = Qwen3AsrConfig.from_hf({"model_type": "qwen3_asr", "audio_config": {"output_dim": 2048}})
    assert hf.audio.d_model == 1024 and hf.audio.n_window == 50 and hf.text.hidden_size == 2048
    assert hf.text.tie_word_embeddings
    original = Qwen3AsrConfig.from_hf(
        {"model_type": "qwen3_asr", "thinker_config": {"audio_config": {"output_dim": 4096}}}
    )
    assert original.audio.d_model == 1280 and original.audio.n_window == 100 and original.audio.n_window_infer == 400
    assert original.text.hidden_size == 4096 and original.text.rope_theta == 5000000.0
    assert not original.text.tie_word_embeddings


def test_detection_picks_the_layouts_converter(reference, original_dir):
    name, conv = detect_architecture(reference.path)
    assert name == "qwen3_asr" and type(conv).__name__ == "HFQwen3AsrConverter"
    name, conv = detect_architecture(original_dir)
    assert name == "qwen3_asr" and type(conv).__name__ == "OriginalQwen3AsrConverter"


def test_the_original_layout_loads_to_identical_outputs(reference, loaded, original_dir, waveforms):
    from oasr.models import load_pretrained

    original = load_pretrained(original_dir)
    assert original.format == "qwen3_asr" and original.report.ok and not original.report.dropped
    model = original.model.double()
    ours = dict(loaded.model.state_dict())
    theirs = dict(model.state_dict())
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    x, mask = hf_features(reference.feature_extractor, waveforms)
    with torch.no_grad():
        a, na = loaded.model.encode_offline(x, mask.sum(1))
        b, nb = model.encode_offline(x, mask.sum(1))
        assert torch.equal(a, b) and torch.equal(na, nb)
        ids = torch.tensor([loaded.model.prompt_ids(int(nb[0]), language="en")])
        assert ids.tolist()[0] == model.prompt_ids(int(nb[0]), language="en")
        valid = torch.ones_like(ids, dtype=torch.bool)
        la = loaded.model.decoder(loaded.model.embed_prompt(ids, valid, a[:1], na[:1]), valid)
        lb = model.decoder(model.embed_prompt(ids, valid, b[:1], nb[:1]), valid)
        assert torch.equal(la, lb)
    assert original.tokenizer_spec.special_ids == loaded.tokenizer_spec.special_ids
    assert original.feature_spec == loaded.feature_spec


def test_specs(reference, loaded):
    tspec, fspec, dspec = loaded.tokenizer_spec, loaded.feature_spec, loaded.decoding_spec
    assert tspec.kind == "huggingface" and tspec.path.endswith("tokenizer.json")
    assert set(tspec.special_ids) == {reference.token_id(t) for t in SPECIAL_TOKENS}
    assert reference.token_id(ASR_TEXT) not in tspec.special_ids  # the transcript is split on it
    assert fspec.kind == "whisper_mel" and fspec.sampling_rate == 16000
    assert dict(fspec.params) == {
        "n_mels": 128,
        "n_fft": 400,
        "hop_length": 160,
        "chunk_length": 30,
        "pad_to_chunk": False,
        "min_length": 8000,
    }
    assert dspec.decode_type == DecodeType.LLM and dspec.params == {"temperature": 0.0}
    model = loaded.model
    assert model.capabilities == frozenset({DecodeType.LLM}) and model.default_decode_type == DecodeType.LLM
    assert model.encoder.streaming_kind == "none" and model.cache_spec is None
    cfg = model.config
    assert (cfg.audio_start_token_id, cfg.audio_end_token_id, cfg.asr_text_token_id) == (
        reference.token_id("<|audio_start|>"),
        reference.token_id("<|audio_end|>"),
        reference.token_id(ASR_TEXT),
    )


def _copy(src, dst, **edits):
    shutil.copytree(src, dst)
    for name, edit in edits.items():
        path = dst / f"{name}.json"
        data = json.loads(path.read_text()) if path.is_file() else {}
        edit(data)
        path.write_text(json.dumps(data))
    return dst


def test_generation_config_sets_the_decoding_defaults(reference, tmp_path):
    from oasr.models import load_pretrained

    def sampling(gen):
        gen.update(do_sample=True, temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.1, max_new_tokens=256)

    path = _copy(reference.path, tmp_path / "sampling", generation_config=sampling)
    params = load_pretrained(path).decoding_spec.params
    assert params == {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "repetition_penalty": 1.1, "max_new_tokens": 256}


def test_vocab_and_merges_tokenizer(reference, tmp_path):
    """A directory with vocab.json + merges.txt (+ tokenizer_config.json) instead of tokenizer.json."""
    from oasr.models import load_pretrained

    path = tmp_path / "vocab_merges"
    shutil.copytree(reference.path, path)
    (path / "tokenizer.json").unlink()
    reference.tokenizer.model.save(str(path))
    added = {str(reference.token_id(t)): {"content": t, "special": t != ASR_TEXT} for t in (*SPECIAL_TOKENS, ASR_TEXT)}
    (path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added}))
    lo = load_pretrained(path)
    assert lo.tokenizer_spec.path == str(path)
    rendered = (
        "<|im_start|>system\nnorland<|im_end|>\n<|im_start|>user\n<|audio_start|>"
        + "<|audio_pad|>" * 4
        + "<|audio_end|><|im_end|>\n<|im_start|>assistant\nlanguage English<asr_text>"
    )
    assert (
        lo.model.prompt_ids(4, language="en", context="norland")
        == reference.tokenizer.encode(rendered, add_special_tokens=False).ids
    )


def test_refusals(reference, original_dir, tmp_path):
    from oasr.models import load_pretrained

    def wrong_audio_id(cfg):
        cfg["audio_token_id"] = reference.token_id("<|audio_start|>")

    with pytest.raises(LoadError, match="audio_token_id"):
        load_pretrained(_copy(reference.path, tmp_path / "ids", config=wrong_audio_id))

    def aligner(cfg):
        cfg["thinker_config"]["model_type"] = "qwen3_forced_aligner"

    with pytest.raises(LoadError, match="ForcedAligner"):
        load_pretrained(_copy(original_dir, tmp_path / "aligner", config=aligner))

    def dither(pre):
        pre["dither"] = 1.0

    with pytest.raises(LoadError, match="dither"):
        load_pretrained(_copy(reference.path, tmp_path / "dither", preprocessor_config=dither))

    untied = tmp_path / "untied"
    shutil.copytree(original_dir, untied)
    from safetensors.torch import load_file, save_file

    state = load_file(str(untied / "model.safetensors"))
    state["thinker.lm_head.weight"] = state["thinker.lm_head.weight"] + 1.0
    save_file(state, str(untied / "model.safetensors"))
    with pytest.raises(LoadError, match="lm_head differs"):
        load_pretrained(untied)
