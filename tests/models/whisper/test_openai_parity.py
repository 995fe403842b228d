"""The openai-whisper ``.pt`` path: ``{"dims": ..., "model_state_dict": ...}`` with
openai's tensor names and tokenizer.json beside it.

openai-whisper's format has no field for the MLP width: its model is always
``4 x n_state`` wide. The tiny reference's MLP is ``2 x n_state`` (128), so its .pt
declares the width with two extra ``dims`` keys that oasr's config reads (openai-whisper
itself could not build that model). A genuine checkpoint -- standard ``dims`` only,
``4 x n_state`` MLP -- is checked too, against transformers and, when installed,
against openai-whisper's own ``Whisper`` module.
"""

from __future__ import annotations

import shutil

import pytest
import torch

import oasr
from tests.models.whisper import _reference as ref

PROMPT, FORCED = ref.TF_PROMPT, ref.TF_FORCED


def _write_pt(directory, state, dims, vocab_dir):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tiny.pt"
    torch.save({"dims": dims, "model_state_dict": state}, path)
    shutil.copy(vocab_dir / "tokenizer.json", directory / "tokenizer.json")
    return path


def test_openai_pt_of_the_reference_loads_identically(tmp_path, hf_model, oasr_hf, vocab_dir):
    state = ref.hf_to_openai_state_dict(hf_model.state_dict())
    assert "decoder.blocks.1.cross_attn.key.weight" in state and "encoder.ln_post.bias" in state
    path = _write_pt(tmp_path / "pt", state, ref.openai_dims(ffn_explicit=True), vocab_dir)
    for where in (path, path.parent):  # the file, or the directory holding it
        loaded = oasr.load_pretrained(where)
        assert loaded.format == "openai-whisper" and loaded.report.ok and not loaded.report.missing
        assert loaded.model.config == oasr_hf.model.config
        a, b = loaded.model.state_dict(), oasr_hf.model.state_dict()
        assert set(a) == set(b)
        assert [k for k in a if not torch.equal(a[k], b[k])] == []
    assert loaded.tokenizer.encode_text(" ask not") == oasr_hf.tokenizer.encode_text(" ask not")
    # No alignment heads in the file: the upper half of the decoder layers, every head.
    assert loaded.decoding_spec.params["alignment_heads"] == [[1, h] for h in range(ref.N_HEADS)]


@pytest.fixture(scope="module")
def genuine(tmp_path_factory, vocab_dir):
    """A checkpoint openai-whisper itself writes and reads: standard dims, 4 x n_state MLP."""
    hf4 = ref.tiny_hf_model(ffn=4 * ref.D_MODEL, eot_bias=False)
    state = ref.hf_to_openai_state_dict(hf4.state_dict())
    path = _write_pt(tmp_path_factory.mktemp("openai_pt"), state, ref.openai_dims(ffn_explicit=False), vocab_dir)
    return hf4, state, path


@torch.no_grad()
def test_genuine_openai_checkpoint_matches_transformers(genuine, hf_features):
    hf4, _, path = genuine
    loaded = oasr.load_pretrained(path)
    assert loaded.model.config.encoder_ffn_dim == 4 * ref.D_MODEL
    a = loaded.model.state_dict()
    b = {k.removeprefix("model."): v for k, v in hf4.state_dict().items() if k != "proj_out.weight"}
    assert set(a) == set(b) and [k for k in a if not torch.equal(a[k], b[k])] == []

    feats = hf_features[:1]
    enc, _ = loaded.model.encode_offline(feats)
    hf_enc = hf4.model.encoder(feats).last_hidden_state
    ref.assert_parity(enc, hf_enc, "openai-loaded encoder vs transformers")
    full = torch.tensor([PROMPT + FORCED])
    hf_logits = hf4(encoder_outputs=(hf_enc,), decoder_input_ids=full).logits[0]
    pool = loaded.model.decoder.new_pool(1, 1)
    at = torch.arange(full.shape[1])[None]
    logits, _ = loaded.model.decoder.prefill(pool, full, torch.tensor([full.shape[1]]), memory=enc, logits_at=at)
    ref.assert_parity(logits[0], hf_logits, "openai-loaded logits vs transformers")


@torch.no_grad()
def test_genuine_openai_checkpoint_matches_openai_whisper(genuine, hf_features):
    whisper_model = pytest.importorskip("whisper.model", reason="openai-whisper is not installed")
    _, state, path = genuine
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    reference = whisper_model.Whisper(whisper_model.ModelDimensions(**ckpt["dims"])).eval()
    reference.load_state_dict(ckpt["model_state_dict"], strict=True)  # the layout written here is openai's
    loaded = oasr.load_pretrained(path)

    feats = hf_features[:1]
    enc, _ = loaded.model.encode_offline(feats)
    ref.assert_parity(enc, reference.embed_audio(feats), "openai-loaded encoder vs openai-whisper")
    full = torch.tensor([PROMPT + FORCED])
    at = torch.arange(full.shape[1])[None]
    pool = loaded.model.decoder.new_pool(1, 1)
    logits, _ = loaded.model.decoder.prefill(pool, full, torch.tensor([full.shape[1]]), memory=enc, logits_at=at)
    ref.assert_parity(logits, reference.logits(full, reference.embed_audio(feats)), "logits vs openai-whisper")
