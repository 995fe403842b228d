"""icefall transducer checkpoints (the directory layout of ``oasr.models.zipformer.convert``).

``IcefallTransducerConverter`` auto-detects a transducer-only directory (``decoder.*`` and
``joiner.*``, no ``ctc_output``: most icefall releases). A hybrid directory (both heads)
auto-detects as ``zipformer`` (CTC); ``IcefallHybridTransducerConverter`` reads it when asked
for ``architecture="transducer"``, keeping the CTC head so the model serves both decode types.

The predictor's config comes from its shapes: ``decoder.embedding.weight`` (V, decoder_dim),
``decoder.conv.weight`` (decoder_dim, 4, context_size; absent for context_size 1),
``joiner.encoder_proj.weight`` (joiner_dim, D_enc). ``decoder.*`` is renamed ``predictor.*``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from oasr.models.base import DecodeType, DecodingSpec, LoadError
from oasr.models.registry import CheckpointBundle
from oasr.models.transducer.config import TransducerConfig
from oasr.models.zipformer.convert import (
    IcefallCheckpoint,
    IcefallDirectoryConverter,
    encoder_config,
    encoder_state,
    looks_like_icefall,
    read_checkpoint,
    sniff_kind,
    tokenizer_spec,
    vocab_size,
)

ARCH = "transducer"


class IcefallTransducerConverter(IcefallDirectoryConverter):
    """A transducer-only icefall directory (auto-detected)."""

    architecture = ARCH

    def can_load(self, path: Path) -> bool:
        return looks_like_icefall(Path(path)) and sniff_kind(Path(path)) == "transducer"

    def load(self, path: Path) -> CheckpointBundle:
        return self.read(read_checkpoint(Path(path)), str(path))

    def read(self, ckpt: IcefallCheckpoint, source: str) -> CheckpointBundle:
        """Read a checkpoint with ``decoder.*`` / ``joiner.*`` into a ``TransducerModel`` bundle.

        Raises:
            LoadError: no predictor / joiner, or shapes that do not fit together.
        """
        if not ckpt.has_transducer:
            raise LoadError(
                f"{ckpt.weights}: no decoder.embedding.weight / joiner.output_linear.weight: not a transducer "
                f"checkpoint (a CTC-only one loads as architecture='zipformer')"
            )
        s = ckpt.state
        vocab, decoder_dim = s["decoder.embedding.weight"].shape
        conv = s.get("decoder.conv.weight")
        context = 1 if conv is None else int(conv.shape[-1])
        joiner_dim, enc_dim = s["joiner.encoder_proj.weight"].shape
        encoder = encoder_config(ckpt)
        if enc_dim != encoder.output_dim or s["joiner.output_linear.weight"].shape[0] != vocab:
            raise LoadError(
                f"{ckpt.weights}: the joiner ({tuple(s['joiner.encoder_proj.weight'].shape)}, output "
                f"{s['joiner.output_linear.weight'].shape[0]}) does not fit the encoder width {encoder.output_dim} "
                f"and vocabulary {vocab}"
            )
        if conv is not None and tuple(conv.shape[:2]) != (decoder_dim, 4):
            raise LoadError(f"{ckpt.weights}: decoder.conv.weight {tuple(conv.shape)} is not a groups-of-4 convolution")
        tokenizer, blank = tokenizer_spec(ckpt, vocab_size(ckpt))
        try:
            config = TransducerConfig(
                encoder=encoder,
                vocab_size=int(vocab),
                blank_id=blank,
                decoder_dim=int(decoder_dim),
                context_size=context,
                joiner_dim=int(joiner_dim),
                use_ctc=ckpt.has_ctc,
            )
        except ValueError as e:
            raise LoadError(f"{ckpt.directory}: {e}") from e
        state: dict[str, torch.Tensor] = encoder_state(ckpt)
        for key, tensor in s.items():
            if key.startswith("decoder."):
                state["predictor." + key[len("decoder.") :]] = tensor
            elif key.startswith("joiner."):
                state[key] = tensor
            elif key.startswith("ctc_output.1."):
                state["ctc_output." + key[len("ctc_output.1.") :]] = tensor
            elif not key.startswith(("encoder_embed.", "encoder.")):
                state[key] = tensor
        decoding = DecodingSpec(DecodeType.TRANSDUCER, params={"context_size": context})
        return self.bundle(ckpt, config, state, tokenizer, decoding, source)


class IcefallHybridTransducerConverter(IcefallTransducerConverter):
    """A hybrid icefall directory read as a transducer, only on request (it auto-detects as
    ``zipformer``); a CTC-only one gets ``load``'s error naming the missing predictor."""

    auto_detect = False

    def can_load(self, path: Path) -> bool:
        return looks_like_icefall(Path(path)) and sniff_kind(Path(path)) != "transducer"
