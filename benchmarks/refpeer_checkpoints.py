"""Random-weight checkpoints at released shapes, written by the references' own classes, for
``oasr bench --peer transformers / funasr --random-weights`` (no model hub here).

* ``wav2vec2-base``: ``facebook/wav2vec2-base-960h``'s shape (transformers ``Wav2Vec2ForCTC``:
  7 group-norm convs without bias, 12 post-norm layers of 768 / 12 heads / 3072, its 32-character
  ``vocab.json``; the feature extractor normalises and returns no attention mask), about 94M
  parameters;
* ``wav2vec2-large``: ``facebook/wav2vec2-large-960h-lv60-self``'s (layer-norm convs with bias,
  24 stable-layer-norm layers of 1024 / 16 heads / 4096; attention mask on), about 315M;
* ``paraformer-large``: FunASR's paraformer-large (``benchmarks/paraformer_bench.py``);
* ``sensevoice-small``: FunASR's SenseVoiceSmall (its config.yaml: SANM encoder of 50 + 20 ``tp``
  blocks of 512 / 4 heads / 2048, kernel 11, LFR 7/6) by funasr's ``SenseVoiceSmall`` class, the
  tests' released layout (``tests/models/sensevoice/_funasr_format.py``) with its 160-piece
  sentencepiece model in place of the released 25,055 (a CTC head of 82k weights, not 12.8M:
  about 8% of the encoder's multiply-adds a frame fewer on both sides), about 230M parameters.

The CTC head is scaled up so that a random encoder's argmax moves between characters (at the
default init almost every frame is the same class, and an agreement of two sides would say
little); ``<s>``, ``</s>`` and ``<unk>`` never win (a trained model does not emit them), and the
blank's bias is set so that it wins on about ``BLANK_SHARE`` of the frames of the shared ``jfk.wav``
(a trained English model's share), so the transcripts have a real model's length.

    python benchmarks/refpeer_checkpoints.py wav2vec2-base /tmp/refpeers/wav2vec2-base
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# facebook/wav2vec2-base-960h's vocab.json: CTC blank <pad>, "|" between words, upper-case letters.
VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "|", *"ETAONIHSRDLUMWCFGYPBVK'XJQZ"]
SHAPES = {
    "wav2vec2-base": {},  # Wav2Vec2Config's defaults are wav2vec2-base's
    "wav2vec2-large": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "feat_extract_norm": "layer",
        "do_stable_layer_norm": True,
        "conv_bias": True,
    },
}
HEAD_SCALE = 30.0  # the CTC head's weights times this: a random model's argmax then varies
BLANK_SHARE = 0.65  # of the frames, as a trained English model on read speech


def jfk() -> np.ndarray:
    """The shared ``jfk.wav`` (11 s of speech) at 16 kHz."""
    from oasr.audio import load_audio
    from oasr.cli.bench import default_audio_dir

    audio_dir = default_audio_dir()
    if audio_dir is None:
        raise SystemExit("no shared audio (OASR_SHARED_DIR, or ../shared/data/audio): jfk.wav sets the blank's bias")
    return load_audio(str(audio_dir / "jfk.wav"))


def write_wav2vec2(directory: Path, shape: dict, speech: np.ndarray, seed: int = 0) -> int:
    """A transformers ``Wav2Vec2ForCTC`` of ``shape`` (``Wav2Vec2Config`` fields, e.g. a ``SHAPES``
    value) with random weights, written with its processor (``preprocessor_config.json``,
    ``vocab.json``, tokenizer config) as released directories are; the blank's bias set on
    ``speech`` (16 kHz). Returns the parameter count."""
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
    )

    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.json"
    vocab.write_text(json.dumps({c: i for i, c in enumerate(VOCAB)}), encoding="utf-8")
    tokenizer = Wav2Vec2CTCTokenizer(str(vocab), unk_token="<unk>", pad_token="<pad>", word_delimiter_token="|")
    features = Wav2Vec2FeatureExtractor(
        feature_size=1,
        sampling_rate=16000,
        padding_value=0.0,
        do_normalize=True,
        return_attention_mask=shape.get("do_stable_layer_norm", False),  # as the released large / base
    )
    features.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    config = Wav2Vec2Config(vocab_size=len(VOCAB), pad_token_id=0, ctc_loss_reduction="sum", **shape)
    torch.manual_seed(seed)
    model = Wav2Vec2ForCTC(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(HEAD_SCALE)
        model.lm_head.bias[1:4] = -1e4  # <s>, </s>, <unk>
        logits = model(**features(speech, sampling_rate=16000, return_tensors="pt")).logits[0]  # (frames, vocab)
        margin = logits[:, 1:].max(dim=-1).values - logits[:, 0]
        model.lm_head.bias[0] += torch.quantile(margin, BLANK_SHARE)
    model.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


SENSEVOICE_SMALL = {"output_size": 512, "attention_heads": 4, "linear_units": 2048, "num_blocks": 50, "tp_blocks": 20}


def write_sensevoice(directory: Path, seed: int = 0) -> int:
    """SenseVoiceSmall's shape with random weights, written by funasr's class as released (the
    tests' layout at ``SENSEVOICE_SMALL``); the CTC head scaled as wav2vec2's. Returns the
    parameter count."""
    import funasr.models.sense_voice.model  # noqa: F401  (registers the classes)
    import yaml
    from funasr.register import tables

    from tests.models.paraformer._funasr_format import write_am_mvn
    from tests.models.sensevoice import _funasr_format as layout

    cfg = layout.config()
    cfg["encoder_conf"].update(SENSEVOICE_SMALL)
    torch.manual_seed(seed)
    model = tables.model_classes.get("SenseVoiceSmall")(
        encoder=cfg["encoder"],
        encoder_conf=dict(cfg["encoder_conf"]),
        input_size=cfg["frontend_conf"]["n_mels"] * cfg["frontend_conf"]["lfr_m"],
        vocab_size=layout.VOCAB,
        **cfg["model_conf"],
    ).eval()
    with torch.no_grad():
        model.ctc.ctc_lo.weight.mul_(HEAD_SCALE)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    (directory / "configuration.json").write_text(json.dumps(layout.CONFIGURATION, indent=2), encoding="utf-8")
    torch.save(model.state_dict(), directory / "model.pt")
    layout.write_bpe(directory / layout.BPE)
    g = torch.Generator().manual_seed(seed + 1)
    dim = cfg["frontend_conf"]["n_mels"] * cfg["frontend_conf"]["lfr_m"]
    write_am_mvn(
        directory / "am.mvn", -(8.0 + 4.0 * torch.rand(dim, generator=g)), 0.2 + 0.2 * torch.rand(dim, generator=g)
    )
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", choices=(*SHAPES, "paraformer-large", "sensevoice-small"))
    ap.add_argument("directory", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.shape == "paraformer-large":
        from benchmarks.paraformer_bench import write_large_dir

        _, params = write_large_dir(args.directory, args.seed)
    elif args.shape == "sensevoice-small":
        params = write_sensevoice(args.directory, args.seed)
    else:
        params = write_wav2vec2(args.directory, SHAPES[args.shape], jfk(), args.seed)
    print(f"{args.shape}: {params / 1e6:.1f}M parameters in {args.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
