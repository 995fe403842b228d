"""oasr's transducer strategy against transformers' ``generate`` on CPU: same process, same weights.

Two NeMo transducers at their published 0.6B shapes, random weights built by transformers' own
classes and written with ``save_pretrained`` (so both sides read the same files):

* **Nemotron 3.5 ASR** (``nvidia/nemotron-3.5-asr-streaming-0.6b``, HF ``nemotron3_5_asr``):
  FastConformer 24 x 1024 (8 heads, FF 4096, 128 mel bins, causal subsampling with 256 channels),
  ``chunked_limited`` attention (sliding window 71, 13 lookahead frames), language-prompt projector
  (128 prompts, 2048 wide; no language: the default prompt 101), 2-layer LSTM predictor of 640,
  13088 labels (blank 13087), ``max_symbols_per_step`` 10: transformers' ``Nemotron3_5AsrConfig``
  defaults with ``num_mel_bins`` 128;
* **parakeet-tdt-0.6b-v2** (HF ``parakeet_tdt``): the same FastConformer width with full attention,
  128 mel bins, 1025 labels (1024 pieces + blank), durations 0-4, ``max_symbols_per_step`` 10.

A random joint emits the cap on every frame, or nothing; the head is made zero-mean and its blank
bias set so that about 30 % of the frames of 4 s of the corpus score a label above blank (the TDT
duration head favours 1-2 frames): greedy search then emits a few labels a second, as a real model
does. The figures report the labels emitted.

The corpus is 8 clips of 10 to 20 s cut one after another from the shared English speech
(``OASR_SHARED_DIR``/data/audio). Each round times, alternating order: transformers (feature
extractor + ``generate(decoder_start_token_id=blank)``) one clip at a time and as one padded batch
of 8, and ``ASREngine`` (greedy) with ``max_batch_size`` 1 and 8, and (a separate figure: other
arithmetic) at batch 8 with int8 Linear layers (``quantize="int8"``). RTFx is audio seconds / wall
seconds; peak RSS is the process's VmHWM during the run (reset before each through
``/proc/self/clear_refs``) minus the resident size before it (both models stay loaded).

    python benchmarks/nemo_transducer_bench.py --rounds 1 --threads 1 --memory-minutes 1 2 4 8 \\
        --json benchmarks/results/nemo_transducer_cpu.json

``--memory-minutes`` adds the peak RSS of the Nemotron encoder over one input of each length, each
in a fresh process. (The in-process peak RSS figures of the comparison are a floor: the process's
allocator reuses what the other side freed.)

``--models`` picks ``nemotron``, ``tdt`` or both; ``--threads`` is torch's intra-op threads for both sides.
Needs transformers >= 5.24 (the test extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MELS = 128
NEMOTRON_PROMPTS = {"en-US": 0, "en": 0, "de-DE": 1, "de": 1, "es-ES": 2, "es": 2, "fr-FR": 3, "fr": 3, "auto": 101}


def synthetic_tokenizer(n_pieces: int):
    """A ParakeetTokenizer of exactly ``n_pieces`` ids (unigram pieces, then ``<pad>``)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import ParakeetTokenizer

    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = [("<unk>", 0.0)]
    i = 0
    while len(pieces) < n_pieces - 1:
        word, k = "", i
        while True:
            word, k = letters[k % 26] + word, k // 26 - 1
            if k < 0:
                break
        pieces.append((("\u2581" if i % 3 == 0 else "") + word, -1.0 - 0.001 * i))
        i += 1
    tok = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    out = ParakeetTokenizer(tokenizer_object=tok, clean_up_tokenization_spaces=False)
    out.add_special_tokens(
        {
            "pad_token": AddedToken("<pad>", normalized=False, special=True),
            "unk_token": AddedToken("<unk>", normalized=False, special=True),
        }
    )
    assert len(out) == n_pieces, (len(out), n_pieces)
    return out


EMIT_RATE = 0.3  # share of encoder frames (80 ms) whose first symbol is a label: ~4 labels a second


