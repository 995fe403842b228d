"""NeMo's own Canary archives (``EncDecMultiTaskModel``, prompt formats ``canary`` and ``canary2``)
through oasr's loader, held to NeMo itself in float64: the strict load, the encoder (projected to
the decoder's width), the decoder's log-probs, the prompts token for token, and greedy / beam
tokens against NeMo's own ``MultiTaskDecoding`` run on the same encoder output. Skipped where
``nemo-toolkit`` is not installed (``.ci/run`` installs it)."""

from __future__ import annotations

import shutil
import tarfile

import numpy as np
import pytest
import torch

from oasr.audio import load_audio
from oasr.models.base import LoadError
from oasr.models.canary.search import SearchParams
from oasr.models.loaders import load_pretrained
from tests.models.canary.conftest import DATA

CLIPS = ("jfk.wav", "speechbrain_spk1_snt1.wav", "bambatse_15_haggard_0247.wav")


def _encoded(ref, clips=CLIPS):
    """NeMo's projected encoder output of each clip, padded: (B, T', D), (B,), mask."""
    waves = [torch.from_numpy(load_audio(str(DATA / c), 16000).astype(np.float64)) for c in clips]
    lens = torch.tensor([len(w) for w in waves])
    x = torch.zeros(len(waves), int(lens.max()), dtype=torch.float64)
    for i, w in enumerate(waves):
        x[i, : len(w)] = w
    with torch.no_grad():
        feats, flen = ref.preprocessor(input_signal=x, length=lens)
    return feats, flen


@pytest.mark.parametrize("fmt", ["canary", "canary2"])
def test_load_is_strict_and_stages_match_nemo(canary, fmt):
    _, ref, loaded = canary[fmt]
    assert not loaded.report.missing
    assert set(loaded.report.dropped) == {
        "preprocessor.featurizer.fb",
        "preprocessor.featurizer.window",
        "decoder.embedding.position_embedding.pos_enc",
    }
    model = loaded.model
    feats, flen = _encoded(ref)
    with torch.no_grad():
        _, enc_len, enc, enc_mask = ref.forward(processed_signal=feats, processed_signal_length=flen)
        mine, mine_len = model.encode_offline(feats.transpose(1, 2), flen)
        assert torch.equal(mine_len, enc_len)
        for i, n in enumerate(enc_len.tolist()):
            torch.testing.assert_close(mine[i, :n], enc[i, :n], atol=1e-6, rtol=0)
        prompt = model.prompt("en", "en")
        ids = torch.tensor([prompt + [20, 30, 25]] * len(CLIPS))
        h = ref.transf_decoder(
            input_ids=ids, decoder_mask=torch.ones_like(ids).double(), encoder_embeddings=enc, encoder_mask=enc_mask
        )
        want = ref.log_softmax(hidden_states=h)[:, -1]
        got = model.decoder(ids, model.decoder.new_cache(enc, enc_len))
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_prompts_equal_nemos_formatter(canary):
    _, ref1, loaded1 = canary["canary"]
    for src, tgt, pnc in (("en", "en", True), ("en", "de", False), ("de", "en", True)):
        task = "asr" if src == tgt else "ast"
        slots = {"source_lang": src, "target_lang": tgt, "task": task, "pnc": "yes" if pnc else "no"}
        want = ref1.prompt.encode_dialog([{"role": "user", "slots": slots}])["context_ids"].tolist()
        assert loaded1.model.prompt(src, tgt, punctuation=pnc) == want
    _, ref2, loaded2 = canary["canary2"]
    for src, tgt, flags in (("en", "en", (True, False, False)), ("de", "en", (False, True, True))):
        pnc, itn, ts = flags
        slots = {
            "decodercontext": "",
            "emotion": "<|emo:undefined|>",
            "source_lang": src,
            "target_lang": tgt,
            "pnc": "yes" if pnc else "no",
            "itn": "yes" if itn else "no",
            "timestamp": "yes" if ts else "no",
            "diarize": "no",
        }
        want = ref2.prompt.encode_dialog([{"role": "user", "slots": slots}])["context_ids"].tolist()
        got = loaded2.model.prompt(src, tgt, punctuation=pnc, itn=itn, timestamps=ts)
        assert got == want


def _nemo_tokens(ref, enc, enc_mask, prompt, decoding) -> list[list[int]]:
    from omegaconf import OmegaConf

    ref.change_decoding_strategy(OmegaConf.create(decoding))
    ids = torch.tensor([prompt] * enc.shape[0])
    hyps = ref.decoding.decode_predictions_tensor(enc, enc_mask, ids, return_hypotheses=True)
    return [h.y_sequence.tolist() for h in hyps]


@pytest.mark.parametrize("fmt", ["canary", "canary2"])
def test_greedy_and_beam_tokens_equal_nemos(canary, fmt):
    _, ref, loaded = canary[fmt]
    model = loaded.model
    feats, flen = _encoded(ref)
    with torch.no_grad():
        _, enc_len, enc, enc_mask = ref.forward(processed_signal=feats, processed_signal_length=flen)
        mine, mine_len = model.encode_offline(feats.transpose(1, 2), flen)
    prompt = model.prompt("en", "en")
    # Greedy, batched (NeMo's batch caps nothing with max_generation_delta -1).
    want = _nemo_tokens(
        ref, enc, enc_mask, prompt, {"strategy": "greedy_batch", "greedy": {"max_generation_delta": -1}}
    )
    got = model.multitask_search(mine, mine_len, [prompt] * len(CLIPS), SearchParams(greedy=True))
    assert got == want
    assert any(len(t) > 1 for t in got)
    # Beam search: NeMo's batch of one per clip (its batched beam mixes the elements' cached states).
    for k in (2, 4):
        decoding = {"strategy": "beam", "beam": {"beam_size": k, "length_penalty": 1.0, "max_generation_delta": 50}}
        params = SearchParams(greedy=False, beam_size=k, length_penalty=1.0, max_generation_delta=50)
        for i, n in enumerate(enc_len.tolist()):
            want = _nemo_tokens(ref, enc[i : i + 1, :n], enc_mask[i : i + 1, :n], prompt, decoding)
            assert model.multitask_search(mine[i : i + 1, :n], mine_len[i : i + 1], [prompt], params) == want, (k, i)


def test_archive_decoding_is_the_default(canary):
    _, _, loaded = canary["canary"]
    p = loaded.model.search_params()
    assert (p.greedy, p.beam_size, p.length_penalty, p.max_generation_delta) == (False, 1, 0.0, 50)


def test_unimplemented_config_is_refused_naming_key_and_value(canary, tmp_path):
    import yaml

    path, _, _ = canary["canary"]
    unpacked = tmp_path / "unpacked"
    with tarfile.open(path) as tar:
        tar.extractall(unpacked, filter="data")
    cfg_path = unpacked / "model_config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["transf_decoder"]["config_dict"]["learn_positional_encodings"] = True
    cfg_path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(LoadError, match="learn_positional_encodings=True"):
        load_pretrained(unpacked)
    shutil.rmtree(unpacked)
