"""The ``paraformer`` strategy's pieces against funasr's own functions (CIF, timestamps, text
joining), and the engine and CLI on Mandarin speech."""

from __future__ import annotations

import re

import pytest
import torch

import oasr
from oasr.cli.main import main
from oasr.engine.decode.paraformer.text import group_pieces, join_words
from oasr.engine.decode.paraformer.timestamps import sequential_cif_peaks, token_times
from oasr.models.paraformer.predictor import add_tail, integrate_fire
from tests.models.paraformer.conftest import ZH_CLIP


def _text(pieces: list[str]) -> str:
    return "".join(join_words(group_pieces(pieces)))


@pytest.mark.parametrize(
    ("pieces", "text"),
    [
        (["欢", "迎", "大", "家"], "欢迎大家"),
        (["hel@@", "lo", "wor@@", "ld"], "hello world"),
        (["我", "说", "hel@@", "lo", "world", "你", "好", "ok"], "我说hello world你好ok"),
        (["<s>", "2", "0", "2", "6", "年", "</s>", "<unk>"], "2026年"),
    ],
)
def test_pieces_join_as_funasr_joins_them(pieces, text):
    assert _text(pieces) == text
    postprocess = pytest.importorskip("funasr.utils.postprocess_utils", reason="funasr is not installed")
    assert postprocess.sentence_postprocess(pieces)[0] == text


def test_prefix_sum_cif_matches_funasr(funasr_dirs):
    from funasr.models.bicif_paraformer.cif_predictor import cif as loop_cif
    from funasr.models.paraformer.cif_predictor import cif_v1

    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 40, 8, generator=g)
    lens = torch.tensor([40, 31, 17])
    alphas = torch.rand(3, 40, generator=g) * 0.7 * (torch.arange(40)[None] < lens[:, None])
    alphas, hidden, token_num = add_tail(alphas, hidden, lens, 0.45)
    width = int(token_num.max())
    ours, fires = integrate_fire(hidden, alphas, width)
    ref, ref_fires = cif_v1(hidden, alphas, 1.0)
    assert torch.allclose(ours, ref[:, :width], atol=1e-5) and torch.equal(fires, ref_fires)
    looped, _ = loop_cif(hidden, alphas, 1.0)  # BiCif's sequential float32 CIF: the same tokens
    assert torch.allclose(ours, looped[:, :width], atol=1e-4)


