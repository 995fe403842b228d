"""Streams kept at real time per streaming family and transport, and sherpa-onnx on the same weights.

Release-shaped random models (no hub here), built by ``streaming_bench.py``'s builders and
loaded through oasr's loaders:

* ``wenet``: WeNet U2++ conformer at WenetSpeech's recipe shape (~121M with its attention
  decoder), causal, CTC greedy, 160-ms chunks;
* ``zipformer``: icefall's causal Zipformer transducer "medium", greedy, 160-ms chunks (icefall
  chunk 8), left context 128 frames;
* ``cache_aware``: NeMo's cache-aware streaming FastConformer at the shape of
  ``stt_en_fastconformer_hybrid_large_streaming_multi`` (17 x 512, 8 heads, ``chunked_limited``
  contexts [70, 13] / [70, 6] / [70, 1] / [70, 0], causal convolutions; LSTM 640, joint 640), RNN-T head, built by
  NeMo's own classes (``tests/models/parakeet/nemo_reference.py``; its small test tokenizer, not
  the release's 1,024 pieces), the family's default chunk (lookahead 13: 1.12 s);
* ``nemotron``: Nemotron 3.5 ASR at the ``nemotron-3.5-asr-streaming-0.6b`` shape
  (``nemo_transducer_bench.build``: transformers' classes, 24 x 1024, 638M), its default chunk.

For each, ``oasr bench --workload streaming`` (``oasr.cli.bench_streaming``) runs its three
transports (the engine in-process, ``/v1/audio/stream`` and ``/v1/realtime`` through an ``oasr
serve`` child), batched and one stream per forward. Then the peer: the Zipformer exported by the
``zipformer`` package's own ONNX export (``zipformer.bin.export.export_onnx_streaming_transducer``:
encoder / decoder / joiner with the ``zipformer2`` metadata sherpa-onnx reads) and run by
sherpa-onnx's ``OnlineRecognizer`` in the same harness: N streams fed one 160-ms piece each
period, a chunk timed from the piece that completed its feature window to the end of the
decode that consumed it, one stream per ``decode_stream`` and all ready streams per
``decode_streams``; its tokens on the clip are compared with oasr's stream of the same weights.

Two workarounds the export needs, both outside oasr: ``zipformer.bin.export`` imports
``ssentencepiece`` (a tokenizer for its command line, not on PyPI) at the top, so a stand-in
module is registered before the import; torch 2.13's ``torch.onnx.export`` defaults to the
dynamo exporter (``onnxscript``, not installed), so the TorchScript exporter is asked for
(``dynamo=False``), as the package was written for.

    python benchmarks/streaming_capacity.py --threads 2 --out benchmarks/results/streaming_capacity_cpu2
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import types
from pathlib import Path

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")  # icefall wraps Swoosh in torch.compile

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

SHERPA_CHUNK = 8  # icefall chunk (50-Hz frames): 16 feature frames, 160 ms
LEFT_CONTEXT = 128
FAMILIES = ("wenet", "zipformer", "cache_aware", "nemotron")
CACHE_AWARE_CONTEXTS = [[70, 13], [70, 6], [70, 1], [70, 0]]


def build_cache_aware(directory: Path) -> tuple[Path, int]:
    """NeMo's cache-aware FastConformer at the large streaming release's shape, RNN-T head."""
    import warnings

    from tests.models.parakeet import nemo_reference

    def release(cfg: dict) -> None:
        cfg["preprocessor"]["normalize"] = "NA"
        cfg["encoder"].update(
            n_layers=17,
            d_model=512,
            n_heads=8,
            subsampling_conv_channels=256,
            conv_kernel_size=9,
            causal_downsampling=True,
            att_context_size=CACHE_AWARE_CONTEXTS,
            att_context_style="chunked_limited",
            conv_context_size="causal",
            conv_norm_type="layer_norm",
        )
        cfg["model_defaults"].update(enc_hidden=512, pred_hidden=640, joint_hidden=640)
        cfg["decoder"]["prednet"].update(pred_hidden=640, pred_rnn_layers=1)
        cfg["joint"]["jointnet"]["joint_hidden"] = 640
        cfg["decoding"]["greedy"]["max_symbols"] = 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path, model = nemo_reference.build("rnnt", directory, edit=release, blank_bias=1.5)
    return path, sum(p.numel() for p in model.parameters())


def build_nemotron(directory: Path, wave: np.ndarray) -> tuple[Path, int]:
    import nemo_transducer_bench

    _, _, params = nemo_transducer_bench.build("nemotron", directory, wave)
    return directory, params


def export_sherpa(pretrained: Path, out: Path) -> dict:
    """The causal medium Zipformer of ``pretrained`` exported to sherpa-onnx's streaming files."""
    import icefall_bench
    from zipformer.modules.model import AsrModel

    sys.modules.setdefault("ssentencepiece", types.SimpleNamespace(Ssentencepiece=None))  # see the module
    export = torch.onnx.export
    torch.onnx.export = functools.partial(export, dynamo=False)
    try:
        from zipformer.bin import export as zexport

        cfg = {k: ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in icefall_bench.MEDIUM.items()}
        for k in ("query_head_dim", "value_head_dim", "pos_head_dim"):
            cfg[k] = str(cfg[k])
        model = AsrModel(
            **cfg,
            causal=True,
            chunk_size=str(SHERPA_CHUNK),
            left_context_frames=str(LEFT_CONTEXT),
            use_ctc=False,
            use_transducer=True,
        )
        model.load_state_dict(torch.load(pretrained / "pretrained.pt", map_location="cpu")["model"])
        model.eval()
        out.mkdir(parents=True, exist_ok=True)
        params = argparse.Namespace(
            exp_dir=out,
            suffix="medium",
            feature_dim=80,
            dynamic_batch=True,
            use_external_data=False,
            export_fp16=False,
            enable_int8_quantization=False,
        )
        zexport.export_onnx_streaming_transducer(params, model)
    finally:
        torch.onnx.export = export
    return {part: str(out / f"{part}-medium.onnx") for part in ("encoder", "decoder", "joiner")}


