"""Write any Whisper checkpoint oasr reads as whisper.cpp's ``ggml-*.bin`` model file.

whisper.cpp (and the engines built on it: pywhispercpp, CrispASR) reads one file:

1. the magic ``0x67676d6c`` ("ggml"), then eleven int32 hyper-parameters in this order:
   n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer, n_text_ctx,
   n_text_state, n_text_head, n_text_layer, n_mels, ftype (0 f32, 1 f16, and for a
   quantised file its ggml ftype plus 1000 x the quantisation version: q8_0 is 7 + 2000);
2. the mel filter bank: int32 n_mels, int32 bins (n_fft / 2 + 1), then float32 rows;
3. the vocabulary: int32 count, then each token's bytes (int32 length, bytes), ids 0 to
   end-of-text - 1 (whisper.cpp names the special tokens after them itself);
4. the tensors until the end of the file, each: int32 n_dims, int32 name length, int32 ggml
   type, n_dims int32 sizes fastest-varying first (the reverse of a row-major shape), the
   name (openai-whisper's state-dict names), then the data.

whisper.cpp fixes each tensor's type from the file's ftype (its loader allocates the
tensors before it reads them): the 2-D weight matrices, the token embedding included,
take the file's type (f32, f16 or q8_0); the convolution kernels f32 in an f32 file and
f16 otherwise; biases, norms and both positional embeddings stay f32 (the convolution
biases stored as ``(n_state, 1)``). That is also the set whisper.cpp's own quantiser
leaves unquantised.

q8_0 (ggml's block layout): each row is cut into blocks of 32 values; a block is one
float16 scale ``d = max|x| / 127`` followed by 32 int8 ``round(x / d)`` (half away from
zero), 34 bytes in all.

Usage::

    python -m oasr.models.whisper.ggml whisper-base ggml-base-f16.bin --type f16
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

GGML_MAGIC = 0x67676D6C
QK8_0 = 32  # values per q8_0 block
GGML_QNT_VERSION = 2  # ggml's quantisation format version, stored in a quantised file's ftype
FILE_TYPES = ("f32", "f16", "q8_0")
_FTYPE = {"f32": 0, "f16": 1, "q8_0": 7 + 1000 * GGML_QNT_VERSION}  # the header's ftype field
_GGML_TYPE = {"f32": 0, "f16": 1, "q8_0": 8}  # a tensor's ggml_type

# oasr's (Hugging Face) Whisper names -> openai-whisper's, which whisper.cpp reads.
_RENAMES = (
    (r"encoder\.embed_positions\.weight", "encoder.positional_embedding"),
    (r"decoder\.embed_positions\.weight", "decoder.positional_embedding"),
    (r"decoder\.embed_tokens\.weight", "decoder.token_embedding.weight"),
    (r"encoder\.layer_norm\.", "encoder.ln_post."),
    (r"decoder\.layer_norm\.", "decoder.ln."),
    (r"(encoder|decoder)\.layers\.(\d+)\.", r"\1.blocks.\2."),
    (r"\.self_attn_layer_norm\.", ".attn_ln."),
    (r"\.encoder_attn_layer_norm\.", ".cross_attn_ln."),
    (r"\.final_layer_norm\.", ".mlp_ln."),
    (r"\.self_attn\.", ".attn."),
    (r"\.encoder_attn\.", ".cross_attn."),
    (r"\.q_proj\.", ".query."),
    (r"\.k_proj\.", ".key."),
    (r"\.v_proj\.", ".value."),
    (r"\.out_proj\.", ".out."),
    (r"\.fc1\.", ".mlp.0."),
    (r"\.fc2\.", ".mlp.2."),
)
_CONV_BIASES = ("encoder.conv1.bias", "encoder.conv2.bias")
_ALWAYS_F32 = (*_CONV_BIASES, "encoder.positional_embedding", "decoder.positional_embedding")


def ggml_name(name: str) -> str:
    """openai-whisper's (whisper.cpp's) name of oasr's Whisper tensor ``name``."""
    for pattern, repl in _RENAMES:
        name = re.sub(pattern, repl, name)
    return name


def tensor_type(name: str, ndim: int, file_type: str) -> str:
    """The type whisper.cpp allocates for tensor ``name`` (openai name, ``ndim`` dims) in a ``file_type`` file."""
    if name in _ALWAYS_F32 or ndim < 2:
        return "f32"
    if ndim == 3:  # the convolution kernels
        return "f32" if file_type == "f32" else "f16"
    return file_type


