"""Paraformer / BiCifParaformer (FunASR): SANM encoder -> CIF predictor -> SANM decoder in
one parallel pass. Module names follow FunASR's state dict (``encoder.*``, ``predictor.*``,
``decoder.*``), so a ``model.pt`` maps 1:1 apart from the decoder's unused input embedding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from oasr.models.base import BaseAsrModel, DecodeType
from oasr.models.ctc import BlankVocabMixin
from oasr.models.paraformer.config import ParaformerConfig
from oasr.models.paraformer.decoder import ParaformerDecoder
from oasr.models.paraformer.encoder import ParaformerEncoder
from oasr.models.paraformer.predictor import CifOutput, CifPredictor


class ParaformerModel(BlankVocabMixin, BaseAsrModel):
    """A FunASR Paraformer; with a ``CifPredictorV3`` the BiCif variant (timestamp head).

    The decode strategy calls, per batch: ``encode_offline`` -> ``cif`` -> ``decode_cif``
    (and ``predictor.upsampled_alphas`` for BiCif timestamps).
    """

    architecture = "paraformer"
    capabilities = frozenset({DecodeType.PARAFORMER})
    config_class = ParaformerConfig

    def __init__(self, config: ParaformerConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        config = self.config
        d = config.encoder.output_size
        self.encoder = ParaformerEncoder(config.encoder)
        self.predictor = CifPredictor(d, config.predictor)
        self.decoder = ParaformerDecoder(d, config.vocab_size, config.decoder)

    def cif(self, hidden: torch.Tensor, lens: torch.Tensor) -> CifOutput:
        """The predictor over encoder states (``hidden`` (B, T, D), ``lens`` (B,))."""
        return self.predictor(hidden, lens)

    def decode_cif(self, hidden: torch.Tensor, lens: torch.Tensor, cif: CifOutput) -> torch.Tensor:
        """Decoder log-probabilities of the CIF tokens.

        Shapes:
            hidden: (B, T, D), lens: (B,) -> (B, N, V) float32 log-probs
        """
        embeds = cif.embeds.to(hidden.dtype)
        logits = self.decoder(embeds, cif.token_lens, hidden, lens)
        return torch.log_softmax(logits.float() if logits.dtype != torch.float64 else logits, dim=-1)

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, CifOutput]:
        """Encoder, CIF and decoder: log-probs (B, N, V) and the CIF output."""
        hidden, lens = self.encode_offline(feats, feat_lens)
        cif = self.cif(hidden, lens)
        return self.decode_cif(hidden, lens, cif), cif
