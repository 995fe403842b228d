"""A test double of a diarization model package: ``detect`` / ``load`` as
``oasr.diarization.loader`` asks of one, over a directory holding ``tone_diarizer.json``.

Its "speakers" are pitch bands: each 0.1-s frame loud enough to be speech is given the band
of its spectral peak (the bands' edges in Hz come from the JSON), runs of one band become
turns, labelled ``SPEAKER_00``... by first appearance. ``embed`` is a clip's normalised energy
per band, so a reference tone of a band matches that band's speaker. Deterministic, exact on
sine tones, and a ``Diarizer`` by the contract: a batch in, one result per row, rows
independent. ``calls`` counts ``diarize`` calls and ``rows`` their recordings (the batching
tests read them).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from oasr.diarization.types import Diarization, SpeakerTurn, speaker_label

CONFIG = "tone_diarizer.json"
FRAME_S = 0.1


def write(directory: Path, edges: list[float], max_speakers: int = 4) -> Path:
    """A model directory: bands ``[edges[i], edges[i + 1])`` Hz are the speakers."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG).write_text(json.dumps({"edges": edges, "max_speakers": max_speakers}))
    return directory


def detect(path: Path) -> bool:
    return (Path(path) / CONFIG).is_file()


def load(path: Path, *, device: str = "cpu", dtype: str | None = None) -> ToneDiarizer:
    config = json.loads((Path(path) / CONFIG).read_text())
    return ToneDiarizer(config["edges"], config["max_speakers"])


class ToneDiarizer:
    sampling_rate = 16000

    def __init__(self, edges: list[float], max_speakers: int) -> None:
        self.edges = np.asarray(edges, dtype=np.float64)
        self.max_speakers = max_speakers
        self.calls = 0
        self.rows = 0
        self.fail_on: float | None = None  # a recording this long (s) raises: a failing row

    def _bands(self, audio: np.ndarray) -> list[int | None]:
        n = round(FRAME_S * self.sampling_rate)
        out: list[int | None] = []
        for i in range(0, len(audio) - n + 1, n):
            frame = audio[i : i + n].astype(np.float64)
            if np.sqrt(np.mean(frame**2)) < 0.01:
                out.append(None)
                continue
            spectrum = np.abs(np.fft.rfft(frame))
            peak = np.fft.rfftfreq(n, 1 / self.sampling_rate)[int(np.argmax(spectrum))]
            band = int(np.searchsorted(self.edges, peak, side="right")) - 1
            out.append(band if 0 <= band < len(self.edges) - 1 else None)
        return out

    def diarize(self, audios, *, num_speakers=None, min_speakers=None, max_speakers=None) -> list[Diarization]:
        self.calls += 1
        self.rows += len(audios)
        results = []
        for audio in audios:
            duration = len(audio) / self.sampling_rate
            if self.fail_on is not None and abs(duration - self.fail_on) < 1e-6:
                raise RuntimeError("the tone diarizer was told to fail on this recording")
            bands = self._bands(audio)
            order: dict[int, str] = {}
            turns, start = [], 0
            for i in range(1, len(bands) + 1):
                if i == len(bands) or bands[i] != bands[start]:
                    if bands[start] is not None:
                        label = order.setdefault(bands[start], speaker_label(len(order)))
                        turns.append(SpeakerTurn(round(start * FRAME_S, 3), round(i * FRAME_S, 3), label))
                    start = i
            if num_speakers is not None:
                keep = set(list(order.values())[:num_speakers])
                turns = [t for t in turns if t.speaker in keep]
            results.append(Diarization(turns, duration))
        return results

    def embed(self, audios) -> np.ndarray:
        rows = []
        for audio in audios:
            counts = np.zeros(len(self.edges) - 1)
            for band in self._bands(np.asarray(audio)):
                if band is not None:
                    counts[band] += 1
            rows.append(counts / max(1.0, np.linalg.norm(counts)))
        return np.stack(rows)


def tones(spans: list[tuple[float, float, float]], duration: float, rate: int = 16000) -> np.ndarray:
    """Sine tones ``(start, end, hz)`` at 0.5 amplitude over silence."""
    audio = np.zeros(round(duration * rate), dtype=np.float32)
    for start, end, hz in spans:
        a, b = round(start * rate), round(end * rate)
        t = np.arange(b - a) / rate
        audio[a:b] = 0.5 * np.sin(2 * np.pi * hz * t)
    return audio