@pytest.mark.parametrize("upsample_rate", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_token_times_match_funasr(funasr_dirs, upsample_rate, seed):
    from funasr.models.paraformer.cif_predictor import cif_wo_hidden
    from funasr.utils.timestamp_tools import ts_prediction_lfr6_standard

    g = torch.Generator().manual_seed(seed)
    t = 60 * upsample_rate
    alphas = torch.rand(t, generator=g) * 0.5
    alphas[: 8 * upsample_rate] = 0.0  # a leading silence
    alphas[30 * upsample_rate : 40 * upsample_rate] = 0.01  # a long gap inside
    peaks = cif_wo_hidden(alphas[None], 1.0 - 1e-4)[0]
    n = int(alphas.sum().round()) - seed % 2  # sometimes one fewer token than fires
    for first, second in ((alphas, peaks), (peaks, alphas)):  # BiCif's order, and V2's swapped one
        _, ref = ts_prediction_lfr6_standard(first.clone(), second.clone(), ["x"] * n, upsample_rate=upsample_rate)
        assert token_times(first.clone(), second.clone(), n, upsample_rate) == [tuple(r) for r in ref]
    assert torch.equal(sequential_cif_peaks(alphas), peaks)


def test_engine_and_cli_transcribe_mandarin_with_cif_times(funasr_dirs, funasr_models, zh_audio, tmp_path, capsys):
    """A random model's text is random: the run, the format, and the engine's tokens equal to
    funasr's on the same clip are what is checked."""
    from tests.conftest import AUDIO_DIR

    directory = funasr_dirs["Paraformer"]
    engine = oasr.ASREngine(str(directory))
    out = engine.transcribe(str(AUDIO_DIR / ZH_CLIP), word_timestamps=True)
    (ref,) = funasr_models["Paraformer"].generate(input=zh_audio, output_timestamp=True, disable_pbar=True)
    assert out.text == ref["text"].replace(" ", "") and " " not in out.text
    assert out.duration == pytest.approx(5.547, abs=0.01)

    code = main(["transcribe", str(AUDIO_DIR / ZH_CLIP), "--model", str(directory), "-f", "srt", "--no-progress"])
    srt = capsys.readouterr().out
    assert code == 0
    cues = re.findall(r"(\d+)\n(\d\d:\d\d:\d\d,\d\d\d) --> (\d\d:\d\d:\d\d,\d\d\d)\n(.+)\n", srt)
    assert cues and "".join(c[3] for c in cues) == out.text
    first = ref["timestamp"][0][0]
    assert cues[0][1] == f"00:00:{first // 1000:02d},{first % 1000:03d}"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"task": "translate"}, "can only transcribe"),
        ({"language": "zh"}, r"'zh' \(Chinese\): ParaformerModel has no language control"),
        ({"initial_prompt": "你好"}, "initial_prompt: the 'paraformer' decoding does not take it .only 'aed'"),
        ({"hotwords": "达摩院"}, "has no hotword biasing"),
        ({"temperature": 0.7}, "temperature: the 'paraformer' decoding does not take it .only 'aed' and 'llm'"),
        ({"beam_size": 5}, "beam_size: the 'paraformer' decoding does not take it"),
    ],
)
def test_options_it_cannot_honour_are_refused(oasr_dir, option, message):
    engine = oasr.ASREngine(str(oasr_dir))
    with pytest.raises(ValueError, match=message):
        engine.transcribe(torch.zeros(16000).numpy(), **option)


def test_silence_and_a_too_short_input_give_empty_transcripts(oasr_dir):
    engine = oasr.ASREngine(str(oasr_dir))
    assert engine.transcribe(torch.zeros(100).numpy()).text == ""  # shorter than one 25 ms frame
    out = engine.transcribe(torch.zeros(8000).numpy(), word_timestamps=True)
    assert all(s.text and s.words for s in out.segments)  # whatever a random model says is timed


def test_a_batch_takes_the_oldest_window_and_those_nearest_its_length(oasr_dir, monkeypatch):
    """Rows are padded to the longest: the strategy groups like lengths (oldest first), and the
    texts do not depend on the grouping."""
    from oasr.engine.decode.paraformer import strategy as mod

    seconds = [6.0, 1.0, 5.5, 1.2, 6.2, 0.9]
    rng = torch.Generator().manual_seed(0)
    clips = [(0.1 * torch.randn(int(16000 * s), generator=rng)).numpy() for s in seconds]
    alone = [oasr.ASREngine(str(oasr_dir), max_batch_size=1).transcribe(c).text for c in clips]

    seen: list[list[int]] = []
    real = mod.decode_batch

    def recording(model, feats, device, dtype):
        seen.append([f.shape[0] for f in feats])
        return real(model, feats, device, dtype)

    monkeypatch.setattr(mod, "decode_batch", recording)
    engine = oasr.ASREngine(str(oasr_dir), max_batch_size=3, encoder_batch_size=3)
    assert [o.text for o in engine.transcribe(clips)] == alone
    lfr = [len(engine.strategy.frontend(torch.from_numpy(c))) for c in clips]
    assert seen == [[lfr[0], lfr[2], lfr[4]], [lfr[1], lfr[3], lfr[5]]]

    # On a CPU the default passes one window at a time (the step still takes three).
    seen.clear()
    engine = oasr.ASREngine(str(oasr_dir), max_batch_size=3)
    assert engine.strategy.encoder_batch == 1
    assert [o.text for o in engine.transcribe(clips)] == alone
    assert seen == [[lfr[k]] for k in (0, 2, 4, 1, 3, 5)]
