"""What the NeMo-lineage families (Parakeet, Nemotron; next: Canary) share: for a Hugging Face
directory, the FastConformer ``encoder_config`` fields, the tensor renames (attention projections;
the transducer's predictor and joint), the ``ParakeetFeatureExtractor`` settings and the
``tokenizer.json`` spec; for NeMo's own ``.nemo`` archives (and their unpacked directories), the
reader, the config sections checked key by key (``ConformerEncoder``,
``AudioToMelSpectrogramPreprocessor``, the SentencePiece tokenizer) and NeMo's tensor names -> oasr's.

Family-neutral on purpose: a family's converter imports this module, never another family's.
"""

from __future__ import annotations

import atexit
import io
import math
import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.hf import read_json

# encoder_config keys that become the FastConformer encoder config's fields (same names).
ENCODER_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "attention_bias",
    "convolution_bias",
    "conv_kernel_size",
    "subsampling_factor",
    "subsampling_conv_channels",
    "num_mel_bins",
    "subsampling_conv_kernel_size",
    "subsampling_conv_stride",
    "scale_input",
)

# Hugging Face attention projection names -> oasr's.
ATTENTION_RENAMES = (
    (re.compile(r"\.self_attn\.q_proj\."), ".self_attn.linear_q."),
    (re.compile(r"\.self_attn\.k_proj\."), ".self_attn.linear_k."),
    (re.compile(r"\.self_attn\.v_proj\."), ".self_attn.linear_v."),
    (re.compile(r"\.self_attn\.o_proj\."), ".self_attn.linear_out."),
    (re.compile(r"\.self_attn\.relative_k_proj\."), ".self_attn.linear_pos."),
)

# The transducer's predictor and joint, Hugging Face names -> oasr's.
TRANSDUCER_RENAMES = (
    (re.compile(r"^decoder\."), "predictor."),
    (re.compile(r"^encoder_projector\."), "joiner.encoder_proj."),
    (re.compile(r"^joint\.head\."), "joiner.head."),
)

# Hugging Face ParakeetFeatureExtractor defaults, for keys a preprocessor_config.json omits; the
# keys are the ``parakeet_mel`` front end's parameters, in its order.
FEATURE_DEFAULTS: dict[str, Any] = {
    "feature_size": 80,
    "hop_length": 160,
    "n_fft": 512,
    "win_length": 400,
    "preemphasis": 0.97,
}


def transducer_fields(hf: Mapping[str, Any], vocab_size: int) -> dict[str, Any]:
    """The predictor / joint fields of a transducer config from a Hugging Face ``config.json``
    (NeMo's defaults where it is silent: blank last, 640 hidden, 2 LSTM layers, 10 symbols a frame).

    Raises:
        TypeError, ValueError: a value that is not a number (the caller names the file).
    """
    return {
        "vocab_size": vocab_size,
        "blank_id": int(hf.get("blank_token_id", vocab_size - 1)),
        "decoder_hidden_size": int(hf.get("decoder_hidden_size", 640)),
        "num_decoder_layers": int(hf.get("num_decoder_layers", 2)),
        "max_symbols_per_step": int(hf.get("max_symbols_per_step", 10)),
    }


def rename(weights: Mapping[str, torch.Tensor], renames) -> dict[str, torch.Tensor]:
    """The tensors under oasr's names: each ``(pattern, replacement)`` of ``renames`` applied in turn."""
    state: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        for pattern, repl in renames:
            name = pattern.sub(repl, name)
        state[name] = tensor
    return state


