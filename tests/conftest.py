"""Shared test fixtures: where the real speech and reference fixtures live, and
which optional real-weight packages are installed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """Restore torch's thread count after each test: an engine built with ``num_threads``
    (or a CLI run with ``--threads``) sets it for the whole process, which would change
    float summation order, and so exact results, in every later test."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


REPO_ROOT = Path(__file__).resolve().parents[1]
# The clips and WeNet fixtures the suite decodes ship in the repository (data/README.md).
AUDIO_DIR = REPO_ROOT / "data" / "audio"
FIXTURES_DIR = REPO_ROOT / "data" / "fixtures"


def load_manifest(audio_dir: Path = AUDIO_DIR) -> list[dict]:
    """Rows of ``audio_dir/manifest.jsonl`` (default: the repository's clips) with ``path`` resolved."""
    rows = []
    with open(audio_dir / "manifest.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                row["path"] = str(audio_dir / row["audio"])
                rows.append(row)
    return rows


@pytest.fixture(scope="session")
def audio_dir() -> Path:
    """The repository's test clips (``data/audio``)."""
    return AUDIO_DIR


@pytest.fixture(scope="session")
def manifest(audio_dir) -> list[dict]:
    """The repository's test clips with their reference transcripts."""
    return load_manifest(audio_dir)


@dataclass(frozen=True)
class SpeechWithSilences:
    """Real clips laid out with silences between them (16 kHz mono float32).

    Attributes:
        audio: the whole recording.
        spans: ``(start, end)`` seconds of each clip in ``audio``.
        clips: each clip's samples.
        texts: each clip's reference transcript (manifest).
    """

    audio: np.ndarray
    spans: list[tuple[float, float]]
    clips: list[np.ndarray]
    texts: list[str]

    def clip_at(self, t: float, tolerance: float = 0.5) -> int | None:
        """The index of the clip whose span (widened by ``tolerance``) holds ``t``."""
        for i, (a, b) in enumerate(self.spans):
            if a - tolerance <= t <= b + tolerance:
                return i
        return None


def speech_with_silences(rows: list[dict], silences: list[float]) -> SpeechWithSilences:
    """``rows``' clips with ``silences[i]`` seconds of digital silence before clip i and
    ``silences[-1]`` after the last one."""
    from oasr.audio import SAMPLE_RATE, load_audio

    assert len(silences) == len(rows) + 1
    parts, spans, clips = [], [], []
    t = 0
    for row, gap in zip(rows, silences):
        parts.append(np.zeros(round(gap * SAMPLE_RATE), dtype=np.float32))
        t += len(parts[-1])
        clip = load_audio(row["path"])
        clips.append(clip)
        parts.append(clip)
        spans.append((t / SAMPLE_RATE, (t + len(clip)) / SAMPLE_RATE))
        t += len(clip)
    parts.append(np.zeros(round(silences[-1] * SAMPLE_RATE), dtype=np.float32))
    return SpeechWithSilences(np.concatenate(parts), spans, clips, [row["text"] for row in rows])


VAD_CLIPS = (
    "jfk.wav",
    "1272-141231-0002.flac",
    "sense_and_sensibility_01_austen_64kb-0870.wav",
    "picovoice_test.wav",
)


@pytest.fixture(scope="session")
def vad_recording(manifest) -> SpeechWithSilences:
    """Four English clips (37 s of speech) with 1-4 s of silence around each: two VAD chunks."""
    rows = {r["audio"]: r for r in manifest}
    missing = [name for name in VAD_CLIPS if name not in rows]
    if missing:
        pytest.skip(f"clips {missing} are not in the manifest")
    return speech_with_silences([rows[name] for name in VAD_CLIPS], [1.0, 2.0, 3.0, 4.0, 1.5])


def checkout_hint(extra: str) -> str:
    """The install command oasr's hints give for ``extra`` when it runs from this source checkout."""
    return f"pip install -e '{REPO_ROOT}[{extra}]'"


@pytest.fixture(scope="session")
def sherpa_onnx_tiny_en(tmp_path_factory):
    """tiny.en exported by oasr in sherpa-onnx's Whisper layout (float32): what the export's
    end-to-end test and the bench's sherpa-onnx child decode; skipped without sherpa-onnx."""
    pytest.importorskip("sherpa_onnx")
    pytest.importorskip("onnx")
    from oasr.models import export_sherpa_onnx
    from oasr.models.bundled import bundled_path

    if bundled_path("tiny.en") is None:
        pytest.skip("tiny.en is not installed (oasr's whisper-tiny-en extra)")
    return export_sherpa_onnx("tiny.en", tmp_path_factory.mktemp("sherpa_onnx_tiny_en"))


def pytest_terminal_summary(terminalreporter) -> None:
    """The test process's peak resident memory, in the summary: CI's machine has 24 GiB, and a
    suite that grows towards it is killed without a word (exit 137)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:  # not Linux
        return
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            terminalreporter.write_line(f"peak RSS of the test process: {int(line.split()[1]) / 2**20:.1f} GiB")
