"""Diarizers on the 2 / 3-speaker set: DER, JER, cpWER, and oasr's speed against each reference.

    python benchmarks/diarization_bench.py [--nemotron3 DIR] [--pyannote DIR] [--sortformer FILE]
        [--asr whisper-base] [--threads 2] [--rounds 3] [--out benchmarks/results/diarization_cpu2]

The set is ``oasr.diarization.synth.build_set`` over the corpus's speakers (``--audio-dir``: the
shared corpus beside the checkout, else the repository's ``data/audio``), written once to
``--set-dir`` (16-kHz WAV + RTTM + manifest) and read back from there; each mix is decoded once
and every system gets the same float32 arrays.

Systems (each run on the whole set, ``--batch-size`` recordings a call, no speaker count given):

* ``vad+resemblyzer``: a baseline with real weights, the only ones here: Silero VAD (the
  ``silero-vad`` package), Resemblyzer's GE2E speaker encoder (``VoiceEncoder``, weights shipped in
  its wheel) on 1.5-s windows every 0.5 s of speech, average-linkage agglomerative clustering of
  the cosine distances, the count chosen by the best silhouette over 2..8 (``(oracle count)``: the
  true count given). One speaker per frame, so overlapped speech is partly missed by design.
* ``oasr nemotron3`` / ``transformers nemotron3`` (``--nemotron3 DIR``, transformers'
  ``save_pretrained`` directory): oasr's ``load_diarizer(DIR)`` against
  ``Nemotron3DiarizationForAudioFrameClassification`` + its processor's ``extract_speaker_dict``.
* ``oasr pyannote`` / ``pyannote.audio`` (``--pyannote DIR``), ``oasr sortformer`` / ``nemo
  sortformer`` (``--sortformer FILE``), where those loaders are present.

No released diarization weights are reachable here: the model directories are the reference's
own classes with random (or briefly fitted) weights, so their DER says nothing of accuracy; the
``agreement`` column (DER of oasr's turns against the reference's turns taken as truth, and
whether the two DERs are equal) and the speed ratio are what they show. The baseline's DER is
a real one. The truth is Silero's speech spans of each clip alone, so a Silero-based system is
favoured on missed / false-alarm speech; confusion is the fair part of its figure.

Timing: every system is loaded and warmed up on one mix first; then ``--rounds`` rounds each
time every system once over the whole set, the order reversed every other round (A/B
interleaved), torch at ``--threads`` threads; medians reported, with min and max. Peak RSS is
not reported (all systems share one process).

cpWER (``--asr MODEL``): oasr transcribes each mix once with word timestamps; each system's
turns assign the words to speakers (``oasr.diarization.assign``, WhisperX's rule, words outside
every turn go to the nearest) and each speaker's words are concatenated; ``truth`` assigns them
with the reference turns (the ASR's own floor).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from oasr.diarization import Diarization, SpeakerTurn, speaker_label  # noqa: E402
from oasr.diarization.references import REFERENCES, agreement, in_batches  # noqa: E402
from oasr.diarization.scoring import score_cpwer, score_diarization, speaker_texts  # noqa: E402

COLLARS = ((0.0, False), (0.5, True))  # full scoring; NIST-style forgiving: +-0.25 s, overlap skipped


@dataclass
class System:
    name: str
    diarize: Callable[[Sequence[np.ndarray]], list[Diarization]]
    reference_of: str | None = None  # the oasr system this one is the reference of


def default_audio_dir() -> Path:
    shared = REPO.parent / "shared" / "data" / "audio"
    return shared if (shared / "manifest.jsonl").is_file() else REPO / "data" / "audio"


# --- the baseline with real weights ---------------------------------------------------------------


class ResemblyzerBaseline:
    """Silero VAD + Resemblyzer embeddings + agglomerative clustering (a ``Diarizer``)."""

    sampling_rate = 16000
    max_speakers = 8
    window_s, hop_s = 1.5, 0.5

    def __init__(self) -> None:
        from resemblyzer import VoiceEncoder

        self.encoder = VoiceEncoder("cpu", verbose=False)

    def _embed(self, audio: np.ndarray, spans: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
        """Window centres (s) and their unit embeddings."""
        import torch
        from resemblyzer.audio import wav_to_mel_spectrogram

        mel = wav_to_mel_spectrogram(audio)  # (frames, 40) at 10 ms
        win, hop = round(self.window_s * 100), round(self.hop_s * 100)
        centres, windows = [], []
        for a, b in spans:
            fa, fb = int(a * 100), int(np.ceil(b * 100))
            starts = list(range(fa, max(fa + 1, fb - win + 1), hop))
            for s in starts:
                piece = mel[s : s + win]
                if len(piece) < win:
                    piece = np.pad(piece, ((0, win - len(piece)), (0, 0)))
                windows.append(piece)
                centres.append((s + min(win, fb - s) / 2) / 100)
        with torch.no_grad():
            embeds = self.encoder(torch.from_numpy(np.stack(windows)).float()).numpy()
        return np.asarray(centres), embeds

    @staticmethod
    def _cluster(embeds: np.ndarray, num_speakers: int | None, max_speakers: int) -> np.ndarray:
        from sklearn.cluster import AgglomerativeClustering
        from sklearn.metrics import silhouette_score

        def fit(k: int) -> np.ndarray:
            return AgglomerativeClustering(n_clusters=k, metric="cosine", linkage="average").fit_predict(embeds)

        if len(embeds) < 3:
            return np.zeros(len(embeds), dtype=int)
        if num_speakers is not None:
            return fit(min(num_speakers, len(embeds)))
        best = None
        for k in range(2, min(max_speakers, len(embeds) - 1) + 1):
            labels = fit(k)
            score = silhouette_score(embeds, labels, metric="cosine")
            if best is None or score > best[0]:
                best = (score, labels)
        return best[1]

    def diarize(self, audios, *, num_speakers=None, min_speakers=None, max_speakers=None) -> list[Diarization]:
        from oasr.audio.vad import speech_spans
        from oasr.diarization.synth import TRUTH_VAD

        out = []
        for audio in audios:
            duration = len(audio) / self.sampling_rate
            spans = [(a / 16000, b / 16000) for a, b in speech_spans(audio, 16000, TRUTH_VAD)]
            if not spans:
                out.append(Diarization([], duration))
                continue
            centres, embeds = self._embed(audio, spans)
            labels = self._cluster(embeds, num_speakers, max_speakers or self.max_speakers)
            turns = []
            for a, b in spans:  # each 10-ms frame of speech to the nearest window's cluster
                frames = np.arange(int(a * 100), int(np.ceil(b * 100))) / 100 + 0.005
                nearest = labels[np.abs(frames[:, None] - centres[None, :]).argmin(axis=1)]
                cuts = np.flatnonzero(np.diff(nearest)) + 1
                for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(frames)]):
                    start, end = max(a, frames[lo] - 0.005), min(b, frames[hi - 1] + 0.005)
                    turns.append(SpeakerTurn(round(start, 3), round(end, 3), f"c{nearest[lo]}"))
            order = {}
            for t in sorted(turns, key=lambda t: t.start):
                order.setdefault(t.speaker, speaker_label(len(order)))
            turns = [SpeakerTurn(t.start, t.end, order[t.speaker]) for t in turns]
            out.append(Diarization(turns, duration).merged())
        return out


# --- the references' weights (their runners: oasr.diarization.references) -------------------------------


def random_nemotron3(directory: Path) -> str:
    """transformers' ``Nemotron3DiarizationConfig()`` (the released model's shape, 99 M parameters)
    with its own random initialisation (seed 0), saved once into ``directory`` with its processor."""
    if not (directory / "model.safetensors").is_file():
        import torch
        from transformers import (
            Nemotron3DiarizationConfig,
            Nemotron3DiarizationForAudioFrameClassification,
            Nemotron3DiarizationProcessor,
            NemotronAsrStreamingFeatureExtractor,
        )

        torch.manual_seed(0)
        config = Nemotron3DiarizationConfig()
        Nemotron3DiarizationForAudioFrameClassification(config).save_pretrained(directory)
        extractor = NemotronAsrStreamingFeatureExtractor(feature_size=config.audio_config.num_mel_bins)
        Nemotron3DiarizationProcessor(extractor).save_pretrained(directory)
    return str(directory)


def tiny_pyannote(root: Path) -> str:
    """The pyannote helper's test pipeline (tests/diarization/pyannote/conftest.py), built once."""
    if not (root / "config.yaml").is_file():
        from tests.diarization.pyannote.conftest import build_pipeline_dir

        root.mkdir(parents=True, exist_ok=True)
        build_pipeline_dir(root)
    return str(root)