def transducer_state(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face NeMo-transducer tensor names -> oasr's (encoder attention, predictor, joint)."""
    return rename(weights, (*ATTENTION_RENAMES, *TRANSDUCER_RENAMES))


def mel_params(fe: Mapping[str, Any], source: Path, num_mel_bins: int) -> dict[str, Any]:
    """The ``parakeet_mel`` parameters of a feature-extractor config, defaults filled in.

    Raises:
        LoadError: its ``feature_size`` is not the encoder's ``num_mel_bins``.
    """
    params = {k: fe.get(k, default) for k, default in FEATURE_DEFAULTS.items()}
    if int(params["feature_size"]) != num_mel_bins:
        raise LoadError(
            f"{source}: feature_size={params['feature_size']} but the encoder expects num_mel_bins={num_mel_bins}"
        )
    return params


def mel_feature_spec(params: Mapping[str, Any], fe: Mapping[str, Any]) -> FeatureSpec:
    """The ``parakeet_mel`` feature spec for ``params`` at the config's sampling rate (16 kHz if unsaid)."""
    return FeatureSpec(kind="parakeet_mel", sampling_rate=int(fe.get("sampling_rate", 16000)), params=dict(params))


def tokenizer_spec(path: Path, blank_id: int, vocab_size: int) -> TokenizerSpec:
    """The ``tokenizer.json`` beside the weights, its special tokens and the blank marked special.

    Raises:
        LoadError: no ``tokenizer.json`` in ``path``.
    """
    tok = path / "tokenizer.json"
    if not tok.is_file():
        raise LoadError(f"{path}: no tokenizer.json beside the weights (a Parakeet directory carries one)")
    added = read_json(tok).get("added_tokens") or []
    special = {int(t["id"]) for t in added if t.get("special", False)}
    special.add(blank_id)
    return TokenizerSpec(
        kind="huggingface", path=str(tok), special_ids=tuple(sorted(i for i in special if 0 <= i < vocab_size))
    )


# -- NeMo's own checkpoints: ``.nemo`` archives and their unpacked directories --------------------
#
# A ``.nemo`` file is a tar (optionally gzip-compressed) that ``ModelPT.save_to`` writes: the
# resolved Hydra config ``model_config.yaml``, the ``state_dict`` as ``model_weights.ckpt`` and the
# artefacts the config names as ``nemo:<member>`` (a SentencePiece ``tokenizer.model``, its
# ``vocab.txt``). The archive is read in place: the config and weights straight from the tar into
# memory; only the artefacts a tokenizer library must open by path are written, under names oasr
# chooses, into a private temporary directory removed at exit. A member whose name leaves the
# archive's root (absolute, ``..``) is refused: a hostile tar never reaches the file system.

NEMO_CONFIG = "model_config.yaml"
NEMO_WEIGHTS = "model_weights.ckpt"
NEMO_REF = "nemo:"


@dataclass
class NemoCheckpoint:
    """A NeMo checkpoint read into memory.

    Attributes:
        source: the ``.nemo`` file or the unpacked directory.
        config: ``model_config.yaml`` as plain dicts and lists.
        state_dict: ``model_weights.ckpt`` (NeMo's tensor names, host memory).
        artefacts: ``nemo:<member>`` reference -> a readable local file.
    """

    source: Path
    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    artefacts: dict[str, Path]

    def artefact(self, ref: Any, key: str) -> Path:
        """The local file of the config value ``ref`` at ``key`` (a ``nemo:<member>`` reference).

        Raises:
            LoadError: ``ref`` is not a reference to a member of this checkpoint.
        """
        if not isinstance(ref, str) or ref not in self.artefacts:
            raise LoadError(f"{self.source}: {key}={ref!r} names no file in the checkpoint")
        return self.artefacts[ref]


def _member_name(name: str, source: Path) -> str:
    """An archive member's name relative to the archive root (``./x`` -> ``x``).

    Raises:
        LoadError: the name is absolute or climbs out of the root (``..``).
    """
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if name.startswith(("/", "\\")) or ".." in parts or any("\\" in p or ":" in p for p in parts):
        raise LoadError(f"{source}: archive member {name!r} points outside the archive; refusing to read it")
    return "/".join(parts)


def is_nemo_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a ``.nemo`` file or an unpacked archive (cheap: names only). A damaged
    ``.nemo`` file is claimed too, so that reading it names what is wrong."""
    path = Path(path)
    if path.is_dir():
        return (path / NEMO_CONFIG).is_file() and (path / NEMO_WEIGHTS).is_file()
    return path.is_file() and path.suffix == ".nemo"


def nemo_target(path: Path) -> str | None:
    """The NeMo model class a checkpoint's ``model_config.yaml`` names (its ``target``, last
    component), or None where it names none or cannot be read (the reader then says why).
    Remembered per file (path, size, mtime): every NeMo family's converter asks it."""
    path = Path(path)
    if not is_nemo_checkpoint(path):
        return None
    stat = (path / NEMO_CONFIG if path.is_dir() else path).stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _TARGETS:
        _TARGETS[key] = _read_target(path)
    return _TARGETS[key]


