"""A tiny LASR overfitted on three real clips, saved as a Hugging Face lasr directory,
transcribes them exactly through ``oasr transcribe``, with word times at the model's
CTC spikes.

Training runs in transformers (``LasrForCTC`` in eval mode: no dropout, batch norm on
its running statistics, as at inference) on transformers' own features; oasr then reads
the saved directory through its own loader, front end, CTC strategy and CLI.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.models.lasr._reference import TINY_ENCODER, lasr_config, save_lasr_directory, train_tokenizer

# transformers' own depthwise conv (padding="same", even kernel) warns about a padded copy.
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")

# Short single-speaker clips (about 1 s each); their transcripts come from the manifest.
OVERFIT_CLIPS = ("jaufry_03_lafon_0298.wav", "nada_lily_30_haggard_0086.wav", "presentpictureofnsw_02_mann_1095.wav")
SEED = 0
MAX_STEPS = 600
TARGET_LOSS = 0.05
# Wider than the parity model: it has to learn. Dropout off (from TINY_ENCODER).
ENCODER = {**TINY_ENCODER, "hidden_size": 48, "intermediate_size": 96, "subsampling_conv_channels": 32}
TOLERANCE_S = 0.04  # one encoder frame (4 x 10 ms)


def _greedy(ids: list[int], blank: int) -> list[int]:
    return [i for i, _ in itertools.groupby(ids) if i != blank]


@pytest.fixture(scope="module")
def overfit(manifest, tmp_path_factory) -> tuple[Path, list[dict]]:
    """(HF lasr directory of the trained model, the manifest rows of its clips)."""
    pytest.importorskip("transformers")
    from transformers import LasrFeatureExtractor, LasrForCTC

    from oasr.audio import load_audio

    rows = {r["audio"]: r for r in manifest}
    clips = [rows[name] for name in OVERFIT_CLIPS]
    tokenizer = train_tokenizer([r["text"] for r in manifest if r["language"] == "en"], vocab_size=300)
    targets = [tokenizer(r["text"], add_special_tokens=False).input_ids for r in clips]
    assert all(tokenizer.unk_token_id not in t for t in targets)

    torch.manual_seed(SEED)
    model = LasrForCTC(lasr_config(tokenizer, ENCODER))
    model.eval()  # no dropout; batch norm keeps its (inference) running statistics
    feats = LasrFeatureExtractor()(
        [load_audio(r["path"]) for r in clips], sampling_rate=16000, return_tensors="pt", return_attention_mask=True
    )
    out_lens = model._get_subsampling_output_length(feats.attention_mask.sum(-1))
    flat = torch.tensor(list(itertools.chain(*targets)))
    target_lens = torch.tensor([len(t) for t in targets])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    step = 0
    while True:
        step += 1
        log_probs = model(feats.input_features, attention_mask=feats.attention_mask).logits.log_softmax(-1)
        loss = F.ctc_loss(log_probs.transpose(0, 1), flat, out_lens, target_lens, blank=tokenizer.pad_token_id)
        opt.zero_grad()
        loss.backward()
        opt.step()
        paths = log_probs.detach().argmax(-1)
        exact = all(
            _greedy(paths[i, :n].tolist(), tokenizer.pad_token_id) == t
            for i, (n, t) in enumerate(zip(out_lens, targets))
        )
        if exact and loss.item() < TARGET_LOSS:
            break
        if step == MAX_STEPS:
            pytest.fail(f"no convergence in {MAX_STEPS} steps (loss {loss.item():.3f})")
    return save_lasr_directory(model, tokenizer, tmp_path_factory.mktemp("lasr_overfit")), clips


def _spikes(log_probs: torch.Tensor, blank: int, skip: set[int]) -> tuple[list[int], list[int]]:
    """Tokens of the greedy path and each one's spike: its most probable frame within its run."""
    path = log_probs.argmax(-1).tolist()
    tokens, frames, t = [], [], 0
    for tok, run in itertools.groupby(path):
        n = len(list(run))
        if tok != blank and tok not in skip:
            tokens.append(tok)
            frames.append(t + int(log_probs[t : t + n, tok].argmax()))
        t += n
    return tokens, frames


def test_cli_transcribes_the_overfitted_clips(overfit, tmp_path):
    from oasr.cli.main import main
    from oasr.engine.decode.words import TokenPieces, group_words
    from oasr.models.loaders import load_pretrained

    directory, clips = overfit
    out_dir = tmp_path / "out"
    argv = ["transcribe", *(r["path"] for r in clips), "--model", str(directory), "--device", "cpu"]
    argv += ["-f", "verbose_json", "--word-timestamps", "-o", str(out_dir), "--no-progress"]
    assert main(argv) == 0

    loaded = load_pretrained(directory)
    assert loaded.feature_spec.kind == "lasr_mel" and loaded.tokenizer_spec.kind == "huggingface"
    from oasr.audio import load_audio
    from oasr.audio.frontends import build_frontend

    frontend = build_frontend(loaded.feature_spec)
    frame_s = loaded.model.encoder.subsampling_rate * frontend.frame_shift_s
    assert frame_s == pytest.approx(TOLERANCE_S)
    blank, skip = loaded.model.blank_id, set(loaded.tokenizer_spec.special_ids)
    pieces = TokenPieces(loaded.tokenizer, skip | {blank})
    for row in clips:
        doc = json.loads((out_dir / f"{Path(row['path']).stem}.verbose_json").read_text(encoding="utf-8"))
        assert doc["text"] == row["text"]
        feats = frontend(load_audio(row["path"]))[None]
        with torch.inference_mode():
            log_probs, _ = loaded.model.forward_offline(feats, torch.tensor([feats.shape[1]]))
        tokens, frames = _spikes(log_probs[0], blank, skip)
        assert [t for seg in doc["segments"] for t in seg["tokens"]] == tokens
        spans = group_words(tokens, pieces)
        words = doc["words"]
        assert [w["word"] for w in words] == row["text"].split()
        assert len(words) == len(spans)
        times = [f * frame_s for f in frames]
        for k, (word, span) in enumerate(zip(words, spans)):
            first, last = times[span.start], times[span.end - 1]
            # The word's span holds its own tokens' spikes ...
            assert word["start"] <= first + TOLERANCE_S and word["end"] >= last - TOLERANCE_S
            # ... and stops short of its neighbours' spikes.
            if k > 0:
                assert word["start"] >= times[span.start - 1] - TOLERANCE_S
            if k + 1 < len(spans):
                assert word["end"] <= times[span.end] + TOLERANCE_S