def sherpa_run(rec, audio: np.ndarray, n: int, *, chunk_s: float, seconds: float, batched: bool, sr: int = 16000):
    """N sherpa-onnx streams at real time (the harness of ``oasr.cli.bench_streaming.realtime_run``)."""
    from oasr.cli.bench_streaming import Player
    from oasr.cli.bench_transports import ClientResult, percentiles

    total = int(seconds * sr)
    streams = [rec.create_stream() for _ in range(n)]
    decoded = [0] * n  # chunks decoded per stream
    finished_at: dict[int, float] = {}
    latencies: list[float] = []
    hop = sr // 100
    window = 2 * SHERPA_CHUNK + 13  # feature frames one chunk reads (sherpa's T: chunk + the embed's padding)

    def need(j: int) -> int:  # samples chunk j reads (Kaldi frames without snip_edges: (samples + hop/2) // hop)
        return (j * 2 * SHERPA_CHUNK + window) * hop - hop // 2

    player = Player(np.resize(audio.astype(np.float32), total), n, int(round(chunk_s * sr)), chunk_s)
    while True:
        for i, samples, last in player.due():
            streams[i].accept_waveform(sr, samples)
            if last:
                streams[i].input_finished()
        ready = [i for i, s in enumerate(streams) if rec.is_ready(s)]
        if ready:
            ends = {}
            if batched:
                rec.decode_streams([streams[i] for i in ready])
                ends = dict.fromkeys(ready, player.now())
            else:
                for i in ready:
                    rec.decode_stream(streams[i])
                    ends[i] = player.now()
            for i, end in ends.items():
                j = decoded[i]
                decoded[i] += 1
                if need(j) <= total:  # the tail padding's chunks are timed as the final
                    latencies.append(end - player.pushed_at(i, need(j)))
            continue
        for i in range(n):
            if player.done(i) and i not in finished_at:
                finished_at[i] = player.now() - player.push_times[i][-1]
        if len(finished_at) == n:
            break
        player.wait()
    return ClientResult(
        streams=n,
        chunks=len(latencies),
        **percentiles(latencies),
        final_ms=1000 * max(finished_at.values(), default=0.0),
        wall_s=player.now(),
    )


def sherpa_tokens(rec, audio: np.ndarray, sr: int = 16000) -> list[str]:
    s = rec.create_stream()
    s.accept_waveform(sr, audio.astype(np.float32))
    s.input_finished()
    while rec.is_ready(s):
        rec.decode_stream(s)
    return list(rec.get_result_all(s).tokens)


def oasr_tokens(model_dir: Path, audio: np.ndarray, threads: int) -> list[str]:
    from oasr.engine.engine import ASREngine

    engine = ASREngine(str(model_dir), architecture="transducer", num_threads=threads, stream_chunk_ms=160)
    stream = engine.open_stream(sample_rate=16000)
    events = stream.feed(audio) + stream.finish()
    ids = [t for e in events if e.type == "final" for t in e.tokens]
    table = dict((int(i), t) for t, i in (line.split() for line in (model_dir / "tokens.txt").read_text().splitlines()))
    return [table[i].replace("\u2581", " ") for i in ids]  # sherpa-onnx shows a word start as a space


