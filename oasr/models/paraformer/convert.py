"""FunASR model directories -> the paraformer family.

A FunASR release directory holds::

    config.yaml      model: Paraformer | BiCifParaformer, encoder / decoder / predictor /
                     frontend and their *_conf
    model.pt         a torch state dict (model.pb in older releases: the same format);
                     a {"state_dict" | "model_state_dict" | "model": ...} wrapper is unwrapped
    am.mvn           Kaldi nnet1 CMVN: <AddShift> and <Rescale> rows of lfr_m * n_mels values
    tokens.json      the token list (a JSON list; or tokens.txt, one token a line)
    seg_dict         optional: word -> pieces for training text; accepted and ignored

``am.mvn`` becomes the encoder buffers ``encoder.cmvn_shift`` / ``encoder.cmvn_scale``, so an
oasr state dict saved back carries its CMVN. Every ``*_conf`` key is checked against the
tables below: an option this family does not implement is a ``LoadError`` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.text import read_mapping
from oasr.models.paraformer.config import (
    CifPredictorConfig,
    ParaformerConfig,
    SanmDecoderConfig,
    SanmEncoderConfig,
)
from oasr.models.paraformer.frontend import KIND as FRONTEND_KIND
from oasr.models.registry import CheckpointBundle
from oasr.tokenizers.base import TableTokenizer

ARCH = "paraformer"
MODELS = {"Paraformer": "CifPredictorV2", "BiCifParaformer": "CifPredictorV3"}
WEIGHTS = ("model.pt", "model.pb")
TOKENS = ("tokens.json", "tokens.txt")
READ_ELSEWHERE = frozenset({"SenseVoiceSmall"})  # FunASR models of the families built on this one

TRAINING_ONLY = frozenset(
    {
        "dropout_rate",
        "positional_dropout_rate",
        "attention_dropout_rate",
        "self_attention_dropout_rate",
        "src_attention_dropout_rate",
        "dropout",
        "tf2torch_tensor_name_prefix_torch",
        "tf2torch_tensor_name_prefix_tf",
        "lora_rank",
        "lora_alpha",
        "lora_dropout",
    }
)
# *_conf key -> config field (defaults are FunASR's, through the config dataclasses)
_ENC_FIELDS = ("output_size", "attention_heads", "linear_units", "num_blocks", "kernel_size", "sanm_shfit")
_ENC_FIXED: dict[str, tuple[tuple[Any, ...], str]] = {
    "input_layer": (("pe",), "only the sinusoid input layer (pe) of the released models is implemented"),
    "pos_enc_class": (("SinusoidalPositionEncoder",), "only FunASR's SinusoidalPositionEncoder is implemented"),
    "selfattention_layer_type": (("sanm",), "only SANM self-attention is implemented"),
    "normalize_before": ((True,), "only pre-norm blocks are implemented"),
    "concat_after": ((False,), "concat_after blocks are not implemented"),
    "positionwise_layer_type": (("linear",), "only the linear feed-forward is implemented"),
    "interctc_layer_idx": (([], None), "intermediate CTC layers are not implemented"),
    "lora_list": ((None,), "LoRA adapters are not implemented"),
    "chunk_size": ((None,), "the streaming (chunked) SANM encoder is not implemented"),
}
_DEC_FIELDS = ("attention_heads", "linear_units", "num_blocks", "att_layer_num", "kernel_size", "sanm_shfit")
_DEC_FIXED: dict[str, tuple[tuple[Any, ...], str]] = {
    "input_layer": (("embed",), "only the released decoder layout is implemented"),
    "use_output_layer": ((True,), "the decoder needs its output layer"),
    "wo_input_layer": ((False,), "only the released decoder layout is implemented"),
    "normalize_before": ((True,), "only pre-norm blocks are implemented"),
    "concat_after": ((False,), "concat_after blocks are not implemented"),
    "lora_list": ((None,), "LoRA adapters are not implemented"),
    "chunk_multiply_factor": (((1,), [1]), "the streaming decoder is not implemented"),
}
_PRED_FIELDS = (
    "l_order",
    "r_order",
    "threshold",
    "smooth_factor",
    "noise_threshold",
    "tail_threshold",
    "upsample_times",
    "upsample_type",
    "use_cif1_cnn",
    "smooth_factor2",
    "noise_threshold2",
)
_PRED_IGNORED = frozenset({"idim", "tail_mask"})  # idim is checked against the encoder width
_FRONT_FIELDS = {"n_mels": "n_mels", "frame_length": "frame_length", "frame_shift": "frame_shift", "window": "window"}
_FRONT_IGNORED = frozenset({"fs", "dither", "cmvn_file", "filter_length_min", "filter_length_max", "lfr_m", "lfr_n"})
_FRONT_FIXED: dict[str, tuple[tuple[Any, ...], str]] = {
    "snip_edges": ((True,), "only kaldi's snip_edges framing is implemented"),
    "upsacle_samples": ((True,), "only int16-scaled samples (FunASR's default) are implemented"),
}
# Training-only tensors of a FunASR checkpoint.
_UNUSED = ("decoder.embed.", "ctc.", "criterion_att.", "criterion_pre.")


def refuse(where: Path, key: str, value: Any, why: str) -> LoadError:
    return LoadError(f"{where}: {key}={value!r} is not supported: {why}")


def weights_file(directory: Path) -> Path | None:
    return next((directory / n for n in WEIGHTS if (directory / n).is_file()), None)


def check_conf(where: Path, section: str, conf: Mapping[str, Any], fields, fixed, ignored) -> dict[str, Any]:
    for key, value in conf.items():
        if key in fixed:
            accepted, why = fixed[key]
            if value not in accepted:
                raise refuse(where, f"{section}.{key}", value, why)
        elif key not in fields and key not in ignored and key not in TRAINING_ONLY:
            raise refuse(where, f"{section}.{key}", value, "an option this family does not know")
    return {f: conf[f] for f in fields if f in conf}


def read_cmvn(path: Path, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``am.mvn`` (Kaldi nnet1 text: ``<AddShift>`` / ``<Rescale>`` each followed by a
    ``<LearnRateCoef> 0 [ ... ]`` row) -> (shift, scale) float32 of ``dim`` values.

    Raises:
        LoadError: the file lacks either row, or its rows are not ``dim`` numbers.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    rows: dict[str, list[float]] = {}
    for i, line in enumerate(lines[:-1]):
        head = line.split()[:1]
        if head and head[0] in ("<AddShift>", "<Rescale>"):
            items = lines[i + 1].split()
            if not items or items[0] != "<LearnRateCoef>" or "[" not in items or items[-1] != "]":
                raise LoadError(f"{path}:{i + 2}: expected '<LearnRateCoef> r [ values ]' after {head[0]}")
            try:
                rows[head[0]] = [float(x) for x in items[items.index("[") + 1 : -1]]
            except ValueError as e:
                raise LoadError(f"{path}:{i + 2}: {e}") from e
    for name in ("<AddShift>", "<Rescale>"):
        if name not in rows:
            raise LoadError(f"{path}: no {name} row (not a FunASR am.mvn)")
        if len(rows[name]) != dim:
            raise LoadError(f"{path}: {name} has {len(rows[name])} values; the encoder reads {dim} features")
    return (
        torch.tensor(rows["<AddShift>"], dtype=torch.float32),
        torch.tensor(rows["<Rescale>"], dtype=torch.float32),
    )


def read_tokens(path: Path) -> list[str]:
    """``tokens.json`` (a JSON list) or ``tokens.txt`` (one token a line, or ``<token> <id>``),
    read as the tokenizer will read it.

    Raises:
        LoadError: naming the file, when it is neither.
    """
    try:
        table = TableTokenizer.from_file(path)
    except (ValueError, json.JSONDecodeError) as e:
        raise LoadError(f"{path}: not a FunASR token list: {e}") from e
    tokens = [table.id_to_token(i) for i in range(table.vocab_size)]
    if any(t is None for t in tokens):
        raise LoadError(f"{path}: token ids are not contiguous from 0")
    return tokens


def check_frontend(where: Path, cfg: Mapping[str, Any]) -> tuple[int, int, int]:
    """The ``frontend`` / ``frontend_conf`` / ``normalize`` / ``input_size`` keys of a FunASR
    ``config.yaml`` checked: (encoder input size, lfr_m, lfr_n).

    Raises:
        LoadError: naming the key and value this reader does not implement.
    """
    if cfg.get("frontend", "WavFrontend") not in ("WavFrontend", "wav_frontend"):
        raise refuse(where, "frontend", cfg.get("frontend"), "only FunASR's WavFrontend is implemented")
    if cfg.get("normalize") not in (None, "null"):
        raise refuse(where, "normalize", cfg.get("normalize"), "CMVN comes from am.mvn in the front end")
    front = dict(cfg.get("frontend_conf") or {})
    check_conf(where, "frontend_conf", front, _FRONT_FIELDS, _FRONT_FIXED, _FRONT_IGNORED)
    lfr_m, lfr_n = int(front.get("lfr_m", 1)), int(front.get("lfr_n", 1))
    n_mels = int(front.get("n_mels", 80))
    input_size = int(cfg.get("input_size", n_mels * lfr_m))
    if input_size != n_mels * lfr_m:
        raise refuse(where, "input_size", input_size, f"the front end gives n_mels * lfr_m = {n_mels * lfr_m}")
    return input_size, lfr_m, lfr_n


def read_state_dict(weights: Path) -> dict[str, torch.Tensor]:
    """A FunASR ``model.pt``: a flat state dict (a ``state_dict`` / ``model_state_dict`` /
    ``model`` wrapper unwrapped, DDP's ``module.`` prefix removed).

    Raises:
        LoadError: naming the file, when it is not one.
    """
    try:
        raw = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as e:
        raise LoadError(f"{weights}: cannot read as a PyTorch state dict: {e}") from e
    for wrapper in ("state_dict", "model_state_dict", "model"):
        if isinstance(raw, dict) and isinstance(raw.get(wrapper), dict):
            raw = raw[wrapper]
    if not isinstance(raw, dict) or not all(isinstance(v, torch.Tensor) for v in raw.values()):
        raise LoadError(f"{weights}: not a FunASR state dict (a flat mapping of tensors)")
    return {k.removeprefix("module."): v for k, v in raw.items()}


def model_config(where: Path, cfg: Mapping[str, Any], vocab_size: int) -> ParaformerConfig:
    """``config.yaml`` -> ``ParaformerConfig``, refusing what this family does not implement.

    Raises:
        LoadError: naming the ``config.yaml`` key and value.
    """
    kind = cfg.get("model")
    if kind not in MODELS:
        raise refuse(where, "model", kind, f"this family reads FunASR {' / '.join(MODELS)} directories")
    for key, want in (("encoder", "SANMEncoder"), ("decoder", "ParaformerSANMDecoder"), ("predictor", MODELS[kind])):
        if cfg.get(key) != want:
            raise refuse(where, key, cfg.get(key), f"a FunASR {kind} has {key}: {want}")
    input_size, lfr_m, lfr_n = check_frontend(where, cfg)
    enc = check_conf(where, "encoder_conf", dict(cfg.get("encoder_conf") or {}), _ENC_FIELDS, _ENC_FIXED, frozenset())
    dec = check_conf(where, "decoder_conf", dict(cfg.get("decoder_conf") or {}), _DEC_FIELDS, _DEC_FIXED, frozenset())
    pred_conf = dict(cfg.get("predictor_conf") or {})
    pred = check_conf(where, "predictor_conf", pred_conf, _PRED_FIELDS, {}, _PRED_IGNORED)
    model_conf = dict(cfg.get("model_conf") or {})
    try:
        encoder = SanmEncoderConfig(input_size=input_size, **enc)
        if "idim" in pred_conf and int(pred_conf["idim"]) != encoder.output_size:
            raise ValueError(f"predictor_conf.idim={pred_conf['idim']} != encoder_conf.output_size")
        ids = {k: int(model_conf[k]) for k in ("blank_id", "sos", "eos") if model_conf.get(k) is not None}
        return ParaformerConfig(
            encoder=encoder,
            decoder=SanmDecoderConfig(**dec),
            predictor=CifPredictorConfig(kind=MODELS[kind], **pred),
            vocab_size=vocab_size,
            lfr_m=lfr_m,
            lfr_n=lfr_n,
            **ids,
        )
    except (TypeError, ValueError) as e:
        raise LoadError(f"{where}: {e}") from e


def feature_spec(cfg: Mapping[str, Any]) -> FeatureSpec:
    front = dict(cfg.get("frontend_conf") or {})
    params = {
        "n_mels": int(front.get("n_mels", 80)),
        "frame_length": float(front.get("frame_length", 25)),
        "frame_shift": float(front.get("frame_shift", 10)),
        "window": str(front.get("window", "hamming")),
        "lfr_m": int(front.get("lfr_m", 1)),
        "lfr_n": int(front.get("lfr_n", 1)),
    }
    return FeatureSpec(kind=FRONTEND_KIND, sampling_rate=int(front.get("fs", 16000)), params=params)


class FunasrConverter:
    """What the FunASR model-directory readers share: a directory is claimed by its
    ``config.yaml`` (``claims``), read by ``read_config``."""

    auto_detect = True
    capability_drop_hints: Mapping[str, str] = {}

    def claims(self, directory: Path, cfg: Mapping[str, Any]) -> bool:
        raise NotImplementedError

    def can_load(self, path: Path) -> bool:
        path = Path(path)
        directory = path.parent if path.is_file() else path
        yml = directory / "config.yaml"
        if not yml.is_file():
            return False
        try:
            cfg = read_mapping(yml, "a FunASR model config")
        except (LoadError, OSError):
            return False
        return self.claims(directory, cfg)

    @staticmethod
    def read_config(path: Path) -> tuple[Path, Path, dict[str, Any]]:
        """(the model directory, its ``config.yaml``, the config) of a directory or a file in it.

        Raises:
            LoadError: there is no ``config.yaml``, or it does not parse.
        """
        path = Path(path)
        directory = path.parent if path.is_file() else path
        yml = directory / "config.yaml"
        if not yml.is_file():
            raise LoadError(f"{directory}: no config.yaml (not a FunASR model directory)")
        return directory, yml, dict(read_mapping(yml, "a FunASR model config"))


class FunasrParaformerConverter(FunasrConverter):
    """A FunASR Paraformer / BiCifParaformer directory (``config.yaml`` + ``model.pt``)."""

    architecture = ARCH
    expected_unused_prefixes: tuple[str, ...] = _UNUSED

    def claims(self, directory: Path, cfg: Mapping[str, Any]) -> bool:
        # Any FunASR model directory but those another family reads is claimed, so that another
        # model's gets a clear refusal from load().
        return (
            weights_file(directory) is not None
            and "model" in cfg
            and "encoder_conf" in cfg
            and cfg["model"] not in READ_ELSEWHERE
        )

    def load(self, path: Path) -> CheckpointBundle:
        path = Path(path)
        directory, yml, cfg = self.read_config(path)
        if cfg.get("model") not in MODELS:
            raise refuse(yml, "model", cfg.get("model"), f"this family reads FunASR {' / '.join(MODELS)} directories")
        weights = path if path.is_file() else weights_file(directory)
        if weights is None:
            raise LoadError(f"{directory}: no weights ({' or '.join(WEIGHTS)}) beside config.yaml")
        tokens_path = next((directory / n for n in TOKENS if (directory / n).is_file()), None)
        if tokens_path is None:
            raise LoadError(f"{directory}: no token list ({' or '.join(TOKENS)})")
        tokens = read_tokens(tokens_path)
        config = model_config(yml, cfg, len(tokens))

        state = read_state_dict(weights)

        head = state.get("decoder.output_layer.weight")
        if head is None:
            raise LoadError(f"{weights}: no decoder output layer (decoder.output_layer.weight)")
        if head.shape[0] != len(tokens):
            raise LoadError(
                f"{tokens_path}: {len(tokens)} tokens but the decoder output layer in {weights.name} "
                f"has {head.shape[0]} rows"
            )
        if "encoder.cmvn_shift" not in state:
            mvn = directory / "am.mvn"
            if not mvn.is_file():
                raise LoadError(f"{directory}: no am.mvn (the front end's CMVN) and the weights carry none")
            state["encoder.cmvn_shift"], state["encoder.cmvn_scale"] = read_cmvn(mvn, config.encoder.input_size)

        special = (config.blank_id, config.sos, config.eos)
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=TokenizerSpec(kind="table", path=str(tokens_path), special_ids=tuple(sorted(set(special)))),
            features=feature_spec(cfg),
            decoding=DecodingSpec(DecodeType.PARAFORMER, params={"model": cfg["model"]}),
            source=str(weights),
            format="funasr",
            metadata={"config_yaml": str(yml), "seg_dict": str(directory / "seg_dict")}
            if (directory / "seg_dict").is_file()
            else {"config_yaml": str(yml)},
        )


__all__ = [
    "FunasrConverter",
    "FunasrParaformerConverter",
    "TRAINING_ONLY",
    "check_conf",
    "check_frontend",
    "feature_spec",
    "model_config",
    "read_cmvn",
    "read_state_dict",
    "read_tokens",
    "refuse",
    "weights_file",
]
