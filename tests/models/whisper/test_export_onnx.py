"""The sherpa-onnx export: its graphs compute what oasr's Whisper modules compute (tiny random
checkpoint, through onnxruntime), its metadata and token table are the ones sherpa-onnx reads,
and sherpa-onnx's own recognizer transcribes the exported tiny.en as oasr does."""

from __future__ import annotations

import base64
import contextlib
import io

import pytest
import torch

from tests.conftest import AUDIO_DIR
from tests.models.whisper import _reference as ref

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, hf_dir):
    """The tiny checkpoint exported by ``oasr models export-sherpa-onnx ... --int8``."""
    from oasr.cli.main import main
    from oasr.models.whisper.export_onnx import SherpaOnnxFiles

    out = tmp_path_factory.mktemp("sherpa_onnx")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["models", "export-sherpa-onnx", str(hf_dir), str(out), "--prefix", "tiny", "--int8"]) == 0
    names = ("encoder.onnx", "decoder.onnx", "tokens.txt", "encoder.int8.onnx", "decoder.int8.onnx")
    files = SherpaOnnxFiles(*(out / f"tiny-{name}" for name in names))
    assert sorted(printed.getvalue().split()) == sorted(str(out / f"tiny-{name}") for name in names)
    return files


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_encoder_graph_gives_the_cross_attention_kv_of_oasr(exported, oasr_hf, hf_features):
    model = oasr_hf.model
    feats = hf_features[:1]
    with torch.inference_mode():
        memory, _ = model.encode_offline(feats)
        want_k = torch.stack([layer.encoder_attn.k_proj(memory) for layer in model.decoder.layers])
        want_v = torch.stack([layer.encoder_attn.v_proj(memory) for layer in model.decoder.layers])
    got_k, got_v = _session(exported.encoder).run(None, {"mel": feats.numpy()})
    assert got_k.shape == (ref.N_LAYERS, 1, ref.N_AUDIO_CTX, ref.D_MODEL)
    torch.testing.assert_close(torch.from_numpy(got_k), want_k, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.from_numpy(got_v), want_v, rtol=1e-4, atol=1e-4)


def test_encoder_graph_takes_a_window_shorter_than_30_s(exported, oasr_hf, hf_features):
    """sherpa-onnx feeds the clip plus 1000 frames, not 3000: the first positions are used."""
    from oasr.models.whisper.export_onnx import SherpaWhisperEncoder

    feats = hf_features[:1, :, :2000]
    with torch.inference_mode():
        want_k, _ = SherpaWhisperEncoder(oasr_hf.model.encoder, oasr_hf.model.decoder)(feats)
    got_k, _ = _session(exported.encoder).run(None, {"mel": feats.numpy()})
    assert got_k.shape == (ref.N_LAYERS, 1, 1000, ref.D_MODEL)
    torch.testing.assert_close(torch.from_numpy(got_k), want_k, rtol=1e-4, atol=1e-4)


def test_decoder_graph_prefills_and_steps_as_oasr(exported, oasr_hf, hf_features):
    """A prompt at offset 0 over empty caches, then one token at offset 4 over the returned
    caches: the logits of oasr's prefill over its K/V pool and of its step."""
    model = oasr_hf.model
    feats = hf_features[:1]
    prompt = torch.tensor([[ref.SOT, 50259, ref.TRANSCRIBE, ref.NO_TIMESTAMPS]])
    with torch.inference_mode():
        memory, _ = model.encode_offline(feats)
        pool = model.decoder.new_pool(max_rows=1, max_groups=1)
        want_prefill, state = model.decoder.prefill(
            pool, prompt, torch.tensor([4]), memory=memory, logits_at=torch.arange(4)[None]
        )
        want_step = model.decoder.step(state, torch.tensor([440]))
    cross_k, cross_v = _session(exported.encoder).run(None, {"mel": feats.numpy()})
    decoder = _session(exported.decoder)
    cache = torch.zeros(ref.N_LAYERS, 1, ref.N_TEXT_CTX, ref.D_MODEL).numpy()
    feed = {"n_layer_cross_k": cross_k, "n_layer_cross_v": cross_v}
    logits, k, v = decoder.run(
        None,
        {**feed, "tokens": prompt.numpy(), "in_n_layer_self_k_cache": cache, "in_n_layer_self_v_cache": cache,
         "offset": torch.tensor([0]).numpy()},
    )  # fmt: skip
    torch.testing.assert_close(torch.from_numpy(logits), want_prefill, rtol=1e-4, atol=1e-3)
    assert k.shape == cache.shape and not k[:, :, 4:].any()  # only the prompt's positions are written
    logits, _, _ = decoder.run(
        None,
        {**feed, "tokens": torch.tensor([[440]]).numpy(), "in_n_layer_self_k_cache": k, "in_n_layer_self_v_cache": v,
         "offset": torch.tensor([4]).numpy()},
    )  # fmt: skip
    torch.testing.assert_close(torch.from_numpy(logits[:, 0]), want_step, rtol=1e-4, atol=1e-3)


