"""icefall's stateless transducer over a Zipformer2 encoder.

    feats -> ZipformerEncoder -> enc (B, T', D_enc)
    labels: the last ``context_size`` labels (a window; the start window is
        [-1] * (context_size - 1) + [blank], a negative label embedding to zero)
        -> embedding -> grouped Conv1d over the window (groups of 4 channels) -> ReLU
        -> pred (B, D_pred)                                   (StatelessPredictor)
    logits = output_linear(tanh(encoder_proj(enc) + decoder_proj(pred)))   (IcefallJoiner)

Tensor names follow icefall's ``AsrModel`` except the predictor, ``decoder.*`` there and
``predictor.*`` here (the engine's transducer contract names it), and a hybrid's CTC head
``ctc_output.1.*`` -> ``ctc_output.*``. The search loops are in ``search.py``. A causal encoder
streams (the Zipformer's slot states); the search carried across its chunks is
``oasr.engine.streaming.transducer``, which shares the beam loop (``BeamSet``) of ``search.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from oasr.layers import Conv1d, CtcProjection, Embedding, Linear, Relu, Tanh
from oasr.models.base import BaseAsrModel, DecodeType
from oasr.models.ctc import CtcMixin
from oasr.models.decoders.base import Joiner, TransducerPredictor
from oasr.models.transducer.config import TransducerConfig
from oasr.models.transducer.search import BeamSet, TransducerResult, beam_advance, greedy_search, modified_beam_search
from oasr.models.zipformer.model import ZipformerEncoder


class StatelessPredictor(TransducerPredictor):
    """icefall's stateless prediction network; its state is the window of the last
    ``context_size`` labels, a (B, context_size) int64 tensor.

    Shapes:
        state: (B, context_size) -> predict: (B, decoder_dim)
    """

    label_window_state = True

    def __init__(self, vocab_size: int, decoder_dim: int, context_size: int, blank_id: int) -> None:
        super().__init__()
        self.context_size, self.blank_id = context_size, blank_id
        self.embedding = Embedding(vocab_size, decoder_dim)
        if context_size > 1:
            self.conv = Conv1d(decoder_dim, decoder_dim, context_size, groups=decoder_dim // 4, bias=False)
            self.relu = Relu()

    def init_state(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """icefall's start window ``[-1] * (context_size - 1) + [blank]`` per row."""
        window = [-1] * (self.context_size - 1) + [self.blank_id]
        return torch.tensor(window, dtype=torch.long, device=device).expand(batch_size, -1).clone()

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        """Prediction vectors of label windows (negative labels embed to zero).

        Shapes:
            labels: (N, context_size) -> (N, decoder_dim)
        """
        emb = self.embedding(labels.clamp(min=0))
        emb = emb * (labels >= 0)[..., None].to(emb.dtype)
        if self.context_size == 1:
            return emb[:, 0]
        return self.relu(self.conv(emb.transpose(1, 2))[..., 0])  # (N, D, 1) -> (N, D)

    def predict(self, state: torch.Tensor) -> torch.Tensor:
        return self(state)

    def advance(self, state: torch.Tensor, tokens: torch.Tensor, emit: torch.Tensor) -> torch.Tensor:
        """Shift ``tokens`` into the windows of the rows where ``emit`` is True."""
        shifted = torch.cat((state[:, 1:], tokens.to(state.dtype)[:, None]), dim=1)
        return torch.where(emit[:, None], shifted, state)

    def stack_states(self, states: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat(list(states), dim=0)

    def unstack_states(self, state: torch.Tensor) -> list[torch.Tensor]:
        return list(state.split(1, dim=0))


class IcefallJoiner(Joiner):
    """``output_linear(tanh(encoder_proj(enc) + decoder_proj(pred)))``; the projections are
    exposed so a search projects every encoder frame once.

    Shapes:
        enc: (..., D_enc), pred: (..., D_pred) -> (..., V)
    """

    def __init__(self, encoder_dim: int, decoder_dim: int, joiner_dim: int, vocab_size: int) -> None:
        super().__init__()
        self.encoder_proj = Linear(encoder_dim, joiner_dim)
        self.decoder_proj = Linear(decoder_dim, joiner_dim)
        self.tanh = Tanh()
        self.output_linear = Linear(joiner_dim, vocab_size)

    def forward(self, enc: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        return self.join(self.encoder_proj(enc), self.decoder_proj(pred))

    def join(self, enc_proj: torch.Tensor, pred_proj: torch.Tensor) -> torch.Tensor:
        """Logits from already-projected inputs (icefall's ``project_input=False``)."""
        return self.output_linear(self.tanh(enc_proj + pred_proj))


class TransducerModel(CtcMixin, BaseAsrModel):
    """Zipformer2 encoder + stateless predictor + joiner; a hybrid checkpoint's CTC head
    makes it serve CTC too."""

    architecture = "transducer"
    default_decode_type = DecodeType.TRANSDUCER
    config_class = TransducerConfig

    def __init__(self, config: TransducerConfig | Mapping[str, Any]) -> None:
        super().__init__(config)
        config = self.config
        self.encoder = ZipformerEncoder(config.encoder)
        self.predictor = StatelessPredictor(config.vocab_size, config.decoder_dim, config.context_size, config.blank_id)
        self.joiner = IcefallJoiner(config.encoder.output_dim, config.decoder_dim, config.joiner_dim, config.vocab_size)
        self.ctc_output = CtcProjection(config.encoder.output_dim, config.vocab_size) if config.use_ctc else None

    @property
    def capabilities(self) -> frozenset[DecodeType]:  # type: ignore[override]
        """Transducer decoding, and CTC where the checkpoint has the head."""
        caps = {DecodeType.TRANSDUCER}
        if self.ctc_output is not None:
            caps.add(DecodeType.CTC)
        return frozenset(caps)

    @property
    def ctc_projection(self) -> CtcProjection | None:  # type: ignore[override]
        return self.ctc_output

    def forward_offline(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder + CTC head of a hybrid checkpoint.

        Shapes:
            feats: (B, T, F), feat_lens: (B,) -> log_probs (B, T', V) float32, lens (B,)

        Raises:
            NotImplementedError: a transducer-only checkpoint (no ``ctc_output``).
        """
        if self.ctc_output is None:
            raise NotImplementedError(
                "this transducer checkpoint has no CTC head (ctc_output); decode it with decode_type='transducer'"
            )
        hidden, lens = self.encoder(feats, feat_lens)
        return self.ctc_output(hidden), lens

    def transducer_search(
        self,
        enc: torch.Tensor,
        enc_lens: torch.Tensor,
        *,
        beam_size: int,
        max_sym_per_frame: int | None,
        blank_penalty: float,
        context_graph: Any = None,
    ) -> TransducerResult:
        """The engine's transducer search: icefall's greedy search (``beam_size`` 1; one symbol
        per frame unless ``max_sym_per_frame`` says more) or modified beam search with beam
        ``beam_size`` (hotwords through ``context_graph``), batched over the rows.

        Shapes:
            enc: (B, T', D), enc_lens: (B,)
        """
        if beam_size == 1 and context_graph is None:
            return greedy_search(
                self, enc, enc_lens, max_sym_per_frame=max_sym_per_frame or 1, blank_penalty=blank_penalty
            )
        return modified_beam_search(
            self, enc, enc_lens, beam=beam_size, blank_penalty=blank_penalty, context_graph=context_graph
        )

    def start_beams(self, rows: int, beam: int) -> BeamSet:
        """Modified beam search carried across chunks (the engine's streaming search): ``rows``
        streams at the predictor's start window, ``beam`` slots each. The set joins others
        (``BeamSet.cat``), splits per row (``split``) and gives each row's best (``best``)."""
        return BeamSet.start(self, rows, beam, self.device, self.compute_dtype)

    def advance_beams(
        self, beams: BeamSet, enc_proj: torch.Tensor, enc_lens: list[int], *, frame0: list[int], blank_penalty: float
    ) -> None:
        """``beams`` over one chunk of each row's projected encoder output, in place; emission
        frames count from ``frame0`` per row.

        Shapes:
            enc_proj: (B, T, J) (``joiner.encoder_proj`` of the chunk)
        """
        beam_advance(self, beams, enc_proj, enc_lens, frame0=frame0, blank_penalty=blank_penalty)


__all__ = ["IcefallJoiner", "StatelessPredictor", "TransducerModel"]