_TARGETS: dict[tuple[str, int, int], str | None] = {}


def _read_target(path: Path) -> str | None:
    try:
        if path.is_dir():
            text = (path / NEMO_CONFIG).read_bytes()
        else:
            with tarfile.open(path, "r:*") as archive:
                member = next((m for m in archive if m.isfile() and _member_name(m.name, path) == NEMO_CONFIG), None)
                handle = archive.extractfile(member) if member is not None else None
                if handle is None:
                    return None
                text = handle.read()
        target = _parse_config(text, NEMO_CONFIG).get("target")
    except (LoadError, OSError, tarfile.TarError):
        return None
    return None if target is None else str(target).rsplit(".", 1)[-1]


def _artefact_refs(config: Any) -> set[str]:
    """Every ``nemo:<member>`` string anywhere in the config."""
    if isinstance(config, dict):
        return set().union(*(_artefact_refs(v) for v in config.values())) if config else set()
    if isinstance(config, list):
        return set().union(*(_artefact_refs(v) for v in config)) if config else set()
    return {config} if isinstance(config, str) and config.startswith(NEMO_REF) else set()


def _parse_config(text: bytes, where: str) -> dict[str, Any]:
    import yaml

    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise LoadError(f"{where}: not readable YAML ({e})") from e
    if not isinstance(config, dict):
        raise LoadError(f"{where}: not a NeMo model config (a mapping)")
    return config


def _parse_weights(data: bytes | Path, where: str) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(data if isinstance(data, Path) else io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated or foreign pickle: name the file, whatever torch raised
        raise LoadError(f"{where}: not a readable state dict ({type(e).__name__}: {e})") from e
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise LoadError(f"{where}: not a state dict of tensors")
    return dict(state)


_TEMP_DIRS: list[str] = []


def _private_dir() -> Path:
    """A fresh temporary directory, removed when the process exits."""
    if not _TEMP_DIRS:
        atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _TEMP_DIRS])
    d = tempfile.mkdtemp(prefix="oasr-nemo-")
    _TEMP_DIRS.append(d)
    return Path(d)


def read_nemo(path: Path) -> NemoCheckpoint:
    """Read a ``.nemo`` archive (tar or tar.gz) or its unpacked directory.

    Raises:
        LoadError: not a NeMo checkpoint, a member outside the archive root, a missing config,
            weights or artefact, or an unreadable one (each names the file).
    """
    path = Path(path)
    if path.is_dir():
        return _read_nemo_dir(path)
    try:
        archive = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise LoadError(f"{path}: not a readable .nemo archive (tar or tar.gz): {e}") from e
    with archive:
        members: dict[str, tarfile.TarInfo] = {}
        for info in archive.getmembers():
            name = _member_name(info.name, path)
            if info.isfile() and name:
                members[name] = info
            elif not (info.isdir() or name == ""):
                raise LoadError(f"{path}: archive member {info.name!r} is a link or device; refusing to read it")

        def read(name: str) -> bytes:
            if name not in members:
                raise LoadError(f"{path}: no {name} in the archive (members: {sorted(members)})")
            handle = archive.extractfile(members[name])
            assert handle is not None  # a regular file always has one
            return handle.read()

        config = _parse_config(read(NEMO_CONFIG), f"{path}:{NEMO_CONFIG}")
        state = _parse_weights(read(NEMO_WEIGHTS), f"{path}:{NEMO_WEIGHTS}")
        artefacts: dict[str, Path] = {}
        refs = _artefact_refs(config)
        out = _private_dir() if refs else None
        for ref in sorted(refs):
            name = _member_name(ref[len(NEMO_REF) :], path)
            if name not in members:
                continue  # only a reference a reader uses must resolve (NemoCheckpoint.artefact says so)
            target = out / f"{len(artefacts)}_{PurePosixPath(name).name}"
            target.write_bytes(read(name))
            artefacts[ref] = target
    return NemoCheckpoint(path, config, state, artefacts)


