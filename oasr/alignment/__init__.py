"""Forced alignment: word times for known text from a CTC model's posteriors (``viterbi``: the
batched Viterbi path; ``text``: a transcript as the aligner's labels; ``spans``: paths -> word
times; ``aligner``: ``CtcAligner`` over any CTC family oasr loads)."""

from oasr.lazy import lazy_exports

__getattr__ = lazy_exports(
    __name__,
    {
        "AlignedWord": "oasr.alignment.spans",
        "AlignmentError": "oasr.alignment.viterbi",
        "CtcAligner": "oasr.alignment.aligner",
        "Piece": "oasr.alignment.aligner",
        "forced_align": "oasr.alignment.viterbi",
        "prepare_text": "oasr.alignment.text",
        "word_spans": "oasr.alignment.spans",
    },
)

__all__ = ["AlignedWord", "AlignmentError", "CtcAligner", "Piece", "forced_align", "prepare_text", "word_spans"]
