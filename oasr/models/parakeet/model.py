"""Parakeet: NVIDIA's FastConformer encoder with a CTC head (Hugging Face ``parakeet_ctc``) or
NeMo's LSTM transducer (``parakeet_rnnt``, ``parakeet_tdt``).

    feats (B, T, F) -> 8x depthwise-striding Conv2d subsampling -> x sqrt(D)
    -> N x [ x + 0.5 FF(LN x); x + RelPosXL-MHSA(LN x); x + Conv(LN x); x + 0.5 FF(LN x); LN ]
    -> CTC head -> log-probs (B, T / 8, V)

Module and tensor names follow the Hugging Face checkpoint, except the attention
projections, which use the layer's ``linear_q`` / ``linear_k`` / ``linear_v`` /
``linear_out`` / ``linear_pos`` (the converter renames them) and the CTC head, a
(V, D) ``CtcProjection`` where Hugging Face stores a kernel-1 Conv1d.

Every mask is per utterance: the subsampling zeroes each row's frames past its
length after every convolution, attention takes key lengths, and the convolution
module zeroes padded frames before its depthwise kernel, so a padded batch gives
each row what it gets alone. Offline only.

The attention is full context, or within a band of ``att_context_size`` = (left, right) frames
(``oasr.layers.relpos_local``: NeMo's ``rel_pos_local_attn`` for long audio, or its ``regular``
band mask), memory linear in the length; ``ParakeetEncoder.set_attention`` switches it at load
(``EngineConfig.attention_model`` / ``att_context_size``), as NeMo's ``change_attention_model``.

The transducers share the encoder and add ``oasr.models.nemotron.predictor``'s LSTM predictor
and additive joint (Hugging Face ``decoder.`` -> ``predictor.``, ``encoder_projector.`` ->
``joiner.encoder_proj.``, ``joint.head.`` -> ``joiner.head.``); a TDT head carries
``len(durations)`` duration logits after the vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from oasr.layers import ConformerConvolution, Conv2d, FeedForward, LayerNorm, Linear, Relu
from oasr.layers.ctc import CtcProjection
from oasr.layers.packing import Packing
from oasr.layers.relpos_local import LocalRelPositionAttention
from oasr.layers.relpos_xl import xl_relative_positions
from oasr.models.base import BaseAsrModel, BaseEncoder, DecodeType
from oasr.models.ctc import BlankVocabMixin, CtcMixin, EncoderCtcModel
from oasr.models.nemotron.predictor import AdditiveJoint, LstmPredictor
from oasr.models.nemotron.search import NEMO_SEARCHES, GreedyResult, greedy_search, nemo_transducer_search
from oasr.models.parakeet.config import (
    ParakeetConfig,
    ParakeetEncoderConfig,
    ParakeetHybridConfig,
    ParakeetTransducerConfig,
    check_attention,
)


def _valid(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """(B,) lengths -> (B, n) bool, True at frames inside each row."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


