"""WeNet experiment directories -> the conformer family.

A WeNet experiment directory holds ``train.yaml`` (the training config), the weights
and the units table::

    train.yaml           model / encoder / decoder / ctc types and their *_conf
    final.pt             a plain state dict (torch.save(model.state_dict()))
    units.txt            "<unit> <id>" per line (or words.txt, or the file that
                         tokenizer_conf.symbol_table_path names, looked up beside it)
    global_cmvn          JSON ({"mean_stat", "var_stat", "frame_num"}) or kaldi text stats;
                         only read when the state dict lacks encoder.global_cmvn.*

Which weights: a ``.pt`` path given directly; else ``final.pt``; else the one
``avg_N.pt``; else the only ``*.pt`` in the directory. Several candidates and no
``final.pt`` is refused (pass the file).

Only a WeNet ``asr_model`` / ``k2_model`` with a ``conformer`` encoder is built, because
oasr decodes through the CTC head those two train. Everything in ``encoder_conf`` is
checked against the tables below: an option this Conformer does not implement, or a key
it does not know, is a ``LoadError`` naming the key and its value. A ``decoder_conf``
that cannot be built drops the attention decoder with a warning (the model then serves
CTC only; the registry's drop hint names what is lost).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError, TokenizerSpec, pad_output_projection
from oasr.models.conformer.config import SUBSAMPLING, ConformerEncoderConfig, ConformerModelConfig
from oasr.models.decoders.transformer_decoder import TransformerDecoderConfig
from oasr.models.formats.text import read_mapping, read_symbol_table
from oasr.models.registry import CheckpointBundle

ARCH = "conformer"

# ---------------------------------------------------------------------------
# Tables of train.yaml keys

# Top level: the WeNet classes this family builds (and WeNet's defaults when a key is absent).
_MODEL_TYPES = ("asr_model", "k2_model")
_DEFAULTS_TOP = {"model": "asr_model", "encoder": "conformer", "decoder": "bitransformer", "ctc": "ctc"}

# encoder_conf key -> ConformerEncoderConfig field, with WeNet ConformerEncoder's default.
_ENC_FIELDS: dict[str, tuple[str, Any]] = {
    "output_size": ("output_size", 256),
    "attention_heads": ("attention_heads", 4),
    "linear_units": ("linear_units", 2048),
    "num_blocks": ("num_blocks", 6),
    "input_layer": ("input_layer", "conv2d"),
    "normalize_before": ("normalize_before", True),
    "final_norm": ("final_norm", True),
    "static_chunk_size": ("static_chunk_size", 0),
    "use_dynamic_chunk": ("use_dynamic_chunk", False),
    "macaron_style": ("macaron_style", True),
    "use_cnn_module": ("use_cnn_module", True),
    "cnn_module_kernel": ("cnn_module_kernel", 15),
    "causal": ("causal", False),
    "cnn_module_norm": ("cnn_module_norm", "batch_norm"),
    "query_bias": ("query_bias", True),
    "key_bias": ("key_bias", True),
    "value_bias": ("value_bias", True),
    "conv_bias": ("conv_bias", True),
    "mlp_bias": ("mlp_bias", True),
    "norm_eps": ("norm_eps", 1e-5),
    "conv_norm_eps": ("conv_norm_eps", 1e-5),
}
# WeNet activation_type -> oasr activation. gelu is refused: WeNet's is exact erf, while the
# convolution module's fused one is the tanh approximation.
_ENC_ACTIVATIONS = {"swish": "silu", "relu": "relu"}
# encoder_conf keys that only shape training (or that WeNet's ConformerEncoder accepts and ignores).
_ENC_IGNORED = frozenset(
    {
        "dropout_rate",
        "positional_dropout_rate",
        "attention_dropout_rate",
        "use_dynamic_left_chunk",
        "gradient_checkpointing",
        "use_sdpa",
        "positionwise_conv_kernel_size",
        "n_expert",
        "n_expert_activated",
    }
)
# encoder_conf keys whose only implemented value is fixed: key -> (accepted values, why).
_ENC_FIXED: dict[str, tuple[tuple[Any, ...], str]] = {
    "pos_enc_layer_type": (("rel_pos",), "only WeNet's relative positions (rel_pos) are implemented"),
    "selfattention_layer_type": (("rel_selfattn",), "only rel-pos self-attention (rel_selfattn) is implemented"),
    "layer_norm_type": (("layer_norm",), "RMSNorm conformer blocks are not implemented"),
    "concat_after": (
        (False,),
        "concat_after blocks (attention output concatenated with its input) are not implemented",
    ),
    "mlp_type": (("position_wise_feed_forward",), "only the position-wise feed-forward is implemented"),
    "conv_inner_factor": ((2,), "the convolution module's GLU maps C -> 2C -> C"),
}

# decoder types this family builds: WeNet decoder -> bidirectional
_DECODER_TYPES = {"transformer": False, "bitransformer": True}
# decoder_conf key -> TransformerDecoderConfig field, with WeNet TransformerDecoder's default.
_DEC_FIELDS: dict[str, tuple[str, Any]] = {
    "attention_heads": ("attention_heads", 4),
    "linear_units": ("linear_units", 2048),
    "num_blocks": ("num_blocks", 6),
    "r_num_blocks": ("r_num_blocks", 0),
    "normalize_before": ("normalize_before", True),
    "query_bias": ("query_bias", True),
    "key_bias": ("key_bias", True),
    "value_bias": ("value_bias", True),
    "src_query_bias": ("src_query_bias", True),
    "src_key_bias": ("src_key_bias", True),
    "src_value_bias": ("src_value_bias", True),
    "mlp_bias": ("mlp_bias", True),
    "norm_eps": ("norm_eps", 1e-5),
}
_DEC_ACTIVATIONS = {"relu": "relu", "swish": "silu", "gelu": "gelu", "tanh": "tanh"}
_DEC_IGNORED = frozenset(
    {
        "dropout_rate",
        "positional_dropout_rate",
        "self_attention_dropout_rate",
        "src_attention_dropout_rate",
        "gradient_checkpointing",
        "use_sdpa",
        "n_expert",
        "n_expert_activated",
        "tie_word_embedding",  # handled when mapping the weights
    }
)
_DEC_FIXED: dict[str, tuple[tuple[Any, ...], str]] = {
    "input_layer": (("embed",), "only a token embedding with absolute sinusoids is implemented"),
    "use_output_layer": ((True,), "rescoring needs the output layer"),
    "src_attention": ((True,), "rescoring needs cross-attention over the encoder"),
    "layer_norm_type": (("layer_norm",), "RMSNorm decoder blocks are not implemented"),
    "mlp_type": (("position_wise_feed_forward",), "only the position-wise feed-forward is implemented"),
}

# dataset_conf.fbank_conf keys -> KaldiFbank param
_FBANK_KEYS = {
    "num_mel_bins": "num_mel_bins",
    "frame_length": "frame_length",
    "frame_shift": "frame_shift",
    "window_type": "window_type",
    "dither": None,  # training augmentation: WeNet decodes with dither 0
}

# Derived sinusoid tables WeNet saves with its weights (oasr recomputes them).
_POSITION_TABLES = (
    "encoder.embed.pos_enc.pe",
    "decoder.left_decoder.embed.1.pe",
    "decoder.right_decoder.embed.1.pe",
)


class _Unbuildable(Exception):
    """A decoder_conf this family cannot build (the AED branch is dropped)."""


def _refuse(where: Path, key: str, value: Any, why: str) -> LoadError:
    return LoadError(f"{where}: {key}={value!r} is not supported: {why}")


# ---------------------------------------------------------------------------
# Reading the directory


def _experiment_dir(path: Path) -> Path:
    return path.parent if path.is_file() else path


def _checkpoint_file(path: Path) -> Path:
    """The weights to read (see the module docstring for the order)."""
    if path.is_file():
        return path
    if (path / "final.pt").is_file():
        return path / "final.pt"
    averaged = sorted(path.glob("avg_*.pt"))
    if len(averaged) == 1:
        return averaged[0]
    if len(averaged) > 1:
        raise LoadError(f"{path}: several averaged checkpoints {[p.name for p in averaged]}; pass the one to load")
    pts = sorted(path.glob("*.pt"))
    if len(pts) == 1:
        return pts[0]
    if not pts:
        raise LoadError(f"{path}: no WeNet checkpoint (final.pt, avg_N.pt or one *.pt) beside train.yaml")
    raise LoadError(f"{path}: several checkpoints {[p.name for p in pts]} and no final.pt; pass the one to load")


def _units_file(directory: Path, cfg: Mapping[str, Any]) -> Path:
    candidates = [directory / "units.txt"]
    table = (cfg.get("tokenizer_conf") or {}).get("symbol_table_path")
    if table:
        candidates += [Path(table) if Path(table).is_absolute() else directory / table, directory / Path(table).name]
    candidates.append(directory / "words.txt")
    for c in candidates:
        if c.is_file():
            return c
    raise LoadError(f"{directory}: no units table (units.txt, words.txt or tokenizer_conf.symbol_table_path)")


def _cmvn_stats(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """WeNet's global CMVN file (JSON or kaldi text) -> (mean, istd) float32, as WeNet derives them."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        stats = json.loads(text)
        sums, squares, count = stats["mean_stat"], stats["var_stat"], float(stats["frame_num"])
    else:
        tokens = text.split()
        if len(tokens) < 6 or tokens[0] != "[" or tokens[-1] != "]":
            raise LoadError(f"{path}: not a kaldi text CMVN matrix (binary stats are not supported)")
        dim = (len(tokens) - 4) // 2
        sums = [float(t) for t in tokens[1 : dim + 1]]
        count = float(tokens[dim + 1])
        squares = [float(t) for t in tokens[dim + 2 : 2 * dim + 2]]
    mean, istd = [], []
    for s, q in zip(sums, squares):
        m = s / count
        var = max(q / count - m * m, 1.0e-20)
        mean.append(m)
        istd.append(1.0 / math.sqrt(var))
    return torch.tensor(mean, dtype=torch.float64).float(), torch.tensor(istd, dtype=torch.float64).float()


