"""Whisper live (local agreement over a growing buffer): confirmed-text latency and WER against the
offline decode of the same file, whisper-base on the CPU.

Each clip is fed to ``ASREngine.open_stream`` as a live source on a simulated clock that counts
compute honestly (whisper_streaming's default, computation-aware mode): the clock waits for
``min_chunk_s`` of new audio, hands over everything recorded by then, and advances by the time
the decode took; audio that arrived meanwhile goes into the next decode. A confirmed word's
latency is the clock when its ``final`` came minus the word's end in the audio (its stream word
time). WER: the streamed text against the offline decode of the whole file with the same options
(and both against the manifest's text), Whisper's English normaliser (``oasr.metrics``), as the
other benchmarks score.

Clips: the repository's data/jfk.flac and the English clips of the shared corpus
(``OASR_SHARED_DIR``/data/audio/manifest.jsonl; skipped, with the reason, when absent).

    python benchmarks/whisper_live.py --threads 1 2 --json benchmarks/results/whisper_live_cpu2.json \\
        --markdown benchmarks/results/whisper_live_cpu2.md
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RATE = 16000


def clips(limit: int | None) -> tuple[list[dict], str | None]:
    """The repository's jfk.flac and the shared corpus' English clips; (rows, why the corpus is missing)."""
    rows = [{"audio": "jfk.flac", "path": str(REPO / "data" / "jfk.flac"), "text": None}]
    shared = Path(os.environ.get("OASR_SHARED_DIR", REPO.parent / "shared")) / "data" / "audio"
    manifest = shared / "manifest.jsonl"
    if not manifest.is_file():
        return rows, f"no corpus at {manifest} (set OASR_SHARED_DIR)"
    corpus: list[dict] = []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        row = json.loads(line) if line.strip() else None
        # jfk.* of the corpus are the repository's clip again
        if row and row.get("language") == "en" and not row["audio"].startswith("jfk"):
            if (shared / row["audio"]).is_file():
                corpus.append({**row, "path": str(shared / row["audio"])})
    if limit is not None and limit - 1 < len(corpus):  # spread evenly over the corpus
        corpus = [corpus[i] for i in np.unique(np.linspace(0, len(corpus) - 1, max(0, limit - 1)).round().astype(int))]
    return rows + corpus, None


def stream_clip(engine, audio: np.ndarray, options: dict, min_chunk_s: float) -> dict:
    """One clip through a live stream on the compute-aware simulated clock."""
    stream = engine.open_stream(sample_rate=RATE, min_chunk_s=min_chunk_s, word_timestamps=True, **options)
    duration = len(audio) / RATE
    now, fed, compute, decodes = 0.0, 0, 0.0, 0
    latencies: list[float] = []
    finals: list[str] = []

    def take(events) -> None:
        for event in events:
            if event.type == "error":
                raise RuntimeError(f"{event.code}: {event.message}")
            if event.type == "final":
                finals.append(event.text)
                latencies.extend(now - w.end for w in event.words or ())

    while fed < len(audio):
        now = max(now, fed / RATE + min_chunk_s)  # wait for a chunk of new audio
        upto = min(len(audio), int(now * RATE))
        before = engine._streaming().decodes
        t0 = time.perf_counter()
        events = stream.feed(audio[fed:upto])
        dt = time.perf_counter() - t0
        fed, now, compute = upto, now + dt, compute + dt
        decodes += engine._streaming().decodes - before
        take(events)
    now = max(now, duration)
    before = engine._streaming().decodes
    t0 = time.perf_counter()
    events = stream.finish()
    dt = time.perf_counter() - t0
    now, compute = now + dt, compute + dt
    decodes += engine._streaming().decodes - before
    take(events)
    return {
        "text": stream.output.text,
        "latencies": latencies,
        "compute_s": compute,
        "duration_s": duration,
        "decodes": decodes,
    }


def run(threads: int, rows: list[dict], options: dict, min_chunk_s: float, quantize: str | None = None) -> dict:
    import torch

    from oasr.audio import load_audio
    from oasr.engine.engine import ASREngine
    from oasr.metrics import error_rates

    torch.set_num_threads(threads)
    engine = ASREngine("whisper-base", num_threads=threads, quantize=quantize)
    warm = load_audio(rows[0]["path"], RATE)
    engine.transcribe(warm[: 2 * RATE], **options)  # first-call costs out of the figures
    per_clip = []
    all_lat: list[float] = []
    pairs, refs_stream, refs_offline = [], [], []
    for row in rows:
        audio = load_audio(row["path"], RATE)
        t0 = time.perf_counter()
        offline = engine.transcribe(audio, **options).text
        offline_s = time.perf_counter() - t0
        live = stream_clip(engine, audio, options, min_chunk_s)
        lat = np.array(live["latencies"]) if live["latencies"] else np.zeros(0)
        all_lat.extend(live["latencies"])
        pairs.append((offline, live["text"], "en"))
        if row.get("text"):
            refs_stream.append((row["text"], live["text"], "en"))
            refs_offline.append((row["text"], offline, "en"))
        clip_wer = error_rates([(offline, live["text"], "en")])["en"].rate if offline.strip() else None
        per_clip.append(
            {
                "clip": row["audio"],
                "duration_s": round(live["duration_s"], 2),
                "words": int(lat.size),
                "latency_p50_s": round(float(np.percentile(lat, 50)), 3) if lat.size else None,
                "latency_p95_s": round(float(np.percentile(lat, 95)), 3) if lat.size else None,
                "compute_s": round(live["compute_s"], 2),
                "decodes": live["decodes"],
                "offline_s": round(offline_s, 2),
                "wer_vs_offline": None if clip_wer is None else round(clip_wer, 4),
            }
        )
        print(
            f"[{threads} thr] {row['audio']}: {live['duration_s']:.1f} s, {lat.size} words, latency p50 "
            f"{per_clip[-1]['latency_p50_s']} p95 {per_clip[-1]['latency_p95_s']} s, "
            f"compute {live['compute_s']:.1f} s, "
            f"WER vs offline {per_clip[-1]['wer_vs_offline']}",
            flush=True,
        )
    lat = np.array(all_lat)
    audio_s = sum(c["duration_s"] for c in per_clip)
    compute_s = sum(c["compute_s"] for c in per_clip)
    out = {
        "threads": threads,
        "quantize": quantize,
        "clips": len(per_clip),
        "audio_s": round(audio_s, 1),
        "words": int(lat.size),
        "latency_p50_s": round(float(np.percentile(lat, 50)), 3),
        "latency_p95_s": round(float(np.percentile(lat, 95)), 3),
        "latency_mean_s": round(float(lat.mean()), 3),
        "stream_compute_rtf": round(compute_s / audio_s, 3),
        "offline_rtf": round(sum(c["offline_s"] for c in per_clip) / audio_s, 3),
        "wer_stream_vs_offline": round(error_rates(pairs)["en"].rate, 4),
        "per_clip": per_clip,
    }
    if refs_stream:
        out["wer_stream_vs_reference"] = round(error_rates(refs_stream)["en"].rate, 4)
        out["wer_offline_vs_reference"] = round(error_rates(refs_offline)["en"].rate, 4)
    return out


def markdown(report: dict) -> str:
    lines = [
        "# Whisper live: whisper-base, local agreement, CPU",
        "",
        f"`{report['command']}`",
        "",
        f"Machine: {report['machine']['cores']} cores ({report['machine']['cpu']}), torch "
        f"{report['machine']['torch']}; load before / after: {report['load_before']} / {report['load_after']}. "
        f"Options: {report['options']}, min_chunk_s {report['min_chunk_s']}, buffer trimming 15 s (defaults).",
        "",
        "Latency: clock at the word's `final` minus the word's end in the audio, on a simulated clock that "
        "advances by the decodes' compute time (whisper_streaming's computation-aware mode). WER: the "
        "streamed text against the offline decode of the same file (same options); `vs reference`: against "
        "the manifest text (corpus clips only). Whisper's English normaliser.",
        "",
        "| torch threads | weights | clips | audio s | words | latency p50 s | p95 s | mean s | stream compute RTF "
        "| offline RTF | WER vs offline | WER stream / offline vs reference |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["runs"]:
        ref = f"{r.get('wer_stream_vs_reference', '-')} / {r.get('wer_offline_vs_reference', '-')}"
        lines.append(
            f"| {r['threads']} | {r.get('quantize') or 'float32'} | {r['clips']} | {r['audio_s']} | {r['words']} | "
            f"{r['latency_p50_s']} | "
            f"{r['latency_p95_s']} | {r['latency_mean_s']} | {r['stream_compute_rtf']} | {r['offline_rtf']} | "
            f"{r['wer_stream_vs_offline']} | {ref} |"
        )
    for r in report["runs"]:
        lines += [
            "",
            f"Per clip, {r['threads']} thread(s):",
            "",
            "| clip | s | words | p50 s | p95 s | stream compute s | decodes | offline s | WER vs offline |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c['clip']} | {c['duration_s']} | {c['words']} | {c['latency_p50_s']} | {c['latency_p95_s']} | "
            f"{c['compute_s']} | {c['decodes']} | {c['offline_s']} | {c['wer_vs_offline']} |"
            for c in r["per_clip"]
        ]
    if report.get("skipped"):
        lines += ["", f"Skipped: {report['skipped']}"]
    lines += ["", "The paper (Macháček et al. 2023) reports 3.3 s average latency for large-v2 on a GPU.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[2])
    p.add_argument("--min-chunk-s", type=float, default=1.0)
    p.add_argument("--beam-size", type=int, default=5, help="whisper_streaming's faster-whisper backend: 5")
    p.add_argument("--quantize", default=None, help="EngineConfig.quantize (int8: both the stream and offline)")
    p.add_argument("--limit", type=int, default=None, help="at most this many clips (jfk.flac, then spread evenly)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    import torch

    rows, skipped = clips(args.limit)
    if skipped:
        print(f"corpus skipped: {skipped}", flush=True)
    options = {"language": "en", "beam_size": args.beam_size}
    load_before = os.getloadavg()
    runs = [run(t, rows, options, args.min_chunk_s, args.quantize) for t in args.threads]
    report = {
        "command": "python benchmarks/whisper_live.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
        },
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "options": options,
        "min_chunk_s": args.min_chunk_s,
        "skipped": skipped,
        "runs": runs,
    }
    for r in runs:
        print({k: v for k, v in r.items() if k != "per_clip"}, flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(markdown(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
