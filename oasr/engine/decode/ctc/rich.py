"""The ``rich_ctc`` decode strategy: CTC behind prompt rows, with tags in its output (FunASR's
SenseVoice).

Life of a request (the ``ctc`` strategy's, ``strategy.py``, with these differences):

1. ``validate``: ``language`` resolves against the model's languages (SenseVoice: zh, en, yue,
   ja, ko, nospeech; a name, an ISO 639-2/3 code or a locale through the one resolver); unset or
   "auto" lets the model tell. ``itn`` (funasr's ``use_itn``) asks for inverse text normalisation
   (numbers as digits, punctuation); off by default, as funasr's ``generate``.
2. ``step``: each window's prompt (``model.rich_prompt(language, itn)``: the rows of its query
   embedding) goes in front of its features; one batched ``model.forward_rich`` gives CTC
   log-probs over the prompt and audio frames, searched as the ``ctc`` strategy searches them
   (greedy by default, as funasr; beam, LM and hotwords as for any CTC model).
3. A window's tokens are decoded by the tokenizer as funasr decodes them (tags and all: the raw
   string funasr's ``generate`` returns), and ``model.rich_transcript`` reads the tags and the
   plain text from it. The window is one segment with that text; its tokens are the text
   tokens at the audio frames, timed from their CTC spikes (the prompt frames and tag pieces are
   neither tokens nor timed), and ``word_timestamps`` words are made of them.
4. The request's text is ``rich_transcript`` of its windows' raw strings joined by spaces (as
   funasr joins its VAD segments before ``rich_transcription_postprocess``); its
   ``RequestOutput.language`` is the one asked for, else the first the model wrote, its
   ``emotion`` and ``audio_events`` the tags read from the same joined string.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from oasr.audio.frontends import pad_features
from oasr.engine.config import EngineConfig
from oasr.engine.decode.base import StepEvent
from oasr.engine.decode.ctc.search import CtcHypothesis
from oasr.engine.decode.ctc.strategy import CtcDecodeStrategy, CtcOptions, Offsets, _Req, _RowDecoder
from oasr.engine.decode.words import group_words, text_labels, timed_word, token_times
from oasr.engine.outputs import RequestOutput, compression_ratio
from oasr.models.base import DecodeType
from oasr.models.loaders import LoadedModel


@dataclass(frozen=True)
class RichCtcOptions(CtcOptions):
    """What ``rich_ctc`` reads: the ``ctc`` options (greedy by default, as funasr's SenseVoice
    ``inference``) and ``itn``, funasr's ``use_itn``, off by default as in its ``generate``."""

    itn: bool = False


class RichCtcStrategy(CtcDecodeStrategy):
    """CTC over prompt rows and audio; tags read into the output's fields (see the module)."""

    decode_type = DecodeType.RICH_CTC
    options_class = RichCtcOptions
    packs_rows = False  # the prompt rows go in front of each row's audio, a padded batch

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        tokenizer, model = loaded.tokenizer, loaded.model
        vocab = range(tokenizer.vocab_size) if tokenizer is not None else ()
        self.tag_ids = frozenset(i for i in vocab if model.is_tag(tokenizer.id_to_token(i)))
        """The tag pieces: kept by the search (they are the tags), no word's text (nor an LM's)."""
        super().__init__(loaded, config)
        self.prompt_frames = int(self.model.prompt_frames)

    def _untexted_ids(self) -> frozenset[int]:
        return self.tag_ids

    def _row_decoder(self, batch: list[tuple[_Req, int]]) -> _RowDecoder:
        feats, lens = pad_features([r.windows[i].feats for r, i in batch])
        prompts = [self.model.rich_prompt(r.opts.language, r.opts.itn) for r, _ in batch]
        log_probs, out_lens = self.model.forward_rich(feats.to(self.device, self.dtype), lens.to(self.device), prompts)
        log_probs = log_probs.detach().to(device="cpu", dtype=torch.float32)
        n_out = [min(int(x), log_probs.shape[1]) for x in out_lens.tolist()]
        return self._search_rows([log_probs[row, :n] for row, n in enumerate(n_out)], None)

    def _window_segments(
        self, req: _Req, index: int, hyp: CtcHypothesis, probs: list[float], n_frames: int, offsets: Offsets | None
    ) -> list[dict]:
        """The window's one segment: the text ``rich_transcript`` reads from the decode of all its
        tokens, the text tokens of its audio frames timed from their spikes."""
        req.window_texts[index] = raw = self.tokenizer.decode(list(hyp.tokens))  # funasr's string
        text = self.model.rich_transcript(raw).text
        if not text:
            return []
        p = self.prompt_frames
        spoken = [j for j, f in enumerate(hyp.frames) if f >= p]
        tokens, frames, token_probs = text_labels(
            self.tag_ids,
            [hyp.tokens[j] for j in spoken],
            [hyp.frames[j] - p for j in spoken],
            [probs[j] for j in spoken],
        )
        win = req.windows[index]
        spans = token_times(frames, self.frame_s, win.start_s, win.end_s)
        words = [
            w
            for span in group_words(tokens, self.pieces)
            if (w := timed_word(span, tokens, spans, token_probs, self.tokenizer)) is not None
        ]
        start, end = (spans[0][0], spans[-1][1]) if spans else (win.start_s, win.end_s)
        return [
            dict(
                seek=round(win.start_s / self.frontend.frame_shift_s),
                start=round(start, 3),
                end=round(end, 3),
                text=text,
                tokens=tokens,
                token_times=[(round(a, 3), round(b, 3)) for a, b in spans],
                avg_logprob=float(hyp.ctc_score) / max(1, n_frames),
                compression_ratio=compression_ratio(text),
                words=words if req.opts.word_timestamps else None,
            )
        ]

    def _segment_text(self, req: _Req, seg: dict) -> dict:
        return {**seg, "text": " " + seg["text"]} if req.segments else seg

    def _read(self, req: _Req):
        return self.model.rich_transcript(" ".join(req.window_texts[i] for i in sorted(req.window_texts)))

    def _request_text(self, req: _Req) -> str:
        return self._read(req).text

    def _language(self, req: _Req) -> str | None:
        return req.opts.language or self._read(req).language

    def _complete(self, req: _Req, output: RequestOutput, events: list[StepEvent]) -> None:
        tags = self._read(req)
        super()._complete(
            req, dataclasses.replace(output, emotion=tags.emotion, audio_events=list(tags.audio_events)), events
        )


__all__ = ["RichCtcOptions", "RichCtcStrategy"]