def _cmvn_file(directory: Path, cfg: Mapping[str, Any]) -> Path | None:
    conf = cfg.get("cmvn_conf") or {}
    named = conf.get("cmvn_file") or cfg.get("cmvn_file")
    candidates = []
    if named:
        candidates += [Path(named) if Path(named).is_absolute() else directory / named, directory / Path(named).name]
    candidates.append(directory / "global_cmvn")
    return next((c for c in candidates if c.is_file()), None)


def _declares_cmvn(cfg: Mapping[str, Any]) -> bool:
    if "cmvn" in cfg:
        kind = cfg["cmvn"]
        if kind not in (None, "global_cmvn"):
            raise LoadError(f"cmvn={kind!r} is not supported: only WeNet's global_cmvn is implemented")
        return kind == "global_cmvn"
    return bool(cfg.get("cmvn_file"))  # WeNet configs before cmvn_conf


# ---------------------------------------------------------------------------
# Config mapping


def _fixed_violation(section: str, conf: Mapping[str, Any], table) -> str | None:
    """The first key of ``table`` whose value ``conf`` sets to something unimplemented, as a message."""
    for key, (accepted, why) in table.items():
        if key in conf and conf[key] not in accepted:
            return f"{section}.{key}={conf[key]!r} is not supported: {why}"
    return None


