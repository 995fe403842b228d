"""Print the parity of oasr's Nemotron 3 Diarization with transformers' on the tiny fixture, per
stage (cosine, max |diff|), offline and streamed:

    python -m tests.diarization.nemotron3.parity_report
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from oasr.audio.io import load_audio
from oasr.diarization.nemotron3 import load
from tests.conftest import AUDIO_DIR
from tests.diarization.nemotron3.fixture import reference, reference_stream, save_tiny


def _row(name: str, got, want) -> str:
    a = torch.as_tensor(np.asarray(got), dtype=torch.float64).flatten()
    b = torch.as_tensor(np.asarray(want), dtype=torch.float64).flatten()
    cos = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    return f"| {name} | {a.numel()} | {cos:.15f} | {float((a - b).abs().max()):.2e} |"


@torch.no_grad()
def main() -> None:
    directory = save_tiny(Path(tempfile.mkdtemp()) / "tiny")
    model, processor = reference(directory)
    mine = load(directory, dtype=torch.float64)
    clip = load_audio(AUDIO_DIR / "1272-141231-0002.flac")[: 16000 * 4]
    inputs = processor(clip, sampling_rate=16000)
    feats_ref = inputs["input_features"].double()
    n = int(inputs["attention_mask"].sum())
    feats, _ = mine.features([clip])
    feats32, _ = load(directory).features([clip])
    embeds = model.model.audio_tower.embedder(feats_ref)[:, :12]
    enc_ref = model.model.audio_tower(inputs_embeds=embeds).last_hidden_state
    enc = mine.model.model.audio_tower.encode(mine.model.embed(feats_ref)[:, :12], None)
    logits = model(input_features=feats_ref, attention_mask=inputs["attention_mask"]).logits
    probs_ref = logits.sigmoid()[0, :n]
    same = mine.model.forward_offline(feats_ref, torch.tensor([n])).sigmoid()[0, :n]
    probs = mine.speaker_probabilities([clip])[0]
    steps = reference_stream(model, processor, clip, "low_latency")
    stream = mine.stream("low_latency")
    got = stream.push(clip) + stream.finish()
    print("| stage | values | cosine | max abs diff |\n|---|---|---|---|")
    for row in (
        _row("log-mel, oasr float32 vs transformers (float32)", feats32[0], inputs["input_features"][0]),
        _row("log-mel, oasr float64 vs transformers (float32)", feats[0], feats_ref[0]),
        _row("encoder (first chunk's 12 frames), same input", enc, enc_ref),
        _row("offline probabilities, same features", same, probs_ref),
        _row("offline probabilities, from the waveform", probs, probs_ref),
        _row(
            "streamed probabilities (17 steps), from the waveform",
            np.concatenate([s.probabilities for s in got]),
            torch.cat([lg.sigmoid() for _, lg in steps]),
        ),
    ):
        print(row)
    state, outs = None, []
    for i, (f, _) in enumerate(steps):
        out, state = mine.model.stream_step(f, state, 0 if i == len(steps) - 1 else 1)
        outs.append(out[0].sigmoid())
    print(
        _row(
            "streamed probabilities, transformers' chunk features",
            torch.cat(outs),
            torch.cat([lg.sigmoid() for _, lg in steps]),
        )
    )


if __name__ == "__main__":
    main()
