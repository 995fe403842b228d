"""Sortformer: NeMo's end-to-end diarizer (``SortformerEncLabelModel``).

    waveform -> log-mel (NeMo's preprocessor: ``ParakeetFrontend``)
    -> FastConformer (Parakeet's encoder: 8x subsampling, conformer blocks) (B, T, D_fc)
    -> encoder_proj (B, T, D_tf) where the widths differ
    -> transformer encoder (post-LN self-attention + ReLU feed-forward blocks; ``TransformerEncoder``)
    -> head: ReLU, Linear(D_tf, D_tf), ReLU, Linear(D_tf, S), sigmoid -> (B, T, S) speaker
       probabilities, one 80 ms frame each, zero past each row's frames

Reads top to bottom: the transformer's block, the transformer, the head, the model. Tensor names
are NeMo's (``transformer_encoder.layers.<i>.first_sub_layer.query_net``,
``sortformer_modules.first_hidden_to_hidden``, ...) except the FastConformer's, which the loader
renames as for Parakeet (``models/formats/nemo.NEMO_ENCODER_RENAMES``). The attention mask is per
row (key lengths), so a padded batch gives each row what it gets alone.

The streaming forward (``streaming.py``) runs the same pieces on [speaker cache, FIFO, chunk]:
``pre_encode`` (the subsampling alone) on each chunk, ``encode_embedded`` on the concatenation.
"""

from __future__ import annotations

import torch
from torch import nn

from oasr.diarization.sortformer.config import SortformerConfig, TransformerConfig
from oasr.layers import LayerNorm, Linear
from oasr.models.canary.model import CanaryAttention, CanaryFeedForward
from oasr.models.parakeet.model import ParakeetEncoder


def _valid(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """(B,) lengths -> (B, n) bool, True at frames inside each row."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


class TransformerBlock(nn.Module):
    """NeMo's ``TransformerEncoderBlock``: self-attention (``first_sub_layer``) and feed-forward
    (``second_sub_layer``), each added to its input; post-LN (``layer_norm_1`` after the
    attention, ``layer_norm_2`` after the feed-forward) or pre-LN.

    Shapes:
        x: (B, T, D), lengths: (B,) -> (B, T, D)
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.pre_ln = cfg.pre_ln
        self.layer_norm_1 = LayerNorm(d)
        self.first_sub_layer = CanaryAttention(d, cfg.num_attention_heads)
        self.layer_norm_2 = LayerNorm(d)
        self.second_sub_layer = CanaryFeedForward(d, cfg.inner_size, cfg.hidden_act)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        attn = self.first_sub_layer
        h = self.layer_norm_1(x) if self.pre_ln else x
        k, v = attn.kv(h)
        y = attn.attend(h, k, v, key_lengths=lengths) + x
        if not self.pre_ln:
            y = self.layer_norm_1(y)
        h = self.layer_norm_2(y) if self.pre_ln else y
        out = self.second_sub_layer(h) + y
        return out if self.pre_ln else self.layer_norm_2(out)


class TransformerEncoder(nn.Module):
    """NeMo's ``TransformerEncoder`` without future masking (Sortformer's).

    Shapes:
        x: (B, T, D), lengths: (B,) -> (B, T, D)
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.num_layers))
        final = cfg.pre_ln and cfg.pre_ln_final_layer_norm
        self.final_layer_norm = LayerNorm(cfg.hidden_size) if final else None

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, lengths)
        return x if self.final_layer_norm is None else self.final_layer_norm(x)


class SpeakerHead(nn.Module):
    """``SortformerModules.forward_speaker_sigmoids``: ReLU, ``first_hidden_to_hidden``, ReLU,
    ``single_hidden_to_spks``, sigmoid; and the ``encoder_proj`` from the FastConformer's width.

    Shapes:
        hidden: (B, T, D_tf) -> probabilities (B, T, S)
    """

    def __init__(self, cfg: SortformerConfig) -> None:
        super().__init__()
        d = cfg.transformer.hidden_size
        self.encoder_proj = Linear(cfg.encoder.hidden_size, d) if cfg.projects else None
        self.first_hidden_to_hidden = Linear(d, d)
        self.single_hidden_to_spks = Linear(d, cfg.num_speakers)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.first_hidden_to_hidden(torch.relu(hidden))
        return torch.sigmoid(self.single_hidden_to_spks(torch.relu(h)))


class SortformerModel(nn.Module):
    """The FastConformer, the transformer encoder and the speaker head.

    Shapes:
        feats: (B, T, F), feat_lens: (B,) -> probabilities (B, T', S), frame counts (B,)
    """

    def __init__(self, config: SortformerConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = ParakeetEncoder(config.encoder)
        self.transformer_encoder = TransformerEncoder(config.transformer)
        self.sortformer_modules = SpeakerHead(config)

    @property
    def subsampling_factor(self) -> int:
        return self.config.encoder.subsampling_factor

    def pre_encode(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The FastConformer's subsampling alone (NeMo's ``encoder.pre_encode``), before its
        input scale. -> (B, T', D_fc), (B,)"""
        return self.encoder.subsampling(feats, feat_lens.to(device=feats.device, dtype=torch.long))

    def encode_embedded(self, embs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Speaker probabilities of pre-encoded frames (NeMo's ``frontend_encoder`` with
        ``bypass_pre_encode`` then ``forward_infer``): zero past each row's ``lengths``.

        Shapes:
            embs: (B, T', D_fc), lengths: (B,) -> (B, T', S)
        """
        enc = self.encoder
        x = embs * enc.input_scale if enc.input_scale != 1.0 else embs
        inputs = enc.block_inputs(x, lengths)
        for layer in enc.layers:
            x = layer(x, *inputs)
        head = self.sortformer_modules
        if head.encoder_proj is not None:
            x = head.encoder_proj(x)
        x = self.transformer_encoder(x, lengths)
        return head(x) * _valid(lengths, x.shape[1])[..., None].to(x.dtype)

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The offline forward (NeMo's ``frontend_encoder`` + ``forward_infer``)."""
        embs, lengths = self.pre_encode(feats, feat_lens)
        return self.encode_embedded(embs, lengths), lengths