def quantize_q8_0(x: np.ndarray) -> bytes:
    """ggml q8_0 blocks of ``x`` (rows of a length divisible by 32), row-major.

    Returns:
        ``x.size / 32`` blocks of 34 bytes: a float16 scale, then 32 int8 values.
    """
    blocks = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, QK8_0)  # (nb, 32)
    d = np.abs(blocks).max(axis=1) / np.float32(127)  # (nb,)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d > 0)
    scaled = blocks * inv[:, None]
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))).astype(np.int8)  # C's roundf
    out = np.empty((blocks.shape[0], 2 + QK8_0), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 values of q8_0 ``data`` (the inverse of ``quantize_q8_0`` up to its rounding)."""
    raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, 2 + QK8_0)
    d = raw[:, :2].copy().view("<f2").astype(np.float32)  # (nb, 1)
    q = raw[:, 2:].view(np.int8).astype(np.float32)
    return (q * d).reshape(shape)


def _encode(array: np.ndarray, ggml_type: str) -> bytes:
    if ggml_type == "q8_0":
        return quantize_q8_0(array)
    return np.ascontiguousarray(array, dtype="<f4" if ggml_type == "f32" else "<f2").tobytes()


def _tensors(state_dict, file_type: str) -> Iterator[tuple[str, np.ndarray, str]]:
    """``(openai name, float32 array, ggml type)`` per tensor, refusing what whisper.cpp cannot hold."""
    for key, tensor in state_dict.items():
        name = ggml_name(key)
        array = tensor.detach().float().cpu().numpy()
        if name in _CONV_BIASES:
            array = array.reshape(-1, 1)  # whisper.cpp's (1, n_state) in its order
        kind = tensor_type(name, array.ndim, file_type)
        if kind == "q8_0" and array.shape[-1] % QK8_0:
            raise ValueError(
                f"--type q8_0: tensor {key} has rows of {array.shape[-1]} values, not a multiple of {QK8_0}"
            )
        yield name, array, kind


def _vocabulary(tokenizer, n_vocab: int) -> list[bytes]:
    """The byte strings of ids 0 .. end-of-text - 1, at the ids whisper.cpp assumes."""
    eot = tokenizer.token_to_id("<|endoftext|>")
    expected = 50257 if n_vocab >= 51865 else 50256  # whisper.cpp's multilingual / English layouts
    if eot != expected:
        raise ValueError(f"end-of-text is id {eot}; whisper.cpp places it at {expected} for {n_vocab} tokens")
    return [tokenizer.decode_bytes([i]) for i in range(eot)]


def _header(config, file_type: str) -> bytes:
    fields = (
        config.n_vocab,
        config.n_audio_ctx,
        config.n_audio_state,
        config.n_audio_head,
        config.n_audio_layer,
        config.n_text_ctx,
        config.n_text_state,
        config.n_text_head,
        config.n_text_layer,
        config.n_mels,
        _FTYPE[file_type],
    )
    return struct.pack("<I11i", GGML_MAGIC, *fields)


def _write(f: BinaryIO, bundle, tokenizer, file_type: str) -> None:
    from oasr.audio import mel_filters

    config = bundle.config
    if config.n_text_state != config.n_audio_state:
        raise ValueError("whisper.cpp needs equal encoder and decoder widths")
    if config.encoder_ffn_dim != 4 * config.n_audio_state or config.decoder_ffn_dim != 4 * config.n_text_state:
        raise ValueError("whisper.cpp needs MLP widths of 4 x the model width")
    f.write(_header(config, file_type))
    n_fft = int(bundle.features.params.get("n_fft", 400)) if bundle.features is not None else 400
    filters = mel_filters(config.n_mels, n_fft).numpy().astype("<f4")  # (n_mels, n_fft // 2 + 1)
    f.write(struct.pack("<2i", *filters.shape) + filters.tobytes())
    words = _vocabulary(tokenizer, config.n_vocab)
    f.write(struct.pack("<i", len(words)))
    for word in words:
        f.write(struct.pack("<i", len(word)) + word)
    for name, array, kind in _tensors(bundle.state_dict, file_type):
        raw = name.encode()
        f.write(struct.pack("<3i", array.ndim, len(raw), _GGML_TYPE[kind]))
        f.write(struct.pack(f"<{array.ndim}i", *reversed(array.shape)) + raw)
        f.write(_encode(array, kind))


def write_ggml(model: str | os.PathLike, out: str | os.PathLike, file_type: str = "f16") -> Path:
    """Write ``model`` (a bundled name or any Whisper checkpoint oasr reads) as a whisper.cpp file.

    Args:
        model: what ``oasr.load_pretrained`` takes (resolved the same way).
        out: the file to write (written beside as ``*.tmp``, then renamed: never half a file).
        file_type: "f32", "f16" or "q8_0": the type of the weight matrices (see the module docstring).

    Returns:
        The path written.

    Raises:
        ValueError: not a Whisper checkpoint, or one whisper.cpp cannot hold (named).
    """
    from oasr.models.loaders import resolve_model_path
    from oasr.models.registry import load_checkpoint_bundle
    from oasr.tokenizers import load_tokenizer

    if file_type not in FILE_TYPES:
        raise ValueError(f"--type {file_type!r}: one of {', '.join(FILE_TYPES)}")
    bundle, _ = load_checkpoint_bundle(resolve_model_path(model))
    if bundle.architecture != "whisper":
        raise ValueError(f"{model} is a {bundle.architecture} checkpoint; whisper.cpp runs Whisper only")
    tokenizer = load_tokenizer(bundle.tokenizer)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            _write(f, bundle, tokenizer, file_type)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from oasr.models.base import LoadError
    from oasr.models.bundled import BundledModelCorrupt

    p = argparse.ArgumentParser(
        prog="python -m oasr.models.whisper.ggml",
        description="Write a Whisper checkpoint (bundled name or directory) as whisper.cpp's ggml model file.",
    )
    p.add_argument("model", help="bundled name (whisper-base, whisper-tiny.en) or a Whisper checkpoint oasr reads")
    p.add_argument("out", type=Path, help="the ggml-*.bin file to write")
    p.add_argument("--type", choices=FILE_TYPES, default="f16", help="weight matrices' type (default f16)")
    args = p.parse_args(argv)
    try:
        path = write_ggml(args.model, args.out, args.type)
    except (ValueError, OSError, LoadError, BundledModelCorrupt) as e:  # a bad checkpoint or path: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB, {args.type})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
