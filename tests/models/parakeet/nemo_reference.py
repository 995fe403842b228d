"""Tiny NeMo-saved Parakeet checkpoints, built by NeMo's own classes (``nemo-toolkit``): the
release configs (``parakeet-ctc`` / ``parakeet-rnnt`` / ``parakeet-tdt`` / hybrid TDT+CTC
``model_config.yaml``: FastConformer with ``dw_striding`` 8x subsampling, ``rel_pos`` attention with
untied biases, ``xscaling``, batch-norm convolution module, the 16 kHz ``AudioToMelSpectrogramPreprocessor``
with ``normalize: per_feature`` and ``pad_to: 0``) shrunk to two layers of width 32, a SentencePiece
BPE tokenizer trained on a few lines, random weights, written by ``model.save_to`` so that the
archive is laid out as NeMo lays it out.

Imported only by tests that skip where ``nemo`` is absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from tests.models.parakeet.conftest import SENTENCES  # what the tiny tokenizer is trained on

KINDS = ("ctc", "rnnt", "tdt", "hybrid_tdt_ctc")

TDT_DURATIONS = [0, 1, 2, 3, 4]
BLANK_BIAS = 1.0  # the transducers' blank logit bias (see ``build``)


def train_sentencepiece(directory: Path, vocab_size: int = 40, sentences: Sequence[str] = SENTENCES) -> Path:
    """A BPE SentencePiece model (``tokenizer.model``, ``tokenizer.vocab``, ``vocab.txt``) in
    ``directory``, trained on ``sentences``, as NeMo's ``process_asr_text_tokenizer.py`` writes one
    for ``type: bpe``."""
    import sentencepiece as spm

    directory.mkdir(parents=True, exist_ok=True)
    text = directory / "text.txt"
    text.write_text("\n".join(sentences) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(directory / "tokenizer"),
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=-1,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    (directory / "vocab.txt").write_text("\n".join(pieces) + "\n")
    text.unlink()
    return directory


def preprocessor_config(features: int) -> dict[str, Any]:
    return {
        "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
        "sample_rate": 16000,
        "normalize": "per_feature",
        "window_size": 0.025,
        "window_stride": 0.01,
        "window": "hann",
        "features": features,
        "n_fft": 512,
        "log": True,
        "frame_splicing": 1,
        "dither": 1e-05,
        "pad_to": 0,
        "pad_value": 0.0,
    }


def encoder_config(features: int) -> dict[str, Any]:
    return {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "feat_in": features,
        "feat_out": -1,
        "n_layers": 2,
        "d_model": 32,
        "subsampling": "dw_striding",
        "subsampling_factor": 8,
        "subsampling_conv_channels": 8,
        "causal_downsampling": False,
        "ff_expansion_factor": 4,
        "self_attention_model": "rel_pos",
        "n_heads": 4,
        "att_context_size": [-1, -1],
        "att_context_style": "regular",
        "xscaling": True,
        "untie_biases": True,
        "pos_emb_max_len": 5000,
        "conv_kernel_size": 9,
        "conv_norm_type": "batch_norm",
        "conv_context_size": None,
        "dropout": 0.1,
        "dropout_pre_encoder": 0.1,
        "dropout_emb": 0.0,
        "dropout_att": 0.1,
    }


def _ctc_decoder() -> dict[str, Any]:
    return {
        "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
        "feat_in": None,
        "num_classes": -1,
        "vocabulary": [],
    }


def _transducer(tdt: bool, joint_dropout: float = 0.2) -> dict[str, Any]:
    """The predictor, joint, decoding and loss sections of a release RNN-T / TDT config."""
    joint: dict[str, Any] = {
        "_target_": "nemo.collections.asr.modules.RNNTJoint",
        "log_softmax": None,
        "preserve_memory": False,
        "fuse_loss_wer": True,
        "fused_batch_size": 4,
        "jointnet": {"joint_hidden": 32, "activation": "relu", "dropout": joint_dropout},
    }
    decoding: dict[str, Any] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 10}}
    loss: dict[str, Any] = {"loss_name": "default"}
    if tdt:
        joint["num_extra_outputs"] = len(TDT_DURATIONS)
        decoding.update(model_type="tdt", durations=TDT_DURATIONS)
        loss = {
            "loss_name": "tdt",
            "tdt_kwargs": {
                "fastemit_lambda": 0.0,
                "clamp": -1.0,
                "durations": TDT_DURATIONS,
                "sigma": 0.02,
                "omega": 0.1,
            },
        }
    return {
        "model_defaults": {"enc_hidden": 32, "pred_hidden": 32, "joint_hidden": 32},
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder",
            "normalization_mode": None,
            "random_state_sampling": False,
            "blank_as_pad": True,
            "prednet": {"pred_hidden": 32, "pred_rnn_layers": 2, "t_max": None, "dropout": 0.2},
        },
        "joint": joint,
        "decoding": decoding,
        "loss": loss,
    }


SPEC_AUGMENT: dict[str, Any] = {  # the releases' training-time augmentation (no tensors, no effect at inference)
    "_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
    "freq_masks": 2,
    "time_masks": 10,
    "freq_width": 27,
    "time_width": 0.05,
}


def model_config(kind: str, tokenizer_dir: Path, joint_dropout: float = 0.2) -> dict[str, Any]:
    """The ``model`` section of a release-shaped config of ``kind`` (one of ``KINDS``), shrunk
    (``joint_dropout`` 0: NeMo's joint network holds no Dropout module, which shifts its indices)."""
    features = 128 if kind in ("tdt", "hybrid_tdt_ctc") else 80  # parakeet-tdt-0.6b-v2 uses 128 mel bins
    cfg: dict[str, Any] = {
        "sample_rate": 16000,
        "tokenizer": {"dir": str(tokenizer_dir), "type": "bpe"},
        "preprocessor": preprocessor_config(features),
        "spec_augment": dict(SPEC_AUGMENT),
        "encoder": encoder_config(features),
    }
    if kind == "ctc":
        cfg["decoder"] = _ctc_decoder()
        cfg["decoding"] = {"strategy": "greedy_batch"}
    else:
        cfg.update(_transducer(tdt=kind != "rnnt", joint_dropout=joint_dropout))
    if kind == "hybrid_tdt_ctc":
        cfg["aux_ctc"] = {
            "ctc_loss_weight": 0.3,
            "use_cer": False,
            "ctc_reduction": "mean_batch",
            "decoder": _ctc_decoder(),
            "decoding": {"strategy": "greedy"},
        }
    return cfg


def model_class(kind: str):
    """NeMo's class for ``kind``."""
    from nemo.collections.asr import models

    return {
        "ctc": models.EncDecCTCModelBPE,
        "rnnt": models.EncDecRNNTBPEModel,
        "tdt": models.EncDecRNNTBPEModel,
        "hybrid_tdt_ctc": models.EncDecHybridRNNTCTCBPEModel,
    }[kind]


def randomize(model: torch.nn.Module, g: torch.Generator) -> None:
    """Random weights drawn from ``g`` (in place, under no_grad): unit-variance activations, norm
    scales near 1, and random batch-norm running statistics (fresh ones are the identity), so the
    checkpoint exercises every tensor."""
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=g)
        if p.dim() > 1:  # unit-variance activations: a well-conditioned net
            p.copy_(noise * p[0].numel() ** -0.5)
        elif "norm" in name and name.endswith("weight"):  # LayerNorm / BatchNorm scales near 1
            p.copy_(1.0 + 0.1 * noise)
        else:
            p.copy_(0.1 * noise)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=g) * 0.1)
            module.running_var.copy_(torch.rand(module.running_var.shape, generator=g) + 0.5)