def test_int8_graphs_quantise_the_matmuls_and_stay_close(exported, hf_features):
    import onnx

    feats = hf_features[:1].numpy()
    k32, _ = _session(exported.encoder).run(None, {"mel": feats})
    k8, _ = _session(exported.encoder_int8).run(None, {"mel": feats})
    corr = torch.corrcoef(torch.stack([torch.from_numpy(k32).flatten(), torch.from_numpy(k8).flatten()]))[0, 1]
    assert corr > 0.99
    for path in exported.pick(int8=True):
        ops = {n.op_type for n in onnx.load(str(path)).graph.node}
        assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops


def test_metadata_and_tokens_are_what_sherpa_onnx_reads(exported, oasr_hf):
    meta = _session(exported.encoder).get_modelmeta().custom_metadata_map
    assert meta["sot_sequence"] == f"{ref.SOT},50259,{ref.TRANSCRIBE}"  # <|en|> and transcribe, replaced per call
    assert (meta["sot"], meta["eot"], meta["no_timestamps"]) == (str(ref.SOT), str(ref.EOT), str(ref.NO_TIMESTAMPS))
    assert (meta["translate"], meta["transcribe"], meta["no_speech"]) == tuple(
        map(str, (ref.TRANSLATE, ref.TRANSCRIBE, ref.NO_SPEECH))
    )
    assert (meta["n_text_layer"], meta["n_text_ctx"], meta["n_text_state"], meta["n_vocab"], meta["n_mels"]) == tuple(
        map(str, (ref.N_LAYERS, ref.N_TEXT_CTX, ref.D_MODEL, ref.N_VOCAB, ref.N_MELS))
    )
    codes, ids = meta["all_language_codes"].split(","), meta["all_language_tokens"].split(",")
    assert meta["is_multilingual"] == "1" and len(codes) == len(ids) == 99
    assert (codes[0], ids[0], codes[-1]) == ("en", "50259", "su")
    lines = exported.tokens.read_text(encoding="utf-8").splitlines()
    assert len(lines) == ref.EOT  # the text tokens only
    piece, i = lines[440].split()
    assert int(i) == 440 and base64.b64decode(piece) == oasr_hf.tokenizer.decode_bytes([440])


def test_sherpa_onnx_transcribes_the_export_as_oasr_does(sherpa_onnx_tiny_en):
    import sherpa_onnx

    from oasr.audio import SAMPLE_RATE, load_audio
    from oasr.engine import ASREngine

    clip = AUDIO_DIR / "jfk.wav"
    recognizer = sherpa_onnx.OfflineRecognizer.from_whisper(
        encoder=str(sherpa_onnx_tiny_en.encoder),
        decoder=str(sherpa_onnx_tiny_en.decoder),
        tokens=str(sherpa_onnx_tiny_en.tokens),
        language="en",
        task="transcribe",
        num_threads=1,
    )
    stream = recognizer.create_stream()
    stream.accept_waveform(SAMPLE_RATE, load_audio(str(clip)))
    recognizer.decode_stream(stream)
    out = ASREngine("tiny.en", device="cpu", num_threads=1).transcribe(
        str(clip), language="en", beam_size=1, temperature=0.0, without_timestamps=True
    )
    assert stream.result.text.strip() == out.text.strip()
    assert len(stream.result.tokens) == sum(len(s.tokens) for s in out.segments)


def test_export_command_refuses_a_model_it_cannot_load(tmp_path, capsys):
    from oasr.cli.main import main

    assert main(["models", "export-sherpa-onnx", str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "oasr models: error:" in err and "nothing" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
