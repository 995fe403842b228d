"""icefall checkpoint directories (Zipformer2 recipes).

A directory holds one ``*.pt`` (``pretrained.pt`` wins when there are several) with
``{"model": state_dict}`` (what ``export.py`` / ``epoch-N.pt`` / averaged exports save) or a
bare state dict, and ``tokens.txt`` (icefall's ``<sym> <id>`` lines, ``<blk>`` 0, ``▁``
starting a word) and/or ``bpe.model``. An optional ``config.json`` overrides what the
shapes cannot show (keys of ``ZipformerEncoderConfig``; e.g. ``chunk_size``,
``left_context_frames``, ``num_heads``).

The config is read off the tensor shapes: stacks (``encoder.encoders.<i>``), layers per
stack, widths (``norm.bias``), downsampling factors (``downsample.bias`` has one weight per
input frame), kernels, feed-forward widths, the embed's channels and ``pos_dim``; the
per-head split of the attention takes icefall's ``pos_head_dim`` default (4) to count the
heads, then reads the query and value head widths. A causal release is told by its
``chunkwise_conv`` / ``causal_conv`` keys and decodes at chunk 16 / left context 128.

A hybrid checkpoint (with ``ctc_output``) is a ``zipformer`` (CTC) directory; a
transducer-only one (``decoder.*`` / ``joiner.*``, no ``ctc_output``) is a ``transducer``
one (``oasr.models.transducer.convert``).
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.text import read_mapping, read_symbol_table
from oasr.models.registry import CheckpointBundle
from oasr.models.zipformer.config import ZipformerConfig, ZipformerEncoderConfig

ARCH = "zipformer"

# lhotse's Fbank as icefall decodes (and kaldi-native-fbank as sherpa-onnx computes it):
# 80 bins, 25 / 10 ms, no dither, snip_edges False, float samples in [-1, 1], high_freq -400.
FBANK_PARAMS: dict[str, Any] = {
    "num_mel_bins": 80,
    "frame_length": 25.0,
    "frame_shift": 10.0,
    "dither": 0.0,
    "snip_edges": False,
    "waveform_scale": 1.0,
    "low_freq": 20.0,
    "high_freq": -400.0,
}

# icefall training defaults for what the shapes cannot show.
DEFAULT_POS_HEAD_DIM = 4
DEFAULT_CHUNK_SIZE = 16
DEFAULT_LEFT_CONTEXT_FRAMES = 128
CAUSAL_TAIL_PAD_FRAMES = 30  # icefall's decode.py pads causal models' features by 30 LOG_EPS frames

# Tensors icefall keeps that no inference path reads.
UNUSED_PREFIXES = ("simple_am_proj.", "simple_lm_proj.")
_UNUSED_LAYER_KEY = re.compile(r"^encoder\.encoders\.\d+\.(encoder\.)?layers\.\d+\.bypass_scale$")
_STACK_KEY = re.compile(r"^encoder\.encoders\.(\d+)\.")
_LAYER_KEY = re.compile(r"^encoder\.encoders\.(\d+)\.(?:encoder\.)?layers\.(\d+)\.")

_ENCODER_OVERRIDES = {f for f in ZipformerEncoderConfig.__dataclass_fields__}


@dataclass
class IcefallCheckpoint:
    """An icefall directory read into plain parts (before any family config).

    Attributes:
        directory: the directory.
        weights: the ``.pt`` file read.
        state: its state dict (host tensors, icefall names).
        overrides: the ``config.json`` contents ({} without one).
    """

    directory: Path
    weights: Path
    state: dict[str, torch.Tensor]
    overrides: dict[str, Any]

    @property
    def has_ctc(self) -> bool:
        return "ctc_output.1.weight" in self.state

    @property
    def has_transducer(self) -> bool:
        return "decoder.embedding.weight" in self.state and "joiner.output_linear.weight" in self.state


def _directory(path: Path) -> Path:
    return path.parent if path.is_file() else path


def weights_file(path: Path) -> Path:
    """The ``.pt`` file of an icefall directory (or ``path`` itself when it is one).

    Raises:
        LoadError: none, or several without a ``pretrained.pt``.
    """
    if path.is_file():
        return path
    found = sorted(path.glob("*.pt"))
    if not found:
        raise LoadError(f"{path}: no *.pt checkpoint (an icefall directory holds pretrained.pt or epoch-N.pt)")
    if len(found) == 1:
        return found[0]
    if (path / "pretrained.pt").is_file():
        return path / "pretrained.pt"
    raise LoadError(
        f"{path}: several checkpoints {[p.name for p in found]} and no pretrained.pt; pass the .pt file itself"
    )


def looks_like_icefall(path: Path) -> bool:
    """A ``.pt`` (no WeNet ``train.yaml`` beside it) with ``tokens.txt`` or ``bpe.model`` beside it,
    or whose state dict has the Zipformer's names (so that ``load`` can say what is missing)."""
    path = Path(path)
    if path.is_file() and path.suffix != ".pt":
        return False
    directory = _directory(path)
    if not directory.is_dir() or (directory / "train.yaml").is_file():
        return False
    # A FunASR directory (config.yaml declares its model:) is the paraformer family's, tokens.txt or not.
    funasr = directory / "config.yaml"
    if funasr.is_file() and re.search(r"(?m)^model:", funasr.read_text(encoding="utf-8", errors="replace")):
        return False
    if not (path.is_file() or any(directory.glob("*.pt"))):
        return False
    if (directory / "tokens.txt").is_file() or (directory / "bpe.model").is_file():
        return True
    return sniff_kind(path) != "unknown"