def _heads_violation(section: str, conf: Mapping[str, Any], width: int, heads: int) -> str | None:
    kv = conf.get("n_kv_head")
    if kv is not None and kv != heads:
        return f"{section}.n_kv_head={kv!r} is not supported: grouped-query attention is not implemented"
    hd = conf.get("head_dim")
    if hd is not None and hd * heads != width:
        return f"{section}.head_dim={hd!r} is not supported: the head width must be {width} / {heads}"
    return None


def encoder_config(where: Path, cfg: Mapping[str, Any], global_cmvn: bool) -> ConformerEncoderConfig:
    """``encoder_conf`` -> ``ConformerEncoderConfig``, refusing what this Conformer does not implement.

    Raises:
        LoadError: naming the ``encoder_conf`` key and value.
    """
    conf = dict(cfg.get("encoder_conf") or {})
    known = set(_ENC_FIELDS) | _ENC_IGNORED | set(_ENC_FIXED) | {"activation_type", "n_kv_head", "head_dim"}
    for key in conf:
        if key not in known:
            raise _refuse(where, f"encoder_conf.{key}", conf[key], "an encoder option this Conformer does not know")
    if (msg := _fixed_violation("encoder_conf", conf, _ENC_FIXED)) is not None:
        raise LoadError(f"{where}: {msg}")
    act = conf.get("activation_type", "swish")
    if act not in _ENC_ACTIVATIONS:
        raise _refuse(
            where,
            "encoder_conf.activation_type",
            act,
            "only swish and relu are implemented (WeNet's gelu is exact erf, the conv module's fused one is tanh)",
        )
    values = {field: conf.get(key, default) for key, (field, default) in _ENC_FIELDS.items()}
    if values["input_layer"] not in SUBSAMPLING:
        raise _refuse(
            where,
            "encoder_conf.input_layer",
            values["input_layer"],
            f"subsampling must be one of {sorted(SUBSAMPLING)}",
        )
    if values["cnn_module_norm"] not in ("batch_norm", "layer_norm"):
        raise _refuse(
            where, "encoder_conf.cnn_module_norm", values["cnn_module_norm"], "only batch_norm and layer_norm"
        )
    if values["static_chunk_size"] > 0 and not values["use_dynamic_chunk"]:
        raise _refuse(
            where,
            "encoder_conf.static_chunk_size",
            values["static_chunk_size"],
            "a static chunk without a dynamic one (use_dynamic_chunk false) is not served",
        )
    if values["use_cnn_module"] and not values["causal"] and values["cnn_module_kernel"] % 2 == 0:
        raise _refuse(where, "encoder_conf.cnn_module_kernel", values["cnn_module_kernel"], "a symmetric kernel is odd")
    if (msg := _heads_violation("encoder_conf", conf, values["output_size"], values["attention_heads"])) is not None:
        raise LoadError(f"{where}: {msg}")
    if "input_dim" not in cfg:
        raise LoadError(f"{where}: train.yaml has no input_dim")
    try:
        return ConformerEncoderConfig(
            input_dim=int(cfg["input_dim"]), activation=_ENC_ACTIVATIONS[act], global_cmvn=global_cmvn, **values
        )
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: encoder_conf: {e}") from e


