"""CTC decoding: greedy and prefix beam search, attention rescoring, LM and hotword
fusion, NeMo's batched beam / fused greedy searches, and the ``ctc`` / ``ctc_aed_rescoring``
strategies."""

from oasr.engine.decode.ctc.batched_beam import BeamSettings, ctc_batched_beam_search, ctc_greedy_fused_search
from oasr.engine.decode.ctc.lm import ContextGraph, LmFusion, NgramLanguageModel, parse_hotwords
from oasr.engine.decode.ctc.rescoring import attention_rescoring
from oasr.engine.decode.ctc.search import CtcHypothesis, PrefixScorer, ctc_greedy_search, ctc_prefix_beam_search
from oasr.engine.decode.ctc.strategy import CtcDecodeStrategy, CtcRescoringStrategy

__all__ = [
    "BeamSettings",
    "ContextGraph",
    "CtcDecodeStrategy",
    "CtcHypothesis",
    "CtcRescoringStrategy",
    "LmFusion",
    "NgramLanguageModel",
    "PrefixScorer",
    "attention_rescoring",
    "ctc_batched_beam_search",
    "ctc_greedy_fused_search",
    "ctc_greedy_search",
    "ctc_prefix_beam_search",
    "parse_hotwords",
]
