"""Live streams kept at real time: oasr's batched streaming engine against a one-stream loop.

Two models at published shapes, random weights (no hub here), saved in their native formats and
loaded through oasr's loaders:

* WeNet U2++ conformer, ~80M: WenetSpeech's recipe shape (``output_size 512, attention_heads 8,
  linear_units 2048, num_blocks 12, cnn_module_kernel 15, causal, use_dynamic_chunk``, a 3 + 3
  block bidirectional attention decoder, 5,000 units), CTC greedy, 160-ms chunks
  (``decoding_chunk_size`` 4), all history;
* icefall causal Zipformer transducer, "medium" (LibriSpeech ``zipformer/train.py`` defaults with
  ``--causal 1 --chunk-size 16,32,64,-1 --left-context-frames 64,128,256,-1``), greedy, 160-ms
  chunks (icefall chunk 8), left context 128 frames.

For each, N streams play a real recording at real speed (``oasr.cli.bench_streaming``: each fed one
160-ms chunk every 160 ms, starts staggered), first batched (every ready stream in one forward per
step), then as a one-stream-per-forward loop (what sherpa-onnx's and NeMo's stream loops do),
N = 1, 2, 4, ... until the p95 chunk latency (last needed sample fed -> chunk encoded and searched)
reaches the chunk duration. Reported: the largest N each way, latencies, cache bytes per stream.

    python benchmarks/streaming_bench.py --threads 2 --json benchmarks/results/streaming_cpu2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")  # icefall wraps Swoosh in torch.compile

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

WENET_80M = dict(output_size=512, attention_heads=8, linear_units=2048, num_blocks=12, cnn_module_kernel=15, vocab=5000)
WENET_TINY = dict(output_size=64, attention_heads=2, linear_units=128, num_blocks=2, cnn_module_kernel=7, vocab=64)


def build_wenet(directory: Path, shape: dict | None = None) -> int:
    """A causal U2++ conformer (default: the WenetSpeech shape), saved as a WeNet experiment
    directory; its parameter count."""
    from oasr.models.conformer.model import ConformerModel
    from tests.models.conformer._wenet_format import randomize, save_wenet_experiment

    s = shape or WENET_80M
    config = {
        "vocab_size": s["vocab"],
        "encoder": dict(
            input_dim=80,
            output_size=s["output_size"],
            attention_heads=s["attention_heads"],
            linear_units=s["linear_units"],
            num_blocks=s["num_blocks"],
            cnn_module_kernel=s["cnn_module_kernel"],
            causal=True,
            use_dynamic_chunk=True,
            cnn_module_norm="layer_norm",
        ),
        "decoder": dict(
            vocab_size=s["vocab"],
            d_model=s["output_size"],
            attention_heads=s["attention_heads"],
            linear_units=s["linear_units"],
            num_blocks=3,
            bidirectional=True,
            r_num_blocks=3,
            sos=s["vocab"] - 1,
            eos=s["vocab"] - 1,
        ),
    }
    torch.manual_seed(0)
    model = ConformerModel(config).eval()
    randomize(model, seed=0)
    save_wenet_experiment(model, directory, decoder_type="bitransformer")
    return sum(p.numel() for p in model.parameters())


def build_zipformer(directory: Path, feats: torch.Tensor) -> int:
    """icefall's medium Zipformer transducer, causal, saved as icefall exports it."""
    import icefall_bench
    from zipformer.modules.model import AsrModel

    torch.manual_seed(0)
    cfg = {k: ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in icefall_bench.MEDIUM.items()}
    for k in ("query_head_dim", "value_head_dim", "pos_head_dim"):
        cfg[k] = str(cfg[k])
    model = AsrModel(
        **cfg,
        causal=True,
        chunk_size="16,32,64,-1",
        left_context_frames="64,128,256,-1",
        use_ctc=False,
        use_transducer=True,
    ).eval()
    with torch.no_grad():
        model.joiner.output_linear.weight.mul_(8.0)
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict()}, directory / "pretrained.pt")
    tokens = icefall_bench.token_table(icefall_bench.MEDIUM["vocab_size"])
    (directory / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=8.0, help="audio per stream")
    p.add_argument("--counts", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128])
    p.add_argument("--models", nargs="+", default=["wenet", "zipformer"], choices=["wenet", "zipformer"])
    p.add_argument("--clip", default=None, help="the recording (default: the repository's data/jfk.flac)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from oasr.audio import load_audio
    from oasr.cli.bench_streaming import capacity
    from oasr.engine.engine import ASREngine

    clip = args.clip or str(REPO / "data" / "jfk.flac")
    audio = load_audio(clip, 16000)
    report: dict = {
        "clip": os.path.basename(clip),
        "threads": args.threads,
        "seconds_per_stream": args.seconds,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__},
        "models": {},
    }
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            d = Path(tmp) / name
            if name == "wenet":
                params = build_wenet(d)
                engine = ASREngine(str(d), num_threads=args.threads, max_streams=max(args.counts), stream_chunk_ms=160)
            else:
                from oasr.audio.fbank import KaldiFbank

                params = build_zipformer(d, KaldiFbank(snip_edges=False)(audio))
                engine = ASREngine(
                    str(d),
                    architecture="transducer",
                    num_threads=args.threads,
                    max_streams=max(args.counts),
                    stream_chunk_ms=160,
                )
            core = engine._streaming()
            chunk_s = core.plan.stride_frames * core.frontend.frame_shift_s
            log(f"{name}: {params / 1e6:.1f} M parameters, {core.runtime.kind} runtime, chunk {1000 * chunk_s:.0f} ms")
            best, runs = capacity(engine, audio, chunk_s=chunk_s, seconds=args.seconds, counts=args.counts, log=log)
            peer, peer_runs = capacity(
                engine, audio, chunk_s=chunk_s, seconds=args.seconds, counts=args.counts, one_stream_loop=True, log=log
            )
            report["models"][name] = {
                "parameters": params,
                "runtime": core.runtime.kind,
                "decode_type": core.decode_type,
                "chunk_ms": round(1000 * chunk_s, 3),
                "batched": {"capacity": best, "runs": [r.to_dict() for r in runs]},
                "one_stream_loop": {"capacity": peer, "runs": [r.to_dict() for r in peer_runs]},
                "capacity_ratio": best / peer if peer else None,
                "cache_bytes_per_stream": max((r.cache_bytes_per_stream for r in runs), default=0.0),
            }
            log(f"{name}: batched keeps {best} streams at real time, the one-stream loop {peer}")
            del engine, core
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