def decoder_config(cfg: Mapping[str, Any], vocab_size: int, d_model: int) -> TransformerDecoderConfig | None:
    """The attention decoder of ``train.yaml``, or None when it declares none.

    Raises:
        _Unbuildable: a decoder this family cannot build (the caller drops it with a warning).
    """
    kind = cfg.get("decoder", _DEFAULTS_TOP["decoder"])
    if kind is None:
        return None
    if kind not in _DECODER_TYPES:
        raise _Unbuildable(f"decoder={kind!r} is not one of {sorted(_DECODER_TYPES)}")
    ctc_weight = float((cfg.get("model_conf") or {}).get("ctc_weight", 0.5))
    if ctc_weight >= 1.0:
        raise _Unbuildable(f"model_conf.ctc_weight={ctc_weight}: the attention decoder was never trained")
    if (cfg.get("model_conf") or {}).get("apply_non_blank_embedding", False):
        raise _Unbuildable(
            "model_conf.apply_non_blank_embedding=True: rescoring over blank-filtered encoder frames is not implemented"
        )
    conf = dict(cfg.get("decoder_conf") or {})
    known = set(_DEC_FIELDS) | _DEC_IGNORED | set(_DEC_FIXED) | {"activation_type", "n_kv_head", "head_dim"}
    for key in conf:
        if key not in known:
            raise _Unbuildable(f"decoder_conf.{key}={conf[key]!r} is a decoder option this family does not know")
    if (msg := _fixed_violation("decoder_conf", conf, _DEC_FIXED)) is not None:
        raise _Unbuildable(msg)
    act = conf.get("activation_type", "relu")
    if act not in _DEC_ACTIVATIONS:
        raise _Unbuildable(f"decoder_conf.activation_type={act!r} is not one of {sorted(_DEC_ACTIVATIONS)}")
    values = {field: conf.get(key, default) for key, (field, default) in _DEC_FIELDS.items()}
    if (msg := _heads_violation("decoder_conf", conf, d_model, values["attention_heads"])) is not None:
        raise _Unbuildable(msg)
    special = (cfg.get("tokenizer_conf") or {}).get("special_tokens") or {}
    model_conf = cfg.get("model_conf") or {}
    try:
        return TransformerDecoderConfig(
            vocab_size=vocab_size,
            d_model=d_model,
            bidirectional=_DECODER_TYPES[kind],
            activation=_DEC_ACTIVATIONS[act],
            sos=int(special.get("<sos>", vocab_size - 1)),
            eos=int(special.get("<eos>", vocab_size - 1)),
            reverse_weight=float(model_conf.get("reverse_weight", 0.0)),
            **values,
        )
    except (TypeError, ValueError) as e:
        raise _Unbuildable(f"decoder_conf: {e}") from e


