"""Whisper's text as it is decoded (``transcript.text.delta`` / ``on_token``): real tiny.en weights
on the JFK clip. Greedy decoding without a fallback sends the tokens as they are chosen; beam search
sends the text its beams agree on; with the temperature fallback (the default) a window's text waits
until the window is accepted. Every way, the deltas concatenate to the non-streamed transcript."""

from __future__ import annotations

import pytest

import oasr
from oasr.engine.decode.base import Request
from oasr.models.bundled import bundled_path

pytestmark = pytest.mark.real_weights

TINY = "whisper-tiny.en"
JFK = "ask not what your country can do for you"


@pytest.fixture(scope="module")
def engine():
    if bundled_path(TINY) is None:
        pytest.skip("tiny.en weights not installed")
    return oasr.ASREngine(TINY, device="cpu")


@pytest.fixture(scope="module")
def jfk(audio_dir) -> str:
    path = audio_dir / "jfk.wav"
    if not path.exists():
        pytest.skip("jfk.wav is not in the shared audio")
    return str(path)


def _steps(engine, path: str, **options) -> list[list]:
    """The request's events, step by step, as the engine's loop receives them."""
    strategy = engine.splitter
    strategy.add_request(strategy.prepare(Request("r", path, engine.make_options(**options))))
    steps = []
    while strategy.num_unfinished():
        steps.append([e for e in strategy.step() if e.request_id == "r"])
    return steps


def _kinds(steps, kind: str) -> list[tuple[int, object]]:
    return [(i, e) for i, step in enumerate(steps) for e in step if e.kind == kind]


def test_greedy_deltas_follow_the_tokens(engine, jfk):
    options = dict(beam_size=1, temperature=0.0)
    steps = _steps(engine, jfk, **options)
    deltas, segments = _kinds(steps, "delta"), _kinds(steps, "segment")
    ((last, finished),) = _kinds(steps, "finished")
    text = finished.output.text
    assert JFK in text.lower().replace(",", "")
    assert "".join(e.delta for _, e in deltas) == text == engine.transcribe(jfk, **options).text
    # Token by token: more deltas than segments, the first long before the window is done.
    assert len(deltas) > len(segments) + 5
    assert deltas[0][0] < segments[0][0] < last or deltas[0][0] < last // 2


def test_on_token_streams_whisper(engine, jfk):
    pieces: list[str] = []
    out = engine.transcribe(jfk, beam_size=1, temperature=0.0, on_token=pieces.append)
    assert len(pieces) > len(out.segments) and "".join(pieces) == out.text


def test_beam_search_sends_what_the_beams_agree_on(engine, jfk):
    options = dict(beam_size=5, temperature=0.0)
    steps = _steps(engine, jfk, **options)
    deltas = _kinds(steps, "delta")
    ((last, finished),) = _kinds(steps, "finished")
    assert "".join(e.delta for _, e in deltas) == finished.output.text == engine.transcribe(jfk, **options).text


def _common_prefix(seqs: list[list[int]], eot: int) -> list[int]:
    out = []
    for column in zip(*seqs):
        if column[0] == eot or any(t != column[0] for t in column):
            break
        out.append(column[0])
    return out


def test_what_the_candidates_agree_on_is_final():
    # What beam search streams (the common prefix of its candidates) is a prefix of its result at every step.
    import torch

    from oasr.engine.decode.aed.search import BeamSearch

    vocab, eot = 6, 5
    agreed = 0
    for seed in range(30):
        gen = torch.Generator().manual_seed(seed)
        search = BeamSearch((1,), 12, eot, 1.0, beam_size=3, patience=1.0)
        prefixes = []
        while not search.done:
            rows = len(search.row_tokens())
            logprobs = torch.log_softmax(torch.randn(rows, vocab, generator=gen) * 3, dim=-1)
            best = logprobs.max(dim=-1)
            search.update(logprobs, list(zip(best.indices.tolist(), best.values.tolist())))
            if not search.done:
                prefixes.append(_common_prefix(search.candidates(), eot))
        result, _ = search.result()
        assert all(result[: len(p)] == p for p in prefixes), seed
        agreed += any(len(p) > 1 for p in prefixes)
    assert agreed >= 5  # the beams agree on more than the forced prefix before the end, often


def test_a_window_the_fallback_may_replace_is_sent_once_accepted(engine, jfk):
    steps = _steps(engine, jfk, beam_size=1)  # the default temperatures 0.0 ... 1.0 with their thresholds
    deltas = _kinds(steps, "delta")
    ((_, finished),) = _kinds(steps, "finished")
    assert deltas and "".join(e.delta for _, e in deltas) == finished.output.text
    segment_steps = {i for i, _ in _kinds(steps, "segment")}
    assert all(i in segment_steps for i, _ in deltas)  # never ahead of the accepted window


def test_a_character_split_across_tokens_is_sent_whole(audio_dir):
    # Mandarin through whisper-base: Whisper's byte-level BPE splits many CJK characters across tokens.
    if bundled_path("whisper-base") is None:
        pytest.skip("whisper-base weights not installed")
    path = audio_dir / "aishell-BAC009S0724W0121.wav"  # 广州市房地产中介协会分析
    if not path.exists():
        pytest.skip(f"{path.name} is not in the shared audio")
    engine = oasr.ASREngine("whisper-base", device="cpu")
    pieces: list[str] = []
    out = engine.transcribe(str(path), language="zh", beam_size=1, temperature=0.0, on_token=pieces.append)
    assert "州市" in out.text and "分析" in out.text  # whisper-base writes it in traditional characters
    tokens = [t for s in out.segments for t in s.tokens if t < engine.strategy.tok.eot]
    split = [t for t in tokens if not _whole(engine.strategy.tok.decode_bytes([t]))]
    assert split  # the hold was needed
    assert "".join(pieces) == out.text and len(pieces) > len(out.segments)
    assert all(p and "\ufffd" not in p for p in pieces)


def _whole(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