def sherpa_peer(model_dir: Path, work: Path, audio: np.ndarray, args, log) -> dict:
    from oasr.cli.bench_streaming import sweep

    try:
        import sherpa_onnx
    except ImportError as e:
        return {"skipped": f"sherpa-onnx is not installed ({e})"}
    try:
        files = export_sherpa(model_dir, work / "sherpa")
    except Exception as e:  # the export failing is a result to report, with its reason
        return {"skipped": f"the zipformer package's streaming ONNX export failed: {type(e).__name__}: {e}"}
    rec = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(model_dir / "tokens.txt"),
        encoder=files["encoder"],
        decoder=files["decoder"],
        joiner=files["joiner"],
        num_threads=args.threads,
        sample_rate=16000,
        feature_dim=80,
        decoding_method="greedy_search",
    )
    chunk_s = 2 * SHERPA_CHUNK * 0.01
    theirs = sherpa_tokens(rec, audio)
    ours = oasr_tokens(model_dir, audio, args.threads)
    import difflib

    matcher = difflib.SequenceMatcher(a=ours, b=theirs, autojunk=False)
    same = sum(b.size for b in matcher.get_matching_blocks())
    prefix = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    out: dict = {
        "export": "zipformer.bin.export.export_onnx_streaming_transducer (TorchScript exporter, dynamo=False)",
        "chunk_ms": 1000 * chunk_s,
        "tokens": {
            "oasr": len(ours),
            "sherpa_onnx": len(theirs),
            "equal_sequences": ours == theirs,
            "common_prefix": prefix,
            "matched_in_alignment": same,
            "first_oasr": ours[:12],
            "first_sherpa_onnx": theirs[:12],
        },
    }
    log(f"sherpa-onnx: {len(theirs)} tokens, oasr {len(ours)}, equal sequences: {ours == theirs}")
    sherpa_run(rec, audio, 1, chunk_s=chunk_s, seconds=2.0, batched=False)  # warm-up
    for batched, name in ((True, "batched"), (False, "one_stream_loop")):
        best, runs = sweep(
            lambda n, b=batched: sherpa_run(rec, audio, n, chunk_s=chunk_s, seconds=args.seconds, batched=b),
            args.counts,
            chunk_s,
            f"sherpa-onnx, {name.replace('_', '-')}",
            log,
        )
        out[name] = {"capacity": best, "runs": [r.to_dict() for r in runs]}
    return out


def bench_cli(model_dir: Path, extra: list[str], args, out_json: Path) -> dict:
    """``oasr bench --workload streaming`` on one model, as a command (its JSON)."""
    cmd = [sys.executable, "-m", "oasr.cli.main", "bench", "--workload", "streaming", "--model", str(model_dir)]
    cmd += ["--threads", str(args.threads), "--stream-seconds", str(args.seconds)]
    cmd += ["--stream-counts", *map(str, args.counts), "--short-clip", args.clip, "--json", str(out_json), *extra]
    subprocess.run(cmd, check=True, cwd=REPO)
    return json.loads(out_json.read_text())["models"][str(model_dir)]