class ParakeetSubsampling(nn.Module):
    """The depthwise-striding Conv2d front end over (time, mel).

    A full 1 -> C strided conv, then (log2(factor) - 1) x [depthwise strided conv,
    pointwise conv], each stage followed by ReLU; the (C, F') map of every output
    frame is flattened channel-major and projected to D. ``layers`` keeps the
    checkpoint's indices (the ReLUs hold no weights: 0, 2, 3, 5, 6 for a factor of 8).

    Shapes:
        feats: (B, T, F), lengths: (B,) -> (B, T', D), (B,) with T' from ``output_lengths``
    """

    def __init__(self, cfg: ParakeetEncoderConfig) -> None:
        super().__init__()
        k, s, c = cfg.subsampling_conv_kernel_size, cfg.subsampling_conv_stride, cfg.subsampling_conv_channels
        self.kernel_size, self.stride, self.padding = k, s, (k - 1) // 2
        layers: list[nn.Module] = [Conv2d(1, c, k, stride=s, padding=self.padding), Relu()]
        for _ in range(cfg.num_subsampling_layers - 1):
            layers += [
                Conv2d(c, c, k, stride=s, padding=self.padding, groups=c),
                Conv2d(c, c, 1),
                Relu(),
            ]
        self.layers = nn.ModuleList(layers)
        freq = cfg.num_mel_bins
        for _ in range(cfg.num_subsampling_layers):
            freq = self._reduce(freq)
        self.linear = Linear(c * freq, cfg.hidden_size)

    def _reduce(self, n: Any) -> Any:
        """Length after one strided convolution."""
        return (n + 2 * self.padding - self.kernel_size) // self.stride + 1

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames out of the front end for ``lengths`` frames in."""
        for layer in self.layers:
            if isinstance(layer, Conv2d) and layer.stride != 1:
                lengths = self._reduce(lengths)
        return lengths

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = (feats * _valid(lengths, feats.shape[1])[..., None].to(feats.dtype))[:, None]  # (B, 1, T, F)
        for layer in self.layers:
            x = layer(x)
            if isinstance(layer, Conv2d):
                if layer.stride != 1:
                    lengths = self._reduce(lengths)
                # Frames past a row's end are zero, as the next kernel would see them alone.
                x = x * _valid(lengths, x.shape[2])[:, None, :, None].to(x.dtype)
        b, c, t, f = x.shape
        x = x.transpose(1, 2).reshape(b, t, c * f)  # (B, T', C * F'), channel-major
        return self.linear(x), lengths


class FastConformerBlock(nn.Module):
    """The macaron conformer block of every FastConformer (Parakeet's, Nemotron's): half-step
    feed-forwards around the self-attention and the convolution module, a final LayerNorm. A
    subclass builds its ``self_attn`` and ``conv``; ``macaron`` runs the block around them, each
    caller saying how they are called (closures over what they take).
    """

    def __init__(self, cfg: Any, self_attn: nn.Module, conv: nn.Module) -> None:
        super().__init__()
        d = cfg.hidden_size
        ff = dict(activation=cfg.hidden_act, bias=cfg.attention_bias, names=("linear1", "linear2"))
        self.norm_feed_forward1 = LayerNorm(d)
        self.feed_forward1 = FeedForward(d, cfg.intermediate_size, **ff)
        self.norm_self_att = LayerNorm(d)
        self.self_attn = self_attn
        self.norm_conv = LayerNorm(d)
        self.conv = conv
        self.norm_feed_forward2 = LayerNorm(d)
        self.feed_forward2 = FeedForward(d, cfg.intermediate_size, **ff)
        self.norm_out = LayerNorm(d)

    def macaron(
        self,
        x: torch.Tensor,
        attend: Callable[[torch.Tensor], torch.Tensor],
        convolve: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The block over ``x`` with ``attend`` / ``convolve`` standing for ``self_attn`` / ``conv``."""
        h = self.feed_forward1(self.norm_feed_forward1(x))
        y, x = self.norm_self_att.add_forward(0.5 * h, x)
        y, x = self.norm_conv.add_forward(attend(y), x)
        y, x = self.norm_feed_forward2.add_forward(convolve(y), x)
        return self.norm_out(x + 0.5 * self.feed_forward2(y))


