"""Loading Qwen2-Audio directories: the three key layouts, omitted text_config fields,
and the specs a checkpoint carries."""

from __future__ import annotations

import copy
import json
import shutil
import warnings

import pytest
import torch

from oasr.models.speech_llm.config import Qwen2AudioConfig
from tests.models.speech_llm import _reference as ref


def _rename(state: dict, table: tuple[tuple[str, str], ...]) -> dict:
    out = {}
    for name, t in state.items():
        for src, dst in table:
            if name.startswith(src):
                name = dst + name[len(src) :]
                break
        out[name] = t
    return out


# From the saved layout (what save_pretrained writes) to the other two.
IN_MEMORY = (
    ("audio_tower.", "model.audio_tower."),
    ("multi_modal_projector.", "model.multi_modal_projector."),
    ("language_model.model.", "model.language_model."),
    ("language_model.lm_head.", "lm_head."),
)
RESAVE = (("language_model.model.", "language_model.model.model."),)


def _copy_with_weights(src, dst, state: dict):
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    save_file({k: v.contiguous() for k, v in state.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def test_saved_layout_is_what_transformers_writes(hf_dir, loaded):
    from safetensors import safe_open

    with safe_open(str(hf_dir / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert any(k.startswith("language_model.model.layers.") for k in keys)
    assert "language_model.lm_head.weight" in keys and any(k.startswith("audio_tower.") for k in keys)
    rep = loaded.report
    assert rep.ok and not rep.dropped and len(rep.mapped) == len(keys), rep.summary()


def test_weights_equal_transformers(loaded, hf_model):
    """Every transformers tensor (in-memory names) has its oasr counterpart, equal."""
    from oasr.models.speech_llm.convert import rename_key

    ours = loaded.model.state_dict()
    theirs = {rename_key(k): v for k, v in hf_model.state_dict().items()}
    assert set(theirs) == {k for k in ours if not k.startswith("decoder.rotary.")}
    for name, t in theirs.items():
        assert torch.equal(ours[name], t), name


@pytest.mark.parametrize("layout", ["in_memory", "resave"])
def test_other_key_layouts_load_to_the_same_model(hf_dir, tmp_path, loaded, hf_model, layout):
    from safetensors.torch import load_file

    import oasr

    saved = load_file(str(hf_dir / "model.safetensors"))
    state = _rename(saved, IN_MEMORY if layout == "in_memory" else RESAVE)
    if layout == "in_memory":
        assert set(state) == set(hf_model.state_dict())  # really the layout transformers holds
    else:
        assert any(k.startswith("language_model.model.model.layers.") for k in state)
    other = _copy_with_weights(hf_dir, tmp_path / layout, state)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        got = oasr.load_pretrained(other)
    assert got.report.ok and not got.report.dropped, got.report.summary()
    want = loaded.model.state_dict()
    for name, t in got.model.state_dict().items():
        assert torch.equal(t, want[name]), name


def test_unknown_tensor_is_reported(hf_dir, tmp_path):
    from safetensors.torch import load_file

    import oasr

    state = load_file(str(hf_dir / "model.safetensors"))
    state["language_model.model.layers.0.self_attn.rotary_emb.extra"] = torch.zeros(2)
    other = _copy_with_weights(hf_dir, tmp_path / "extra", state)
    with pytest.warns(UserWarning, match="not used by the model"):
        got = oasr.load_pretrained(other)
    assert "decoder.layers.0.self_attn.rotary_emb.extra" in got.report.dropped


# The published Qwen2-Audio-7B text_config names only these; the rest are Qwen2 defaults.
RELEASE_TEXT_CONFIG = {
    "model_type": "qwen2",
    "vocab_size": 156032,
    "intermediate_size": 11008,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}


def test_omitted_text_config_fields_take_qwen2_defaults():
    from transformers import Qwen2AudioConfig as HFQwen2AudioConfig

    hf = {"model_type": "qwen2_audio", "audio_token_index": 151646, "text_config": RELEASE_TEXT_CONFIG}
    text = Qwen2AudioConfig.from_hf(hf).text
    want = HFQwen2AudioConfig(text_config=dict(RELEASE_TEXT_CONFIG), audio_token_index=151646).text_config
    assert text.vocab_size == want.vocab_size == 156032
    assert text.hidden_size == want.hidden_size
    assert text.num_hidden_layers == want.num_hidden_layers
    assert text.num_attention_heads == want.num_attention_heads
    assert text.num_key_value_heads == want.num_key_value_heads
    assert text.resolved_head_dim == want.hidden_size // want.num_attention_heads
    assert text.intermediate_size == want.intermediate_size
    assert text.rms_norm_eps == want.rms_norm_eps
    assert text.rope_theta == want.rope_parameters["rope_theta"]
    assert text.max_position_embeddings == want.max_position_embeddings
    assert text.tie_word_embeddings == want.tie_word_embeddings
    assert text.attention_bias and not text.qk_norm
    audio = Qwen2AudioConfig.from_hf(hf).audio  # the audio_config is omitted entirely
    assert (audio.d_model, audio.encoder_layers, audio.encoder_attention_heads) == (1280, 32, 20)
    assert (audio.num_mel_bins, audio.max_source_positions) == (128, 1500)


@torch.no_grad()
def test_directory_with_omitted_fields_loads_like_transformers(tmp_path_factory, hf_batch1):
    """A saved config without rope / eps / context / tying / activation keys: both read
    the defaults, and the prefill logits agree."""
    from transformers import Qwen2AudioForConditionalGeneration

    import oasr

    omit = ("rope_parameters", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings", "hidden_act")
    path = ref.build_tiny_qwen2_audio(tmp_path_factory.mktemp("omitted"), omit=omit)
    text = json.loads((path / "config.json").read_text())["text_config"]
    assert not set(omit) & set(text)
    hf = Qwen2AudioForConditionalGeneration.from_pretrained(path).eval().double()
    model = copy.deepcopy(oasr.load_pretrained(path).model).double()
    assert model.config.text.max_position_embeddings == 32768 and model.config.text.rope_theta == 10000.0

    hf_logits = hf(**hf_batch1).logits[:, -1]
    mel_lens = hf_batch1["feature_attention_mask"].sum(-1)
    states, n_audio = model.encode_offline(hf_batch1["input_features"].double(), mel_lens)
    ids = torch.tensor([model.prompt_ids(int(n_audio[0]))])
    valid = torch.ones_like(ids, dtype=torch.bool)
    embeds = model.embed_prompt(ids, valid, states, n_audio)
    logits, _ = model.decoder.prefill(model.decoder.new_pool(1, max_len=ids.shape[1]), embeds, valid)
    ref.assert_parity(logits, hf_logits, "prefill logits (text_config with omitted fields)")


def test_specs(loaded, tok):
    feats = loaded.feature_spec
    assert feats.kind == "whisper_mel" and feats.sampling_rate == 16000
    assert feats.params["n_mels"] == 128 and feats.params["pad_to_chunk"] is True
    assert (feats.params["n_fft"], feats.params["hop_length"], feats.params["chunk_length"]) == (400, 160, 30)
    assert loaded.decoding_spec.decode_type.value == "llm"
    assert loaded.decoding_spec.params["temperature"] == 0.0  # generate is greedy without do_sample
    spec = loaded.tokenizer_spec
    assert spec.kind == "huggingface" and set(spec.special_ids) == {tok.token_to_id(t) for t in ref.SPECIAL_TOKENS}
    cfg = loaded.model.config
    assert cfg.audio_token_id == tok.token_to_id("<|AUDIO|>")
    assert (cfg.audio_bos_id, cfg.audio_eos_id) == (tok.token_to_id("<|audio_bos|>"), tok.token_to_id("<|audio_eos|>"))
    assert set(loaded.model.stop_ids) == {tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")}
    assert cfg.prompt_style == "chat"
    assert Qwen2AudioConfig.from_dict(cfg.to_dict()) == cfg
    assert loaded.model.encoder.streaming_kind == "none" and loaded.model.cache_spec is None


def test_generation_config_sampling_defaults(hf_dir, tmp_path):
    import oasr

    other = tmp_path / "sampling"
    shutil.copytree(hf_dir, other)
    gen = json.loads((other / "generation_config.json").read_text())
    gen.update(do_sample=True, temperature=0.7, top_k=20, top_p=0.5, repetition_penalty=1.1, max_new_tokens=256)
    (other / "generation_config.json").write_text(json.dumps(gen))
    params = oasr.load_pretrained(other).decoding_spec.params
    assert params == {"temperature": 0.7, "top_k": 20, "top_p": 0.5, "repetition_penalty": 1.1, "max_new_tokens": 256}


def test_mismatched_audio_token_is_refused(hf_dir, tmp_path):
    import oasr
    from oasr.models.base import LoadError

    other = tmp_path / "bad_ids"
    shutil.copytree(hf_dir, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["audio_token_index"] = 5
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(LoadError, match="audio_token_index=5"):
        oasr.load_pretrained(other)