def shape_joint_(model, fe, wave: np.ndarray, seed: int = 0) -> float:
    """Zero-mean head, then the blank bias at which about ``EMIT_RATE`` of the frames of ``wave``
    (from the predictor's start state) score a label above blank; TDT's duration head favours
    one or two frames. Returns the blank bias."""
    g = torch.Generator().manual_seed(seed)
    vocab, blank = model.config.vocab_size, model.config.blank_token_id
    head = model.joint.head
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=g) * 2 / head.in_features**0.5)
        head.bias.zero_()
        if head.out_features > vocab:
            head.weight[vocab:] *= 0.25
            # 30 below the labels: transformers' generate picks its next input over the whole head
            # (labels and durations); the argmax among the durations is unchanged.
            head.bias[vocab:] = torch.tensor([0.5, 2.0, 1.5, 1.0, 0.5]) - 30.0
        inputs = fe([wave], sampling_rate=16000, return_tensors="pt")
        logits = model(
            input_features=inputs.input_features,
            attention_mask=inputs.attention_mask,
            decoder_input_ids=torch.tensor([[blank]]),
        ).logits[0, :, :vocab]
        margin = torch.cat([logits[:, :blank], logits[:, blank + 1 :]], -1).amax(-1) - logits[:, blank]
        bias = float(torch.quantile(margin, 1 - EMIT_RATE))
        head.bias[blank] = bias
    return bias


def build(kind: str, directory: Path, wave: np.ndarray, layers: int = 24):
    """Save the 0.6B-shaped checkpoint of ``kind``; (transformers model, feature extractor, params)."""
    import transformers as tf

    if kind == "nemotron":
        tokenizer = synthetic_tokenizer(13087)
        config = tf.Nemotron3_5AsrConfig(
            encoder_config={
                "model_type": "nemotron_asr_streaming_encoder",
                "num_mel_bins": MELS,
                "num_hidden_layers": layers,
            },
            vocab_size=len(tokenizer) + 1,
            blank_token_id=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
        )
        model = tf.Nemotron3_5AsrForRNNT(config).eval()
        fe = tf.NemotronAsrStreamingFeatureExtractor(feature_size=MELS)
        processor = tf.Nemotron3_5AsrProcessor(
            feature_extractor=fe, tokenizer=tokenizer, prompt_dictionary=NEMOTRON_PROMPTS, num_prompts=128
        )
    else:
        tokenizer = synthetic_tokenizer(1024)
        config = tf.ParakeetTDTConfig(
            encoder_config={"num_mel_bins": MELS, "num_hidden_layers": layers},
            vocab_size=len(tokenizer) + 1,
            blank_token_id=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            durations=[0, 1, 2, 3, 4],
        )
        model = tf.ParakeetForTDT(config).eval()
        fe = tf.ParakeetFeatureExtractor(feature_size=MELS)
        processor = tf.ParakeetProcessor(feature_extractor=fe, tokenizer=tokenizer, decoder_type="tdt")
    shape_joint_(model, fe, wave)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return model, fe, sum(p.numel() for p in model.parameters())


def corpus(audio_dir: Path, n: int = 8) -> list[np.ndarray]:
    """``n`` clips of 10..20 s (spread evenly, shuffled) cut one after another from the shared
    English clips joined at 16 kHz."""
    from oasr.audio.io import load_audio

    rows = [json.loads(line) for line in (audio_dir / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = sorted((r for r in rows if r.get("language") == "en"), key=lambda r: r["audio"])
    lengths = np.linspace(10.0, 20.0, n)
    np.random.default_rng(0).shuffle(lengths)
    need = int(lengths.sum() * 16000) + 16000
    parts, have = [], 0
    for row in rows:
        if have >= need:
            break
        x = load_audio(str(audio_dir / row["audio"]), 16000)
        parts.append(x)
        have += len(x)
    stream = np.concatenate(parts)
    if len(stream) < need:
        raise SystemExit(f"{audio_dir}: only {len(stream) / 16000:.0f} s of audio; {need / 16000:.0f} s needed")
    clips, at = [], 0
    for seconds in lengths:
        k = int(round(seconds * 16000))
        clips.append(np.ascontiguousarray(stream[at : at + k], dtype=np.float32))
        at += k
    return clips


def _status_kb(key: str) -> int:
    m = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1)) if m else 0


