"""Forced alignment (``oasr.alignment``): speed against torchaudio's kernel as ctc-forced-aligner
ships it, and word-boundary agreement on the shared corpus.

    python benchmarks/alignment_bench.py speed [--rounds 5]
    python benchmarks/alignment_bench.py quality [--clips 24] [--threads 2]
    python benchmarks/alignment_bench.py long [--seconds 300 600]

``speed``: the Viterbi of one row (oasr's ``forced_align`` against ctc-forced-aligner's
``align_sequences``, torchaudio's CPU kernel; torchaudio's own compiled kernel does not load beside
torch 2.13), a batch of 16 rows, and the word spans (oasr's ``word_spans`` against
ctc-forced-aligner's ``get_spans`` + ``postprocess_results``) on random posteriors of 5 / 30 / 60 s
(50 frames a second, 32 classes, 13 characters a second as English speech has);
rounds interleaved, medians.

``long``: one long row each side in a fresh process: time and peak RSS above the inputs'.

``quality``: no reference word alignments exist in the corpus and no real CTC weights are on
PyPI, so this measures what can be measured honestly: on English clips <= 30 s, the agreement of
word boundaries between whisper-base's DTW word times and (a) whisper tiny.en's (two real timers),
(b) words spread over each segment by their characters (what agreement costs nothing), (c) oasr's
aligner through ``align_model`` with a tiny random wav2vec2 (the plumbing only: chance level).
Words are matched by the longest common subsequence of their normalised text.
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "audio"


def _case(seconds: float, seed: int, chars_per_s: float = 13.0, v: int = 32):
    g = torch.Generator().manual_seed(seed)
    t = int(50 * seconds)
    log_probs = (2 * torch.randn(t, v, generator=g)).log_softmax(-1)
    target = torch.randint(1, v, (int(chars_per_s * seconds),), generator=g)
    return log_probs, target


def speed(rounds: int) -> None:
    from ctc_forced_aligner import get_spans, postprocess_results
    from ctc_forced_aligner.ctc_aligner import align_sequences

    from oasr.alignment.spans import word_spans
    from oasr.alignment.text import PreparedText, Unit
    from oasr.alignment.viterbi import forced_align

    torch.set_num_threads(2)
    print(
        "| audio | frames x labels | ctc-forced-aligner (torchaudio kernel), 1 row | oasr, 1 row | oasr, 16 rows "
        "(per row) | spans: ctc-forced-aligner | spans: oasr |"
    )
    print("|---|---|---|---|---|---|---|")
    for seconds in (5.0, 30.0, 60.0):
        lp, tg = _case(seconds, 0)
        lp16, tg16 = lp[None].expand(16, -1, -1).contiguous(), tg[None].expand(16, -1).contiguous()
        words = [tg[i : i + 5] for i in range(0, len(tg), 5)]
        units = [Unit(tuple(w.tolist()), k) for k, w in enumerate(words)]
        text = PreparedText([f"w{k}" for k in range(len(words))], units)
        tokens = [" ".join(str(int(x)) for x in w) for w in words]
        times = {"ref": [], "one": [], "b16": [], "spans_ref": [], "spans": []}
        for _ in range(rounds):
            a = time.perf_counter()
            ref_path, ref_scores = align_sequences(lp[None].numpy(), tg[None].numpy(), 0)
            times["ref"].append(time.perf_counter() - a)
            a = time.perf_counter()
            path, scores = forced_align(lp[None], tg[None])
            times["one"].append(time.perf_counter() - a)
            a = time.perf_counter()
            forced_align(lp16, tg16)
            times["b16"].append((time.perf_counter() - a) / 16)
            assert np.array_equal(path[0].numpy(), ref_path[0])
            a = time.perf_counter()
            segs = _cfa_segments(ref_path[0])
            spans = get_spans(tokens, segs, "0")
            postprocess_results(tokens, spans, 20, ref_scores)
            times["spans_ref"].append(time.perf_counter() - a)
            a = time.perf_counter()
            word_spans(path[0].numpy(), scores[0].numpy(), text, 0, 0.02 * np.arange(path.shape[1]))
            times["spans"].append(time.perf_counter() - a)
        med = {k: 1000 * statistics.median(v) for k, v in times.items()}
        print(
            f"| {seconds:g} s | {lp.shape[0]} x {len(tg)} | {med['ref']:.1f} ms | {med['one']:.1f} ms | "
            f"{med['b16']:.1f} ms | {med['spans_ref']:.1f} ms | {med['spans']:.1f} ms |"
        )


_LONG_CHILD = """
import resource, sys, time, torch
side, seconds = sys.argv[1], float(sys.argv[2])
torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
lp = (2 * torch.randn(int(50 * seconds), 32, generator=g)).log_softmax(-1)
tg = torch.randint(1, 32, (int(13 * seconds),), generator=g)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if side == "cfa":
    from ctc_forced_aligner.ctc_aligner import align_sequences
    align_sequences(lp[None].numpy(), tg[None].numpy(), 0)
else:
    from oasr.alignment.viterbi import forced_align
    forced_align(lp[None], tg[None])
