"""oasr's paraformer strategy against funasr's ``AutoModel.generate`` on CPU, same process, same weights.

The model has the published paraformer-large shape (FunASR's
``speech_paraformer-large_asr_nat-zh-cn-16k-common-vocab8404`` config.yaml: SANM encoder 50 blocks
of 512 / 4 heads / 2048, CifPredictorV2, SANM decoder 16 blocks, 8404 tokens, LFR 7/6; about
220M parameters) with random weights built by funasr's own classes and written as a FunASR
directory, so both sides read the same files. The CIF output layer is biased to fire about every
fourth encoder frame (~4 tokens a second, a real model's rate for Mandarin).

The corpus is 16 clips of 5 to 20 s cut from the shared speech (``OASR_SHARED_DIR``/data/audio).
Each round times, alternating: funasr ``generate(input=<16 waveforms>, batch_size_s=300)``, oasr
at batch 1 (``max_batch_size=1``), oasr at batch 8 (``max_batch_size=8``: eight windows a step,
through the model one at a time on a CPU), the same with ``encoder_batch_size=8`` (one padded
pass of the eight, length-grouped), oasr at batch 8 with
int8 Linear layers (``quantize="int8"``; a separate figure: other arithmetic), and, as a second
funasr figure, ``generate(..., batch_size=8)``. On a CPU funasr's ``AutoModel`` sets
``batch_size=1`` and reads ``batch_size_s`` only on its VAD path, so its default run decodes one
input per forward; ``batch_size=8`` asks it for padded batches of 8.

    python benchmarks/paraformer_bench.py --rounds 1 --threads 1 \\
        --json benchmarks/results/paraformer_cpu.json

``--threads`` is both sides' intra-op threads (torch's, which funasr also runs on).

Needs funasr 1.4.16 (``pip install torch==2.13.0 funasr==1.4.16``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# FunASR's paraformer-large config.yaml (speech_paraformer-large_asr_nat-zh-cn-16k-common-vocab8404).
LARGE = {
    "encoder_conf": {"output_size": 512, "attention_heads": 4, "linear_units": 2048, "num_blocks": 50},
    "decoder_conf": {"attention_heads": 4, "linear_units": 2048, "num_blocks": 16, "att_layer_num": 16},
    "predictor_conf": {"idim": 512, "threshold": 1.0, "l_order": 1, "r_order": 1, "tail_threshold": 0.45},
}
VOCAB = 8404
CIF_RATE = 0.25  # sigmoid of the CIF output: a token every 4 encoder frames (240 ms)


def token_table() -> list[str]:
    """8404 entries: <blank>, <s>, </s>, CJK characters, <unk> (FunASR's layout)."""
    chars = [chr(0x4E00 + i) for i in range(VOCAB - 4)]
    return ["<blank>", "<s>", "</s>", *chars, "<unk>"]


def write_large_dir(directory: Path, seed: int = 0) -> tuple[Path, int]:
    """A FunASR Paraformer directory at the paraformer-large shape, random weights; (dir, params)."""
    import funasr.models.paraformer.model  # noqa: F401  (registers the classes)
    import yaml
    from funasr.register import tables

    from tests.models.paraformer._funasr_format import config, write_am_mvn

    cfg = config("Paraformer")
    for section, values in LARGE.items():
        cfg[section].update(values)
    torch.manual_seed(seed)
    cls = tables.model_classes.get("Paraformer")
    kwargs = {k: v for k, v in cfg.items() if k not in ("model", "model_conf", "frontend_conf")}
    tokens = token_table()
    model = cls(**kwargs, **cfg["model_conf"], vocab_size=len(tokens)).eval()
    with torch.no_grad():
        model.predictor.cif_output.weight.mul_(0.01)
        model.predictor.cif_output.bias.fill_(float(np.log(CIF_RATE / (1 - CIF_RATE))))
    params = sum(p.numel() for n, p in model.named_parameters() if not n.startswith(("decoder.embed", "ctc")))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    torch.save(model.state_dict(), directory / "model.pt")
    (directory / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False), encoding="utf-8")
    dim = 560
    g = torch.Generator().manual_seed(seed + 1)
    write_am_mvn(
        directory / "am.mvn", -(8.0 + 4.0 * torch.rand(dim, generator=g)), 0.2 + 0.2 * torch.rand(dim, generator=g)
    )
    del model
    return directory, params