def markdown(report: dict) -> str:
    """The capacities as a table (the JSON holds every run)."""
    from oasr.cli.bench_streaming import markdown_table

    models = {}
    for family, entry in report["families"].items():
        if "failed" not in entry:
            models[family] = {k: v for k, v in entry.items() if k not in ("shape", "parameters", "sherpa_onnx")}
    transports = ["engine", "ws", "realtime"]
    load = " / ".join(f"{x:.1f}" for x in report["machine"]["load_average_at_start"])
    load_end = " / ".join(f"{x:.1f}" for x in report["machine"]["load_average_at_end"])
    lines = [
        f"Command: `{report['command']}`; {report['threads']} threads, the audio per stream each command's --seconds, "
        f"clip {report['clip']}; load average {load} at the start, {load_end} at the end (2 cores shared with "
        "other runs: figures are noisy).",
        "",
        markdown_table({"settings": {"transports": transports}, "models": models}),
    ]
    for family, entry in report["families"].items():
        lines.append(f"- {family}: {entry['shape']}, {entry['parameters'] / 1e6:.1f} M parameters")
        if "failed" in entry:
            lines.append(f"- {family}: not measured: {entry['failed']}")
        peer = entry.get("sherpa_onnx")
        if peer is None:
            continue
        if "skipped" in peer:
            lines.append(f"- sherpa-onnx on {family}: not run: {peer['skipped']}")
            continue
        t = peer["tokens"]
        lines.append(
            "- sherpa-onnx's files come from the zipformer package's own streaming export, with two workarounds: "
            "`zipformer.bin.export` imports `ssentencepiece` (its command line's tokenizer; not on PyPI) at the top, "
            "so a stand-in module is registered first, and torch 2.13's `torch.onnx.export` defaults to the dynamo "
            "exporter (needs `onnxscript`), so `dynamo=False` (the TorchScript exporter the package was written for)."
        )
        lines.append(
            f"- sherpa-onnx on the same {family} weights ({peer['export']}), {peer['chunk_ms']:g}-ms chunks: "
            f"batched {peer['batched']['capacity']}, one-stream loop {peer['one_stream_loop']['capacity']} streams; "
            f"tokens on the clip: oasr {t['oasr']}, sherpa-onnx {t['sherpa_onnx']}, equal: {t['equal_sequences']}, "
            f"common prefix {t['common_prefix']}, {t['matched_in_alignment']} matched in alignment"
        )
    merged = report.get("on_merge")
    if merged:  # runs on a local merge with the branches that add /v1/realtime and Whisper live
        lines += ["", f"On a local merge ({merged['what']}):", ""]
        for run in merged["runs"]:
            lines += [f"Command: `{run['command']}`", "", markdown_table(run["report"])]
        lines += [merged["notes"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=6.0, help="audio per stream")
    p.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 6, 8, 12, 16, 24])
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--merge", action="store_true", help="add to OUT.json's families instead of replacing it")
    p.add_argument("--no-sherpa", action="store_true", help="skip the sherpa-onnx peer")
    p.add_argument("--clip", default=str(REPO / "data" / "jfk.flac"))
    p.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = p.parse_args()
    earlier = args.out.with_suffix(".json") if args.out is not None else None
    args.earlier = json.loads(earlier.read_text()) if args.merge and earlier.is_file() else None
    torch.set_num_threads(args.threads)

    import streaming_bench

    from oasr.audio import load_audio

    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    audio = load_audio(args.clip, 16000)
    report: dict = {
        "command": " ".join(["python", "benchmarks/streaming_capacity.py", *sys.argv[1:]]),
        "clip": os.path.basename(args.clip),
        "threads": args.threads,
        "seconds_per_stream": args.seconds,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "load_average_at_start": os.getloadavg(),
        },
        "families": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for family in args.families:
            d = work / family
            extra: list[str] = ["--chunk-ms", "160"]
            if family == "wenet":
                params = streaming_bench.build_wenet(d)
                shape = "WenetSpeech U2++ conformer (output 512, 12 blocks, 8 heads, 2048 FFN, 3+3 decoder, 5000 units)"
            elif family == "zipformer":
                from oasr.audio.fbank import KaldiFbank

                params = streaming_bench.build_zipformer(d, KaldiFbank(snip_edges=False)(audio))
                extra += ["--architecture", "transducer"]
                shape = "icefall Zipformer2 medium, causal (LibriSpeech zipformer/train.py defaults, 500 BPE)"
            elif family == "cache_aware":
                d, params = build_cache_aware(d)
                extra = []
                shape = (
                    "NeMo cache-aware FastConformer 17 x 512 (stt_en_fastconformer_hybrid_large_streaming_multi), RNN-T"
                )
            else:
                d, params = build_nemotron(d, audio)
                extra = []
                shape = "Nemotron 3.5 ASR streaming 0.6B (24 x 1024, transformers' classes)"
            log(f"{family}: {params / 1e6:.1f} M parameters")
            entry = {"shape": shape, "parameters": params}
            try:
                entry.update(bench_cli(d, extra, args, work / f"{family}.json"))
            except subprocess.CalledProcessError as e:  # one family failing is a result; the others still run
                entry["failed"] = f"oasr bench exited with {e.returncode} (its stderr above)"
            if family == "zipformer" and not args.no_sherpa:
                entry["sherpa_onnx"] = sherpa_peer(d, work, audio, args, log)
            report["families"][family] = entry
            write(report, args)  # after each family: a later failure loses nothing
    return 0


def write(report: dict, args) -> None:
    """Print the report and write OUT.json / OUT.md (with --merge: over OUT.json as it was when
    the run started, this run's families replacing the same ones there)."""
    report["machine"]["load_average_at_end"] = os.getloadavg()
    out = dict(report)
    before = args.earlier
    if before is not None:
        out["families"] = {**before["families"], **report["families"]}
        out["command"] = f"{before['command']}; then {report['command']}"
        out["machine"] = {**report["machine"], "earlier_run": before["machine"]}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out is not None:
        args.out.with_suffix(".json").write_text(text + "\n", encoding="utf-8")
        args.out.with_suffix(".md").write_text(markdown(out), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
