"""The NeMo transducer's label side: an LSTM prediction network and the additive joint.

Shared by the ``nemotron`` family and the Parakeet RNN-T / TDT checkpoints (both are NeMo's
``RNNTDecoder`` + ``RNNTJoint`` in Hugging Face's layout):

    predictor: label -> embedding -> L-layer LSTM -> decoder_projector -> pred (B, Dj)
    joint:     head(relu(encoder_proj(enc) + pred)) -> (B, V [+ len(durations)])

The predictor's first state is not zeros: it is the LSTM's response to the blank
embedding from a zero state (NeMo primes the network with blank as its start-of-sequence
label), computed once per batch. The state is recurrent, so beam search cannot gather a
label window out of it (``label_window_state = False``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import torch
from torch import nn

from oasr.layers import LSTM, Embedding, Linear
from oasr.models.decoders.base import Joiner, TransducerPredictor


class LstmState(NamedTuple):
    """Per-row predictor state.

    Attributes:
        h, c: LSTM hidden and cell states (L, B, H).
        pred: the projected output for the last label (B, Dj): what ``predict`` returns.
    """

    h: torch.Tensor
    c: torch.Tensor
    pred: torch.Tensor


class LstmPredictor(TransducerPredictor):
    """NeMo's ``RNNTDecoder``: embedding -> LSTM -> projection, blank-primed.

    Args:
        vocab_size: embedding rows (blank included).
        hidden_size: embedding, LSTM and projection width.
        num_layers: LSTM layers.
        blank_id: the label whose embedding primes the start state.

    Shapes:
        init_state(B) -> LstmState; predict(state) -> (B, hidden_size);
        advance(state, tokens (B,), emit (B,) bool) -> LstmState
    """

    label_window_state: ClassVar[bool] = False

    def __init__(self, vocab_size: int, hidden_size: int, num_layers: int, blank_id: int) -> None:
        super().__init__()
        self.blank_id = blank_id
        self.embedding = Embedding(vocab_size, hidden_size)
        self.lstm = LSTM(hidden_size, hidden_size, num_layers=num_layers)
        self.decoder_projector = Linear(hidden_size, hidden_size)

    def _step(self, tokens: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> LstmState:
        """One label per row through the network. tokens (B,) -> LstmState"""
        return self._step_embedded(self.embedding(tokens), h, c)

    def _step_embedded(self, emb: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> LstmState:
        """``_step`` from the labels' embeddings (B, H)."""
        out, (h, c) = self.lstm.step(emb, h, c)  # (B, H)
        return LstmState(h, c, self.decoder_projector(out))

    def init_state(self, batch_size: int, device: torch.device | str | None = None) -> LstmState:
        """The LSTM's response to blank from a zero state, for ``batch_size`` rows."""
        device = self.embedding.weight.device if device is None else device
        blank = torch.full((1,), self.blank_id, device=device, dtype=torch.long)
        emb = self.embedding(blank)  # (1, H): the LSTM's input, in the dtype it runs in
        zeros = emb.new_zeros(self.lstm.num_layers, 1, self.lstm.hidden_size)
        h, c, pred = self._step_embedded(emb, zeros, zeros)
        return LstmState(
            h.expand(-1, batch_size, -1).contiguous(),
            c.expand(-1, batch_size, -1).contiguous(),
            pred.expand(batch_size, -1).contiguous(),
        )

    def predict(self, state: LstmState) -> torch.Tensor:
        return state.pred

    def advance(self, state: LstmState, tokens: torch.Tensor, emit: torch.Tensor) -> LstmState:
        """Feed ``tokens`` to the rows where ``emit``; the others keep their state (rows that
        emitted blank do not move the predictor)."""
        new = self._step(tokens.clamp(min=0), state.h, state.c)
        keep_h = emit[None, :, None]
        return LstmState(
            torch.where(keep_h, new.h, state.h),
            torch.where(keep_h, new.c, state.c),
            torch.where(emit[:, None], new.pred, state.pred),
        )

    def stack_states(self, states: Sequence[LstmState]) -> LstmState:
        return LstmState(
            torch.cat([s.h for s in states], dim=1),
            torch.cat([s.c for s in states], dim=1),
            torch.cat([s.pred for s in states], dim=0),
        )

    def unstack_states(self, state: LstmState) -> list[LstmState]:
        return [
            LstmState(state.h[:, i : i + 1], state.c[:, i : i + 1], state.pred[i : i + 1])
            for i in range(state.pred.shape[0])
        ]


class AdditiveJoint(Joiner):
    """NeMo's ``RNNTJoint``: ``head(relu(encoder_proj(enc) + pred))``.

    The encoder projection is applied once per utterance by a search (``project_encoder``),
    then ``join`` runs per step; ``forward`` does both. A TDT joint's head is wider by
    ``num_durations`` duration logits after the vocabulary.

    Args:
        encoder_size: encoder output width.
        joint_size: predictor output / joint hidden width.
        vocab_size: token logits (blank included).
        num_durations: TDT duration logits (0 for RNN-T).

    Shapes:
        project_encoder: (..., encoder_size) -> (..., joint_size);
        join: (..., joint_size), (..., joint_size) -> (..., vocab_size + num_durations)
    """

    def __init__(self, encoder_size: int, joint_size: int, vocab_size: int, num_durations: int = 0) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.num_durations = num_durations
        self.encoder_proj = Linear(encoder_size, joint_size)
        # NeMo projects the label side inside the predictor (``decoder_projector``): the joint's own
        # label projection is the identity, kept so a search written for icefall's joiner
        # (``encoder_proj`` / ``decoder_proj`` / ``join``) drives this one too.
        self.decoder_proj = nn.Identity()
        self.head = Linear(joint_size, vocab_size + num_durations)

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return self.encoder_proj(enc)

    def join(self, enc_proj: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(enc_proj + pred))

    def forward(self, enc: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        return self.join(self.project_encoder(enc), pred)


__all__ = ["AdditiveJoint", "LstmPredictor", "LstmState"]