def corpus(audio_dir: Path, n: int = 16) -> list[np.ndarray]:
    """``n`` clips of 5..20 s (spread evenly, shuffled) cut one after another from the shared
    clips (Mandarin first) joined at 16 kHz."""
    from oasr.audio.io import load_audio

    rows = [json.loads(line) for line in (audio_dir / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    rows.sort(key=lambda r: (r.get("language") != "zh", r["audio"]))
    lengths = np.linspace(5.0, 20.0, n)
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


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--model-dir", type=Path, default=None, help="reuse / write the random model here")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from funasr import AutoModel

    import oasr
    from oasr.models import load_pretrained

    shared = Path(os.environ.get("OASR_SHARED_DIR", REPO.parent / "shared"))
    clips = corpus(shared / "data" / "audio", args.clips)
    audio_s = sum(len(c) for c in clips) / 16000
    torch.set_num_threads(args.threads)

    tmp = tempfile.TemporaryDirectory() if args.model_dir is None else None
    directory = Path(tmp.name) / "paraformer-large" if tmp else args.model_dir
    t_build, (directory, params) = timed(lambda: write_large_dir(directory))
    print(
        f"model: {params / 1e6:.1f}M parameters, written in {t_build:.1f} s; corpus {len(clips)} clips, {audio_s:.1f} s"
    )

    ref = AutoModel(model=str(directory), disable_update=True, device="cpu", ncpu=args.threads, log_level="ERROR")
    loaded = load_pretrained(str(directory))
    engines = {b: oasr.ASREngine(loaded, max_batch_size=b, num_threads=args.threads) for b in (1, 8)}
    engines["8 padded"] = oasr.ASREngine(loaded, max_batch_size=8, encoder_batch_size=8, num_threads=args.threads)
    # int8 (dynamic, the Linear layers) quantises in place: its own copy of the weights.
    engines["8 int8"] = oasr.ASREngine(
        load_pretrained(str(directory)), max_batch_size=8, num_threads=args.threads, quantize="int8"
    )
    torch.set_num_threads(args.threads)

    def run_funasr(**kw):
        return [r["text"].replace(" ", "") for r in ref.generate(input=clips, disable_pbar=True, **kw)]

    sides = {
        "funasr batch_size_s=300": lambda: run_funasr(batch_size_s=300),
        "oasr batch 1": lambda: [o.text for o in engines[1].transcribe(clips)],
        "oasr batch 8": lambda: [o.text for o in engines[8].transcribe(clips)],
        "oasr batch 8, encoder_batch_size 8": lambda: [o.text for o in engines["8 padded"].transcribe(clips)],
        "oasr batch 8 int8": lambda: [o.text for o in engines["8 int8"].transcribe(clips)],
        "funasr batch_size=8": lambda: run_funasr(batch_size=8),
    }
    # Warm-up: one short clip through each.
    ref.generate(input=clips[:1], disable_pbar=True)
    for e in engines.values():
        e.transcribe(clips[0])

    times: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}  # process CPU seconds: steadier on a shared machine
    texts: dict[str, list[str]] = {}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            c0 = time.process_time()
            seconds, out = timed(sides[name])
            cpu[name].append(time.process_time() - c0)
            times[name].append(seconds)
            texts[name] = out
            print(f"round {r + 1} {name}: {seconds:.1f} s ({cpu[name][-1]:.1f} s CPU), RTFx {audio_s / seconds:.2f}")

    base = texts["funasr batch_size_s=300"]
    agree = {k: sum(a == b for a, b in zip(v, base)) for k, v in texts.items()}
    # Characters equal at the same place (a random model's logits are close: int8 flips some argmaxes).
    chars = {
        k: sum(x == y for a, b in zip(v, base) for x, y in zip(a, b)) / max(1, sum(map(len, base)))
        for k, v in texts.items()
    }
    rtfx = {k: audio_s / statistics.median(v) for k, v in times.items()}
    result = {
        "command": "python " + " ".join([os.path.relpath(__file__, REPO), *sys.argv[1:]]),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
            "funasr": __import__("funasr").__version__,
            "load_average": os.getloadavg(),
        },
        "model": {"shape": "paraformer-large (vocab 8404)", "parameters": params, "cif_rate": CIF_RATE},
        "corpus": {
            "clips": len(clips),
            "audio_s": round(audio_s, 2),
            "lengths_s": [round(len(c) / 16000, 2) for c in clips],
        },
        "rounds": args.rounds,
        "seconds": times,
        "rtfx": {k: round(v, 2) for k, v in rtfx.items()},
        "cpu_seconds": cpu,
        "ratio_vs_funasr_default": {k: round(v / rtfx["funasr batch_size_s=300"], 2) for k, v in rtfx.items()},
        "cpu_ratio_vs_funasr_default": {
            k: round(statistics.median(cpu["funasr batch_size_s=300"]) / statistics.median(v), 2)
            for k, v in cpu.items()
        },
        "ratio_oasr_b8_vs_funasr_batch_size_8": round(rtfx["oasr batch 8"] / rtfx["funasr batch_size=8"], 2),
        "texts_equal_to_funasr_default": {k: f"{v}/{len(clips)}" for k, v in agree.items()},
        "characters_equal_to_funasr_default": {k: round(v, 4) for k, v in chars.items()},
        "tokens": sum(len(t) for t in base),
    }
    print(
        json.dumps(
            {k: result[k] for k in ("rtfx", "ratio_vs_funasr_default", "texts_equal_to_funasr_default")},
            indent=2,
            ensure_ascii=False,
        )
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