def _read_nemo_dir(path: Path) -> NemoCheckpoint:
    for name in (NEMO_CONFIG, NEMO_WEIGHTS):
        if not (path / name).is_file():
            raise LoadError(f"{path}: no {name} (an unpacked .nemo directory holds {NEMO_CONFIG} and {NEMO_WEIGHTS})")
    config = _parse_config((path / NEMO_CONFIG).read_bytes(), str(path / NEMO_CONFIG))
    state = _parse_weights(path / NEMO_WEIGHTS, str(path / NEMO_WEIGHTS))
    artefacts = {}
    for ref in _artefact_refs(config):
        name = _member_name(ref[len(NEMO_REF) :], path)
        if (path / name).is_file():
            artefacts[ref] = path / name
    return NemoCheckpoint(path, config, state, artefacts)


# -- NeMo config sections -> oasr's terms ----------------------------------------------------------
#
# Each section's keys are checked against what oasr implements: a key is either ignored at inference
# (dropouts, augmentation, training schedules: ``ANY_VALUE``), or must hold one of the values listed (the
# default first); a key not listed, or a value outside the list, is refused naming both.

ANY_VALUE = object()


def check_section(section: Mapping[str, Any], allowed: Mapping[str, Any], where: str) -> None:
    """Refuse a key of ``section`` that ``allowed`` does not list, or a value it does not allow.

    ``allowed`` maps a key to ``ANY_VALUE`` (any value: read elsewhere or without effect at inference)
    or to the tuple of values oasr implements.

    Raises:
        LoadError: naming the key and its value.
    """
    for key, value in section.items():
        if key not in allowed:
            raise LoadError(f"{where}.{key}={value!r} is not implemented by oasr (known keys: {sorted(allowed)})")
        ok = allowed[key]
        if ok is not ANY_VALUE and value not in ok:
            raise LoadError(f"{where}.{key}={value!r} is not implemented by oasr (supported: {list(ok)})")


def check_target(section: Mapping[str, Any], cls: str, where: str) -> None:
    target = section.get("_target_")
    if target is None or str(target).rsplit(".", 1)[-1] != cls:
        raise LoadError(f"{where}._target_={target!r} is not implemented by oasr (expected NeMo's {cls})")


_ENCODER_KEYS: dict[str, Any] = {
    "_target_": ANY_VALUE,
    "feat_in": ANY_VALUE,
    "feat_out": (-1,),
    "n_layers": ANY_VALUE,
    "d_model": ANY_VALUE,
    "subsampling": ("dw_striding",),
    "subsampling_factor": ANY_VALUE,
    "subsampling_conv_chunking_factor": ANY_VALUE,  # splits the convolutions for memory, same output
    "subsampling_conv_channels": ANY_VALUE,
    "causal_downsampling": (False, True),  # True: a cache-aware encoder (cache_aware_fields_from_nemo)
    "reduction": (None,),
    "reduction_position": (None,),
    "reduction_factor": (1,),
    "ff_expansion_factor": ANY_VALUE,
    "self_attention_model": ("rel_pos", "rel_pos_local_attn"),
    "n_heads": ANY_VALUE,
    "att_context_size": ANY_VALUE,  # read below
    "att_context_probs": ANY_VALUE,  # the training draw among att_context_size's entries
    "att_chunk_context_size": (None,),
    "att_context_style": ("regular", "chunked_limited"),
    "xscaling": (True, False),
    "untie_biases": (True,),
    "pos_emb_max_len": ANY_VALUE,  # NeMo extends its table to any length; oasr computes the positions
    "conv_kernel_size": ANY_VALUE,
    "conv_norm_type": ("batch_norm", "layer_norm"),
    "conv_context_size": ANY_VALUE,  # read by cache_aware_fields_from_nemo
    "conv_context_style": ("regular",),
    "use_bias": (True, False),
    "dropout": ANY_VALUE,
    "dropout_pre_encoder": ANY_VALUE,
    "dropout_emb": ANY_VALUE,
    "dropout_att": ANY_VALUE,
    "stochastic_depth_drop_prob": ANY_VALUE,
    "stochastic_depth_mode": ANY_VALUE,
    "stochastic_depth_start_layer": ANY_VALUE,
    "global_tokens": (0,),
    "global_tokens_spacing": ANY_VALUE,
    "global_attn_separate": (False,),
    "use_pytorch_sdpa": ANY_VALUE,  # the same attention, another kernel
    "use_pytorch_sdpa_backends": ANY_VALUE,
    "sync_max_audio_length": ANY_VALUE,
}


