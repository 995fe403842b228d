"""Moonshine against transformers' ``MoonshineForConditionalGeneration`` on a tiny random checkpoint
saved by transformers' own classes: float64 stage by stage (the conv front, each encoder layer, the
encoder's output, the decoder's teacher-forced logits) with three real clips of unequal lengths in
one padded batch, each row against transformers on that clip alone; and the engine's greedy tokens
and text, the three clips decoded in one batch, equal to ``generate`` on each clip alone with the
model card's limit (6.5 positions per second), finish reasons included."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import torch

from tests.models.moonshine.conftest import CLIPS, hf_generate, parity

COSINE = 1 - 1e-12
MAX_ABS = 1e-9


@pytest.fixture(scope="module")
def ours(reference):
    from oasr.models import load_pretrained

    return load_pretrained(reference.path).model.double().eval()


@pytest.fixture(scope="module")
def batch(waveforms) -> tuple[torch.Tensor, torch.Tensor]:
    lens = torch.tensor([len(w) for w in waveforms])
    x = torch.zeros(len(waveforms), int(lens.max()), dtype=torch.float64)
    for i, w in enumerate(waveforms):
        x[i, : len(w)] = torch.from_numpy(w)
    return x, lens


def _hf_stages(model, wave: np.ndarray) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """transformers on one clip: the conv front's output, each encoder layer's, the encoder's."""
    enc = model.model.encoder
    x = torch.from_numpy(wave).double()[None]
    layers: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda m, i, o: layers.append(o)) for layer in enc.layers]
    try:
        with torch.no_grad():
            h = torch.tanh(enc.conv1(x[:, None]))
            h = torch.nn.functional.gelu(enc.conv3(torch.nn.functional.gelu(enc.conv2(enc.groupnorm(h)))))
            out = enc(x).last_hidden_state
    finally:
        for hook in hooks:
            hook.remove()
    return h.transpose(1, 2)[0], [t[0] for t in layers], out[0]


def test_each_stage_of_a_padded_batch_equals_transformers_on_each_clip(ours, reference, batch, waveforms):
    x, lens = batch
    with torch.no_grad():
        front, frames = ours.encoder.front(x, lens)
        layers: list[torch.Tensor] = []
        enc, frames2 = ours.encoder(x, lens, keep_layers=layers)
    assert torch.equal(frames, frames2)
    assert frames.tolist() != [frames.max()] * len(CLIPS)  # the rows really are padded
    for i, wave in enumerate(waveforms):
        n = int(frames[i])
        hf_front, hf_layers, hf_out = _hf_stages(reference.model, wave)
        assert n == hf_out.shape[0]
        stages = [("front", front[i, :n], hf_front)]
        stages += [(f"layer {j}", layers[j][i, :n], hf_layers[j]) for j in range(len(hf_layers))]
        stages += [("encoder", enc[i, :n], hf_out)]
        for name, a, b in stages:
            cos, err = parity(a, b)
            assert cos > COSINE and err < MAX_ABS, (CLIPS[i], name, cos, err)


def test_teacher_forced_logits_equal_transformers(ours, reference, batch, waveforms):
    x, lens = batch
    prefix = torch.tensor([[1, 5, 40, 77, 120, 9, 160, 33]]) % reference.model.config.vocab_size
    with torch.no_grad():
        enc, frames = ours.encoder(x, lens)
        for i, wave in enumerate(waveforms):
            mine = ours.decoder(prefix, enc[i : i + 1], frames[i : i + 1])
            theirs = reference.model(
                input_values=torch.from_numpy(wave).double()[None], decoder_input_ids=prefix
            ).logits
            cos, err = parity(mine, theirs)
            assert cos > COSINE and err < MAX_ABS, (CLIPS[i], cos, err)


@pytest.fixture(scope="module")
def hf32(reference):
    return copy.deepcopy(reference.model).float()


def _budget(wave: np.ndarray) -> int:
    return int(len(wave) * 6.5 / 16000) - 1  # the card's max_length, less the decoder-start token


def test_engine_batch_equals_generate_on_each_clip(engine, hf32, reference, waveforms, audio_dir):
    outs = engine.transcribe([str(audio_dir / c) for c in CLIPS])
    for out, wave in zip(outs, waveforms, strict=True):
        want = hf_generate(hf32, wave)
        got = [t for s in out.segments for t in s.tokens]
        assert got == want
        assert out.text == reference.tokenizer.decode(want, skip_special_tokens=True).strip()
        assert out.language == "en"
        # The random decoder never says </s> here: every row stops at its own budget.
        assert len(got) == _budget(wave) and out.finish_reason == "length"


@pytest.fixture(scope="module")
def stopping(reference, tmp_path_factory):
    """The same weights whose end id is a token the random decoder writes early on."""
    path = tmp_path_factory.mktemp("moonshine_stop")
    for f in reference.path.iterdir():
        shutil.copy(f, path / f.name)
    gen = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": STOP}))
    return path


STOP = 152  # the tiny decoder's sixth token on the first clip


def test_the_end_id_of_the_generation_config_stops_as_generate_does(stopping, hf32, waveforms, audio_dir):
    import oasr

    out = oasr.ASREngine(str(stopping)).transcribe(str(audio_dir / CLIPS[0]))
    want = hf_generate(hf32, waveforms[0], eos_token_id=STOP)
    assert [t for s in out.segments for t in s.tokens] == want
    assert len(want) < _budget(waveforms[0]) and out.finish_reason == "stop"