def full_pyannote(root: Path) -> str:
    """The same pipeline at the released models' sizes: PyanNet's and WeSpeakerResNet34's defaults
    (LSTM 128 x 4, 80 mel bins), 10-s segmentation windows every 1 s (the released step, 0.1), fitted
    as the test one is; built once."""
    if not (root / "config.yaml").is_file():
        import pyannote.audio.models.embedding as embedding
        import pyannote.audio.models.segmentation as segmentation
        import yaml

        from tests.diarization.pyannote import conftest

        small_seg, small_emb = segmentation.PyanNet, embedding.WeSpeakerResNet34
        segmentation.PyanNet = lambda **_: small_seg()
        embedding.WeSpeakerResNet34 = lambda **_: small_emb()
        conftest.CHUNK_S = 10.0
        try:
            root.mkdir(parents=True, exist_ok=True)
            conftest.build_pipeline_dir(root)
        finally:
            segmentation.PyanNet, embedding.WeSpeakerResNet34, conftest.CHUNK_S = small_seg, small_emb, 2.0
        config = yaml.safe_load((root / "config.yaml").read_text())
        config["pipeline"]["params"]["segmentation_step"] = 0.1
        (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return str(root)


def tiny_sortformer(root: Path, calibration: np.ndarray) -> str:
    """The Sortformer helper's test archive (tests/diarization/sortformer/nemo_reference.py, offline,
    its head calibrated on ``calibration``), built once."""
    found = sorted(root.glob("sortformer_offline_*.nemo"))
    if found:
        return str(found[0])
    from tests.diarization.sortformer.nemo_reference import build

    path, _ = build(root, False, calibration)
    return str(path)


def oasr_diarizer(path: str) -> Callable[[Sequence[np.ndarray]], list[Diarization]]:
    from oasr.diarization.loader import load_diarizer

    diarizer = load_diarizer(path)
    return lambda audios: diarizer.diarize(list(audios))


def systems(args: argparse.Namespace, baseline: ResemblyzerBaseline | None) -> list[System]:
    out = []
    if baseline is not None:
        out.append(System("vad+resemblyzer", baseline.diarize))
    if args.nemotron3:
        out.append(System("oasr nemotron3", oasr_diarizer(args.nemotron3)))
        out.append(System("transformers nemotron3", REFERENCES["nemotron3"].load(args.nemotron3), "oasr nemotron3"))
    if args.pyannote:
        out.append(System("oasr pyannote", oasr_diarizer(args.pyannote)))
        out.append(System("pyannote.audio", REFERENCES["pyannote"].load(args.pyannote), "oasr pyannote"))
    if args.sortformer:
        out.append(System("oasr sortformer", oasr_diarizer(args.sortformer)))
        out.append(System("nemo sortformer", REFERENCES["sortformer"].load(args.sortformer), "oasr sortformer"))
    return out


# --- the run ---------------------------------------------------------------------------------------


def scores(truths: Sequence[Diarization], hyps: Sequence[Diarization]) -> dict:
    return {
        f"collar{collar}{'_nooverlap' if skip else ''}": score_diarization(
            zip(truths, hyps), collar=collar, skip_overlap=skip
        ).to_dict()
        for collar, skip in COLLARS
    }


def transcribe(asr: str, paths: Sequence[str], threads: int):
    import oasr

    engine = oasr.ASREngine(asr, max_batch_size=4, num_threads=threads)
    return engine.transcribe(list(paths), language="en", word_timestamps=True)


def cpwer_of(outputs, diarizations: Sequence[Diarization], references: Sequence[dict]) -> dict:
    from oasr.diarization.assign import assign_speakers, speaker_runs

    pairs = []
    for output, diarization, reference in zip(outputs, diarizations, references):
        assigned = assign_speakers(copy.deepcopy(output), diarization, fill_nearest=True)
        pairs.append((reference, speaker_texts(speaker_runs(assigned.segments))))
    return score_cpwer(pairs).to_dict()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--audio-dir", type=Path, default=None)
    p.add_argument("--set-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "oasr-diarization-set")
    p.add_argument("--mixes-per-setting", type=int, default=3)
    p.add_argument(
        "--nemotron3", default=None, metavar="DIR", help="a save_pretrained directory, or 'random' (built in --set-dir)"
    )
    p.add_argument(
        "--pyannote",
        default=None,
        metavar="DIR",
        help="a pipeline directory, 'tiny' (the test one) or 'full' (the same at the released sizes)",
    )
    p.add_argument("--sortformer", default=None, metavar="FILE", help="a .nemo archive, or 'tiny' (the test one)")
    p.add_argument("--asr", default=None, metavar="MODEL", help="score cpWER with this ASR model's words")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, metavar="STEM", help="write STEM.json and STEM.md")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from oasr.audio import load_audio
    from oasr.diarization.synth import build_set, read_corpus, read_set, write_set

    audio_dir = args.audio_dir or default_audio_dir()
    manifest = args.set_dir / "manifest.jsonl"
    if not manifest.is_file():
        write_set(build_set(read_corpus(audio_dir), mixes_per_setting=args.mixes_per_setting), args.set_dir)
    rows = read_set(manifest)
    audios = [load_audio(r["path"]) for r in rows]
    truths = [r["truth"] for r in rows]
    audio_s = sum(len(a) for a in audios) / 16000
    print(f"set: {len(rows)} mixes, {audio_s:.1f} s, from {audio_dir}", file=sys.stderr)

    if args.nemotron3 == "random":
        args.nemotron3 = random_nemotron3(args.set_dir / "nemotron3-random")
    if args.pyannote == "tiny":
        args.pyannote = tiny_pyannote(args.set_dir / "pyannote-tiny")
    elif args.pyannote == "full":
        args.pyannote = full_pyannote(args.set_dir / "pyannote-full")
    if args.sortformer == "tiny":
        args.sortformer = tiny_sortformer(args.set_dir / "sortformer-tiny", audios[0])
    baseline = None if args.no_baseline else ResemblyzerBaseline()
    timed = systems(args, baseline)
    for s in timed:  # warm-up
        s.diarize(audios[:1])
    walls: dict[str, list[float]] = {s.name: [] for s in timed}
    cpus: dict[str, list[float]] = {s.name: [] for s in timed}  # this process's CPU seconds: steadier under load
    results: dict[str, list[Diarization]] = {}
    for r in range(args.rounds):
        for s in timed if r % 2 == 0 else timed[::-1]:
            t0, c0 = time.perf_counter(), time.process_time()
            got = in_batches(s.diarize, audios, args.batch_size)
            walls[s.name].append(time.perf_counter() - t0)
            cpus[s.name].append(time.process_time() - c0)
            if s.name in results and [d.turns for d in got] != [d.turns for d in results[s.name]]:
                raise SystemExit(f"{s.name}: a second run gave other turns")
            results[s.name] = got
            print(f"round {r}: {s.name} {walls[s.name][-1]:.2f} s ({cpus[s.name][-1]:.2f} CPU s)", file=sys.stderr)
    if baseline is not None:  # untimed: the same work with the count given
        results["vad+resemblyzer (oracle count)"] = [
            baseline.diarize([a], num_speakers=r["num_speakers"])[0] for a, r in zip(audios, rows)
        ]

    report: dict = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads},
        "set": {
            "mixes": len(rows),
            "audio_seconds": round(audio_s, 2),
            "audio_dir": str(audio_dir),
            "settings": sorted({r["audio"].rsplit("_", 1)[0] for r in rows}),
            "overlap_share": round(overlap_share(truths), 4),
        },
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "systems": {},
    }
    outputs = None
    if args.asr:
        outputs = transcribe(args.asr, [r["path"] for r in rows], args.threads)
        report["asr"] = args.asr
        report["truth_cpwer"] = cpwer_of(outputs, truths, [r["transcripts"] for r in rows])
    for name, hyps in results.items():
        entry = {"scores": scores(truths, hyps)}
        by_count = {}
        for n in sorted({r["num_speakers"] for r in rows}):
            idx = [i for i, r in enumerate(rows) if r["num_speakers"] == n]
            by_count[f"{n}spk"] = score_diarization([(truths[i], hyps[i]) for i in idx]).der
        entry["der_by_speakers"] = by_count
        entry["speakers_found"] = [len(h.speakers) for h in hyps]
        if name in walls:
            w = walls[name]
            entry["wall_s"] = {"median": statistics.median(w), "min": min(w), "max": max(w), "runs": w}
            entry["rtfx"] = audio_s / statistics.median(w)
            entry["cpu_s"] = {"median": statistics.median(cpus[name]), "runs": cpus[name]}
        if outputs is not None:
            entry["cpwer"] = cpwer_of(outputs, hyps, [r["transcripts"] for r in rows])
        report["systems"][name] = entry
    for s in timed:
        if s.reference_of:
            mine, ref = results[s.reference_of], results[s.name]
            agree = agreement(mine, ref)  # oasr.diarization.references: the same figures as `oasr bench`
            report["systems"][s.reference_of]["vs_reference"] = {
                "reference": s.name,
                "der_against_reference": agree["der"],
                "same_turns": agree["same_turns"],
                "files": agree["files"],
                "speedup": statistics.median(walls[s.name]) / statistics.median(walls[s.reference_of]),
                "speedup_cpu_s": statistics.median(cpus[s.name]) / statistics.median(cpus[s.reference_of]),
            }
    text = markdown(report)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