def build(
    kind: str,
    directory: Path,
    seed: int = 0,
    joint_dropout: float = 0.2,
    edit=None,
    blank_bias: float = BLANK_BIAS,
    sentences: Sequence[str] = SENTENCES,
):
    """Build a tiny random NeMo model of ``kind``, save it to ``directory / f"{kind}.nemo"``
    (``edit(config)`` changes the release-shaped config first: a cache-aware encoder; its tokenizer
    trained on ``sentences``).

    Batch-norm running statistics are randomised too (fresh ones are the identity), so the
    checkpoint exercises every tensor. As in a trained release, the predictor's blank (padding)
    embedding is zero and ``<unk>`` (id 0) is never the best label (its output bias is low):
    NeMo renders it as `` ⁇ `` where oasr, like every other family, keeps it out of the text.

    Returns:
        (path of the .nemo archive, the NeMo model in eval mode)
    """
    from omegaconf import OmegaConf

    tok = train_sentencepiece(directory / f"{kind}_tokenizer", sentences=sentences)
    directory = directory / f"joint_dropout_{joint_dropout}" if joint_dropout != 0.2 else directory
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    cfg = model_config(kind, tok, joint_dropout)
    if edit is not None:
        edit(cfg)
    model = model_class(kind)(cfg=OmegaConf.create(cfg))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        randomize(model, g)
        blank = model.tokenizer.vocab_size
        if hasattr(model, "joint"):
            model.decoder.prediction.embed.weight[blank].zero_()
            model.joint.joint_net[-1].bias[0] = -20.0
            # Blank wins most frames, as in a trained model: labels come a few per second, and the
            # recurrent predictor is not driven at ``max_symbols`` on every frame (where float32
            # rounding would decide between near-equal random labels).
            model.joint.joint_net[-1].bias[blank] = blank_bias
        for head in (getattr(model, "decoder", None), getattr(model, "ctc_decoder", None)):
            if head is not None and hasattr(head, "decoder_layers"):
                head.decoder_layers[0].bias[0] = -20.0
    path = directory / f"{kind}.nemo"
    model.save_to(str(path))
    model.eval()
    return path, model