def encoder_fields_from_nemo(
    enc: Mapping[str, Any], feat_in: int, where: str, cache_aware: bool = False
) -> dict[str, Any]:
    """The FastConformer encoder fields (``ENCODER_FIELDS`` names, ``attention_model`` and
    ``att_context_size``) of a NeMo ``ConformerEncoder`` section (``model_config.yaml``'s ``encoder``).

    Args:
        cache_aware: the caller reads a cache-aware encoder's keys itself
            (``cache_aware_fields_from_nemo``); without it they are refused.

    Raises:
        LoadError: a key or value oasr does not implement, naming it.
    """
    check_target(enc, "ConformerEncoder", where)
    check_section(enc, _ENCODER_KEYS, where)
    extra = cache_aware_fields_from_nemo(enc, where)
    if extra is not None and not cache_aware:
        signs = (k for k in _CACHE_AWARE_SIGNS if k in enc and enc[k] not in _CACHE_AWARE_SIGNS[k])
        key = next(signs, "att_context_size")  # else several contexts
        raise LoadError(f"{where}.{key}={enc[key]!r} is not implemented by oasr for this model (a cache-aware encoder)")
    if int(enc["feat_in"]) != feat_in:
        raise LoadError(f"{where}.feat_in={enc['feat_in']} but the preprocessor makes {feat_in} features")
    d = int(enc["d_model"])
    factor = enc.get("ff_expansion_factor", 4)
    if float(d * factor) != int(d * factor):
        raise LoadError(f"{where}.ff_expansion_factor={factor} gives no whole feed-forward width for d_model={d}")
    channels = int(enc.get("subsampling_conv_channels", -1))
    bias = bool(enc.get("use_bias", True))
    return {
        "hidden_size": d,
        "num_hidden_layers": int(enc["n_layers"]),
        "num_attention_heads": int(enc.get("n_heads", 4)),
        "intermediate_size": int(d * factor),
        "hidden_act": "silu",
        "attention_bias": bias,
        "convolution_bias": bias,
        "conv_kernel_size": int(enc.get("conv_kernel_size", 31)),
        "subsampling_factor": int(enc.get("subsampling_factor", 4)),
        "subsampling_conv_channels": d if channels == -1 else channels,
        "num_mel_bins": feat_in,
        "subsampling_conv_kernel_size": 3,
        "subsampling_conv_stride": 2,
        "scale_input": bool(enc.get("xscaling", True)),
        **attention_fields_from_nemo(enc, where),
    }


def _att_contexts(enc: Mapping[str, Any], where: str) -> list[tuple[int, int]]:
    """Every [left, right] of ``att_context_size`` (one pair, or NeMo's multi-lookahead list of
    pairs; None: [-1, -1], all), first the one NeMo runs by default.

    Raises:
        LoadError: anything else.
    """
    context = enc.get("att_context_size")
    if context is None:
        return [(-1, -1)]

    def pair(c: Any) -> bool:
        return isinstance(c, list) and len(c) == 2 and all(isinstance(x, int) for x in c)

    if pair(context):
        return [tuple(context)]
    if isinstance(context, list) and context and all(pair(c) for c in context):
        return [tuple(c) for c in context]
    raise LoadError(f"{where}.att_context_size={context!r} is not implemented by oasr ([left, right] or a list)")


