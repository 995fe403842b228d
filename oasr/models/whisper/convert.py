"""Whisper checkpoint converters: Hugging Face, CTranslate2 (faster-whisper) and
openai-whisper ``.pt`` layouts, all renamed onto the Hugging Face names of
``oasr.models.whisper.model`` (without the ``model.`` prefix).

Conversion is strict: every source tensor is either mapped (shape-checked by
``load_weights``), declared unused, or reported; fused CTranslate2 projections are
split, and a fused bias slot that Whisper does not have (the key projection's)
must be zero.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from oasr.models.base import DecodeType, DecodingSpec, FeatureSpec, LoadError, TokenizerSpec
from oasr.models.formats.ctranslate2 import find_model_parts, read_ct2_model
from oasr.models.formats.hf import bpe_tokenizer_path, read_json, read_json_if_present
from oasr.models.formats.hf import load_hf_weights as _load_hf_weights
from oasr.models.formats.hf import model_type as hf_model_type
from oasr.models.registry import CheckpointBundle
from oasr.models.whisper.config import WhisperConfig

ARCH = "whisper"


def _feature_spec(n_mels: int, pre: Mapping[str, Any] | None = None) -> FeatureSpec:
    pre = pre or {}
    return FeatureSpec(
        kind="whisper_mel",
        sampling_rate=int(pre.get("sampling_rate", 16000)),
        params={
            "n_mels": int(pre.get("feature_size", n_mels)),
            "n_fft": int(pre.get("n_fft", 400)),
            "hop_length": int(pre.get("hop_length", 160)),
            "chunk_length": int(pre.get("chunk_length", 30)),
        },
    )


def _tokenizer_spec(directory: Path) -> TokenizerSpec:
    return TokenizerSpec(kind="huggingface", path=str(bpe_tokenizer_path(directory, "Whisper")))


def _decoding_spec(params: dict[str, Any]) -> DecodingSpec:
    params.setdefault("max_initial_timestamp_index", 50)
    return DecodingSpec(decode_type=DecodeType.AED, params=params)


def _directory_bundle(
    path: Path, config: WhisperConfig, state: dict[str, torch.Tensor], params: dict[str, Any], fmt: str, **metadata: Any
) -> CheckpointBundle:
    """A bundle for a checkpoint directory: its tokenizer and (optional) preprocessor config beside the weights."""
    return CheckpointBundle(
        architecture=ARCH,
        config=config,
        state_dict=state,
        tokenizer=_tokenizer_spec(path),
        features=_feature_spec(config.n_mels, read_json_if_present(path / "preprocessor_config.json")),
        decoding=_decoding_spec(params),
        source=str(path),
        format=fmt,
        metadata=metadata,
    )


def _pairs(heads: Any) -> list[list[int]]:
    return [[int(a), int(b)] for a, b in heads] if heads else []


# ---------------------------------------------------------------------------
# Hugging Face


class HFWhisperConverter:
    """A transformers ``WhisperForConditionalGeneration`` directory (config.json
    ``model_type: whisper``, safetensors or .bin, generation_config.json)."""

    architecture = ARCH
    auto_detect = True
    # proj_out is tied to embed_tokens (checked equal when a checkpoint stores it).
    expected_unused_prefixes: tuple[str, ...] = ("proj_out.",)
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        return path.is_dir() and hf_model_type(path) == "whisper"

    def load(self, path: Path) -> CheckpointBundle:
        hf = read_json(path / "config.json")
        act = hf.get("activation_function", "gelu")
        if act != "gelu":
            raise LoadError(f"{path}: activation_function={act!r} is not supported (Whisper uses 'gelu')")
        if hf.get("scale_embedding", False):
            raise LoadError(f"{path}: scale_embedding=True is not supported (no Whisper release uses it)")
        d = int(hf["d_model"])
        config = WhisperConfig(
            n_mels=int(hf.get("num_mel_bins", 80)),
            n_audio_ctx=int(hf.get("max_source_positions", 1500)),
            n_audio_state=d,
            n_audio_head=int(hf["encoder_attention_heads"]),
            n_audio_layer=int(hf["encoder_layers"]),
            n_vocab=int(hf["vocab_size"]),
            n_text_ctx=int(hf.get("max_target_positions", 448)),
            n_text_state=d,
            n_text_head=int(hf["decoder_attention_heads"]),
            n_text_layer=int(hf["decoder_layers"]),
            encoder_ffn_dim=int(hf.get("encoder_ffn_dim", 4 * d)),
            decoder_ffn_dim=int(hf.get("decoder_ffn_dim", 4 * d)),
        )
        raw = _load_hf_weights(path)
        state: dict[str, torch.Tensor] = {}
        for name, t in raw.items():
            state[name[len("model.") :] if name.startswith("model.") else name] = t
        proj = state.get("proj_out.weight")
        emb = state.get("decoder.embed_tokens.weight")
        if proj is not None and emb is not None and not torch.equal(proj, emb):
            raise LoadError(f"{path}: proj_out.weight differs from the token embedding; oasr ties them as Whisper does")
        gen = read_json_if_present(path / "generation_config.json")
        params = {
            "suppress_tokens": list(gen.get("suppress_tokens", hf.get("suppress_tokens")) or []),
            "begin_suppress_tokens": list(gen.get("begin_suppress_tokens", hf.get("begin_suppress_tokens")) or []),
            "alignment_heads": _pairs(gen.get("alignment_heads")),
            "lang_ids": sorted(gen.get("lang_to_id", {}).values()),
        }
        if "max_initial_timestamp_index" in gen:
            params["max_initial_timestamp_index"] = int(gen["max_initial_timestamp_index"])
        return _directory_bundle(path, config, state, params, "huggingface")


# ---------------------------------------------------------------------------
# CTranslate2 / faster-whisper


_CT2_SCALARS = {
    # scalar -> the value a Whisper spec must have (anything else is a different model)
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/start_from_zero_embedding": 0,
    "decoder/alibi": 0,
}
_CT2_GELU = 3  # ctranslate2 ops::ActivationType::GELU


def _ct2_weight(m, name: str) -> torch.Tensor:
    """A weight, dequantised when stored as int8 with a ``weight_scale``."""
    w = m.get(name)
    scale_name = name.rsplit("/", 1)[0] + "/weight_scale"
    if w.dtype in (torch.int8, torch.int16) and scale_name in m:
        scale = m.get(scale_name).float()
        w = w.float() / (scale[:, None] if scale.dim() == 1 else scale)
    return w


class CT2WhisperConverter:
    """A CTranslate2 Whisper directory (``model.bin`` or ``model.bin.partN`` pieces,
    config.json, tokenizer.json), as faster-whisper uses."""

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}

    def can_load(self, path: Path) -> bool:
        if not path.is_dir():
            return False
        try:
            parts = find_model_parts(path)
        except FileNotFoundError:
            return any(path.glob("model.bin.part*"))  # split: let load() name the missing part
        with open(parts[0], "rb") as f:
            head = f.read(64)
        return b"WhisperSpec" in head

    def load(self, path: Path) -> CheckpointBundle:
        parts = find_model_parts(path)
        m = read_ct2_model(parts)
        if m.spec_name != "WhisperSpec":
            raise LoadError(f"{path}: CTranslate2 spec {m.spec_name!r} is not a Whisper model")
        for name, want in _CT2_SCALARS.items():
            if name in m and int(m.get(name)) != want:
                raise LoadError(f"{path}: {name}={int(m.get(name))} is not a Whisper model (expected {want})")
        if "decoder/activation" in m and int(m.get("decoder/activation")) != _CT2_GELU:
            raise LoadError(f"{path}: decoder/activation={int(m.get('decoder/activation'))} is not GELU")

        def n_layers(prefix: str) -> int:
            pat = re.compile(rf"^{prefix}/layer_(\d+)/")
            return 1 + max(int(mt.group(1)) for k in m.variables if (mt := pat.match(k)))

        conv1 = m.get("encoder/conv1/weight")
        d = conv1.shape[0]
        config = WhisperConfig(
            n_mels=conv1.shape[1],
            n_audio_ctx=m.get("encoder/position_encodings/encodings").shape[0],
            n_audio_state=d,
            n_audio_head=int(m.get("encoder/num_heads")),
            n_audio_layer=n_layers("encoder"),
            n_vocab=m.get("decoder/embeddings/weight").shape[0],
            n_text_ctx=m.get("decoder/position_encodings/encodings").shape[0],
            n_text_state=m.get("decoder/embeddings/weight").shape[1],
            n_text_head=int(m.get("decoder/num_heads")),
            n_text_layer=n_layers("decoder"),
            encoder_ffn_dim=m.get("encoder/layer_0/ffn/linear_0/weight").shape[0],
            decoder_ffn_dim=m.get("decoder/layer_0/ffn/linear_0/weight").shape[0],
        )
        state: dict[str, torch.Tensor] = {}
        used: set[str] = set()

        def take(src: str, dst: str) -> None:
            state[dst] = _ct2_weight(m, src) if src.endswith("weight") else m.get(src)
            used.add(src)

        def take_norm(src: str, dst: str) -> None:
            take(f"{src}/gamma", f"{dst}.weight")
            take(f"{src}/beta", f"{dst}.bias")

        def take_linear(src: str, dst: str) -> None:
            take(f"{src}/weight", f"{dst}.weight")
            take(f"{src}/bias", f"{dst}.bias")

        def take_fused(src: str, dsts: tuple[str, ...]) -> None:
            w = _ct2_weight(m, f"{src}/weight")
            b = m.get(f"{src}/bias")
            used.update({f"{src}/weight", f"{src}/bias", f"{src}/weight_scale"} & (set(m.variables)))
            for dst, wi, bi in zip(dsts, w.chunk(len(dsts)), b.chunk(len(dsts))):
                state[f"{dst}.weight"] = wi
                if dst.endswith("k_proj"):
                    if bi.abs().max() != 0:
                        raise LoadError(f"{path}: {src}/bias has a non-zero key slot; Whisper's k_proj has no bias")
                else:
                    state[f"{dst}.bias"] = bi

        for side in ("encoder", "decoder"):
            nl = config.n_audio_layer if side == "encoder" else config.n_text_layer
            for i in range(nl):
                s, o = f"{side}/layer_{i}", f"{side}.layers.{i}"
                take_fused(
                    f"{s}/self_attention/linear_0",
                    (f"{o}.self_attn.q_proj", f"{o}.self_attn.k_proj", f"{o}.self_attn.v_proj"),
                )
                take_linear(f"{s}/self_attention/linear_1", f"{o}.self_attn.out_proj")
                take_norm(f"{s}/self_attention/layer_norm", f"{o}.self_attn_layer_norm")
                if side == "decoder":
                    take_linear(f"{s}/attention/linear_0", f"{o}.encoder_attn.q_proj")
                    take_fused(f"{s}/attention/linear_1", (f"{o}.encoder_attn.k_proj", f"{o}.encoder_attn.v_proj"))
                    take_linear(f"{s}/attention/linear_2", f"{o}.encoder_attn.out_proj")
                    take_norm(f"{s}/attention/layer_norm", f"{o}.encoder_attn_layer_norm")
                take_linear(f"{s}/ffn/linear_0", f"{o}.fc1")
                take_linear(f"{s}/ffn/linear_1", f"{o}.fc2")
                take_norm(f"{s}/ffn/layer_norm", f"{o}.final_layer_norm")
            take_norm(f"{side}/layer_norm", f"{side}.layer_norm")
            take(f"{side}/position_encodings/encodings", f"{side}.embed_positions.weight")
        for c in ("conv1", "conv2"):
            take_linear(f"encoder/{c}", f"encoder.{c}")
        take("decoder/embeddings/weight", "decoder.embed_tokens.weight")
        # Scalars describing the spec (checked above) and CTranslate2's own alignment defaults.
        used.update(k for k in m.variables if m.variables[k].dim() == 0)
        leftover = sorted(set(m.variables) - used)
        if leftover:
            raise LoadError(f"{path}: CTranslate2 variables this converter does not map: {leftover[:10]}")
        cfg = read_json_if_present(path / "config.json")
        params = {
            "suppress_tokens": list(cfg.get("suppress_ids") or []),
            "begin_suppress_tokens": list(cfg.get("suppress_ids_begin") or []),
            "alignment_heads": _pairs(cfg.get("alignment_heads")),
            "lang_ids": list(cfg.get("lang_ids") or []),
        }
        bundle = _directory_bundle(path, config, state, params, "ctranslate2", parts=[str(p) for p in parts])
        bundle.release = m.release  # the state's tensors are views of m's maps
        return bundle


# ---------------------------------------------------------------------------
# openai-whisper .pt


# openai-whisper's attention projections -> transformers' (self- and cross-attention alike).
_OPENAI_PROJECTIONS = (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"), ("out", "out_proj"))
_OPENAI_RENAMES = (
    *(
        (rf"^(encoder|decoder)\.blocks\.(\d+)\.attn\.{theirs}\.", rf"\1.layers.\2.self_attn.{ours}.")
        for theirs, ours in _OPENAI_PROJECTIONS
    ),
    (r"^(encoder|decoder)\.blocks\.(\d+)\.attn_ln\.", r"\1.layers.\2.self_attn_layer_norm."),
    *(
        (rf"^decoder\.blocks\.(\d+)\.cross_attn\.{theirs}\.", rf"decoder.layers.\1.encoder_attn.{ours}.")
        for theirs, ours in _OPENAI_PROJECTIONS
    ),
    (r"^decoder\.blocks\.(\d+)\.cross_attn_ln\.", r"decoder.layers.\1.encoder_attn_layer_norm."),
    (r"^(encoder|decoder)\.blocks\.(\d+)\.mlp\.0\.", r"\1.layers.\2.fc1."),
    (r"^(encoder|decoder)\.blocks\.(\d+)\.mlp\.2\.", r"\1.layers.\2.fc2."),
    (r"^(encoder|decoder)\.blocks\.(\d+)\.mlp_ln\.", r"\1.layers.\2.final_layer_norm."),
    (r"^encoder\.ln_post\.", "encoder.layer_norm."),
    (r"^decoder\.ln\.", "decoder.layer_norm."),
    (r"^encoder\.positional_embedding$", "encoder.embed_positions.weight"),
    (r"^decoder\.positional_embedding$", "decoder.embed_positions.weight"),
    (r"^decoder\.token_embedding\.weight$", "decoder.embed_tokens.weight"),
)


def _openai_name(name: str) -> str:
    for pat, rep in _OPENAI_RENAMES:
        new, n = re.subn(pat, rep, name)
        if n:
            return new
    return name


def _bundled_vocabulary(n_vocab: int) -> Path | None:
    """A Whisper tokenizer.json from an installed real-weight package with the same
    vocabulary size (51865 multilingual / 51864 English vocabularies are shared by
    every size that has them)."""
    from oasr.models.bundled import bundled_tokenizer_for_vocab

    return bundled_tokenizer_for_vocab(n_vocab)


class OpenAIWhisperConverter:
    """An openai-whisper ``.pt`` checkpoint (``{"dims": ..., "model_state_dict": ...}``).

    Its vocabulary is not inside the file: a ``tokenizer.json`` beside it is used,
    else one from an installed real-weight package with the same vocabulary size.
    Without alignment heads in the file, word timing uses the second half of the
    decoder layers (all heads), as openai-whisper does for unknown models.
    """

    architecture = ARCH
    auto_detect = True
    expected_unused_prefixes: tuple[str, ...] = ()
    capability_drop_hints: Mapping[str, str] = {}

    @staticmethod
    def _file(path: Path) -> Path | None:
        if path.is_file() and path.suffix in (".pt", ".pth"):
            return path
        if path.is_dir():
            pts = sorted(path.glob("*.pt"))
            if len(pts) == 1 and not (path / "config.json").is_file():
                return pts[0]
        return None

    def can_load(self, path: Path) -> bool:
        file = self._file(path)
        if file is None:
            return False
        try:  # memory-mapped: reads the pickle, not the tensor data
            ckpt = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except Exception:
            return False
        return isinstance(ckpt, dict) and "dims" in ckpt and "model_state_dict" in ckpt

    def load(self, path: Path) -> CheckpointBundle:
        file = self._file(path)
        if file is None:
            raise LoadError(f"{path}: no openai-whisper .pt checkpoint")
        try:
            ckpt = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as e:
            raise LoadError(f"{file}: cannot read as a PyTorch checkpoint: {e}") from e
        if not isinstance(ckpt, dict) or "dims" not in ckpt or "model_state_dict" not in ckpt:
            raise LoadError(f"{file}: not an openai-whisper checkpoint (needs 'dims' and 'model_state_dict')")
        dims = dict(ckpt["dims"])
        config = WhisperConfig.from_dict(dims)
        state = {_openai_name(k): v for k, v in ckpt["model_state_dict"].items()}
        tok = file.parent / "tokenizer.json"
        if tok.is_file():
            tspec = TokenizerSpec(kind="huggingface", path=str(tok))
        elif (bundled := _bundled_vocabulary(config.n_vocab)) is not None:
            tspec = TokenizerSpec(kind="huggingface", path=str(bundled))
        else:
            raise LoadError(
                f"{file} carries no vocabulary: put the matching Whisper tokenizer.json beside it "
                f"(n_vocab={config.n_vocab})"
            )
        heads = ckpt.get("alignment_heads")
        if isinstance(heads, torch.Tensor):
            heads = heads.to_dense().nonzero().tolist() if heads.is_sparse else heads.nonzero().tolist()
        else:
            half = config.n_text_layer // 2
            heads = [[li, h] for li in range(half, config.n_text_layer) for h in range(config.n_text_head)]
        params = {"suppress_tokens": [], "begin_suppress_tokens": [], "alignment_heads": _pairs(heads), "lang_ids": []}
        return CheckpointBundle(
            architecture=ARCH,
            config=config,
            state_dict=state,
            tokenizer=tspec,
            features=_feature_spec(config.n_mels),
            decoding=_decoding_spec(params),
            source=str(file),
            format="openai-whisper",
        )