def feature_spec(where: Path, cfg: Mapping[str, Any]) -> FeatureSpec:
    """``dataset_conf.fbank_conf`` -> ``FeatureSpec(kind="kaldi_fbank")`` (dither forced to 0)."""
    data = cfg.get("dataset_conf") or {}
    feats_type = data.get("feats_type", "fbank")
    if feats_type != "fbank":
        raise _refuse(where, "dataset_conf.feats_type", feats_type, "only kaldi fbank features are implemented")
    fbank = dict(data.get("fbank_conf") or {})
    params: dict[str, Any] = {"num_mel_bins": int(cfg["input_dim"]), "frame_length": 25.0, "frame_shift": 10.0}
    for key, value in fbank.items():
        if key not in _FBANK_KEYS:
            raise _refuse(where, f"dataset_conf.fbank_conf.{key}", value, "a fbank option this front end does not know")
        if _FBANK_KEYS[key] is not None:
            params[_FBANK_KEYS[key]] = value
    params["dither"] = 0.0
    if int(params["num_mel_bins"]) != int(cfg["input_dim"]):
        raise _refuse(
            where,
            "dataset_conf.fbank_conf.num_mel_bins",
            params["num_mel_bins"],
            f"the encoder reads input_dim={cfg['input_dim']} features",
        )
    rate = int((data.get("resample_conf") or {}).get("resample_rate", 16000))
    return FeatureSpec(kind="kaldi_fbank", sampling_rate=rate, params=params)


# ---------------------------------------------------------------------------
# Converter


