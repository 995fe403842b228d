"""Write an oasr ConformerModel out as a WeNet experiment directory (train.yaml, final.pt,
units.txt, optional global_cmvn), in WeNet's names and layout, so the converter can be
checked on configurations the shared fixture does not cover."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from oasr.layers.relpos import wenet_sinusoids
from oasr.models.conformer.model import ConformerModel

_ACT = {"silu": "swish", "relu": "relu"}


def randomize(model: torch.nn.Module, seed: int = 0) -> None:
    """Perturb every parameter and floating buffer (norm scales, BN statistics) so that
    a tensor landing in the wrong place cannot go unnoticed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("running_var") or name.endswith("istd"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
            elif b.is_floating_point() and (name.endswith("running_mean") or name.endswith(".mean")):
                b.copy_(0.3 * torch.randn(b.shape, generator=g))


def train_yaml(model: ConformerModel, *, decoder_type: str | None, cmvn: str | None, tie: bool = False) -> dict:
    cfg = model.config
    enc = cfg.encoder
    encoder_conf = {
        "output_size": enc.output_size,
        "attention_heads": enc.attention_heads,
        "linear_units": enc.linear_units,
        "num_blocks": enc.num_blocks,
        "input_layer": enc.input_layer,
        "normalize_before": enc.normalize_before,
        "static_chunk_size": enc.static_chunk_size,
        "use_dynamic_chunk": enc.use_dynamic_chunk,
        "use_dynamic_left_chunk": False,
        "macaron_style": enc.macaron_style,
        "activation_type": _ACT[enc.activation],
        "use_cnn_module": enc.use_cnn_module,
        "cnn_module_kernel": enc.cnn_module_kernel,
        "causal": enc.causal,
        "cnn_module_norm": enc.cnn_module_norm,
        "pos_enc_layer_type": "rel_pos",
        "selfattention_layer_type": "rel_selfattn",
        "dropout_rate": 0.1,
        "positional_dropout_rate": 0.1,
        "attention_dropout_rate": 0.0,
    }
    out: dict = {
        "input_dim": enc.input_dim,
        "output_dim": cfg.vocab_size,
        "model": "asr_model",
        "encoder": "conformer",
        "encoder_conf": encoder_conf,
        "ctc": "ctc",
        "ctc_conf": {"ctc_blank_id": cfg.blank_id},
        "model_conf": {"ctc_weight": 0.5, "reverse_weight": 0.0, "lsm_weight": 0.1},
        "dataset_conf": {
            "fbank_conf": {"num_mel_bins": enc.input_dim, "frame_length": 25, "frame_shift": 10, "dither": 0.1}
        },
        "tokenizer": "char",
        "tokenizer_conf": {"symbol_table_path": "data/dict/lang_char.txt", "split_with_space": False},
    }
    if cmvn is not None:
        out["cmvn"] = "global_cmvn"
        out["cmvn_conf"] = {"cmvn_file": "exp/some/where/global_cmvn", "is_json_cmvn": cmvn == "json"}
    dec = cfg.decoder
    out["decoder"] = decoder_type
    if dec is not None:
        out["model_conf"]["reverse_weight"] = dec.reverse_weight
        out["decoder_conf"] = {
            "attention_heads": dec.attention_heads,
            "linear_units": dec.linear_units,
            "num_blocks": dec.num_blocks,
            "normalize_before": dec.normalize_before,
            "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1,
            "self_attention_dropout_rate": 0.0,
            "src_attention_dropout_rate": 0.0,
            "tie_word_embedding": tie,
        }
        if decoder_type == "bitransformer":
            out["decoder_conf"]["r_num_blocks"] = dec.r_num_blocks
    return out


def _cmvn_text(mean: torch.Tensor, istd: torch.Tensor, fmt: str, frames: float = 1000.0) -> str:
    m, var = mean.double(), 1.0 / istd.double() ** 2
    sums, squares = (m * frames).tolist(), ((var + m * m) * frames).tolist()
    if fmt == "json":
        return json.dumps({"mean_stat": sums, "var_stat": squares, "frame_num": frames})
    row1 = " ".join(repr(x) for x in sums) + f" {frames!r}"
    row2 = " ".join(repr(x) for x in squares) + " 0"
    return f" [\n  {row1}\n  {row2} ]\n"


def save_wenet_experiment(
    model: ConformerModel,
    directory: Path,
    *,
    decoder_type: str | None,
    cmvn: str | None = "json",
    cmvn_in_checkpoint: bool = True,
    tie: bool = False,
) -> Path:
    """Write ``model`` as WeNet would have saved it.

    Args:
        decoder_type: "bitransformer", "transformer" or None (as train.yaml's ``decoder``).
        cmvn: "json" / "kaldi" (the global_cmvn file's format) or None (no CMVN).
        cmvn_in_checkpoint: keep ``encoder.global_cmvn.*`` in final.pt (WeNet does);
            False leaves only the file.
        tie: declare ``tie_word_embedding`` and omit the output layers' weights.
    """
    directory.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    v, d = cfg.vocab_size, cfg.encoder.output_size
    state = {k: t.detach().clone() for k, t in model.state_dict().items()}
    wenet: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name in ("ctc.weight", "ctc.bias"):
            wenet["ctc.ctc_lo." + name.split(".")[1]] = t[:v]
            continue
        if name.startswith("decoder.") and ".output_layer." in name:
            if tie and name.endswith("weight"):
                continue
            t = t[:v]
        if decoder_type == "transformer" and name.startswith("decoder.left_decoder."):
            name = "decoder." + name[len("decoder.left_decoder.") :]
        wenet[name] = t
    wenet["encoder.embed.pos_enc.pe"] = wenet_sinusoids(5000, d)[None]
    if cfg.decoder is not None:
        sides = (
            ("decoder.left_decoder.", "decoder.right_decoder.") if decoder_type == "bitransformer" else ("decoder.",)
        )
        for side in sides:
            wenet[side + "embed.1.pe"] = wenet_sinusoids(5000, d)[None]
    if cmvn is not None:
        mean, istd = state["encoder.global_cmvn.mean"], state["encoder.global_cmvn.istd"]
        (directory / "global_cmvn").write_text(_cmvn_text(mean, istd, cmvn), encoding="utf-8")
        if not cmvn_in_checkpoint:
            del wenet["encoder.global_cmvn.mean"], wenet["encoder.global_cmvn.istd"]
    torch.save(wenet, directory / "final.pt")
    units = ["<blank> 0", "<unk> 1"] + [f"u{i} {i}" for i in range(2, v - 1)] + [f"<sos/eos> {v - 1}"]
    (directory / "units.txt").write_text("\n".join(units) + "\n", encoding="utf-8")
    import yaml

    (directory / "train.yaml").write_text(
        yaml.safe_dump(train_yaml(model, decoder_type=decoder_type, cmvn=cmvn, tie=tie)), encoding="utf-8"
    )
    return directory
