"""Moonshine Streaming against transformers in float64, stage by stage, on a tiny random
checkpoint saved by transformers' own classes: the released layout loads with every tensor
accounted for, the encoder (frames, masked convolutions, sliding windows) and the decoder's
logits match, and greedy decoding through the engine, the CLI and the server equals
transformers' ``generate`` on whole clips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.models.moonshine_streaming.conftest import hf_generate, hf_inputs

MAX_NEW = 12


def _clips(waveforms) -> list[np.ndarray]:
    # A clip that ends 37 samples into a 5-ms frame (the mask drops it, and the convolutions keep
    # frames whose window reads a valid one), besides the clips as they are.
    return [*waveforms, waveforms[0][: 80 * 200 + 37]]


def test_loads_every_tensor(loaded):
    report = loaded.report
    assert not report.missing and not report.dropped
    assert loaded.model.config.eos_token_ids == (2,) and loaded.model.config.rotary_dim == 10


def test_encoder_equals_transformers_per_clip_and_batched(reference, loaded, waveforms):
    model = loaded.model
    clips = _clips(waveforms)
    lens = torch.tensor([len(w) for w in clips])
    feats = torch.zeros(len(clips), int(lens.max()), 1, dtype=torch.float64)
    for i, w in enumerate(clips):
        feats[i, : len(w), 0] = torch.from_numpy(w).double()
    with torch.no_grad():
        batch, batch_lens = model.encode_offline(feats, lens)
        for i, w in enumerate(clips):
            x, mask = hf_inputs(w)
            out = reference.model.model.encoder(x, attention_mask=mask)
            n = int(out.attention_mask.sum())
            assert int(batch_lens[i]) == n, "valid frames per clip as transformers counts them alone"
            # The norms' gamma + 1 is folded into float32 weights at load: float32 rounding.
            torch.testing.assert_close(batch[i, :n], out.last_hidden_state[0, :n], rtol=1e-6, atol=1e-6)


def test_decoder_logits_equal_transformers(reference, loaded, waveforms):
    """Prefill + steps over the pool, from transformers' encoder states, give transformers'
    teacher-forced logits."""
    model = loaded.model
    w = _clips(waveforms)[2]
    ids = [1, 40, 20, 30, 15]
    x, mask = hf_inputs(w)
    with torch.no_grad():
        want = reference.model(input_values=x, attention_mask=mask, decoder_input_ids=torch.tensor([ids])).logits[0]
        enc = reference.model.model.encoder(x, attention_mask=mask)
        n = enc.attention_mask.sum(1)
        states = enc.last_hidden_state[:, : int(n[0])]
        prompt = torch.tensor([model.prompt_ids(int(n[0]))])
        embeds = model.embed_prompt(prompt, torch.ones_like(prompt, dtype=torch.bool), states, n)
        pool = model.decoder.new_pool(1, max_len=8, dtype=torch.float64)
        first, state = model.decoder.prefill(pool, embeds, torch.ones_like(prompt, dtype=torch.bool))
        got = [first] + [model.decoder.step(state, torch.tensor([t])) for t in ids[1:]]
    torch.testing.assert_close(torch.cat(got), want, rtol=1e-9, atol=1e-9)


def test_greedy_equals_generate_through_the_engine(reference, hf32, engine, waveforms):
    clips = _clips(waveforms)
    outs = engine.transcribe(clips, max_new_tokens=MAX_NEW)
    for w, out in zip(clips, outs):
        want = hf_generate(hf32, w, MAX_NEW)
        got = [t for s in out.segments for t in s.tokens]
        assert got == want
        assert out.text == reference.tokenizer.decode(want, skip_special_tokens=True).strip()
        assert out.finish_reason == ("length" if len(want) == MAX_NEW else "stop")


def test_default_budget_follows_the_audio(engine, waveforms):
    """Without max_new_tokens a clip may write transformers' recipe, int(6.5 * seconds) - 1
    tokens (a random model never stops by itself here)."""
    w = waveforms[0]
    out = engine.transcribe(w)
    budget = int(len(w) / 16000 * 6.5) - 1
    assert out.finish_reason == "length" and len(out.segments[0].tokens) == budget


def test_cli_and_server_equal_the_engine(reference, engine, manifest, capsys):
    from fastapi.testclient import TestClient

    from oasr.cli.main import main
    from oasr.server.app import create_app
    from oasr.server.settings import ServerSettings
    from tests.models.moonshine_streaming.conftest import CLIPS

    path = next(row["path"] for row in manifest if row["audio"] == CLIPS[1])
    api = engine.transcribe(path, max_new_tokens=MAX_NEW)
    capsys.readouterr()
    argv = ["transcribe", path, "--model", str(reference.path), "-f", "json", "--no-progress"]
    assert main([*argv, "--max-new-tokens", str(MAX_NEW)]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == api.text
    with TestClient(create_app(ServerSettings(model=str(reference.path)))) as client, open(path, "rb") as f:
        r = client.post(
            "/v1/audio/transcriptions",
            files={"file": ("a.wav", f, "audio/wav")},
            data={"model": str(reference.path), "max_new_tokens": str(MAX_NEW), "response_format": "verbose_json"},
        )
    assert r.status_code == 200, r.text
    assert r.json()["text"] == api.text


def test_int8_decodes(reference, waveforms):
    import oasr
    from oasr.layers.quant import Int8Linear

    engine = oasr.ASREngine(str(reference.path), quantize="int8")
    assert any(isinstance(m, Int8Linear) for m in engine.model.decoder.modules())
    out = engine.transcribe(waveforms[1], max_new_tokens=4)
    tokens = [t for s in out.segments for t in s.tokens]
    assert 1 <= len(tokens) <= 4 and out.finish_reason == ("length" if len(tokens) == 4 else "stop")


def test_refused_requests_say_why(engine):
    from oasr.languages import LanguageError

    second = np.zeros(16000, dtype=np.float32)
    with pytest.raises(ValueError, match="too short for one encoder frame"):
        engine.transcribe(np.zeros(50, dtype=np.float32))
    with pytest.raises(ValueError, match="takes no text prompt"):
        engine.transcribe(second, context="hello")
    with pytest.raises(LanguageError, match="is not a language of"):
        engine.transcribe(second, language="fr")
    with pytest.raises(ValueError, match="only transcribes"):
        engine.transcribe(second, task="translate")
