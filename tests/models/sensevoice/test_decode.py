"""SenseVoice through every surface (no funasr needed): the tags as fields, ``itn`` from Python, the
CLI and HTTP alike, the directory reader's refusals, and the tag reading against funasr's own
``rich_transcription_postprocess`` where funasr is installed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import oasr
from oasr.engine.outputs import RequestOutput
from oasr.formatting import json_dict, verbose_json_dict
from oasr.languages import LanguageError
from oasr.models.base import LoadError
from oasr.models.sensevoice.tags import read_rich_transcript
from tests.conftest import AUDIO_DIR
from tests.models.sensevoice.conftest import CLIPS

CLIP = AUDIO_DIR / CLIPS[0]


@pytest.fixture(scope="module")
def engine(oasr_dir):
    return oasr.ASREngine(str(oasr_dir), device="cpu")


def test_defaults_are_funasr_generates(engine):
    options = engine.make_options()
    assert (options.language, options.itn, options.beam_size) == (None, False, 1)
    assert engine.make_options(language="Cantonese").language == "yue"
    assert engine.make_options(language="eng").language == "en"
    assert engine.make_options(language="ko-KR").language == "ko"
    with pytest.raises(LanguageError, match=r"'de' \(German\) is not a language of.*yue \(Cantonese\)"):
        engine.make_options(language="de")


def _cli(path: Path, capsys, *flags: str) -> dict:
    from oasr.cli.main import main

    capsys.readouterr()
    code = main(
        ["transcribe", str(CLIP), "--model", str(path), "--device", "cpu", "-f", "json", "--no-progress", *flags]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def _http(path: Path, **fields: str) -> tuple[dict, dict]:
    from fastapi.testclient import TestClient

    from oasr.cli.main import build_parser
    from oasr.cli.serve import settings_from_args
    from oasr.server.app import build_engine, create_app

    settings = settings_from_args(build_parser().parse_args(["serve", "--model", str(path), "--device", "cpu"]))
    served = build_engine(settings)
    try:
        with TestClient(create_app(settings, served)) as client:
            files = {"file": (CLIP.name, CLIP.read_bytes(), "audio/wav")}
            answers = []
            for fmt in ("json", "verbose_json"):
                form = {"model": settings.model_names[0], "response_format": fmt, **fields}
                r = client.post("/v1/audio/transcriptions", data=form, files=files)
                assert r.status_code == 200, r.text
                answers.append(r.json())
            return answers[0], answers[1]
    finally:
        served.shutdown()


def test_itn_and_the_tags_are_the_same_through_python_cli_and_http(engine, oasr_dir, capsys):
    pytest.importorskip("fastapi")
    plain = engine.transcribe(str(CLIP))
    itn = engine.transcribe(str(CLIP), itn=True)
    assert itn.text != plain.text  # the text-norm query reaches the model
    for out, flags, fields in ((plain, (), {}), (itn, ("--itn",), {"itn": "true"})):
        want = {"text": out.text, "language": out.language, "emotion": out.emotion, "audio_events": out.audio_events}
        assert out.language is not None and out.audio_events  # the random model writes tags on this clip
        cli = _cli(oasr_dir, capsys, *flags)
        assert {k: cli.get(k) for k in want} == want
        answer, verbose = _http(oasr_dir, **fields)
        assert {k: answer.get(k) for k in want} == want
        assert (verbose.get("emotion"), verbose["audio_events"]) == (out.emotion, out.audio_events)


def test_families_without_tags_write_no_tag_fields():
    out = RequestOutput(request_id="r", text="hi", segments=[], language="en")
    assert "emotion" not in json_dict(out) and "audio_events" not in verbose_json_dict(out)
    tagged = RequestOutput(request_id="r", text="hi", segments=[], emotion="HAPPY", audio_events=["Speech", "BGM"])
    assert json_dict(tagged)["audio_events"] == ["Speech", "BGM"] and verbose_json_dict(tagged)["emotion"] == "HAPPY"


def test_word_times_leave_out_the_prompt_frames(engine):
    out = engine.transcribe(str(CLIP), word_timestamps=True)
    (segment,) = out.segments
    assert segment.words and segment.words[0].start < 0.3  # the audio's first frames, not 4 frames (0.24 s) later
    assert all(0 <= a <= b <= out.duration for a, b in segment.token_times)


RAW = (
    "<|en|><|NEUTRAL|><|Speech|><|woitn|>hello world",
    "<|en|><|HAPPY|><|BGM|><|withitn|>Hello, world.<|zh|><|HAPPY|><|Laughter|><|withitn|>你好",
    "<|zh|><|SAD|><|Speech|><|woitn|> 天气 <|Cough|> 不错<|en|><|ANGRY|><|Speech|><|woitn|> The. end ",
    "<|nospeech|><|Event_UNK|><|EMO_UNKNOWN|><|woitn|>",
    "<|ja|><|EMO_UNKNOWN|><|Speech|><|woitn|>a <|de|> b<|nospeech|><|Event_UNK|> c",
    "plain text, no tags",
)


@pytest.mark.parametrize("raw", RAW)
def test_text_is_rich_transcription_postprocess_without_emoji(raw):
    pytest.importorskip("funasr")
    from tests.models.sensevoice.test_parity import _funasr_plain

    assert read_rich_transcript(raw).text == _funasr_plain(raw)


def test_tags_are_read_into_fields():
    tags = read_rich_transcript(RAW[1])
    assert (tags.language, tags.emotion, tags.audio_events) == ("en", "HAPPY", ("BGM", "Laughter"))
    tags = read_rich_transcript(RAW[2])
    assert (tags.language, tags.emotion, tags.audio_events) == ("zh", "SAD", ("Speech", "Cough"))
    tags = read_rich_transcript(RAW[3])
    assert (tags.text, tags.language, tags.emotion, tags.audio_events) == (
        "",
        "nospeech",
        "EMO_UNKNOWN",
        ("Event_UNK",),
    )
    assert read_rich_transcript(RAW[5]) == read_rich_transcript(RAW[5]).__class__(RAW[5], None, None, ())


def _edited(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    cfg = yaml.safe_load((dst / "config.yaml").read_text(encoding="utf-8"))
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            cfg[section][name] = value
        else:
            cfg[section] = value
    (dst / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return dst


def test_the_reader_refuses_what_it_does_not_implement_naming_it(oasr_dir, tmp_path):
    with pytest.raises(LoadError, match=r"encoder_conf\.chunk_size=\[5\] is not supported"):
        oasr.load_pretrained(str(_edited(oasr_dir, tmp_path / "a", encoder_conf__chunk_size=[5])))
    with pytest.raises(LoadError, match=r"encoder='SANMEncoder' is not supported"):
        oasr.load_pretrained(str(_edited(oasr_dir, tmp_path / "b", encoder="SANMEncoder")))
    d = _edited(oasr_dir, tmp_path / "c")
    (d / "configuration.json").unlink()
    with pytest.raises(LoadError, match=r"no tokenizer \(chn_jpn_yue_eng_ko_spectok\.bpe\.model or bpe\.model\)"):
        (d / "chn_jpn_yue_eng_ko_spectok.bpe.model").rename(d / "other.model")
        oasr.load_pretrained(str(d))
    (d / "other.model").rename(d / "bpe.model")  # the name funasr reads in a bare directory
    assert oasr.load_pretrained(str(d)).architecture == "sensevoice"


def test_a_tokenizer_without_the_tags_is_refused(oasr_dir, tmp_path):
    import sentencepiece as spm

    d = _edited(oasr_dir, tmp_path / "d")
    text = tmp_path / "t.txt"
    text.write_text("hello world\n" * 20)
    bpe = d / "chn_jpn_yue_eng_ko_spectok.bpe.model"
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(bpe.with_suffix("")), vocab_size=20, hard_vocab_limit=False, minloglevel=2
    )
    with pytest.raises(LoadError, match=r"no readable piece for \['<\|zh\|>'.*not SenseVoice's tokenizer"):
        oasr.load_pretrained(str(d))


def test_vad_chunks_keep_their_tags(engine, clips):
    """A ``vad_filter`` request keeps the tags: its emotion is the one tagged over the most speech and
    its events every chunk's, as each chunk decoded alone gives them."""
    pytest.importorskip("silero_vad")
    import numpy as np

    from oasr.engine.decode.base import Request

    audio = np.concatenate([clips[CLIPS[0]], np.zeros(16000, np.float32), clips[CLIPS[2]]])
    request = engine.splitter.prepare(Request("x", audio, engine.make_options(vad_filter=True)))
    chunks = request.features.chunks
    request.features.close()
    assert chunks  # one chunk here (VAD packs up to 30 s of speech a chunk); the fields pass through it
    alone = [engine.transcribe(c.audio(audio)) for c in chunks]
    out = engine.transcribe(audio, vad_filter=True)
    assert out.audio_events == list(dict.fromkeys(e for a in alone for e in a.audio_events)) != []
    speech: dict[str, float] = {}
    for c, a in zip(chunks, alone):
        if a.emotion is not None:
            speech[a.emotion] = speech.get(a.emotion, 0.0) + c.duration
    assert out.emotion == (max(speech, key=lambda e: speech[e]) if speech else None)