def _load_state(weights: Path) -> dict[str, torch.Tensor]:
    try:
        obj = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        try:  # a legacy (pre-zip) torch.save file cannot be memory-mapped
            obj = torch.load(weights, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            raise LoadError(
                f"{weights}: holds Python objects besides tensors (a training checkpoint with its params?), "
                f"which oasr does not unpickle; export the model with icefall's export.py "
                f"(pretrained.pt, {{'model': state_dict}}) or re-save just torch.load(...)['model']"
            ) from e
        except Exception as e:  # truncated zip, a pickle of something else, ...
            raise LoadError(f"{weights}: cannot be read as a torch checkpoint (truncated or corrupt?): {e}") from e
    if isinstance(obj, Mapping) and isinstance(obj.get("model"), Mapping):
        obj = obj["model"]
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise LoadError(f"{weights}: holds neither {{'model': state_dict}} nor a bare state dict")
    state = {str(k): v for k, v in obj.items()}
    # A checkpoint saved from DistributedDataParallel prefixes every name.
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module.") :]: v for k, v in state.items()}
    if "encoder_embed.conv.0.weight" not in state or not any(_STACK_KEY.match(k) for k in state):
        sample = sorted(state)[:5]
        raise LoadError(
            f"{weights}: not an icefall Zipformer state dict (no encoder_embed.conv.0.weight / "
            f"encoder.encoders.*; first keys: {sample})"
        )
    return state


_SNIFF_CACHE: dict[tuple[str, int, int], str] = {}


def sniff_kind(path: Path) -> str:
    """What the checkpoint at ``path`` carries: "hybrid", "ctc", "transducer", or "unknown"
    (unreadable or foreign); cached per file version."""
    try:
        weights = weights_file(Path(path))
        stat = weights.stat()
        key = (str(weights.resolve()), stat.st_mtime_ns, stat.st_size)
    except (LoadError, OSError):
        return "unknown"
    if key not in _SNIFF_CACHE:
        try:
            ckpt = IcefallCheckpoint(_directory(weights), weights, _load_state(weights), {})
        except LoadError:
            kind = "unknown"
        else:
            kind = {(True, True): "hybrid", (True, False): "ctc", (False, True): "transducer"}.get(
                (ckpt.has_ctc, ckpt.has_transducer), "unknown"
            )
        _SNIFF_CACHE[key] = kind
    return _SNIFF_CACHE[key]


def read_checkpoint(path: Path) -> IcefallCheckpoint:
    """Read the weights and ``config.json`` of an icefall directory (or .pt file).

    Raises:
        LoadError: a missing / unreadable / foreign checkpoint or a bad config.json.
    """
    path = Path(path)
    weights = weights_file(path)
    directory = _directory(weights)
    cfg_file = directory / "config.json"
    overrides = read_mapping(cfg_file, "a JSON object of config overrides") if cfg_file.is_file() else {}
    return IcefallCheckpoint(directory, weights, _load_state(weights), overrides)


def _shape(ckpt: IcefallCheckpoint, key: str) -> tuple[int, ...]:
    tensor = ckpt.state.get(key)
    if tensor is None:
        raise LoadError(f"{ckpt.weights}: tensor {key!r} is missing (an incomplete Zipformer state dict)")
    return tuple(tensor.shape)


def _mel_bins(ckpt: IcefallCheckpoint, width: int, override: Any) -> int:
    candidates = [f for f in range(7, 4 * width + 7) if ((f - 1) // 2 - 1) // 2 == width]
    if override is not None:
        if int(override) not in candidates:
            raise LoadError(
                f"{ckpt.directory / 'config.json'}: num_mel_bins={override} does not give the embed's "
                f"{width} frequency bins"
            )
        return int(override)
    if 80 in candidates:
        return 80
    raise LoadError(
        f"{ckpt.weights}: the embed reads {candidates[0]}..{candidates[-1]} features, not 80; "
        f"say which in config.json (num_mel_bins)"
    )


def encoder_config(ckpt: IcefallCheckpoint) -> ZipformerEncoderConfig:
    """Infer the encoder config from the state dict, with ``config.json`` overrides.

    Raises:
        LoadError: shapes that do not fit together, or an unknown override key.
    """
    o = {k: v for k, v in ckpt.overrides.items() if k in _ENCODER_OVERRIDES}
    unknown = sorted(set(ckpt.overrides) - _ENCODER_OVERRIDES - {"blank_id"})
    if unknown:
        raise LoadError(
            f"{ckpt.directory / 'config.json'}: unknown key(s) {unknown}; known: {sorted(_ENCODER_OVERRIDES)}"
        )
    s = ckpt.state
    c1 = _shape(ckpt, "encoder_embed.conv.0.weight")[0]
    c2 = _shape(ckpt, "encoder_embed.conv.4.weight")[0]
    c3 = _shape(ckpt, "encoder_embed.conv.7.weight")[0]
    out_in = _shape(ckpt, "encoder_embed.out.weight")[1]
    if out_in % c3:
        raise LoadError(f"{ckpt.weights}: encoder_embed.out.weight does not match {c3} embed channels")
    stacks = sorted({int(m.group(1)) for k in s if (m := _STACK_KEY.match(k))})
    if stacks != list(range(len(stacks))):
        raise LoadError(f"{ckpt.weights}: encoder stacks {stacks} are not numbered 0..n-1")
    layers: dict[int, set[int]] = {i: set() for i in stacks}
    for k in s:
        if m := _LAYER_KEY.match(k):
            layers[int(m.group(1))].add(int(m.group(2)))
    ds, dims, n_layers, heads, qdim, pdim, vdim, ffdim, kernels = ([] for _ in range(9))
    causal_flags = set()
    pos_dim = None
    head_override = o.get("pos_head_dim")
    for i in stacks:
        factor_key = f"encoder.encoders.{i}.downsample.bias"
        factor = _shape(ckpt, factor_key)[0] if factor_key in s else 1
        pre = f"encoder.encoders.{i}.{'encoder.' if factor > 1 else ''}layers.0."
        n = len(layers[i])
        if n == 0 or layers[i] != set(range(n)):
            raise LoadError(f"{ckpt.weights}: stack {i} has layers {sorted(layers[i])}")
        d = _shape(ckpt, pre + "norm.bias")[0]
        in_proj = _shape(ckpt, pre + "self_attn_weights.in_proj.weight")[0]
        pos_w = _shape(ckpt, pre + "self_attn_weights.linear_pos.weight")
        v_proj = _shape(ckpt, pre + "self_attn1.in_proj.weight")[0]
        p_head = int(head_override[i] if isinstance(head_override, list) else head_override or DEFAULT_POS_HEAD_DIM)
        h = pos_w[0] // p_head
        q2 = in_proj - pos_w[0]
        if h * p_head != pos_w[0] or q2 % (2 * h) or v_proj % h:
            raise LoadError(
                f"{ckpt.weights}: stack {i}'s attention shapes (in_proj {in_proj}, linear_pos {pos_w[0]}, "
                f"value {v_proj}) do not split into heads of pos_head_dim {p_head}; set num_heads / "
                f"pos_head_dim in config.json"
            )
        if pos_dim is not None and pos_w[1] != pos_dim:
            raise LoadError(f"{ckpt.weights}: stacks disagree on pos_dim ({pos_dim} vs {pos_w[1]})")
        pos_dim = pos_w[1]
        causal = pre + "conv_module1.depthwise_conv.chunkwise_conv.weight" in s
        causal_flags.add(causal)
        conv_key = "conv_module1.depthwise_conv." + ("chunkwise_conv.weight" if causal else "weight")
        ds.append(factor)
        dims.append(d)
        n_layers.append(n)
        heads.append(h)
        qdim.append(q2 // (2 * h))
        pdim.append(p_head)
        vdim.append(v_proj // h)
        ffdim.append(_shape(ckpt, pre + "feed_forward2.in_proj.weight")[0])
        kernels.append(_shape(ckpt, pre + conv_key)[-1])
    if len(causal_flags) != 1:
        raise LoadError(f"{ckpt.weights}: some stacks have chunk-causal convolutions and some do not")
    causal = causal_flags.pop()
    fields: dict[str, Any] = {
        "num_mel_bins": _mel_bins(ckpt, out_in // c3, o.get("num_mel_bins")),
        "embed_channels": (c1, c2, c3),
        "downsampling_factor": tuple(ds),
        "encoder_dim": tuple(dims),
        "num_encoder_layers": tuple(n_layers),
        "num_heads": tuple(heads),
        "query_head_dim": tuple(qdim),
        "pos_head_dim": tuple(pdim),
        "value_head_dim": tuple(vdim),
        "feedforward_dim": tuple(ffdim),
        "cnn_module_kernel": tuple(kernels),
        "pos_dim": pos_dim,
        "output_downsampling_factor": _shape(ckpt, "encoder.downsample_output.bias")[0],
        "causal": causal,
        "chunk_size": DEFAULT_CHUNK_SIZE,
        "left_context_frames": DEFAULT_LEFT_CONTEXT_FRAMES,
        "tail_pad_frames": CAUSAL_TAIL_PAD_FRAMES if causal else 0,
    }
    free = ("chunk_size", "left_context_frames", "tail_pad_frames")
    shape_fixed = {k for k in fields if k not in (*free, "num_mel_bins")}
    for key, value in o.items():
        if key in shape_fixed and key not in ("num_heads", "query_head_dim", "pos_head_dim", "value_head_dim"):
            want = tuple(value) if isinstance(value, list) else value
            if want != fields[key]:
                raise LoadError(
                    f"{ckpt.directory / 'config.json'}: {key}={value!r} contradicts the checkpoint's {fields[key]!r}"
                )
    for key in free:
        if key in o:
            fields[key] = o[key]
    if "num_heads" in o or "query_head_dim" in o or "value_head_dim" in o:
        fields.update(_split_heads(ckpt, o, dims, heads, qdim, pdim, vdim))
    try:
        return ZipformerEncoderConfig.from_dict(fields)
    except (TypeError, ValueError) as e:
        raise LoadError(f"{ckpt.weights}: {e}") from e


def _split_heads(ckpt: IcefallCheckpoint, o: Mapping[str, Any], dims, heads, qdim, pdim, vdim) -> dict[str, Any]:
    """Re-split the attention widths by an explicit ``num_heads`` (config.json)."""

    def per_stack(value: Any, n: int) -> list[int]:
        return [int(v) for v in value] if isinstance(value, list) else [int(value)] * n

    n = len(dims)
    total_q = [h * q for h, q in zip(heads, qdim)]
    total_p = [h * p for h, p in zip(heads, pdim)]
    total_v = [h * v for h, v in zip(heads, vdim)]
    new_heads = per_stack(o.get("num_heads", list(heads)), n)
    out = {"num_heads": tuple(new_heads), "query_head_dim": [], "pos_head_dim": [], "value_head_dim": []}
    for i, h in enumerate(new_heads):
        if total_q[i] % h or total_p[i] % h or total_v[i] % h:
            raise LoadError(f"{ckpt.directory / 'config.json'}: num_heads[{i}]={h} does not divide stack {i}'s widths")
        out["query_head_dim"].append(total_q[i] // h)
        out["pos_head_dim"].append(total_p[i] // h)
        out["value_head_dim"].append(total_v[i] // h)
    return {k: tuple(v) for k, v in out.items()}


def vocab_size(ckpt: IcefallCheckpoint) -> int:
    for key in ("ctc_output.1.weight", "joiner.output_linear.weight", "decoder.embedding.weight"):
        if key in ckpt.state:
            return int(ckpt.state[key].shape[0])
    raise LoadError(f"{ckpt.weights}: no output head (ctc_output, joiner or decoder): nothing to decode with")


def tokenizer_spec(ckpt: IcefallCheckpoint, vocab: int) -> tuple[TokenizerSpec, int]:
    """The tokenizer and the blank id: ``tokens.txt`` (preferred: it is the id table the
    model was trained with) else ``bpe.model``.

    Raises:
        LoadError: neither file, or a table whose size differs from the model's vocabulary.
    """
    tokens = ckpt.directory / "tokens.txt"
    if tokens.is_file():
        table = read_symbol_table(tokens)
        size = max(table, default=-1) + 1
        if size != vocab:
            raise LoadError(f"{tokens}: {size} tokens but the model's output has {vocab}")
        by_sym = {sym: i for i, sym in table.items()}
        blank = int(ckpt.overrides.get("blank_id", by_sym.get("<blk>", 0)))
        special = sorted(i for i, sym in table.items() if sym.startswith("<") and sym.endswith(">"))
        return TokenizerSpec(kind="table", path=str(tokens), special_ids=tuple(special)), blank
    bpe = ckpt.directory / "bpe.model"
    if bpe.is_file():
        import sentencepiece

        try:
            sp = sentencepiece.SentencePieceProcessor(model_file=str(bpe))
        except (OSError, RuntimeError) as e:
            raise LoadError(f"{bpe}: not a sentencepiece model: {e}") from e
        if sp.get_piece_size() != vocab:
            raise LoadError(f"{bpe}: {sp.get_piece_size()} pieces but the model's output has {vocab}")
        blank = int(
            ckpt.overrides.get("blank_id", sp.piece_to_id("<blk>") if sp.piece_to_id("<blk>") != sp.unk_id() else 0)
        )
        special = sorted({blank} | {i for i in range(vocab) if sp.is_control(i) or sp.is_unknown(i)})
        return TokenizerSpec(kind="sentencepiece", path=str(bpe), special_ids=tuple(special)), blank
    raise LoadError(
        f"{ckpt.directory}: no tokens.txt or bpe.model beside {ckpt.weights.name} "
        f"(icefall's data/lang_bpe_*/tokens.txt; copy it into the directory)"
    )


def feature_spec(encoder: ZipformerEncoderConfig) -> FeatureSpec:
    return FeatureSpec(
        kind="kaldi_fbank", sampling_rate=16000, params={**FBANK_PARAMS, "num_mel_bins": encoder.num_mel_bins}
    )


def encoder_state(ckpt: IcefallCheckpoint) -> dict[str, torch.Tensor]:
    """The encoder's tensors (``encoder_embed.*``, ``encoder.*``) under the model's
    ``encoder.`` prefix, minus icefall's unused per-layer ``bypass_scale`` (its forward reads
    only ``bypass`` / ``bypass_mid``)."""
    return {
        "encoder." + k: v
        for k, v in ckpt.state.items()
        if k.startswith(("encoder_embed.", "encoder.")) and not _UNUSED_LAYER_KEY.match(k)
    }


class IcefallDirectoryConverter:
    """What every icefall converter (CTC here, transducer in ``oasr.models.transducer``)
    declares: auto-detected, training-only tensors dropped silently, the attention decoder
    dropped with a hint; ``bundle`` is the bundle of a checkpoint it has read."""

    architecture: str
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = UNUSED_PREFIXES
    capability_drop_hints: Mapping[str, str] = {
        "attention_decoder.": "icefall's attention decoder (rescoring) is not implemented",
    }

    def bundle(
        self, ckpt: IcefallCheckpoint, config: Any, state: dict[str, torch.Tensor], tokenizer, decoding, source: str
    ) -> CheckpointBundle:
        """The bundle of ``ckpt`` read into ``config`` (its ``encoder`` gives the features)."""
        return CheckpointBundle(
            architecture=self.architecture,
            config=config,
            state_dict=state,
            tokenizer=tokenizer,
            features=feature_spec(config.encoder),
            decoding=decoding,
            source=source,
            format="icefall",
            metadata={"weights": str(ckpt.weights)},
        )


class IcefallConverter(IcefallDirectoryConverter):
    """An icefall Zipformer directory with a CTC head (a CTC or hybrid checkpoint)."""

    architecture = ARCH
    capability_drop_hints: Mapping[str, str] = {
        "decoder.": "the transducer predictor is not used by the CTC model; load with architecture='transducer'",
        "joiner.": "the transducer joiner is not used by the CTC model; load with architecture='transducer'",
        **IcefallDirectoryConverter.capability_drop_hints,
    }

    def can_load(self, path: Path) -> bool:
        """icefall-looking directories, except transducer-only ones (unreadable or foreign
        ones are claimed so that ``load`` names the problem)."""
        return looks_like_icefall(Path(path)) and sniff_kind(Path(path)) != "transducer"

    def load(self, path: Path) -> CheckpointBundle:
        ckpt = read_checkpoint(Path(path))
        if not ckpt.has_ctc:
            raise LoadError(
                f"{ckpt.weights}: no ctc_output.* (a transducer-only checkpoint has no CTC head); "
                f"load it with architecture='transducer'"
            )
        vocab = vocab_size(ckpt)
        tokenizer, blank = tokenizer_spec(ckpt, vocab)
        encoder = encoder_config(ckpt)
        try:
            config = ZipformerConfig(encoder=encoder, vocab_size=vocab, blank_id=blank)
        except ValueError as e:
            raise LoadError(f"{ckpt.directory}: {e}") from e
        state = encoder_state(ckpt)
        state["ctc_output.weight"] = ckpt.state["ctc_output.1.weight"]
        state["ctc_output.bias"] = ckpt.state["ctc_output.1.bias"]
        state.update(
            {k: v for k, v in ckpt.state.items() if not k.startswith(("encoder_embed.", "encoder.", "ctc_output."))}
        )
        return self.bundle(ckpt, config, state, tokenizer, DecodingSpec(DecodeType.CTC), str(path))


class IcefallExplicitConverter(IcefallConverter):
    """Any icefall directory when ``architecture="zipformer"`` is asked for (not auto-detected):
    a transducer-only one gets ``load``'s error naming the missing CTC head."""

    auto_detect = False

    def can_load(self, path: Path) -> bool:
        return looks_like_icefall(Path(path))
