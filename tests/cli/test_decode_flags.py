"""``--max-new-tokens``, ``--repetition-penalty`` and ``--seed`` on ``oasr transcribe`` with
Whisper (whisper-base on jfk.wav): what the flags give equals the Python API's result for the
same options; a window cut by its budget is written with ``finish_reason`` "length" and a warning
on stderr (``oasr eval`` warns too); a family that takes none of them (CTC) refuses each with
exit 2 naming who takes it; ``--seed`` is unset unless given."""

from __future__ import annotations

import json

import pytest

from oasr.cli.main import build_parser, main
from oasr.models.bundled import bundled_path

needs_whisper_base = pytest.mark.skipif(bundled_path("whisper-base") is None, reason="whisper-base is not installed")
GREEDY = ("--model", "whisper-base", "--beam-size", "1", "--language", "en", "--no-progress", "-f", "verbose_json")


def test_flags_left_out_set_no_seed_and_given_ones_reach_the_options():
    from oasr.cli.common import decode_kwargs

    args = build_parser().parse_args(
        ["transcribe", "x.wav", "--max-new-tokens", "9", "--repetition-penalty", "1.3", "--seed", "-4"]
    )
    assert decode_kwargs(args) == {"max_new_tokens": 9, "repetition_penalty": 1.3, "seed": -4}
    assert "seed" not in decode_kwargs(build_parser().parse_args(["transcribe", "x.wav"]))


@needs_whisper_base
def test_a_window_cut_by_its_budget_is_written_with_a_warning(cli, clips, engine):
    jfk = clips["jfk"]["path"]
    code, out, err = cli("transcribe", jfk, *GREEDY)
    assert code == 0 and json.loads(out)["finish_reason"] == "stop" and "warning" not in err
    code, out, err = cli("transcribe", jfk, *GREEDY, "--max-new-tokens", "5")
    doc = json.loads(out)
    api = engine.transcribe(jfk, beam_size=1, language="en", max_new_tokens=5)
    assert code == 0 and doc["finish_reason"] == api.finish_reason == "length"
    assert doc["text"] == api.text and len(api.text.split()) < 5  # 11 s of speech, 4 tokens a window
    assert [s["tokens"] for s in doc["segments"]] == [s.tokens for s in api.segments]
    assert f"{jfk}: warning: " in err and "finish_reason 'length'" in err and "--max-new-tokens" in err


@needs_whisper_base
def test_eval_warns_of_a_hypothesis_its_budget_cut(cli, clips, tmp_path):
    row = {k: v for k, v in clips["jfk"].items() if k != "path"}
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({**row, "audio": clips["jfk"]["path"]}) + "\n", encoding="utf-8")
    argv = ("eval", manifest, "--model", "whisper-base", "--beam-size", "1", "--no-progress")
    code, _, err = cli(*argv, "--max-new-tokens", "5")
    assert code == 0 and f"{clips['jfk']['path']}: warning: " in err and "finish_reason 'length'" in err
    code, _, err = cli(*argv)
    assert code == 0 and "warning" not in err


@needs_whisper_base
def test_repetition_penalty_equals_the_api(cli, clips, engine):
    jfk = clips["jfk"]["path"]
    code, out, _ = cli("transcribe", jfk, *GREEDY, "--repetition-penalty", "1.5")
    api = engine.transcribe(jfk, beam_size=1, language="en", repetition_penalty=1.5)
    assert code == 0 and [s["tokens"] for s in json.loads(out)["segments"]] == [s.tokens for s in api.segments]
    plain = engine.transcribe(jfk, beam_size=1, language="en")
    assert [s.tokens for s in api.segments] != [s.tokens for s in plain.segments], "the penalty changes nothing"


@pytest.fixture(scope="module")
def ctc_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    from tests.models.lasr._reference import build_random_lasr

    return build_random_lasr(tmp_path_factory.mktemp("lasr") / "model", seed=3)


@pytest.mark.parametrize(
    ("flag", "value", "takers"),
    [
        ("--repetition-penalty", "1.2", "'aed' and 'llm'"),
        ("--max-new-tokens", "5", "'aed' and 'llm'"),
        ("--seed", "1", "'aed' and 'llm'"),
    ],
)
def test_a_family_that_does_not_take_a_flag_refuses_it(ctc_dir, audio_dir, flag, value, takers, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["transcribe", str(audio_dir / "jfk.wav"), "--model", str(ctc_dir), flag, value, "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    name = flag[2:].replace("-", "_")
    assert f"{name}: the 'ctc' decoding does not take it (only {takers} decoding does)" in err
    assert "Traceback" not in err