class ParakeetBlock(FastConformerBlock):
    """Parakeet's block: Transformer-XL relative-position attention (full, or within the
    config's ``att_context_size`` band: ``oasr.layers.relpos_local``), a batch-norm convolution.

    Shapes:
        x: (B, T, D), pos_emb: (2T - 1, D) (None under a band), lengths: (B,), valid: (B, T) bool
        -> (B, T, D);
        with ``packing``, x is (N, D) packed rows, T is ``packing.max_len`` and ``valid``
        is None -> (N, D)
    """

    def __init__(self, cfg: ParakeetEncoderConfig) -> None:
        d = cfg.hidden_size
        attn = LocalRelPositionAttention(d, cfg.num_attention_heads, bias=cfg.attention_bias)
        conv = ConformerConvolution(
            d, cfg.conv_kernel_size, bias=cfg.convolution_bias, norm="batch_norm", activation=cfg.hidden_act
        )
        super().__init__(cfg, attn, conv)
        self.set_attention(cfg)

    def set_attention(self, cfg: ParakeetEncoderConfig) -> None:
        """Attend as ``cfg`` says (``attention_model``, ``att_context_size``)."""
        self.self_attn.set_context(cfg.attention_context, nemo_positions=cfg.attention_model == "rel_pos_local_attn")

    def forward(
        self,
        x: torch.Tensor,
        pos_emb: torch.Tensor,
        lengths: torch.Tensor,
        valid: torch.Tensor | None,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        return self.macaron(
            x, lambda y: self.self_attn(y, pos_emb, lengths, packing), lambda y: self.conv(y, valid, packing)
        )


class FastConformerEncoder(BaseEncoder):
    """What every FastConformer encoder has (Parakeet's here, Nemotron's cache-aware one): the
    subsampling, the input scale and a stack of blocks. A subclass names its
    ``subsampling_class`` and ``block_class`` (each built from the encoder config) and says
    what its blocks take beside the hidden states (``block_inputs``).

    Shapes:
        feats: (B, T, num_mel_bins), feat_lens: (B,) -> hidden (B, T', D), hidden_lens (B,)
    """

    subsampling_class: type[nn.Module]
    block_class: type[nn.Module]

    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.subsampling_rate = cfg.subsampling_factor
        self.output_size = cfg.hidden_size
        self.config = cfg
        self.subsampling = self.subsampling_class(cfg)
        self.layers = nn.ModuleList(self.block_class(cfg) for _ in range(cfg.num_hidden_layers))
        self.input_scale = math.sqrt(cfg.hidden_size) if cfg.scale_input else 1.0

    def output_lengths(self, feat_lens: torch.Tensor) -> torch.Tensor:
        """Encoder frames for ``feat_lens`` feature frames."""
        return self.subsampling.output_lengths(feat_lens)

    def block_inputs(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[Any, ...]:
        """What each block takes after the hidden states ``x`` (B, T', D) of a padded batch."""
        raise NotImplementedError(f"{type(self).__name__} must say what its blocks take (block_inputs)")

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = self.embed(feats, feat_lens)
        inputs = self.block_inputs(x, lengths)
        for layer in self.layers:
            x = layer(x, *inputs)
        return x, lengths

    def embed(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Subsampling and input scale of a padded batch. -> (B, T', D), (B,)"""
        if feats.dim() != 3 or feats.shape[-1] != self.config.num_mel_bins:
            raise ValueError(
                f"features must be (B, T, {self.config.num_mel_bins}) for this encoder, got {tuple(feats.shape)}"
            )
        x, lengths = self.subsampling(feats, feat_lens.to(device=feats.device, dtype=torch.long))
        if self.input_scale != 1.0:
            x = x * self.input_scale
        return x, lengths


class ParakeetEncoder(FastConformerEncoder):
    """FastConformer encoder (full context): its blocks take Transformer-XL relative positions."""

    subsampling_class = ParakeetSubsampling
    block_class = ParakeetBlock

    def set_attention(self, attention_model: str | None, att_context_size: tuple[int, int] | None) -> None:
        """Switch every layer's attention, as NeMo's ``change_attention_model`` does: e.g.
        ``("rel_pos_local_attn", (128, 128))`` for linear memory on long audio (the weights
        serve every choice). None keeps the current value.

        Raises:
            ValueError: an attention model or context oasr does not implement (naming it).
        """
        cfg = self.config
        model = cfg.attention_model if attention_model is None else attention_model
        context = cfg.att_context_size if att_context_size is None else tuple(int(c) for c in att_context_size)
        check_attention(model, context)
        self.config = dataclasses.replace(cfg, attention_model=model, att_context_size=context)
        for layer in self.layers:
            layer.set_attention(self.config)

    def _positions(self, t: int, x: torch.Tensor) -> torch.Tensor | None:
        """Full attention's (2T' - 1, D) relative positions; None under a band (it makes its own)."""
        if self.config.attention_context is not None:
            return None
        return xl_relative_positions(t, self.config.hidden_size, device=x.device, dtype=x.dtype)

    def block_inputs(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[Any, ...]:
        t = x.shape[1]
        return self._positions(t, x), lengths, _valid(lengths, t)

    def forward_packed(self, feats: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode packed rows: the subsampling runs on the rows padded (its strided
        convolutions look along time), the blocks on the subsampled frames packed.

        Shapes:
            feats: (N, num_mel_bins), cu_seqlens: (B + 1,) -> hidden (N', D), cu_seqlens (B + 1,)
        """
        rows = Packing.from_cu_seqlens(cu_seqlens, device=feats.device)
        x, lengths = self.embed(rows.pad(feats), rows.lengths)
        packing = Packing(lengths)
        x = packing.unpad(x)  # (N', D)
        pos_emb = self._positions(packing.max_len, x)
        for layer in self.layers if packing.total else ():  # nothing to run when no row has a frame
            x = layer(x, pos_emb, lengths, None, packing)
        return x, packing.cu_seqlens


class ParakeetCtcModel(EncoderCtcModel):
    """FastConformer + CTC head (``ctc_head``); the blank is the last id."""

    architecture = "parakeet"
    config_class = ParakeetConfig
    token_timing = "nemo"  # word and segment times as NeMo's transcribe(timestamps=True)
    encoder_class = ParakeetEncoder


class ParakeetTransducerModel(BlankVocabMixin, BaseAsrModel):
    """FastConformer + NeMo LSTM transducer: RNN-T, or TDT when the config has ``durations``."""

    architecture = "parakeet_transducer"
    capabilities = frozenset({DecodeType.TRANSDUCER})
    token_timing = "nemo"  # word and segment times as NeMo's transcribe(timestamps=True)
    config_class = ParakeetTransducerConfig
    encoder_class: type[FastConformerEncoder] = ParakeetEncoder

    def __init__(self, config: ParakeetTransducerConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        config, dj = self.config, self.config.decoder_hidden_size
        self.encoder = self.encoder_class(config.encoder)
        self.predictor = LstmPredictor(config.vocab_size, dj, config.num_decoder_layers, int(config.blank_id))
        self.joiner = AdditiveJoint(self.encoder.output_size, dj, config.vocab_size, len(self.durations))

    @property
    def durations(self) -> tuple[int, ...]:
        """TDT duration values (empty for RNN-T, and for a config without ``durations``)."""
        return tuple(getattr(self.config, "durations", ()))

    transducer_search = nemo_transducer_search
    """The engine's transducer search (``oasr.engine.decode.transducer``): NeMo's batched greedy and
    beam searches over RNN-T / TDT (``oasr.models.nemotron.search``)."""
    transducer_searches = NEMO_SEARCHES
    """The ``search`` values ``transducer_search`` takes (greedy first)."""

    @torch.no_grad()
    def greedy_decode(self, feats: torch.Tensor, feat_lens: torch.Tensor, *encoder_args: Any) -> GreedyResult:
        """Encode (``encoder_args`` go on to ``encode_offline``: Nemotron's prompt ids) and run
        batched greedy RNN-T / TDT search (``oasr.models.nemotron.search``)."""
        hidden, lens = self.encode_offline(feats, feat_lens, *encoder_args)
        return greedy_search(
            self.joiner,
            self.predictor,
            hidden,
            lens,
            blank_id=self.blank_id,
            max_symbols_per_step=self.config.max_symbols_per_step,
            durations=self.durations or None,
        )


class ParakeetHybridModel(CtcMixin, ParakeetTransducerModel):
    """NeMo's hybrid transducer + CTC (``EncDecHybridRNNTCTCBPEModel``): one encoder, both heads.
    The transducer decodes by default (NeMo's ``cur_decoder``), ``decode_type="ctc"`` reads the CTC
    head; both share the vocabulary and its blank (the last id)."""

    architecture = "parakeet_hybrid"
    capabilities = frozenset({DecodeType.TRANSDUCER, DecodeType.CTC})
    default_decode_type = DecodeType.TRANSDUCER

    config_class = ParakeetHybridConfig

    def __init__(self, config: ParakeetHybridConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        self.ctc_head = CtcProjection(self.encoder.output_size, self.config.vocab_size)

    @property
    def ctc_projection(self) -> CtcProjection:
        return self.ctc_head
