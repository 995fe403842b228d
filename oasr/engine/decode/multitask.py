"""The ``multitask`` decode strategy: prompted encoder-decoders that search a whole clip at once
(NeMo's ``EncDecMultiTaskModel``, Canary).

Life of a request:

1. ``validate``: ``language`` (the spoken one) and ``target_language`` resolve against the
   model's languages; ``task="translate"`` without a target translates into English (OpenAI's
   translations: English speech gets its transcript); a target other than the source is speech
   translation (and makes a ``transcribe`` request a ``translate`` one). The prompt is built
   now (``model.prompt``), so a request the model cannot express fails before any audio is read.
2. ``prepare`` (the windowed strategies' life, ``oasr.engine.decode.windowed``): the audio is cut
   into windows of at most ``EngineConfig.ctc_window_s`` at quiet points and featurised.
3. ``step``: a batch of windows of any requests is encoded in one call and searched together by
   the model's own search (``model.multitask_search``: NeMo's greedy, or its beam search with the
   length penalty), each window with its request's prompt.
4. A window's transcript is one segment over the window; the request's text joins them. With
   ``word_timestamps`` (a model that writes frame tokens: canary2) the prompt asks for them
   (``<|timestamp|>``) and the words between ``<|a|> .. <|b|>`` pairs are timed as NeMo's
   ``transcribe(timestamps=True)`` times them (``model.timestamp_words``); each word's probability
   is the mean of its tokens' (teacher-forced, ``model.token_logprobs``).

Defaults are the archive's ``decoding`` section (``model.search_params``): its strategy, beam
size, length penalty and ``max_generation_delta``; ``beam_size`` / ``length_penalty`` override
them per request (``beam_size=1``: NeMo's greedy).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from oasr.audio.frontends import pad_features
from oasr.engine.config import EngineConfig, StrategyOptions, TranscribeOptions, whole_input
from oasr.engine.decode.base import DecodeStrategy, StepEvent
from oasr.engine.decode.windowed import WindowedRequest, WindowedStrategy
from oasr.engine.outputs import Word, compression_ratio
from oasr.languages import LanguageError, resolve_language
from oasr.models.base import DecodeType
from oasr.models.loaders import LoadedModel


@dataclass(frozen=True)
class MultitaskOptions(StrategyOptions):
    """What the ``multitask`` strategy reads; None means the checkpoint's own (its ``decoding``
    section and ``prompt_defaults``)."""

    beam_size: int | None = None
    length_penalty: float | None = None
    target_language: str | None = None
    punctuation: bool | None = None
    itn: bool | None = None
    context: str | None = None


class MultitaskDecodeStrategy(WindowedStrategy):
    """Batched encoder + the model's prompted search over the windows of all admitted requests."""

    decode_type = DecodeType.MULTITASK
    options_class = MultitaskOptions
    prompt_option = "context"

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        tokenizer = loaded.tokenizer if loaded.tokenizer is not None else getattr(loaded.model, "tokenizer", None)
        super().__init__(dataclasses.replace(loaded, tokenizer=tokenizer), config)

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        options = DecodeStrategy.validate(self, options)
        what = f"{type(self.model).__name__} decoded by 'multitask'"
        if not whole_input(options.clip_timestamps):
            raise ValueError(f"clip_timestamps={options.clip_timestamps!r}: {what} transcribes whole inputs")
        if options.hotwords:
            raise ValueError(f"hotwords={options.hotwords!r}: {what} has no hotword biasing")
        source = options.language or self.model.default_language
        try:
            target = resolve_language(options.target_language, self.languages, model=self.model_name)
        except LanguageError as e:  # named as the option it came from (``language`` is the spoken one)
            raise ValueError(f"target_language: {e}") from None
        if options.task == "translate" and target is None:
            # OpenAI's translations are into English (English speech: its transcript).
            if "en" not in (self.languages or ()):
                raise ValueError(
                    f"task='translate' needs a target_language: {self.model_name} has no English "
                    f"(its languages: {list(self.languages or ())})"
                )
            target = "en"
        target = target or source
        if options.task == "transcribe" and target != source:
            options = options.replace(task="translate")
        options = options.replace(language=source, target_language=target)
        self._prompt(options)  # refuses what the prompt cannot express
        return options

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        return ("frame_tokens",) if getattr(self.model, "supports_timestamps", False) else ()

    def _prompt(self, opts: TranscribeOptions) -> list[int]:
        return self.model.prompt(
            opts.language,
            opts.target_language,
            punctuation=opts.punctuation,
            itn=opts.itn,
            timestamps=True if opts.word_timestamps else None,
            context=opts.context or "",
        )

    def _run_batch(self, batch: list[tuple[WindowedRequest, int]], events: list[StepEvent]) -> None:
        try:
            feats, lens = pad_features([r.windows[i].feats for r, i in batch])
            hidden, hidden_lens = self.model.encode_offline(
                feats.to(device=self.device, dtype=self.dtype), lens.to(self.device)
            )
            prompts = [self._prompt(r.opts) for r, _ in batch]
            params = [self.model.search_params(r.opts.beam_size, r.opts.length_penalty) for r, _ in batch]
            rows: list[list[int]] = [[] for _ in batch]
            for p in dict.fromkeys(params):  # one search per distinct setting
                idx = [j for j, q in enumerate(params) if q == p]
                got = self.model.multitask_search(hidden[idx], hidden_lens[idx], [prompts[j] for j in idx], p)
                for j, ids in zip(idx, got):
                    rows[j] = ids
        except Exception as e:  # a failed batch fails its requests, not the engine
            for req, _ in batch:
                self._fail(req, e, events)
            return
        for j, ((req, index), ids) in enumerate(zip(batch, rows)):
            if req.done:
                continue
            win = req.windows[index]
            text, words = self.tokenizer.decode(ids), None
            if req.opts.word_timestamps:
                text, words = self._words(ids, win.start_s, hidden[j], int(hidden_lens[j]), prompts[j], text)
            req.results[index] = (
                [
                    dict(
                        seek=round(win.start_s / 0.01),
                        start=round(win.start_s, 3),
                        end=round(win.end_s, 3),
                        text=text,
                        tokens=list(ids),
                        compression_ratio=compression_ratio(text),
                        words=words,
                    )
                ]
                if text
                else []
            )
            self._touched[req.rid] = req

    def _words(self, ids, start_s, memory, memory_len, prompt, text) -> tuple[str, list[Word]]:
        """The words between the window's frame-token pairs (``model.timestamp_words``), their times on
        the input's timeline and the mean probability of their tokens; with any, the text is the
        words joined by spaces (NeMo's ``timestamps=True`` text)."""
        found = self.model.timestamp_words(ids)
        if not found:
            return text, []
        logps = self.model.token_logprobs(memory, memory_len, prompt, list(ids))
        words = [
            Word(
                start=round(start_s + a, 3),
                end=round(start_s + b, 3),
                word=(" " if k else "") + w,
                probability=float(sum(math.exp(x) for x in logps[lo:hi]) / max(hi - lo, 1)),
            )
            for k, (w, a, b, lo, hi) in enumerate(found)
        ]
        return " ".join(w for w, *_ in found), words

    def _segment_text(self, req: WindowedRequest, seg: dict) -> dict:
        return {**seg, "text": " " + seg["text"]} if req.segments else seg

    def _language(self, req: WindowedRequest) -> str | None:
        return req.opts.target_language


__all__ = ["MultitaskDecodeStrategy", "MultitaskOptions"]
