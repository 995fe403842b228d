"""FunASR SenseVoiceSmall: Paraformer's SANM encoder (plus its ``tp`` blocks) over the audio with
language / event / emotion / text-norm query rows in front, one CTC head over the sentencepiece
vocabulary, decoded by the ``rich_ctc`` strategy into text and tags (language, emotion, events)."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["SenseVoiceConfig", "SenseVoiceEncoderConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.sensevoice.config"))
