"""Export a Whisper checkpoint to sherpa-onnx's Whisper ONNX layout.

sherpa-onnx runs Whisper as two ONNX graphs and a token table, read by its C++
``OfflineWhisperModel`` (``OfflineRecognizer.from_whisper`` in Python):

* ``<prefix>-encoder.onnx``: ``mel`` (N, n_mels, T) -> ``n_layer_cross_k``,
  ``n_layer_cross_v`` (n_text_layer, N, T // 2, n_text_state): the encoder and every
  decoder layer's cross-attention key / value projections of its output. T may be
  shorter than 3000 frames (sherpa-onnx feeds the clip plus 1000 frames of padding).
  The graph's metadata carries what the C++ side reads: the sizes, the special ids,
  the languages.
* ``<prefix>-decoder.onnx``: ``tokens`` (N, n) at positions ``offset`` .. ``offset + n``,
  the self-attention caches ``in_n_layer_self_k_cache`` / ``..._v_cache`` (n_text_layer,
  N, n_text_ctx, n_text_state), the encoder's cross K/V and ``offset`` (1,) int64 ->
  ``logits`` (N, n, n_vocab) and the caches with positions ``offset .. offset + n``
  written (``out_n_layer_self_k_cache`` / ``..._v_cache``).
* ``<prefix>-tokens.txt``: ``<base64 of the token's bytes> <id>`` for every text token
  (the ids below ``<|endoftext|>``); sherpa-onnx leaves the others out of its text.
* ``<prefix>-{encoder,decoder}.int8.onnx`` with ``int8=True``: the same graphs with their
  MatMul weights quantised to int8 by onnxruntime's dynamic quantisation.

The graphs are traced from oasr's own ``WhisperModel`` modules (thin wrappers below
arrange the tensors the way sherpa-onnx passes them), so the files hold the weights oasr
loads from any Whisper checkpoint it reads, in float32.
"""

from __future__ import annotations

import base64
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from oasr.layers import attention
from oasr.models.whisper.model import WhisperDecoder, WhisperEncoder, WhisperModel
from oasr.models.whisper.tokenizer import WhisperTokenizer

OPSET = 17
DECODER_CACHES_IN = ("in_n_layer_self_k_cache", "in_n_layer_self_v_cache")
DECODER_CACHES_OUT = ("out_n_layer_self_k_cache", "out_n_layer_self_v_cache")
# Past this many bytes of weights a graph keeps them in a ``.weights`` file beside it
# (protobuf's 2-GB limit, with headroom).
EXTERNAL_DATA_BYTES = 1 << 30