print(time.perf_counter() - t, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""


def long_rows(seconds: list[float]) -> None:
    import subprocess

    print("| audio | ctc-forced-aligner | oasr |")
    print("|---|---|---|")
    for s in seconds:
        cells = []
        for side in ("cfa", "oasr"):
            out = subprocess.run(
                [sys.executable, "-c", _LONG_CHILD, side, str(s)], cwd=ROOT, capture_output=True, text=True, check=True
            )
            dt, mib = map(float, out.stdout.split())
            cells.append(f"{dt:.2f} s, +{mib:.0f} MiB")
        print(f"| {s:g} s ({int(50 * s)} x {int(13 * s)}) | {cells[0]} | {cells[1]} |")


def _cfa_segments(path):
    """ctc-forced-aligner's ``merge_repeats`` over labels named by their ids."""
    from ctc_forced_aligner import merge_repeats

    return merge_repeats(path.tolist(), {i: str(i) for i in range(int(path.max()) + 1)})


def _norm(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum() or c == "'")


def _agreement(ref_words, words) -> list[tuple[float, float]]:
    """(|d start|, |d end|) of the words of ``words`` matched to ``ref_words`` by their text."""
    a, b = [_norm(w[2]) for w in ref_words], [_norm(w[2]) for w in words]
    out = []
    for block in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            r, w = ref_words[block.a + k], words[block.b + k]
            out.append((abs(r[0] - w[0]), abs(r[1] - w[1])))
    return out


def _spread(segments) -> list[tuple[float, float, str]]:
    """Each segment's words spread over its span in proportion to their characters."""
    out = []
    for s in segments:
        words = s.text.split()
        if not words:
            continue
        sizes = np.array([len(w) for w in words], dtype=float)
        edges = s.start + (s.end - s.start) * np.concatenate([[0], np.cumsum(sizes)]) / sizes.sum()
        out += [(float(edges[i]), float(edges[i + 1]), w) for i, w in enumerate(words)]
    return out


def quality(n_clips: int, threads: int) -> None:
    sys.path.insert(0, str(ROOT))
    from oasr.audio import load_audio
    from oasr.engine import ASREngine
    from tests.models.wav2vec2 import _reference as ref

    torch.set_num_threads(threads)
    rows = [json.loads(x) for x in (SHARED / "manifest.jsonl").read_text().splitlines() if x]
    english = [r for r in rows if r["language"] == "en" and r["duration_s"] <= 30]
    step = max(1, len(english) // n_clips)
    clips = english[::step][:n_clips]
    audio = [load_audio(str(SHARED / r["audio"])) for r in clips]
    opts = dict(language="en", word_timestamps=True, beam_size=1, temperature=0.0)
    base = ASREngine("whisper-base").transcribe(audio, **opts)
    tiny = ASREngine("whisper-tiny.en").transcribe(audio, **opts)
    with tempfile.TemporaryDirectory() as scratch:
        w2v = ref.build_random(Path(scratch) / "w2v", "wav2vec2_group", seed=3)
        engine = ASREngine("whisper-base", align_model=str(w2v))
        aligned = engine.transcribe(audio, **opts)
        stats = engine.splitter.stats()

    def words(out):
        return [(w.start, w.end, w.word) for s in out.segments for w in (s.words or [])]

    results = {}
    for name, others in (
        ("whisper tiny.en DTW", tiny),
        ("characters spread over whisper-base's segments", None),
        ("oasr aligner, random tiny wav2vec2, within whisper-base's segments", aligned),
    ):
        pairs = []
        for k, out in enumerate(base):
            mine = _spread(out.segments) if others is None else words(others[k])
            pairs += _agreement(words(out), mine)
        d = np.array(pairs)
        results[name] = {
            "matched_words": len(d),
            "median_abs_start_ms": 1000 * float(np.median(d[:, 0])),
            "median_abs_end_ms": 1000 * float(np.median(d[:, 1])),
            "within_100ms": float(np.mean(d <= 0.1)),
            "within_200ms": float(np.mean(d <= 0.2)),
        }
    total = sum(len(a) for a in audio) / 16000
    print(
        f"{len(clips)} clips, {total:.0f} s; whisper-base words: {sum(len(words(o)) for o in base)}; "
        f"aligned segments: {stats['segments_aligned']}, unaligned: {stats['segments_unaligned']}"
    )
    print(
        "| against whisper-base DTW | words matched | median abs start | median abs end | within 100 ms | "
        "within 200 ms |"
    )
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['matched_words']} | {r['median_abs_start_ms']:.0f} ms | {r['median_abs_end_ms']:.0f} ms"
            f" | {100 * r['within_100ms']:.0f}% | {100 * r['within_200ms']:.0f}% |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("speed", "quality", "long"))
    parser.add_argument("--seconds", type=float, nargs="+", default=[300.0, 600.0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clips", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.what == "speed":
        speed(args.rounds)
    elif args.what == "long":
        long_rows(args.seconds)
    else:
        if not (SHARED / "manifest.jsonl").is_file():
            raise SystemExit(f"no corpus at {SHARED}")
        quality(args.clips, args.threads)


if __name__ == "__main__":
    main()
