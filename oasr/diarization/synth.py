"""Two- and three-speaker recordings with known truth, built from single-speaker clips.

The corpus's manifests (``data/audio/manifest.jsonl`` here, ``shared/data/audio`` beside the
checkout) name each clip's ``speaker``. ``build_set`` draws, for every setting (number of
speakers x with / without overlap), a few mixes: clips of distinct speakers laid one after
another, each clip one *turn*, consecutive turns by different speakers, separated by a gap of
silence or overlapping by up to a couple of seconds of speech. Everything is drawn from one
seeded generator over the manifest's rows sorted by file name, so a manifest gives the same
set every time.

The truth of a mix (``Mix.truth``) is where each placed clip has speech: Silero VAD's spans of
the clip alone (``TRUTH_VAD``: no padding to speak of, pauses of 0.3 s or more are silence),
moved to the clip's place in the mix, labelled with the clip's speaker. Gaps and overlaps are
measured between those spans, not between the clips' ends, so an overlap is always two voices
at once. Every clip is loaded by ``oasr.audio.load_audio`` (16 kHz mono whatever the file's rate
and channels) and brought to the same speech RMS before the clips are summed.

``Mix.transcripts`` holds each speaker's reference words: their clips' manifest texts in the
order spoken, the per-speaker references of cpWER. ``write_set`` writes a set as 16-kHz WAV
files, one RTTM per mix and a ``manifest.jsonl`` that ``read_set`` reads back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oasr.audio.vad import VadOptions
from oasr.diarization.types import Diarization, SpeakerTurn

SAMPLE_RATE = 16000
TRUTH_VAD = VadOptions(threshold=0.5, min_speech_duration_ms=100, min_silence_duration_ms=300, speech_pad_ms=30)
"""Silero settings of a clip's speech spans (the truth): tight spans, pauses >= 0.3 s left out."""
SPEECH_RMS = 0.05
"""Every clip is scaled to this RMS over its speech spans (about -26 dBFS)."""


@dataclass(frozen=True)
class Clip:
    """One single-speaker utterance of a manifest.

    Attributes:
        name: the manifest's ``audio`` (file name relative to the manifest).
        path: the file.
        speaker: the manifest's ``speaker``.
        text: the manifest's reference transcript.
    """

    name: str
    path: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Piece:
    """A clip placed in a mix: its samples start at ``offset`` seconds."""

    clip: Clip
    offset: float


