"""The wav2vec2 family of CTC models (Hugging Face ``Wav2Vec2ForCTC``, ``HubertForCTC``,
``Data2VecAudioForCTC``): a convolutional waveform encoder, a transformer with a convolutional
position embedding, and a character CTC head, decoded by the ``ctc`` strategy."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["Wav2Vec2Config"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.wav2vec2.config"))
