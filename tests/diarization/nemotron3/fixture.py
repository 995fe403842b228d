"""A tiny random Nemotron 3 Diarization checkpoint saved by transformers' own classes, and the
reference's outputs on it (offline and streamed, as transformers' processor drives the model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

# Chunks of 5 encoder frames (0.4 s) with 2 of look-ahead, a FIFO of 4 and a cache of 16 frames
# for 4 speakers: a few seconds of audio overflow the FIFO and compress the cache many times.
TINY = {
    "audio_config": {
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_mel_bins": 16,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    },
    "head_config": {"hidden_size": 12, "audio_hidden_size": 16, "num_speakers": 4},
    "streaming_config": {
        "num_speakers": 4,
        "speaker_cache_length": 16,
        "fifo_length": 6,
        "speaker_cache_update_period": 4,
    },
    "chunk_length": 5,
    "chunk_right_context": 2,
    "chunk_left_context": 1,
    "fifo_length": 4,
    "speaker_cache_update_period": 3,
}
STREAMING_MODES = {"low_latency": (3, 1), "no_lookahead": (2, 0)}


def save_tiny(directory: Path, seed: int = 0) -> Path:
    """Build, randomise (every tensor, so that no path is a no-op) and ``save_pretrained`` the
    model and its processor into ``directory``."""
    from transformers import (
        Nemotron3DiarizationConfig,
        Nemotron3DiarizationForAudioFrameClassification,
        Nemotron3DiarizationProcessor,
        NemotronAsrStreamingFeatureExtractor,
    )

    torch.manual_seed(seed)
    model = Nemotron3DiarizationForAudioFrameClassification(Nemotron3DiarizationConfig(**TINY))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.5 if p.ndim > 1 else 0.3)
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)
    model.save_pretrained(directory)
    fe = NemotronAsrStreamingFeatureExtractor(feature_size=16)
    Nemotron3DiarizationProcessor(fe, streaming_modes=STREAMING_MODES, streaming_mode="low_latency").save_pretrained(
        directory
    )
    return directory


def reference(directory: Path):
    """transformers' float64 model and its processor, loaded from ``directory``."""
    from transformers import AutoProcessor, Nemotron3DiarizationForAudioFrameClassification

    model = Nemotron3DiarizationForAudioFrameClassification.from_pretrained(
        directory, dtype=torch.float64, attn_implementation="sdpa"
    ).eval()
    return model, AutoProcessor.from_pretrained(directory)


@torch.no_grad()
def reference_stream(model, processor, audio: np.ndarray, mode: str) -> list[torch.Tensor]:
    """transformers' streamed logits, one tensor per step, fed as its processor documents: a first
    chunk of ``num_samples_first_audio_chunk`` samples, then ``num_samples_per_audio_chunk`` from
    ``audio_chunk_start`` of the frame cursor while the audio holds them, then the rest as the last."""
    processor.set_streaming_mode(mode)
    cursor, cache, first, out = 0, None, True, []
    while True:
        start = 0 if first else processor.audio_chunk_start(cursor)
        need = processor.num_samples_first_audio_chunk if first else processor.num_samples_per_audio_chunk
        last = start + need > len(audio)
        piece = audio[start:] if last else audio[start : start + need]
        inputs = processor(
            piece, sampling_rate=16000, is_streaming=True, is_first_audio_chunk=first, is_last_audio_chunk=last
        )
        feats = inputs["input_features"].to(torch.float64)
        kwargs = {} if last else {"num_lookahead_frames": inputs["num_lookahead_frames"]}
        if last and cache is None:
            kwargs = {"num_lookahead_frames": 0}
        result = model(input_features=feats, attention_mask=inputs["attention_mask"], speaker_cache=cache, **kwargs)
        cache = result.speaker_cache
        out.append(result.logits[0])
        if last:
            return out
        cursor += processor.num_mel_frames_per_step
        first = False
