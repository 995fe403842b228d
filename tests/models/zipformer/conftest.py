"""Fixtures of the icefall Zipformer tests: tiny random ``AsrModel``s built by the ``zipformer``
package (icefall's own modules) with both a CTC head and a transducer, saved the way icefall
exports them (``{"model": state_dict}`` in ``pretrained.pt`` + ``tokens.txt``), causal (chunk 16,
left context 128) and full-context, three stacks at downsampling factors 1, 2, 4; and kaldi
fbank features of real clips of unequal lengths."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")  # icefall wraps Swoosh in torch.compile

from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip(
    "zipformer.modules.model", reason="the icefall reference (pip package 'zipformer') is not installed"
)

from tests.conftest import AUDIO_DIR as AUDIO  # noqa: E402

# Unequal lengths: 3.3 s (161 embed frames: past the causal left context of 128), 2.9 s, 1.3 s.
CLIPS = (
    "sense_and_sensibility_01_austen_64kb-0930.wav",
    "speechbrain_spk1_snt1.wav",
    "nada_lily_21_haggard_0316.wav",
)

# icefall's tokens.txt layout: <blk> 0, <sos/eos> 1, <unk> 2, then BPE pieces.
TOKENS = ("<blk>", "<sos/eos>", "<unk>", "▁THE", "▁A", "S", "▁AND", "ED", "▁TO", "ING") + tuple(
    "▁" + c for c in "BCDEFGHIJKLMN"
)

TINY = dict(
    feature_dim=80,
    downsampling_factor="1,2,4",
    encoder_dim="16,32,24",
    num_encoder_layers="1,2,1",
    encoder_unmasked_dim="16",
    query_head_dim="8",
    pos_head_dim="4",
    value_head_dim="4",
    num_heads="2,4,2",
    feedforward_dim="32,64,48",
    cnn_module_kernel="5,7,3",
    pos_dim=16,
    decoder_dim=16,
    joiner_dim=16,
    context_size=2,
)


@dataclass
class Reference:
    """A saved tiny icefall checkpoint and the icefall model it came from (float64, eval)."""

    path: Path
    model: Any
    causal: bool


def build_reference(
    causal: bool,
    *,
    use_ctc: bool = True,
    use_transducer: bool = True,
    chunk: int = 16,
    left: int = 128,
    seed: int = 0,
):
    """A random icefall ``AsrModel`` with sharpened heads (so decodes are not all blank), eval."""
    from zipformer.modules.model import AsrModel

    torch.manual_seed(seed)
    model = AsrModel(
        **TINY,
        causal=causal,
        chunk_size=str(chunk if causal else -1),
        left_context_frames=str(left if causal else -1),
        use_ctc=use_ctc,
        use_transducer=use_transducer,
        vocab_size=len(TOKENS),
    )
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 0:  # BiasNorm log_scale: keep it near icefall's trained range
                p.uniform_(-0.5, 1.0)
            elif p.dim() == 1 and p.shape[0] <= 8:  # downsample weights
                p.normal_(0.0, 1.0)
            else:
                p.add_(torch.randn_like(p) * 0.05)
        if use_ctc:
            model.ctc_output[1].weight.mul_(30.0)
            model.ctc_output[1].bias[0] -= 2.0
        if use_transducer:
            model.joiner.output_linear.weight.mul_(12.0)
            model.decoder.embedding.weight.mul_(3.0)
    return model.eval()


def calibrate_blank_(model, feats: torch.Tensor) -> None:
    """Shift the blank biases so that about half of the frames of ``feats`` are blank at the
    start window (random heads otherwise emit on every frame, or never)."""
    with torch.no_grad():
        enc, _ = model.forward_encoder(feats[None].float(), torch.tensor([feats.shape[0]]))
        heads = []
        if model.ctc_output is not None:
            heads.append((model.ctc_output[1].bias, model.ctc_output[1](enc)[0]))
        if model.decoder is not None:
            start = torch.tensor([[-1] * (model.decoder.context_size - 1) + [model.decoder.blank_id]])
            pred = model.joiner.decoder_proj(model.decoder(start, need_pad=False))[0]
            heads.append((model.joiner.output_linear.bias, model.joiner(enc[0], pred.expand(enc.shape[1], -1))))
        for bias, logits in heads:
            margin = logits[:, 0] - logits[:, 1:].max(dim=-1).values
            bias[0] -= margin.median()


def save_icefall(model, directory: Path, *, bare: bool = False, tokens: bool = True) -> Path:
    """Save as icefall's export.py does (``{"model": sd}``) or as a bare state dict."""
    directory.mkdir(parents=True, exist_ok=True)
    sd = model.state_dict()
    torch.save(sd if bare else {"model": sd}, directory / "pretrained.pt")
    if tokens:
        (directory / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(TOKENS)), encoding="utf-8")
    return directory


# Built once per session even though the transducer tests' conftest declares these fixtures too.
_REFERENCES: dict[bool, Reference] = {}
_ENCODED: dict[bool, list[tuple[torch.Tensor, torch.Tensor]]] = {}


@pytest.fixture(scope="session", params=[True, False], ids=["causal", "full"])
def reference(request, tmp_path_factory, features) -> Reference:
    causal = request.param
    if causal not in _REFERENCES:
        model = build_reference(causal)
        calibrate_blank_(model, features[0])
        path = save_icefall(model, tmp_path_factory.mktemp("causal" if causal else "full"))
        _REFERENCES[causal] = Reference(path=path, model=model.double(), causal=causal)
    return _REFERENCES[causal]


def icefall_input(feats: torch.Tensor, causal: bool) -> torch.Tensor:
    """One clip's features as icefall's decode.py feeds a model: a causal one gets 30 frames of
    LOG_EPS (log(1e-10)) appended. (T, F) -> (T [+ 30], F)"""
    if not causal:
        return feats
    return torch.nn.functional.pad(feats, (0, 0, 0, 30), value=math.log(1e-10))


def reference_encoded(reference: Reference, features: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """icefall's ``forward_encoder`` of each clip alone, (1, T', D) and (1,), computed once."""
    if reference.causal not in _ENCODED:
        with torch.no_grad():
            _ENCODED[reference.causal] = [
                reference.model.forward_encoder(f[None], torch.tensor([f.shape[0]]))
                for f in (icefall_input(f, reference.causal) for f in features)
            ]
    return _ENCODED[reference.causal]


@pytest.fixture(scope="session")
def features(audio_dir) -> list[torch.Tensor]:
    """icefall's 80-bin fbank (float64) of the clips, longest first."""
    from oasr.audio import load_audio
    from oasr.audio.fbank import KaldiFbank
    from oasr.models.base import FeatureSpec
    from oasr.models.zipformer.convert import FBANK_PARAMS

    fbank = KaldiFbank.from_spec(FeatureSpec("kaldi_fbank", 16000, FBANK_PARAMS))
    return [fbank.compute(load_audio(str(AUDIO / c)), dtype=torch.float64) for c in CLIPS]


def pad(feats: list[torch.Tensor], value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    lens = torch.tensor([f.shape[0] for f in feats])
    out = feats[0].new_full((len(feats), int(lens.max()), feats[0].shape[1]), value)
    for i, f in enumerate(feats):
        out[i, : f.shape[0]] = f
    return out, lens


def parity(ours: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max-abs difference, cosine similarity) of two tensors, in float64."""
    a, b = ours.double().flatten(), ref.double().flatten()
    assert a.shape == b.shape, (ours.shape, ref.shape)
    return float((a - b).abs().max()), float(torch.nn.functional.cosine_similarity(a, b, dim=0))
