"""Tiny random FunASR Paraformer / BiCifParaformer models built by funasr's own classes and
written as a FunASR model directory (config.yaml, model.pt, am.mvn, tokens.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

N_MELS, LFR_M, LFR_N = 80, 7, 6
D = 32

# Chinese characters only: funasr's sentence_postprocess then keeps one token per character.
CHARS = list("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后")
TOKENS = ["<blank>", "<s>", "</s>", *CHARS, "<unk>"]


def config(kind: str = "Paraformer") -> dict[str, Any]:
    """A FunASR config.yaml (as a dict) of the released layout at a tiny width."""
    predictor = {
        "idim": D,
        "threshold": 1.0,
        "l_order": 1,
        "r_order": 1,
        "tail_threshold": 0.45,
    }
    if kind == "BiCifParaformer":
        predictor.update(
            smooth_factor2=0.25,
            noise_threshold2=0.01,
            upsample_times=3,
            use_cif1_cnn=False,
            upsample_type="cnn_blstm",
        )
    return {
        "model": kind,
        "model_conf": {"ctc_weight": 0.0, "lsm_weight": 0.1, "predictor_weight": 1.0, "predictor_bias": 1},
        "encoder": "SANMEncoder",
        "encoder_conf": {
            "output_size": D,
            "attention_heads": 4,
            "linear_units": 48,
            "num_blocks": 3,
            "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1,
            "attention_dropout_rate": 0.1,
            "input_layer": "pe",
            "pos_enc_class": "SinusoidalPositionEncoder",
            "normalize_before": True,
            "kernel_size": 11,
            "sanm_shfit": 0,
            "selfattention_layer_type": "sanm",
        },
        "decoder": "ParaformerSANMDecoder",
        "decoder_conf": {
            "attention_heads": 4,
            "linear_units": 48,
            "num_blocks": 3,
            "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1,
            "self_attention_dropout_rate": 0.1,
            "src_attention_dropout_rate": 0.1,
            "att_layer_num": 2,
            "kernel_size": 11,
            "sanm_shfit": 0,
        },
        "predictor": "CifPredictorV3" if kind == "BiCifParaformer" else "CifPredictorV2",
        "predictor_conf": predictor,
        "frontend": "WavFrontend",
        "frontend_conf": {
            "fs": 16000,
            "window": "hamming",
            "n_mels": N_MELS,
            "frame_length": 25,
            "frame_shift": 10,
            "lfr_m": LFR_M,
            "lfr_n": LFR_N,
            "dither": 0.0,
        },
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"unk_symbol": "<unk>", "split_with_space": True},
        "input_size": N_MELS * LFR_M,
    }


def build_reference(kind: str = "Paraformer", seed: int = 0) -> tuple[torch.nn.Module, dict[str, Any]]:
    """funasr's model from ``config(kind)`` with random weights; the CIF heads biased so they fire
    about every third encoder frame (a random CIF rarely reaches the threshold)."""
    import funasr.models.bicif_paraformer.model  # noqa: F401  (registers the classes)
    import funasr.models.paraformer.model  # noqa: F401
    from funasr.register import tables

    cfg = config(kind)
    torch.manual_seed(seed)
    cls = tables.model_classes.get(kind)
    kwargs = {k: v for k, v in copy.deepcopy(cfg).items() if k not in ("model", "model_conf", "frontend_conf")}
    model = cls(**kwargs, **cfg["model_conf"], vocab_size=len(TOKENS)).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the default init, so the stages differ from row to row
            p.mul_(1.5)
        model.predictor.cif_output.weight.mul_(0.3)
        model.predictor.cif_output.bias.fill_(-0.7)
        if kind == "BiCifParaformer":
            model.predictor.cif_output2.weight.mul_(0.3)
            model.predictor.cif_output2.bias.fill_(0.0)
    return model, cfg


COS_MIN = 0.99999


def assert_close(name: str, ours: torch.Tensor, ref: torch.Tensor, max_abs: float) -> None:
    """A stage equals funasr's: same shape, cosine >= ``COS_MIN`` and max-abs <= ``max_abs``."""
    assert ours.shape == ref.shape, f"{name}: shape {tuple(ours.shape)} vs funasr {tuple(ref.shape)}"
    a, b = ours.detach().double().flatten(), ref.detach().double().flatten()
    diff = float((a - b).abs().max())
    cos = float(F.cosine_similarity(a, b, dim=0))
    assert cos >= COS_MIN and diff <= max_abs, f"{name}: max-abs {diff:.3g}, cosine {cos:.8f}"


def write_am_mvn(path: Path, shift: torch.Tensor, scale: torch.Tensor) -> None:
    """Kaldi nnet1 text CMVN as FunASR releases ship it."""
    dim = shift.numel()

    def row(values: torch.Tensor) -> str:
        return "<LearnRateCoef> 0 [ " + " ".join(f"{v:.6f}" for v in values.tolist()) + " ]"

    path.write_text(
        "\n".join(
            [
                "<Nnet>",
                f"<Splice> {dim} {dim}",
                "[ 0 ]",
                f"<AddShift> {dim} {dim}",
                row(shift),
                f"<Rescale> {dim} {dim}",
                row(scale),
                "</Nnet>",
                "",
            ]
        ),
        encoding="utf-8",
    )


def write_funasr_dir(directory: Path, kind: str = "Paraformer", seed: int = 0) -> Path:
    """Write a tiny random FunASR model directory; returns it."""
    import yaml

    model, cfg = build_reference(kind, seed)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    torch.save(model.state_dict(), directory / "model.pt")
    (directory / "tokens.json").write_text(json.dumps(TOKENS, ensure_ascii=False), encoding="utf-8")
    g = torch.Generator().manual_seed(seed + 1)
    dim = N_MELS * LFR_M
    shift = -(8.0 + 4.0 * torch.rand(dim, generator=g))
    scale = 0.2 + 0.2 * torch.rand(dim, generator=g)
    write_am_mvn(directory / "am.mvn", shift, scale)
    return directory