def attention_fields_from_nemo(enc: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``attention_model`` and ``att_context_size`` of a ``ConformerEncoder`` section: its
    ``self_attention_model`` and the [left, right] NeMo runs by default (the first of a list).

    Raises:
        LoadError: a context that is not [left, right] or a list of them.
    """
    return {
        "attention_model": enc.get("self_attention_model", "rel_pos"),
        "att_context_size": _att_contexts(enc, where)[0],
    }


# The keys that make an encoder cache-aware, and the values that do not.
_CACHE_AWARE_SIGNS: dict[str, tuple[Any, ...]] = {
    "causal_downsampling": (False,),
    "att_context_style": ("regular",),
    "conv_context_size": (None,),
    "conv_norm_type": ("batch_norm",),
}


def cache_aware_fields_from_nemo(enc: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The cache-aware fields of a ``ConformerEncoder`` section (``att_context_style``,
    ``att_context_sizes``, ``conv_norm``, ``conv_context_size``), or None for an encoder with
    none of them (centred convolution with batch norm, ``regular`` attention with one context,
    no causal subsampling).

    Raises:
        LoadError: a ``conv_context_size`` that is not ``causal`` or [left, right] spanning the kernel.
    """
    contexts = _att_contexts(enc, where)
    if len(contexts) == 1 and all(enc.get(k, ok[0]) in ok for k, ok in _CACHE_AWARE_SIGNS.items()):
        return None
    kernel = int(enc.get("conv_kernel_size", 31))
    conv = enc.get("conv_context_size")
    if conv is None:
        conv = [(kernel - 1) // 2, (kernel - 1) // 2]
    elif conv == "causal":
        conv = [kernel - 1, 0]
    if not (isinstance(conv, list) and len(conv) == 2 and all(isinstance(c, int) and c >= 0 for c in conv)) or (
        sum(conv) != kernel - 1
    ):
        raise LoadError(f"{where}.conv_context_size={enc.get('conv_context_size')!r} is not implemented by oasr")
    return {
        "att_context_style": enc.get("att_context_style", "regular"),
        "att_context_sizes": tuple(contexts),
        "conv_norm": enc.get("conv_norm_type", "batch_norm"),
        "conv_context_size": tuple(conv),
    }


_PREPROCESSOR_KEYS: dict[str, Any] = {
    "_target_": ANY_VALUE,
    "sample_rate": ANY_VALUE,
    "window_size": ANY_VALUE,
    "window_stride": ANY_VALUE,
    "n_window_size": ANY_VALUE,
    "n_window_stride": ANY_VALUE,
    "window": ("hann",),
    "normalize": ("per_feature", None, "NA"),  # NA: none (NeMo's cache-aware streaming configs)
    "n_fft": ANY_VALUE,
    "preemph": ANY_VALUE,
    "features": ANY_VALUE,
    "lowfreq": (0, 0.0),
    "highfreq": ANY_VALUE,  # None or the Nyquist frequency (checked below)
    "log": (True,),
    "log_zero_guard_type": ("add",),
    "log_zero_guard_value": (2.0**-24,),
    "dither": ANY_VALUE,  # NeMo dithers only while training
    # pad_to / pad_value pad the features past each utterance's length; NeMo's encoder masks
    # everything past a row's length (its subsampling too), so no valid output changes.
    "pad_to": ANY_VALUE,
    "pad_value": ANY_VALUE,
    "frame_splicing": (1,),
    "exact_pad": (False,),
    "mag_power": (2.0, 2),
    "rng": (None,),
    "nb_augmentation_prob": ANY_VALUE,  # training-time augmentation
    "nb_max_freq": ANY_VALUE,
    "mel_norm": ("slaney",),
    "use_torchaudio": (False,),
    "stft_exact_pad": (False,),
    "stft_conv": (False,),
}


def mel_from_nemo(pre: Mapping[str, Any], where: str) -> FeatureSpec:
    """The ``parakeet_mel`` feature spec of a NeMo ``AudioToMelSpectrogramPreprocessor`` section.

    NeMo's window and stride are in seconds (``window_size``, ``window_stride``) unless given in
    samples (``n_window_size``, ``n_window_stride``); ``n_fft`` defaults to the next power of two
    of the window; ``normalize: per_feature`` is the per-utterance, per-bin normalisation.

    Raises:
        LoadError: a key or value oasr does not implement, naming it.
    """
    check_target(pre, "AudioToMelSpectrogramPreprocessor", where)
    check_section(pre, _PREPROCESSOR_KEYS, where)
    sr = int(pre.get("sample_rate", 16000))
    win = pre.get("n_window_size") or int(float(pre.get("window_size", 0.02)) * sr)
    hop = pre.get("n_window_stride") or int(float(pre.get("window_stride", 0.01)) * sr)
    n_fft = pre.get("n_fft") or 2 ** math.ceil(math.log2(int(win)))
    high = pre.get("highfreq")
    if high is not None and float(high) != sr / 2:
        raise LoadError(f"{where}.highfreq={high!r} is not implemented by oasr (None: the Nyquist frequency)")
    preemph = pre.get("preemph", 0.97)
    params = {
        "feature_size": int(pre.get("features", 64)),
        "hop_length": int(hop),
        "n_fft": int(n_fft),
        "win_length": int(win),
        "preemphasis": None if preemph is None else float(preemph),
        "normalize": pre.get("normalize", "per_feature") == "per_feature",
    }
    return FeatureSpec(kind="parakeet_mel", sampling_rate=sr, params=params)


# NeMo tensor names -> oasr's (FastConformer encoder, LSTM predictor and additive joint, CTC head).
NEMO_ENCODER_RENAMES = (
    (re.compile(r"^encoder\.pre_encode\.conv\."), "encoder.subsampling.layers."),
    (re.compile(r"^encoder\.pre_encode\.out\."), "encoder.subsampling.linear."),
    (re.compile(r"\.self_attn\.pos_bias_u$"), ".self_attn.bias_u"),
    (re.compile(r"\.self_attn\.pos_bias_v$"), ".self_attn.bias_v"),
    (re.compile(r"\.conv\.batch_norm\."), ".conv.norm."),
)
NEMO_TRANSDUCER_RENAMES = (
    (re.compile(r"^decoder\.prediction\.embed\."), "predictor.embedding."),
    (re.compile(r"^decoder\.prediction\.dec_rnn\.lstm\."), "predictor.lstm."),
    (re.compile(r"^joint\.pred\."), "predictor.decoder_projector."),
    (re.compile(r"^joint\.enc\."), "joiner.encoder_proj."),
    # joint_net is [activation, Dropout, Linear], without the Dropout where jointnet.dropout is 0.
    (re.compile(r"^joint\.joint_net\.[12]\."), "joiner.head."),
)
# The CTC head: ``decoder.`` in a CTC model, ``ctc_decoder.`` beside a hybrid's transducer.
NEMO_CTC_RENAMES = ((re.compile(r"^(ctc_)?decoder\.decoder_layers\.0\."), "ctc_head."),)
# Tensors NeMo saves that oasr computes (the mel filterbank and window of the preprocessor).
NEMO_COMPUTED_PREFIXES = ("preprocessor.",)


def ctc_head_state(state: dict[str, torch.Tensor], where: str, vocab_size: int | None = None) -> None:
    """The CTC head (renamed ``ctc_head.weight``), a kernel-1 Conv1d (V, D, 1) in NeMo's and
    Hugging Face's Parakeet checkpoints, as the (V, D) projection oasr holds (in place).

    Raises:
        LoadError: no head, a head that is not a kernel-1 convolution, or one with other than
            ``vocab_size`` outputs.
    """
    head = state.get("ctc_head.weight")
    if head is None:
        raise LoadError(f"{where}: no CTC head in the weights")
    if head.dim() == 3:
        if head.shape[-1] != 1:
            raise LoadError(f"{where}: CTC head {tuple(head.shape)} is not a kernel-1 convolution")
        state["ctc_head.weight"] = head = head[..., 0]
    if vocab_size is not None and head.shape[0] != vocab_size:
        raise LoadError(f"{where}: the CTC head has {head.shape[0]} outputs but vocab_size={vocab_size}")


def transducer_decoding(config: Any, durations: tuple[int, ...]) -> DecodingSpec:
    """The transducer decoding a NeMo-lineage checkpoint declares: its blank, symbols per frame
    and TDT durations."""
    params = {"blank_id": config.blank_id, "max_symbols_per_step": config.max_symbols_per_step}
    return DecodingSpec(DecodeType.TRANSDUCER, params={**params, "durations": durations})


_TOKENIZER_KEYS: dict[str, Any] = {
    "dir": ANY_VALUE,
    "type": ("bpe",),
    "model_path": ANY_VALUE,
    "vocab_path": ANY_VALUE,
    "spe_tokenizer_vocab": ANY_VALUE,
    "hf_kwargs": (None,),
}


def nemo_tokenizer_spec(ckpt: NemoCheckpoint, blank_id: int) -> TokenizerSpec:
    """The SentencePiece tokenizer a NeMo ``tokenizer`` section (``type: bpe``) names, the blank
    (one past its last piece) marked special.

    Raises:
        LoadError: another tokenizer type, or its model file is not in the checkpoint.
    """
    tok = ckpt.config.get("tokenizer")
    if not isinstance(tok, dict):
        raise LoadError(f"{ckpt.source}: {NEMO_CONFIG} names no tokenizer")
    check_section(tok, _TOKENIZER_KEYS, "tokenizer")
    model = ckpt.artefact(tok.get("model_path"), "tokenizer.model_path")
    return TokenizerSpec(kind="sentencepiece", path=str(model), special_ids=(blank_id,))