def timed(fn) -> tuple[float, object, float]:
    """(seconds, result, peak RSS growth in MiB over the run)."""
    base = _status_kb("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    return seconds, out, (_status_kb("VmHWM") - base) / 1024


def hf_labels(model, fe, waves: list[np.ndarray]) -> list[list[int]]:
    """transformers' greedy labels per clip for one padded batch of ``waves``."""
    from tests.models.nemotron.conftest import generated_labels

    with torch.no_grad():
        inputs = fe(list(waves), sampling_rate=16000, return_tensors="pt")
        out = model.generate(
            input_features=inputs.input_features,
            attention_mask=inputs.attention_mask,
            decoder_start_token_id=model.config.blank_token_id,
            max_new_tokens=12 * inputs.input_features.shape[1] // 8 + 16,
        )
        enc_lens = model.encoder._get_subsampling_output_length(inputs.attention_mask.sum(-1))
    return [t for t, _, _ in generated_labels(out.sequences, out.durations, enc_lens, model.config.blank_token_id)]


def bench_model(kind: str, clips, rounds: int, threads: int, layers: int) -> dict:
    import oasr

    audio_s = sum(len(c) for c in clips) / 16000
    with tempfile.TemporaryDirectory(prefix=f"oasr_{kind}_") as tmp:
        t0 = time.perf_counter()
        torch.manual_seed(0)
        model, fe, params = build(kind, Path(tmp), clips[0][: 4 * 16000], layers)
        print(
            f"[{kind}] built and saved {params / 1e6:.0f}M parameters in {time.perf_counter() - t0:.0f} s", flush=True
        )
        first = oasr.ASREngine(tmp, dtype="float32", max_batch_size=1, num_threads=threads)
        engines = {1: first, 8: oasr.ASREngine(first.loaded, dtype="float32", max_batch_size=8, num_threads=threads)}
        int8 = oasr.ASREngine(tmp, dtype="float32", max_batch_size=8, num_threads=threads, quantize="int8")
        sides = {
            "transformers batch 1": lambda: [hf_labels(model, fe, [c])[0] for c in clips],
            "transformers batch 8": lambda: hf_labels(model, fe, clips),
            "oasr batch 1": lambda: _oasr(engines[1], clips),
            "oasr batch 8": lambda: _oasr(engines[8], clips),
            "oasr batch 8 int8": lambda: _oasr(int8, clips),
        }
        hf_labels(model, fe, [clips[0][:16000]])  # warm-up both sides on one second
        _oasr(engines[8], [clips[0][:16000]])
        _oasr(int8, [clips[0][:16000]])
        times: dict[str, list[float]] = {k: [] for k in sides}
        cpu: dict[str, list[float]] = {k: [] for k in sides}  # process CPU seconds: steadier on a shared machine
        rss: dict[str, float] = {}
        labels: dict[str, list[list[int]]] = {}
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for name in order:
                c0 = time.process_time()
                seconds, out, grew = timed(sides[name])
                cpu[name].append(time.process_time() - c0)
                times[name].append(seconds)
                rss[name] = max(rss.get(name, 0.0), grew)
                labels[name] = out
                print(f"[{kind}] round {r + 1} {name}: {seconds:.1f} s, RTFx {audio_s / seconds:.2f}", flush=True)
    base = labels["transformers batch 1"]
    rtfx = {k: audio_s / statistics.median(v) for k, v in times.items()}
    emitted = sum(len(t) for t in base)
    return {
        "shape": kind,
        "encoder_layers": layers,
        "parameters": params,
        "seconds": times,
        "cpu_seconds": cpu,
        "rtfx": {k: round(v, 2) for k, v in rtfx.items()},
        "cpu_ratio_oasr_vs_transformers": {
            f"batch {b}": round(
                statistics.median(cpu[f"transformers batch {b}"]) / statistics.median(cpu[f"oasr batch {b}"]), 2
            )
            for b in (1, 8)
        },
        "ratio_oasr_vs_transformers": {
            "batch 1": round(rtfx["oasr batch 1"] / rtfx["transformers batch 1"], 2),
            "batch 8": round(rtfx["oasr batch 8"] / rtfx["transformers batch 8"], 2),
            "oasr batch 8 vs transformers batch 1": round(rtfx["oasr batch 8"] / rtfx["transformers batch 1"], 2),
            "oasr batch 8 int8 vs transformers batch 8": round(
                rtfx["oasr batch 8 int8"] / rtfx["transformers batch 8"], 2
            ),
        },
        "peak_rss_growth_mib": {k: round(v) for k, v in rss.items()},
        "labels_identical_to_transformers_batch_1": {
            k: f"{sum(a == b for a, b in zip(v, base))}/{len(clips)}" for k, v in labels.items()
        },
        "labels_emitted": emitted,
        "labels_per_second": round(emitted / audio_s, 2),
    }


def _oasr(engine, clips) -> list[list[int]]:
    outs = engine.transcribe(list(clips), beam_size=1)
    return [[t for seg in out.segments for t in seg.tokens] for out in outs]


_MEMORY_CHILD = """
import re, sys, time, numpy as np, torch
sys.path.insert(0, {repo!r})
import oasr
from oasr.audio.frontends import build_frontend
def _status_kb(key):
    return int(re.search(key + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
torch.set_num_threads({threads})
engine = oasr.ASREngine({path!r}, dtype="float32", num_threads={threads})
wave = np.resize(np.load({stream!r}), int({minutes} * 60 * 16000)).astype(np.float32)
x = torch.as_tensor(build_frontend(engine.loaded.feature_spec)(wave))[None].float()
base = _status_kb("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
t0 = time.perf_counter()
with torch.inference_mode():
    engine.model.encode_offline(x, torch.tensor([x.shape[1]]))
print((_status_kb("VmHWM") - base) / 1024, time.perf_counter() - t0)
"""


def memory_sweep(clips, minutes: list[float], threads: int, layers: int) -> dict:
    """Peak RSS growth of the Nemotron encoder (``encode_offline``, one row) over ``minutes`` of
    speech in one piece, each length in a fresh process (VmHWM over VmRSS after the model and the
    features are in memory): the offline chunked_limited attention in query blocks keeps it linear in T."""
    import subprocess

    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="oasr_nemotron_mem_") as tmp:
        torch.manual_seed(0)
        model, _, _ = build("nemotron", Path(tmp), clips[0][: 4 * 16000], layers)
        del model
        stream = Path(tmp) / "stream.npy"
        np.save(stream, np.concatenate(clips))
        for m in minutes:
            code = _MEMORY_CHILD.format(repo=str(REPO), threads=threads, path=tmp, stream=str(stream), minutes=m)
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            grew, seconds = (float(v) for v in res.stdout.split()[-2:])
            out[f"{m:g} min"] = {"peak_rss_growth_mib": round(grew), "seconds": round(seconds, 1)}
            print(f"[memory] {m:g} min: peak RSS +{grew:.0f} MiB, {seconds:.1f} s", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", choices=("nemotron", "tdt"), default=["nemotron", "tdt"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--audio-dir", type=Path, default=Path(os.environ.get("OASR_SHARED_DIR", "/work/shared")) / "data/audio"
    )
    ap.add_argument("--layers", type=int, default=24, help="encoder layers (24, the release; fewer only to smoke-test)")
    ap.add_argument(
        "--memory-minutes",
        type=float,
        nargs="*",
        default=[],
        help="also: peak RSS of the Nemotron encoder over one input of each length (minutes)",
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import transformers

    torch.set_num_threads(args.threads)
    clips = corpus(args.audio_dir)
    audio_s = sum(len(c) for c in clips) / 16000
    print(f"{len(clips)} clips, {audio_s:.1f} s of audio, {args.threads} threads", flush=True)
    results = {kind: bench_model(kind, clips, args.rounds, args.threads, args.layers) for kind in args.models}
    memory = memory_sweep(clips, args.memory_minutes, args.threads, args.layers) if args.memory_minutes else None
    out = {
        "command": "python " + " ".join([os.path.relpath(__file__, REPO), *sys.argv[1:]]),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "load_average": os.getloadavg(),
        },
        "corpus": {
            "clips": len(clips),
            "audio_s": round(audio_s, 2),
            "lengths_s": [round(len(c) / 16000, 2) for c in clips],
        },
        "rounds": args.rounds,
        "models": results,
    }
    if memory is not None:
        out["nemotron_encoder_memory"] = memory
    print(
        json.dumps({k: {f: v[f] for f in ("rtfx", "ratio_oasr_vs_transformers")} for k, v in results.items()}, indent=2)
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