def overlap_share(truths: Sequence[Diarization]) -> float:
    """Seconds with two or more reference speakers / seconds with any (10-ms grid)."""
    both = anyone = 0
    for d in truths:
        grid = np.zeros(int(np.ceil(d.duration * 100)) + 1, dtype=np.int32)
        for t in d.turns:
            grid[int(round(t.start * 100)) : int(round(t.end * 100))] += 1
        both += int((grid >= 2).sum())
        anyone += int((grid >= 1).sum())
    return both / max(anyone, 1)


def markdown(report: dict) -> str:
    s = report["set"]
    lines = [
        f"# Diarization on the {s['mixes']}-mix 2/3-speaker set ({s['audio_seconds']} s, "
        f"{s['overlap_share']:.1%} of speech overlapped), {report['machine']['threads']} threads",
        "",
        f"Command: `python benchmarks/{report['command']}`",
        "",
        "| system | DER | JER | DER (collar 0.5, no overlap) | miss / FA / conf (s) | DER 2spk | DER 3spk "
        "| cpWER | wall s (median [min-max]) | CPU s (median) | RTFx |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, e in report["systems"].items():
        full, easy = e["scores"]["collar0.0"], e["scores"]["collar0.5_nooverlap"]
        w, by = e.get("wall_s"), e["der_by_speakers"]
        lines.append(
            f"| {name} | {full['der']:.1%} | {full['jer']:.1%} | {easy['der']:.1%} | "
            f"{full['missed']:.1f} / {full['false_alarm']:.1f} / {full['confusion']:.1f} | "
            f"{by.get('2spk', float('nan')):.1%} | {by.get('3spk', float('nan')):.1%} | "
            + (f"{e['cpwer']['rate']:.1%}" if "cpwer" in e else "-")
            + " | "
            + (
                f"{w['median']:.2f} [{w['min']:.2f}-{w['max']:.2f}] | {e['cpu_s']['median']:.2f} | {e['rtfx']:.1f}"
                if w
                else "- | - | -"
            )
            + " |"
        )
    if "truth_cpwer" in report:
        lines += [
            "",
            f"cpWER of {report['asr']} with the true turns (the ASR's floor): {report['truth_cpwer']['rate']:.1%}",
        ]
    pairs = [(n, e["vs_reference"]) for n, e in report["systems"].items() if "vs_reference" in e]
    if pairs:
        lines += [
            "",
            "| oasr | reference | DER of oasr vs the reference's turns | same turns | oasr speed-up (wall) | (CPU s) |",
            "|---|---|---|---|---|---|",
        ]
        for name, v in pairs:
            der = "-" if v["der_against_reference"] is None else f"{v['der_against_reference']:.3%}"
            lines.append(
                f"| {name} | {v['reference']} | {der} | {v['same_turns']}/{v['files']} | {v['speedup']:.2f}x "
                f"| {v['speedup_cpu_s']:.2f}x |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