class WenetConverter:
    """A WeNet U2 / U2++ experiment directory (``train.yaml`` + ``final.pt`` / ``avg_N.pt`` +
    ``units.txt``), or a ``.pt`` file with ``train.yaml`` beside it."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = _POSITION_TABLES
    capability_drop_hints: Mapping[str, str] = {
        "decoder.": "the attention decoder could not be built (see the converter's warning): "
        "attention rescoring (ctc_aed_rescoring) is unavailable and the model serves CTC only",
    }

    def can_load(self, path: Path) -> bool:
        path = Path(path)
        if path.is_file() and path.suffix != ".pt":
            return False
        directory = _experiment_dir(path)
        yml = directory / "train.yaml"
        if not yml.is_file():
            return False
        if path.is_dir() and not any(directory.glob("*.pt")):
            return False
        try:
            cfg = read_mapping(yml, "a WeNet training config")
        except LoadError:
            return False
        return "encoder_conf" in cfg and "input_dim" in cfg and "output_dim" in cfg

    def load(self, path: Path) -> CheckpointBundle:
        path = Path(path)
        directory = _experiment_dir(path)
        yml = directory / "train.yaml"
        if not yml.is_file():
            raise LoadError(f"{directory}: no train.yaml (not a WeNet experiment directory)")
        cfg = read_mapping(yml, "a WeNet training config")
        self._check_model(yml, cfg)
        if "output_dim" not in cfg:
            raise LoadError(f"{yml}: train.yaml has no output_dim")
        vocab = int(cfg["output_dim"])
        file = _checkpoint_file(path)
        try:
            raw = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as e:
            raise LoadError(f"{file}: cannot read as a PyTorch state dict: {e}") from e
        if not isinstance(raw, dict) or not all(isinstance(v, torch.Tensor) for v in raw.values()):
            raise LoadError(f"{file}: not a WeNet state dict (a flat mapping of tensors)")
        state: dict[str, torch.Tensor] = dict(raw)

        global_cmvn = _declares_cmvn(cfg) or "encoder.global_cmvn.mean" in state
        if global_cmvn and "encoder.global_cmvn.mean" not in state:
            cmvn = _cmvn_file(directory, cfg)
            if cmvn is None:
                raise LoadError(
                    f"{directory}: train.yaml declares global CMVN but neither the weights nor a file hold it"
                )
            state["encoder.global_cmvn.mean"], state["encoder.global_cmvn.istd"] = _cmvn_stats(cmvn)
        encoder = encoder_config(yml, cfg, global_cmvn)

        ctc_w, ctc_b = state.pop("ctc.ctc_lo.weight", None), state.pop("ctc.ctc_lo.bias", None)
        if ctc_w is None:
            raise LoadError(f"{file}: no CTC head (ctc.ctc_lo.weight)")
        if ctc_w.shape[0] != vocab:
            raise LoadError(f"{file}: the CTC head has {ctc_w.shape[0]} outputs but output_dim is {vocab}")
        state["ctc.weight"] = ctc_w  # widened to the aligned width by BaseAsrModel.load_weights
        if ctc_b is not None:
            state["ctc.bias"] = ctc_b

        try:
            decoder = decoder_config(cfg, vocab, encoder.output_size)
        except _Unbuildable as e:
            warnings.warn(
                f"{ARCH}: {yml}: {e}; the attention decoder is dropped and the model serves CTC only",
                UserWarning,
                stacklevel=2,
            )
            decoder = None
        if decoder is not None:
            state = self._map_decoder(file, cfg, decoder, state)

        units_path = _units_file(directory, cfg)
        units = read_symbol_table(units_path)
        if max(units, default=-1) + 1 != vocab:
            raise LoadError(f"{units_path}: {max(units, default=-1) + 1} units but output_dim is {vocab}")
        blank = int((cfg.get("ctc_conf") or {}).get("ctc_blank_id", 0))
        special = (cfg.get("tokenizer_conf") or {}).get("special_tokens") or {}
        eos = int(special.get("<eos>", vocab - 1))
        sos = int(special.get("<sos>", vocab - 1))
        config = ConformerModelConfig(encoder=encoder, vocab_size=vocab, blank_id=blank, decoder=decoder)
        model_conf = cfg.get("model_conf") or {}
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            # Blank and <sos/eos> are never text; <unk> is a trained unit WeNet prints as it is.
            tokenizer=TokenizerSpec(kind="table", path=str(units_path), special_ids=tuple(sorted({blank, sos, eos}))),
            features=feature_spec(yml, cfg),
            decoding=DecodingSpec(
                DecodeType.CTC,
                params={
                    "ctc_weight": float(model_conf.get("ctc_weight", 0.5)),
                    "reverse_weight": float(model_conf.get("reverse_weight", 0.0)),
                },
            ),
            source=str(file),
            format="wenet",
            metadata={"train_yaml": str(yml)},
        )

    @staticmethod
    def _check_model(where: Path, cfg: Mapping[str, Any]) -> None:
        model = cfg.get("model", _DEFAULTS_TOP["model"])
        if model not in _MODEL_TYPES:
            raise _refuse(where, "model", model, f"only WeNet {' / '.join(_MODEL_TYPES)} decode through a CTC head")
        encoder = cfg.get("encoder", _DEFAULTS_TOP["encoder"])
        if encoder != "conformer":
            raise _refuse(where, "encoder", encoder, "this family builds WeNet's ConformerEncoder only")
        if "efficient_conf" in (cfg.get("encoder_conf") or {}):
            raise _refuse(
                where, "encoder_conf.efficient_conf", cfg["encoder_conf"]["efficient_conf"], "not a Conformer"
            )
        ctc = cfg.get("ctc", _DEFAULTS_TOP["ctc"])
        if ctc != "ctc":
            raise _refuse(where, "ctc", ctc, "only WeNet's CTC head is implemented")
        ctc_weight = (cfg.get("model_conf") or {}).get("ctc_weight", 0.5)
        if float(ctc_weight) == 0.0:
            raise _refuse(where, "model_conf.ctc_weight", ctc_weight, "the CTC head was never trained")

    @staticmethod
    def _map_decoder(
        file: Path, cfg: Mapping[str, Any], decoder: TransformerDecoderConfig, state: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Rename a plain transformer decoder into ``left_decoder``, fill a tied output layer,
        and widen the output layers to the aligned width."""
        out: dict[str, torch.Tensor] = {}
        for name, t in state.items():
            if (
                not decoder.bidirectional
                and name.startswith("decoder.")
                and not name.startswith("decoder.left_decoder.")
            ):
                name = "decoder.left_decoder." + name[len("decoder.") :]
            out[name] = t
        sides = ("left_decoder", "right_decoder") if decoder.bidirectional else ("left_decoder",)
        tied = bool((cfg.get("decoder_conf") or {}).get("tie_word_embedding", False))
        for side in sides:
            prefix = f"decoder.{side}."
            if not any(k.startswith(prefix) for k in out):
                continue  # missing entirely: the registry reports the missing tensors
            w, b = out.get(prefix + "output_layer.weight"), out.get(prefix + "output_layer.bias")
            if w is None and tied:
                w = out.get(prefix + "embed.0.weight")
            if w is None:
                continue
            out[prefix + "output_layer.weight"], out[prefix + "output_layer.bias"] = pad_output_projection(w, b)
        return out


__all__ = ["WenetConverter", "decoder_config", "encoder_config", "feature_spec"]