@dataclass
class Mix:
    """One built recording.

    Attributes:
        name: ``{n}spk_{overlap|gaps}_{k}``, usable as an RTTM file id.
        audio: 16 kHz mono float32 samples.
        truth: the speaker turns (labels: the manifest's speaker names).
        transcripts: each speaker's reference text, their clips' texts in order.
        pieces: the clips and where they start.
        overlap: whether consecutive turns were laid to overlap.
    """

    name: str
    audio: np.ndarray
    truth: Diarization
    transcripts: dict[str, str]
    pieces: list[Piece] = field(default_factory=list)
    overlap: bool = False

    @property
    def num_speakers(self) -> int:
        return len(self.truth.speakers)

    @property
    def duration(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def corpus_clips(rows: Sequence[dict], base: Path, *, language: str = "en", max_seconds: float = 15.0) -> list[Clip]:
    """The manifest rows usable as turns: a ``speaker``, ``language``, at most ``max_seconds``
    long, and one clip per (speaker, text) (the corpus holds some recordings twice, e.g. jfk),
    sorted by file name."""
    seen: set[tuple[str, str]] = set()
    clips = []
    for row in sorted(rows, key=lambda r: r["audio"]):
        speaker = row.get("speaker")
        if not speaker or row.get("language") != language or float(row.get("duration_s", 1e9)) > max_seconds:
            continue
        if (speaker, row["text"]) in seen:
            continue
        seen.add((speaker, row["text"]))
        clips.append(Clip(row["audio"], str(base / row["audio"]), speaker, row["text"]))
    return clips


def read_corpus(audio_dir: Path, **kwargs) -> list[Clip]:
    """``corpus_clips`` of ``audio_dir/manifest.jsonl``.

    Raises:
        FileNotFoundError: no manifest there.
    """
    manifest = Path(audio_dir) / "manifest.jsonl"
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    return corpus_clips(rows, Path(audio_dir), **kwargs)


def _speech_spans(audio: np.ndarray) -> list[tuple[float, float]]:
    from oasr.audio.vad import speech_spans

    return [(a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in speech_spans(audio, SAMPLE_RATE, TRUTH_VAD)]


class _Loaded:
    """Clips decoded, levelled and VAD'd once per set."""

    def __init__(self, speech: Callable[[np.ndarray], list[tuple[float, float]]]) -> None:
        self._speech = speech
        self._cache: dict[str, tuple[np.ndarray, list[tuple[float, float]]]] = {}

    def __call__(self, clip: Clip) -> tuple[np.ndarray, list[tuple[float, float]]]:
        if clip.path not in self._cache:
            from oasr.audio import load_audio

            audio = load_audio(clip.path, SAMPLE_RATE)
            spans = self._speech(audio)
            if not spans:
                raise ValueError(f"{clip.name}: no speech found in the clip")
            voiced = np.concatenate([audio[round(a * SAMPLE_RATE) : round(b * SAMPLE_RATE)] for a, b in spans])
            rms = float(np.sqrt(np.mean(voiced.astype(np.float64) ** 2)))
            self._cache[clip.path] = ((audio * (SPEECH_RMS / max(rms, 1e-6))).astype(np.float32), spans)
        return self._cache[clip.path]


def lay_out(
    name: str,
    clips: Sequence[Clip],
    pauses: Sequence[float],
    loaded: Callable[[Clip], tuple[np.ndarray, list[tuple[float, float]]]],
    *,
    overlap: bool = False,
) -> Mix:
    """Place ``clips`` one after another and sum them.

    Args:
        name: the mix's name.
        clips: the turns in order (consecutive ones by different speakers).
        pauses: ``len(clips) - 1`` seconds between one turn's last speech and the next's first:
            a gap when positive, an overlap when negative (cut to at most 40 % of either turn's
            speech, so a turn never overlaps the one two before it).
        loaded: a clip's (samples, speech spans in seconds).
        overlap: recorded on the mix.

    Returns:
        the mix, its truth the clips' speech spans where they were placed.
    """
    if len(pauses) != len(clips) - 1:
        raise ValueError(f"{len(clips)} clips need {len(clips) - 1} pauses, got {len(pauses)}")
    for a, b in zip(clips, clips[1:]):
        if a.speaker == b.speaker:
            raise ValueError(f"consecutive turns by one speaker ({a.speaker}) in {name}")
    pieces: list[Piece] = []
    turns: list[SpeakerTurn] = []
    previous_end = previous_len = 0.0
    for k, clip in enumerate(clips):
        _, spans = loaded(clip)
        onset, offset = spans[0][0], spans[-1][1]
        if k == 0:
            start = 0.0
        else:
            pause = pauses[k - 1]
            if pause < 0:
                pause = -min(-pause, 0.4 * previous_len, 0.4 * (offset - onset))
            start = max(0.0, previous_end + pause - onset)
        start = round(start * SAMPLE_RATE) / SAMPLE_RATE  # a whole number of samples
        pieces.append(Piece(clip, start))
        turns.extend(SpeakerTurn(round(start + a, 3), round(start + b, 3), clip.speaker) for a, b in spans)
        previous_end, previous_len = start + offset, offset - onset
    total = max(round(p.offset * SAMPLE_RATE) + len(loaded(p.clip)[0]) for p in pieces)
    audio = np.zeros(total, dtype=np.float32)
    for p in pieces:
        samples = loaded(p.clip)[0]
        at = round(p.offset * SAMPLE_RATE)
        audio[at : at + len(samples)] += samples
    peak = float(np.abs(audio).max())
    if peak > 0.99:
        audio *= 0.99 / peak
    words: dict[str, list[str]] = {}
    for clip in clips:
        words.setdefault(clip.speaker, []).append(clip.text)
    transcripts = {speaker: " ".join(texts) for speaker, texts in words.items()}
    duration = total / SAMPLE_RATE
    turns = [SpeakerTurn(t.start, min(t.end, duration), t.speaker) for t in turns]  # a rounded end may pass it
    truth = Diarization(turns, duration).merged()
    return Mix(name, audio, truth, transcripts, pieces, overlap)


def build_set(
    clips: Sequence[Clip],
    *,
    speaker_counts: Sequence[int] = (2, 3),
    mixes_per_setting: int = 3,
    turns_per_speaker: int = 2,
    seed: int = 0,
    speech: Callable[[np.ndarray], list[tuple[float, float]]] | None = None,
) -> list[Mix]:
    """The test set: ``mixes_per_setting`` mixes for each speaker count, without and with overlap.

    A mix of n speakers has ``n * turns_per_speaker`` turns: the n speakers in a drawn order,
    then speakers drawn at random (never the previous one); each turn a clip of its speaker not
    used yet in the mix while there is one. Without overlap the pauses are gaps of 0.3 - 1.5 s;
    with overlap, three in four boundaries overlap by 0.5 - 2.0 s of speech, the rest are gaps.

    Args:
        clips: the corpus (``read_corpus``); at least ``max(speaker_counts)`` speakers.
        speech: a clip's speech spans in seconds (default: Silero VAD with ``TRUTH_VAD``).

    Raises:
        ValueError: too few speakers.
    """
    by_speaker: dict[str, list[Clip]] = {}
    for clip in clips:
        by_speaker.setdefault(clip.speaker, []).append(clip)
    speakers = sorted(by_speaker)
    if len(speakers) < max(speaker_counts):
        raise ValueError(f"a {max(speaker_counts)}-speaker mix needs that many speakers, the corpus has {speakers}")
    loaded = _Loaded(speech or _speech_spans)
    rng = np.random.default_rng(seed)
    mixes = []
    for n in speaker_counts:
        for overlap in (False, True):
            for k in range(mixes_per_setting):
                chosen = [speakers[i] for i in rng.choice(len(speakers), size=n, replace=False)]
                order = list(chosen)
                while len(order) < n * turns_per_speaker:
                    order.append(str(rng.choice([s for s in chosen if s != order[-1]])))
                # each speaker's clips in a drawn order, taken in turn (again from the first when used up)
                drawn = {s: [by_speaker[s][i] for i in rng.permutation(len(by_speaker[s]))] for s in chosen}
                used = dict.fromkeys(chosen, 0)
                turns = []
                for speaker in order:
                    turns.append(drawn[speaker][used[speaker] % len(drawn[speaker])])
                    used[speaker] += 1
                pauses = [
                    -float(rng.uniform(0.5, 2.0)) if overlap and rng.random() < 0.75 else float(rng.uniform(0.3, 1.5))
                    for _ in range(len(turns) - 1)
                ]
                name = f"{n}spk_{'overlap' if overlap else 'gaps'}_{k}"
                mixes.append(lay_out(name, turns, pauses, loaded, overlap=overlap))
    return mixes


def write_set(mixes: Sequence[Mix], out_dir: Path) -> Path:
    """Write ``{name}.wav`` (16-bit PCM), ``{name}.rttm`` and ``manifest.jsonl`` (one row a mix:
    ``audio``, ``rttm``, ``duration_s``, ``num_speakers``, ``overlap``, ``transcripts``,
    ``pieces``) into ``out_dir``; returns the manifest's path."""
    import soundfile as sf

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for mix in mixes:
        sf.write(out_dir / f"{mix.name}.wav", mix.audio, SAMPLE_RATE, subtype="PCM_16")
        (out_dir / f"{mix.name}.rttm").write_text(mix.truth.to_rttm(mix.name), encoding="utf-8")
        rows.append(
            {
                "audio": f"{mix.name}.wav",
                "rttm": f"{mix.name}.rttm",
                "duration_s": round(mix.duration, 3),
                "num_speakers": mix.num_speakers,
                "overlap": mix.overlap,
                "transcripts": mix.transcripts,
                "pieces": [{"audio": p.clip.name, "speaker": p.clip.speaker, "offset": p.offset} for p in mix.pieces],
            }
        )
    manifest = out_dir / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return manifest


def read_set(manifest: Path) -> list[dict]:
    """The rows of a set's ``manifest.jsonl`` (``write_set``), each with ``path`` (the WAV) and
    ``truth`` (its RTTM as a ``Diarization`` over the whole ``duration_s``) added."""
    from oasr.diarization.scoring import read_rttm

    manifest = Path(manifest)
    rows = []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        uri = Path(row["rttm"]).stem
        turns = read_rttm(manifest.parent / row["rttm"])[uri].turns
        rows.append(
            {**row, "path": str(manifest.parent / row["audio"]), "truth": Diarization(turns, row["duration_s"])}
        )
    return rows
