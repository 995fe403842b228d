"""The members only CTC families have: a CTC head, greedy best paths read straight from it,
and sequence packing. A family that decodes with CTC subclasses ``CtcMixin`` beside
``BaseAsrModel`` and sets ``ctc_projection``; the base contract stays family-neutral. A family
that is just an encoder and a CTC head subclasses ``EncoderCtcModel`` and declares its classes."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from oasr.layers.ctc import CtcProjection
from oasr.models.base import BaseAsrModel, BaseEncoder, DecodeType, is_unimplemented
from oasr.models.configs import config_int


class BlankVocabMixin:
    """``blank_id`` and ``vocab_size`` read off the model config (``config.blank_id``,
    ``config.vocab_size``): what the families whose output vocabulary has a blank (CTC,
    transducers, Paraformer) tell their decode strategies."""

    blank_id = config_int("blank_id")
    vocab_size = config_int("vocab_size")


class CtcMixin(BlankVocabMixin):
    """CTC members for a ``BaseAsrModel`` subclass (``class M(CtcMixin, BaseAsrModel)``)."""

    ctc_projection: nn.Module | None = None
    """The ``CtcProjection`` of a CTC family (set by the family), used by
    ``forward_offline_best_path``; None where the family has none."""

    def forward_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder + CTC head (a family with more to its fused forward overrides this).

        Shapes:
            feats: (B, T, F), feat_lens: (B,) -> log_probs (B, T', V) float32, lens (B,)
        """
        hidden, lens = self.encode_offline(feats, feat_lens)
        return self.ctc_log_probs(hidden), lens

    def ctc_log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """CTC log-probabilities of encoder states, through the family's ``ctc_projection``.

        Shapes:
            hidden: (B, T', D) -> (B, T', V) float32

        Raises:
            NotImplementedError: the family has no CTC head.
        """
        head = self.ctc_projection
        if head is None:
            raise NotImplementedError(f"{type(self).__name__} has no CTC head")
        return head(hidden)

    def forward_offline_best_path(
        self, feats: torch.Tensor, feat_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What greedy CTC decoding reads: each frame's best symbol and its log-probability.

        With a ``ctc_projection``: the encoder, then the head's ``best_path`` (max and
        log-sum-exp of the logits, no (B, T', V) log-probs); otherwise from
        ``forward_offline``'s log-probs.

        Shapes:
            -> log-prob (B, T') float32, id (B, T') int64, lens (B,)
        """
        head = self.ctc_projection
        if head is None:
            log_probs, lens = self.forward_offline(feats, feat_lens)
            top, ids = log_probs.max(dim=-1)
            return top, ids, lens
        hidden, lens = self.encode_offline(feats, feat_lens)
        top, ids = head.best_path(hidden)
        return top, ids, lens

    @property
    def supports_packing(self) -> bool:  # type: ignore[override]
        """Whether ``forward_offline_packed`` serves: the encoder encodes packed rows and
        the family has a CTC head."""
        return not is_unimplemented(self.encoder.forward_packed) and self.ctc_projection is not None

    def encode_offline_packed(self, feats: torch.Tensor, cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder only over packed rows (``BaseEncoder.forward_packed``).

        Shapes:
            feats: (N, F), cu_seqlens: (B + 1,) -> hidden (N', D), cu_seqlens (B + 1,)
        """
        if feats.dim() != 2:
            raise ValueError(f"packed features must be (N, F) rows end to end, got {tuple(feats.shape)}")
        return self.encoder.forward_packed(feats, cu_seqlens)

    def forward_offline_packed(
        self, feats: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gapless variable-length forward over packed rows (sequence packing): the
        encoder, then the CTC head, with no frame spent on padding outside attention.

        Shapes:
            feats: (N, F), cu_seqlens: (B + 1,) -> log-probs (N', V) float32, cu_seqlens (B + 1,)
        """
        if not self.supports_packing:
            raise NotImplementedError(
                f"{type(self).__name__} does not support sequence packing; the engine pads batches instead"
            )
        hidden, cu = self.encode_offline_packed(feats, cu_seqlens)
        return self.ctc_projection(hidden), cu


class EncoderCtcModel(CtcMixin, BaseAsrModel):
    """An encoder and a CTC head over its states: a family declares ``config_class``,
    ``encoder_class`` (built from ``config.encoder``, or the whole config with
    ``encoder_reads_model_config``) and the head's checkpoint name (``ctc_head_name``);
    the head maps ``encoder.output_size`` to ``config.vocab_size``.
    """

    capabilities = frozenset({DecodeType.CTC})
    encoder_class: ClassVar[type[BaseEncoder]]
    encoder_reads_model_config: ClassVar[bool] = False
    ctc_head_name: ClassVar[str] = "ctc_head"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.encoder = self.encoder_class(self.config if self.encoder_reads_model_config else self.config.encoder)
        head = CtcProjection(self.encoder.output_size, self.config.vocab_size)
        self.add_module(self.ctc_head_name, head)

    @property
    def ctc_projection(self) -> CtcProjection:  # type: ignore[override]
        return getattr(self, self.ctc_head_name)


__all__ = ["BlankVocabMixin", "CtcMixin", "EncoderCtcModel"]