class SherpaWhisperEncoder(nn.Module):
    """The encoder and the decoder's cross-attention K/V, as sherpa-onnx's encoder graph.

    Shapes:
        mel: (N, n_mels, T), T even and at most 2 * n_audio_ctx
        -> n_layer_cross_k, n_layer_cross_v: (n_text_layer, N, T // 2, n_text_state)
    """

    def __init__(self, encoder: WhisperEncoder, decoder: WhisperDecoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.encoder.embed(mel)  # (N, T // 2, D)
        for layer in self.encoder.layers:
            x = layer(x)
        x = self.encoder.layer_norm(x)
        cross = [layer.encoder_attn for layer in self.decoder.layers]
        return torch.stack([a.k_proj(x) for a in cross]), torch.stack([a.v_proj(x) for a in cross])


class SherpaWhisperDecoder(nn.Module):
    """The decoder over sherpa-onnx's full-context caches, as its decoder graph.

    Shapes:
        tokens: (N, n) int64; in_k_cache, in_v_cache: (L, N, n_text_ctx, D);
        cross_k, cross_v: (L, N, T', D); offset: (1,) int64
        -> logits (N, n, n_vocab), out_k_cache, out_v_cache (L, N, n_text_ctx, D)
    """

    def __init__(self, decoder: WhisperDecoder) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(
        self,
        tokens: torch.Tensor,
        in_k_cache: torch.Tensor,
        in_v_cache: torch.Tensor,
        cross_k: torch.Tensor,
        cross_v: torch.Tensor,
        offset: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dec = self.decoder
        start = offset[0]
        end = start + tokens.shape[1]
        positions = torch.arange(start, end, device=tokens.device)  # (n,)
        # Query i (at start + i) sees keys 0 .. start + i: causal within the tokens, all before.
        may_attend = torch.arange(end, device=tokens.device)[None, :] <= positions[:, None]  # (n, end)
        out_k: list[torch.Tensor] = []
        out_v: list[torch.Tensor] = []

        def merged(heads: torch.Tensor) -> torch.Tensor:
            """(N, H, n, Dh) -> (N, n, D)"""
            b, h, n, dh = heads.shape
            return heads.transpose(1, 2).reshape(b, n, h * dh)

        def self_attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            att = dec.layers[li].self_attn
            keys = torch.cat([in_k_cache[li, :, :start], merged(k)], dim=1)  # (N, end, D)
            values = torch.cat([in_v_cache[li, :, :start], merged(v)], dim=1)
            out_k.append(torch.cat([keys, in_k_cache[li, :, end:]], dim=1))  # (N, n_text_ctx, D)
            out_v.append(torch.cat([values, in_v_cache[li, :, end:]], dim=1))
            return attention(q, att.heads(keys), att.heads(values), mask=may_attend)

        def cross_attend(li: int, q: torch.Tensor) -> torch.Tensor:
            att = dec.layers[li].encoder_attn
            return attention(q, att.heads(cross_k[li]), att.heads(cross_v[li]))

        x = dec.embed_tokens(tokens) + dec.embed_positions(positions)  # (N, n, D)
        x = dec.layer_norm(dec._layers(x, self_attend, cross_attend))
        # Scores against the tied table as (W @ x^T)^T: one initializer serves the lookup and the
        # projection (sherpa-onnx's own export has the same form).
        logits = torch.matmul(dec.embed_tokens.weight, x.transpose(1, 2)).transpose(1, 2)  # (N, n, V)
        return logits, torch.stack(out_k), torch.stack(out_v)


@dataclass(frozen=True)
class SherpaOnnxFiles:
    """What ``export_sherpa_onnx`` wrote (the int8 graphs are None unless asked for)."""

    encoder: Path
    decoder: Path
    tokens: Path
    encoder_int8: Path | None = None
    decoder_int8: Path | None = None

    def pick(self, int8: bool) -> tuple[Path, Path]:
        """``(encoder, decoder)``: the int8 graphs, or the float32 ones."""
        if not int8:
            return self.encoder, self.decoder
        if self.encoder_int8 is None or self.decoder_int8 is None:
            raise ValueError("this export has no int8 graphs (export with int8=True)")
        return self.encoder_int8, self.decoder_int8


def sherpa_metadata(model: WhisperModel, tokenizer: WhisperTokenizer, name: str) -> dict[str, str]:
    """The encoder graph's metadata, as sherpa-onnx's ``OfflineWhisperModel`` reads it.

    ``sot_sequence`` is ``[sot, <|en|>, <|transcribe|>]`` for a multilingual model (sherpa-onnx
    replaces the language and task per request) and ``[sot]`` for an English-only one.

    Raises:
        ValueError: the vocabulary lacks a token sherpa-onnx needs (a task token).
    """
    cfg, special = model.config, tokenizer.special
    if special.transcribe is None or special.translate is None:
        raise ValueError("sherpa-onnx needs the <|transcribe|> and <|translate|> tokens; this vocabulary lacks them")
    sot_sequence = [special.sot]
    if special.is_multilingual:
        sot_sequence += [tokenizer.language_token("en"), special.transcribe]
    blank = tokenizer.encode_text(" ")
    meta: dict[str, object] = {
        "model_type": f"whisper-{name}",
        "version": "1",
        "maintainer": "oasr",
        "n_mels": cfg.n_mels,
        "n_audio_ctx": cfg.n_audio_ctx,
        "n_audio_state": cfg.n_audio_state,
        "n_audio_head": cfg.n_audio_head,
        "n_audio_layer": cfg.n_audio_layer,
        "n_vocab": cfg.n_vocab,
        "n_text_ctx": cfg.n_text_ctx,
        "n_text_state": cfg.n_text_state,
        "n_text_head": cfg.n_text_head,
        "n_text_layer": cfg.n_text_layer,
        "sot_sequence": ",".join(map(str, sot_sequence)),
        "all_language_tokens": ",".join(str(i) for _, i in special.language_ids),
        "all_language_codes": ",".join(code for code, _ in special.language_ids),
        "sot": special.sot,
        "sot_index": 0,
        "eot": special.eot,
        "blank_id": blank[0] if blank else special.eot,
        "is_multilingual": int(special.is_multilingual),
        "no_speech": special.no_speech if special.no_speech is not None else special.eot,
        "non_speech_tokens": ",".join(map(str, tokenizer.non_speech_tokens)),
        "transcribe": special.transcribe,
        "translate": special.translate,
        "sot_prev": special.sot_prev if special.sot_prev is not None else special.eot,
        "sot_lm": special.sot_lm if special.sot_lm is not None else special.eot,
        "no_timestamps": special.no_timestamps,
    }
    return {k: str(v) for k, v in meta.items()}


def write_tokens(tokenizer: WhisperTokenizer, path: Path) -> None:
    """``<base64 of the token's bytes> <id>`` a line, for every id below ``<|endoftext|>``."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(tokenizer.eot):
            piece = tokenizer.tokenizer.decode_bytes([i])
            f.write(f"{base64.b64encode(piece).decode('ascii')} {i}\n")


def _save(path: Path, metadata: dict[str, str] | None = None) -> None:
    """Re-save the graph at ``path`` with ``metadata`` (replacing any), its weights in one
    ``.weights`` file beside it when large."""
    import onnx

    graph = onnx.load(str(path))
    if metadata is not None:
        del graph.metadata_props[:]
        for key, value in metadata.items():
            graph.metadata_props.add(key=key, value=value)
    large = sum(t.ByteSize() for t in graph.graph.initializer) > EXTERNAL_DATA_BYTES
    onnx.save(
        graph,
        str(path),
        save_as_external_data=large,
        all_tensors_to_one_file=True,
        location=path.stem + ".weights" if large else None,
    )


def _trace(module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str], axes: dict) -> None:
    with warnings.catch_warnings():
        # The tracer's notes on Python values it records as constants, and the TorchScript
        # exporter's deprecation notice: the graphs are checked by the tests, not by these.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
        )


def export_sherpa_onnx(
    name_or_path: str | Path,
    out_dir: str | Path,
    *,
    prefix: str | None = None,
    int8: bool = False,
) -> SherpaOnnxFiles:
    """Load a Whisper checkpoint with oasr and write it in sherpa-onnx's Whisper ONNX layout.

    Args:
        name_or_path: any Whisper checkpoint ``oasr.load_pretrained`` reads (a bundled name,
            a Hugging Face / CTranslate2 / openai-whisper checkpoint).
        out_dir: where the files go (created if missing).
        prefix: the files' common prefix (default: the checkpoint's name).
        int8: also write ``.int8.onnx`` graphs (onnxruntime dynamic quantisation of the
            MatMul weights to int8, as sherpa-onnx's own export does).

    Returns:
        The paths written.

    Raises:
        ValueError: the checkpoint is not a Whisper model, or its vocabulary lacks a token
            sherpa-onnx needs.
    """
    from oasr.models.loaders import load_pretrained

    loaded = load_pretrained(name_or_path, device="cpu", dtype="float32")
    if not isinstance(loaded.model, WhisperModel) or loaded.tokenizer is None:
        raise ValueError(f"{name_or_path}: a {loaded.architecture} checkpoint; the sherpa-onnx export takes Whisper")
    model = loaded.model.eval()
    tokenizer = model.aed_vocabulary(loaded.tokenizer)
    prefix = prefix or Path(str(name_or_path)).name
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = SherpaOnnxFiles(
        encoder=out / f"{prefix}-encoder.onnx",
        decoder=out / f"{prefix}-decoder.onnx",
        tokens=out / f"{prefix}-tokens.txt",
        encoder_int8=out / f"{prefix}-encoder.int8.onnx" if int8 else None,
        decoder_int8=out / f"{prefix}-decoder.int8.onnx" if int8 else None,
    )
    cfg = model.config
    with torch.inference_mode():
        mel = torch.zeros(1, cfg.n_mels, 200)  # any even length: the frame axis is symbolic (and tracing is quicker)
        encoder = SherpaWhisperEncoder(model.encoder, model.decoder)
        cross_k, cross_v = encoder(mel)
        _trace(
            encoder,
            (mel,),
            files.encoder,
            ["mel"],
            ["n_layer_cross_k", "n_layer_cross_v"],
            {
                "mel": {0: "n_audio", 2: "T"},
                "n_layer_cross_k": {1: "n_audio", 2: "T"},
                "n_layer_cross_v": {1: "n_audio", 2: "T"},
            },
        )
        _save(files.encoder, sherpa_metadata(model, tokenizer, prefix))
        cache = torch.zeros(cfg.n_text_layer, 1, cfg.n_text_ctx, cfg.n_text_state)
        tokens = torch.full((1, 1), tokenizer.special.sot, dtype=torch.long)
        offset = torch.tensor([3], dtype=torch.long)  # traced mid-sequence, so the cache slices stay symbolic
        _trace(
            SherpaWhisperDecoder(model.decoder),
            (tokens, cache, cache.clone(), cross_k, cross_v, offset),
            files.decoder,
            ["tokens", *DECODER_CACHES_IN, "n_layer_cross_k", "n_layer_cross_v", "offset"],
            ["logits", *DECODER_CACHES_OUT],
            {
                "tokens": {0: "n_audio", 1: "n_tokens"},
                "in_n_layer_self_k_cache": {1: "n_audio"},
                "in_n_layer_self_v_cache": {1: "n_audio"},
                "n_layer_cross_k": {1: "n_audio", 2: "T"},
                "n_layer_cross_v": {1: "n_audio", 2: "T"},
                "logits": {0: "n_audio", 1: "n_tokens"},
                "out_n_layer_self_k_cache": {1: "n_audio"},
                "out_n_layer_self_v_cache": {1: "n_audio"},
            },
        )
        if sum(p.numel() * p.element_size() for p in model.decoder.parameters()) > EXTERNAL_DATA_BYTES:
            _save(files.decoder)
    write_tokens(tokenizer, files.tokens)
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        for src, dst in ((files.encoder, files.encoder_int8), (files.decoder, files.decoder_int8)):
            quantize_dynamic(str(src), str(dst), op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
    return files
