"""oasr against NeMo's own ``transcribe()`` on NeMo-saved Parakeet archives: same process, same files.

For each decoder (``ctc``: ``EncDecCTCModelBPE``; ``rnnt`` / ``tdt``: ``EncDecRNNTBPEModel``) and each
shape, a model is built by NeMo's classes with random weights and written by ``save_to``; oasr loads
that ``.nemo`` (``ASREngine("x.nemo")``), NeMo keeps the model it built. Shapes:

* ``tiny``: ``tests/models/parakeet/nemo_reference``'s release configs shrunk to 2 layers of width 32;
* ``release``: parakeet-tdt-0.6b-v2's encoder, FastConformer 24 x 1024 (8 heads, FF 4096, 8x
  ``dw_striding`` with 256 channels, 128 mel bins), 2-layer LSTM predictor and joint of 640, a
  1024-piece SentencePiece BPE vocabulary (the CTC head over the same vocabulary): about 0.6 B
  parameters, 2.5 GB in float32.

A random head emits nothing or a label on every frame; the blank bias is set so that about 30 % of
the frames of 4 s of the first clip score a label above blank (the transducers' from the predictor's
start state), so both sides decode a few labels a second, as a trained model does. The figures
report the labels emitted and whether both sides' tokens agree.

The corpus: the English 16-kHz mono clips of 2 to 20 s of the repository's ``data/audio`` and, when
present, the shared speech (``OASR_SHARED_DIR``/data/audio; ``--audio-dir`` adds or replaces folders), ``--clips``
of them spread evenly by name. Each round times, in alternating order, NeMo's ``model.transcribe(paths,
batch_size=B)`` and oasr's ``ASREngine(path, max_batch_size=B).transcribe(paths)`` (greedy, the
archive's decoding) for every B of ``--batch-sizes``, after one untimed warm-up of each on the first
clip; torch runs ``--threads`` intra-op threads on both sides. ``--beam K`` adds, for the
transducers, NeMo's ``malsd_batch`` against oasr's ``malsd`` search with beam K. RTFx is audio seconds / wall seconds
(median of ``--rounds``); the ratio is oasr's RTFx over NeMo's, measured in the same run. Timing is
reported, never asserted: run it on a quiet machine.

    python benchmarks/nemo_speed.py --shapes tiny release --json benchmarks/results/nemo_speed_cpu2.json \\
        --markdown benchmarks/results/nemo_speed_cpu2.md

Needs ``nemo-toolkit`` (installed by ``.ci/run``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KINDS = ("ctc", "rnnt", "tdt")
EMIT_RATE = 0.3  # share of encoder frames (80 ms) whose first symbol is a label: ~4 labels a second
RELEASE_ENCODER = {
    "n_layers": 24,
    "d_model": 1024,
    "n_heads": 8,
    "subsampling_conv_channels": 256,
    "ff_expansion_factor": 4,
    "conv_kernel_size": 9,
}
RELEASE_VOCAB = 1024
PRED_HIDDEN = 640  # parakeet-tdt-0.6b-v2's predictor and joint width


def corpus(audio_dirs: list[Path], n: int) -> list[dict]:
    """Up to ``n`` English 16-kHz mono clips of 2..20 s (spread evenly by name) from the manifests."""
    rows = []
    for d in audio_dirs:
        manifest = d / "manifest.jsonl"
        if not manifest.is_file():
            continue
        for line in manifest.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            ok = row.get("language") == "en" and row.get("sample_rate") == 16000 and row.get("channels") == 1
            if ok and 2.0 <= float(row.get("duration_s", 0)) <= 20.0 and (d / row["audio"]).is_file():
                rows.append({**row, "path": str(d / row["audio"])})
    seen, unique = set(), []
    for row in sorted(rows, key=lambda r: r["audio"]):
        if row["audio"] not in seen:
            seen.add(row["audio"])
            unique.append(row)
    if not unique:
        raise SystemExit(f"no English 16-kHz clips in {[str(d) for d in audio_dirs]}")
    picks = np.unique(np.linspace(0, len(unique) - 1, min(n, len(unique))).round().astype(int))
    return [unique[i] for i in picks]


def tokenizer_dir(directory: Path, vocab_size: int) -> Path:
    """A SentencePiece BPE tokenizer of ``vocab_size`` pieces, as NeMo's tokenizer script writes one:
    the tiny fixtures' sentences, plus random letter words that give BPE enough merges for a
    release-sized vocabulary."""
    from tests.models.parakeet import nemo_reference
    from tests.models.parakeet.conftest import SENTENCES

    if vocab_size <= 40:
        return nemo_reference.train_sentencepiece(directory, vocab_size)
    g = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(g.choice(letters, size=int(g.integers(2, 9)))) for _ in range(30000)]
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
    return nemo_reference.train_sentencepiece(directory, vocab_size, sentences=(*SENTENCES, *lines))


def model_config(kind: str, shape: str, tok: Path) -> dict[str, Any]:
    from tests.models.parakeet import nemo_reference

    cfg = nemo_reference.model_config(kind, tok)
    cfg["preprocessor"]["dither"] = 0.0  # both sides deterministic (oasr's front end has no dither)
    # transcribe(paths) builds its data loader from this section, as a release archive carries it
    cfg["validation_ds"] = {"manifest_filepath": None, "sample_rate": 16000, "batch_size": 8, "shuffle": False}
    if shape == "release":
        features = 128
        cfg["preprocessor"]["features"] = features
        cfg["encoder"].update(RELEASE_ENCODER, feat_in=features)
        if kind != "ctc":
            cfg["model_defaults"] = {"enc_hidden": 1024, "pred_hidden": PRED_HIDDEN, "joint_hidden": PRED_HIDDEN}
            cfg["decoder"]["prednet"]["pred_hidden"] = PRED_HIDDEN
            cfg["joint"]["jointnet"]["joint_hidden"] = PRED_HIDDEN
    return cfg


@torch.no_grad()
def shape_head_(model, kind: str, wave: np.ndarray) -> None:
    """Randomise every weight (unit-variance activations), then set the blank bias so that about
    ``EMIT_RATE`` of the frames of ``wave`` score a label above blank."""
    g = torch.Generator().manual_seed(0)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=g)
        if p.dim() > 1:
            p.copy_(noise * p[0].numel() ** -0.5)
        elif "norm" in name and name.endswith("weight"):
            p.copy_(1.0 + 0.1 * noise)
        else:
            p.copy_(0.1 * noise)
    blank = model.tokenizer.vocab_size
    x = torch.from_numpy(wave)[None]
    feats, n = model.preprocessor(input_signal=x, length=torch.tensor([x.shape[1]]))
    enc, _ = model.encoder(audio_signal=feats, length=n)
    if kind == "ctc":
        bias = model.decoder.decoder_layers[0].bias
        bias[0] = -20.0  # <unk> never wins, as in a trained model
        logits = model.decoder(encoder_output=enc)[0]  # (T, V + 1)
    else:
        model.decoder.prediction.embed.weight[blank].zero_()
        bias = model.joint.joint_net[-1].bias
        bias[0] = -20.0
        g_out, _ = model.decoder.predict(None, state=None, add_sos=False, batch_size=1)
        logits = model.joint.joint(enc.transpose(1, 2), g_out)[0, :, 0, : blank + 1]  # (T, V + 1)
    margin = logits[:, :blank].amax(-1) - logits[:, blank]
    bias[blank] += float(torch.quantile(margin, 1 - EMIT_RATE))


def build(kind: str, shape: str, directory: Path, wave: np.ndarray) -> tuple[Path, Any, int]:
    """Build, shape and ``save_to`` a NeMo model; (.nemo path, the NeMo model in eval, parameters)."""
    from omegaconf import OmegaConf

    from tests.models.parakeet import nemo_reference

    tok = tokenizer_dir(directory / f"{shape}_tokenizer", 40 if shape == "tiny" else RELEASE_VOCAB)
    model = nemo_reference.model_class(kind)(cfg=OmegaConf.create(model_config(kind, shape, tok))).eval()
    shape_head_(model, kind, wave[: 4 * 16000])
    path = directory / f"{shape}_{kind}.nemo"
    model.save_to(str(path))
    return path, model, sum(p.numel() for p in model.parameters())


def nemo_strategy(model, kind: str, beam: int) -> None:
    """Set NeMo's decoding: its greedy_batch (``beam`` 1), else ``malsd_batch`` with ``beam_size`` =
    ``beam`` (transducers only: the CTC ``beam_batch`` settings are not aligned between the sides
    here, so CTC beams are not timed)."""
    import copy

    from omegaconf import open_dict

    cfg = copy.deepcopy(model.cfg.decoding)
    with open_dict(cfg):
        cfg.strategy = "greedy_batch" if beam == 1 else "malsd_batch"
        if beam > 1:
            cfg.beam = {"beam_size": beam}
    model.change_decoding_strategy(cfg, verbose=False)


def nemo_transcribe(model, paths: list[str], batch: int) -> list[list[int]]:
    out = model.transcribe(paths, batch_size=batch, verbose=False)
    out = out[0] if isinstance(out, tuple) else out
    return [[int(t) for t in h.y_sequence] for h in out]


def oasr_transcribe(engine, paths: list[str], **options: Any) -> list[list[int]]:
    return [[t for seg in o.segments for t in seg.tokens] for o in engine.transcribe(paths, **options)]


def collapse(frame_labels: list[int], blank: int) -> list[int]:
    """A CTC hypothesis's frame-wise labels (NeMo's ``y_sequence``) -> its tokens."""
    out, prev = [], blank
    for t in frame_labels:
        if t != prev and t != blank:
            out.append(t)
        prev = t
    return out


def bench(kind: str, shape: str, clips: list[dict], batches: list[int], rounds: int, threads: int, beam: int) -> dict:
    import oasr

    paths = [c["path"] for c in clips]
    audio_s = sum(float(c["duration_s"]) for c in clips)
    from oasr.audio import load_audio

    wave = load_audio(paths[0])
    with tempfile.TemporaryDirectory(prefix=f"oasr_nemo_{shape}_{kind}_") as tmp:
        t0 = time.perf_counter()
        path, model, params = build(kind, shape, Path(tmp), wave)
        print(f"[{shape} {kind}] built and saved {params / 1e6:.1f}M parameters in {time.perf_counter() - t0:.0f} s")
        loaded = oasr.ASREngine(str(path), dtype="float32", num_threads=threads).loaded  # one copy of the weights
        engines = {b: oasr.ASREngine(loaded, dtype="float32", max_batch_size=b, num_threads=threads) for b in batches}
        blank = engines[batches[0]].model.blank_id
        nemo_transcribe(model, paths[:1], 1)  # warm-up, untimed
        for e in engines.values():
            oasr_transcribe(e, paths[:1])
        # name -> (untimed set-up, timed run)
        sides = {}
        beams = {"": (1, {})}
        if beam > 1 and kind != "ctc":  # NeMo's malsd_batch against oasr's malsd
            beams[f" beam {beam}"] = (beam, {"beam_size": beam, "search": "malsd"})
        for suffix, (k, opts) in beams.items():
            for b in batches:
                setup = lambda k=k: nemo_strategy(model, kind, k)  # noqa: E731
                sides[f"nemo batch {b}{suffix}"] = (setup, lambda b=b: nemo_transcribe(model, paths, b))
                sides[f"oasr batch {b}{suffix}"] = (None, lambda b=b, o=opts: oasr_transcribe(engines[b], paths, **o))
        if len(beams) > 1:  # the beam search's warm-up
            nemo_strategy(model, kind, beam)
            nemo_transcribe(model, paths[:1], 1)
            oasr_transcribe(engines[batches[0]], paths[:1], **beams[f" beam {beam}"][1])
        times: dict[str, list[float]] = {k: [] for k in sides}
        tokens: dict[str, list[list[int]]] = {}
        for r in range(rounds):
            for name in list(sides) if r % 2 == 0 else list(reversed(sides)):
                setup, run = sides[name]
                if setup is not None:
                    setup()
                t0 = time.perf_counter()
                tokens[name] = run()
                times[name].append(time.perf_counter() - t0)
                print(f"[{shape} {kind}] round {r + 1} {name}: {times[name][-1]:.2f} s", flush=True)
    if kind == "ctc":  # a greedy CTC hypothesis holds the frame-wise labels
        greedy_nemo = [k for k in tokens if k.startswith("nemo") and "beam" not in k]
        tokens.update({k: [collapse(t, blank) for t in tokens[k]] for k in greedy_nemo})
    rtfx = {k: audio_s / statistics.median(v) for k, v in times.items()}
    ref = tokens[f"nemo batch {batches[0]}"]
    names = [n[len("oasr ") :] for n in sides if n.startswith("oasr")]
    return {
        "kind": kind,
        "shape": shape,
        "parameters": params,
        "audio_s": round(audio_s, 2),
        "labels_per_s": round(sum(len(t) for t in ref) / audio_s, 2),
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "rtfx": {k: round(v, 2) for k, v in rtfx.items()},
        "ratio_oasr_vs_nemo": {n: round(rtfx[f"oasr {n}"] / rtfx[f"nemo {n}"], 2) for n in names},
        "same_tokens_as_nemo": {
            n: sum(a == b for a, b in zip(tokens[f"oasr {n}"], tokens[f"nemo {n}"])) / len(ref) for n in names
        },
    }


def markdown(report: dict) -> str:
    lines = [
        "| shape | decoder | params | labels/s | batch | NeMo RTFx | oasr RTFx | oasr/NeMo | same tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        for n in r["ratio_oasr_vs_nemo"]:
            lines.append(
                f"| {r['shape']} | {r['kind']} | {r['parameters'] / 1e6:.1f}M | {r['labels_per_s']} | {n[6:]} "
                f"| {r['rtfx'][f'nemo {n}']} | {r['rtfx'][f'oasr {n}']} "
                f"| {r['ratio_oasr_vs_nemo'][n]}x | {r['same_tokens_as_nemo'][n]:.0%} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", choices=("tiny", "release"), default=["tiny", "release"])
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    p.add_argument("--beam", type=int, default=0, help="also time this beam: NeMo's malsd_batch (transducers)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads on both sides (default 2)")
    p.add_argument("--clips", type=int, default=8, help="clips in the corpus (default 8)")
    p.add_argument("--audio-dir", type=Path, action="append", default=None, help="folders with manifest.jsonl")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(args.threads)
    shared = Path(os.environ.get("OASR_SHARED_DIR", REPO.parent / "shared"))
    dirs = args.audio_dir or [REPO / "data" / "audio", shared / "data" / "audio"]
    clips = corpus(dirs, args.clips)
    print(f"corpus: {len(clips)} clips, {sum(float(c['duration_s']) for c in clips):.1f} s", flush=True)
    import nemo

    results = [
        bench(kind, shape, clips, args.batch_sizes, args.rounds, args.threads, args.beam)
        for shape in args.shapes
        for kind in args.kinds
    ]
    report = {
        "command": "python benchmarks/nemo_speed.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
            "nemo": nemo.__version__,
            "load_average": list(os.getloadavg()),
        },
        "corpus": {
            "clips": [c["audio"] for c in clips],
            "audio_s": round(sum(float(c["duration_s"]) for c in clips), 2),
        },
        "rounds": args.rounds,
        "batch_sizes": args.batch_sizes,
        "results": results,
    }
    table = markdown(report)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
