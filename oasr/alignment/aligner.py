"""Word times for known text from a CTC model: ``CtcAligner``.

The life of an alignment: each piece of audio (a whole input, or one transcript segment's span
of it) goes through the model's front end and ``forward_offline`` in padded batches (audio longer
than ``window_s`` in windows of whole frames, their posteriors joined); the posteriors get the
star column where the text needs one (``text.py``); every piece's labels are aligned to its
frames in one batched Viterbi pass (``viterbi.forced_align``, batches of at most ``MAX_BATCH_CELLS``
frame x state cells, so memory stays bounded however many pieces come); the paths become
word times (``spans.word_spans``) on the audio's timeline.

The model is any CTC family oasr loads (the wav2vec2 family: wav2vec2, HuBERT, data2vec, WavLM,
MMS) whose tokenizer spells words with single characters (a wav2vec2 ``vocab.json``):
a sub-word vocabulary is refused. A piece's memory is its frames x (2 x labels + 1) bytes of
back-pointers: a segment of 30 s and 500 characters, 1.5 MB; a whole hour with its transcript in
one piece would be quadratic (a piece past ``MAX_ROW_CELLS`` is refused): a transcript's segments
are aligned each within its own span, as pieces (how ``EngineConfig.align_model`` times any family's
words).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from oasr.alignment.spans import AlignedWord, word_spans
from oasr.alignment.text import PreparedText, prepare_text
from oasr.alignment.viterbi import AlignmentError, check_inputs, forced_align
from oasr.audio.frontends import build_frontend, pad_features

WINDOW_S = 30.0
MAX_BATCH_CELLS = 1 << 26  # frame x state cells of one Viterbi batch: 64 MiB of back-pointers
MAX_ROW_CELLS = 1 << 30  # one piece's cells at most (1 GiB of back-pointers: ~12 min of speech and its text)


@dataclass(frozen=True)
class Piece:
    """One stretch of audio and the text said in it.

    Attributes:
        audio: 16 kHz (the model's rate) float32 samples.
        text: the transcript of that audio.
        offset: seconds added to its word times (where the stretch starts in its input).
    """

    audio: np.ndarray
    text: str
    offset: float = 0.0


class CtcAligner:
    """Forced alignment of text to audio through a CTC model (module docstring).

    Args:
        loaded: a ``LoadedModel`` of a CTC family with a character vocabulary.
        romanize: romanise words with characters the vocabulary lacks (``text.py``).
        star: star tokens: "none" (only for words with no alignable character), "segment", "edges".
        max_batch_size: pieces per forward pass.
        window_s: audio longer than this goes through the model in windows of it.

    Raises:
        ValueError: the model has no CTC head or its vocabulary is not one of characters.
    """

    def __init__(
        self,
        loaded,
        *,
        romanize: bool = True,
        star: str = "none",
        max_batch_size: int = 8,
        window_s: float = WINDOW_S,
    ) -> None:
        model = loaded.model
        if not callable(getattr(model, "forward_offline", None)) or getattr(model, "ctc_projection", None) is None:
            raise ValueError(f"{loaded.name}: an aligner needs a CTC model; {type(model).__name__} has no CTC head")
        tokenizer = loaded.tokenizer
        if tokenizer is None or loaded.feature_spec is None:
            raise ValueError(f"{loaded.name}: an aligner needs the checkpoint's tokenizer and front end")
        vocab = {}
        for i in range(tokenizer.vocab_size):
            token = tokenizer.id_to_token(i)
            if token is not None and len(token) == 1:
                vocab[token] = i
        letters = sum(c.isalpha() for c in vocab)
        if letters < 10 or len(vocab) < 0.5 * tokenizer.vocab_size:  # a sub-word vocabulary has few 1-char pieces
            raise ValueError(
                f"{loaded.name}: an aligner needs a character vocabulary (a wav2vec2 vocab.json); "
                f"{len(vocab)} of its {tokenizer.vocab_size} tokens are single characters, {letters} of them letters"
            )
        self.loaded = loaded
        self.model = model
        self.vocab = vocab
        self.blank_id = int(model.blank_id)
        self.delimiter_id = getattr(tokenizer, "word_delimiter_id", None)
        self.special_ids = frozenset(tokenizer.special_ids)
        self.n_classes = int(model.vocab_size)
        self.romanize = romanize
        self.star = star
        self.max_batch_size = max(1, int(max_batch_size))
        self.frontend = build_frontend(loaded.feature_spec)
        self.sampling_rate = int(self.frontend.sampling_rate)
        self.frame_s = int(model.encoder.subsampling_rate) * float(self.frontend.frame_shift_s)
        self.window_samples = max(1, round(window_s / self.frame_s)) * round(self.frame_s * self.sampling_rate)
        prepare_text("", self.vocab, blank_id=self.blank_id, star_id=self.n_classes, star=star)  # checks `star`

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, *, device: str | None = None, dtype: str | None = None, **options
    ) -> CtcAligner:
        """Load the CTC model at ``path`` (anything ``oasr.load_pretrained`` reads) as an aligner."""
        from oasr.models.loaders import load_pretrained

        return cls(load_pretrained(path, device=device, dtype=dtype), **options)

    # -- text ------------------------------------------------------------------------------

    def prepare(self, text: str) -> PreparedText:
        """``text`` as this aligner's labels (``text.prepare_text``)."""
        return prepare_text(
            text,
            self.vocab,
            blank_id=self.blank_id,
            star_id=self.n_classes,
            delimiter_id=self.delimiter_id if self.star != "segment" else None,
            special_ids=self.special_ids,
            romanize_missing=self.romanize,
            star=self.star,
        )

    # -- posteriors ------------------------------------------------------------------------

    def _windows(self, audio: np.ndarray) -> list[tuple[int, np.ndarray]]:
        n = max(1, len(audio))
        return [(a, audio[a : a + self.window_samples]) for a in range(0, n, self.window_samples)]

    @torch.inference_mode()
    def posteriors(self, audios: Sequence[np.ndarray]) -> list[tuple[torch.Tensor, np.ndarray]]:
        """Each audio's CTC log-probabilities and each frame's start time (seconds from the audio's
        start), through the model in padded batches of windows.

        Shapes:
            -> [((T_i, V) float32 on the CPU, (T_i,) float64)]
        """
        windows = [(k, a, w) for k, audio in enumerate(audios) for a, w in self._windows(np.asarray(audio))]
        out: list[list[tuple[int, torch.Tensor]]] = [[] for _ in audios]
        device, dtype = self.model.device, self.model.compute_dtype
        min_samples = 2 * round(self.frame_s * self.sampling_rate)  # room for the conv front
        for i in range(0, len(windows), self.max_batch_size):
            batch = windows[i : i + self.max_batch_size]
            feats, lens = pad_features([self.frontend(torch.from_numpy(np.ascontiguousarray(w))) for _, _, w in batch])
            if feats.shape[1] < min_samples:
                feats = torch.nn.functional.pad(feats, (0, 0, 0, min_samples - feats.shape[1]))
            log_probs, out_lens = self.model.forward_offline(feats.to(device, dtype), lens.to(device))
            log_probs = log_probs.float().cpu()
            for row, (k, a, _) in enumerate(batch):
                out[k].append((a, log_probs[row, : int(out_lens[row])]))
        result = []
        for parts in out:
            times = [a / self.sampling_rate + self.frame_s * np.arange(lp.shape[0]) for a, lp in parts]
            result.append((torch.cat([lp for _, lp in parts]), np.concatenate(times)))
        return result

    # -- alignment -------------------------------------------------------------------------

    def align(self, audio: np.ndarray | Sequence[np.ndarray], text: str | Sequence[str]) -> list:
        """Word times of ``text`` in ``audio``; lists of both align row by row.

        Returns:
            one ``AlignedWord`` list (a single audio), or a list of them.

        Raises:
            AlignmentError: a text too long for its audio.
        """
        single = isinstance(text, str)
        audios = [audio] if single else list(audio)
        texts = [text] if single else list(text)
        if len(audios) != len(texts):
            raise ValueError(f"{len(audios)} audios and {len(texts)} texts")
        words = self.align_pieces([Piece(np.asarray(a, dtype=np.float32), t) for a, t in zip(audios, texts)])
        return words[0] if single else words

    def align_pieces(self, pieces: Sequence[Piece], *, return_exceptions: bool = False) -> list:
        """Each piece's words with their times (``offset`` added), in one batched pass.

        Args:
            return_exceptions: give a piece that cannot be aligned (an ``AlignmentError``: its text
                needs more frames than its audio has) its exception in place of its words, and
                align the others; otherwise raise it.

        Returns:
            an ``AlignedWord`` list per piece (or its exception); a text with no word to align
            (empty, punctuation alone) gives its words at ``offset`` with score 0.
        """
        prepared = [self.prepare(p.text) for p in pieces]
        results: list = [
            [AlignedWord(p.offset, p.offset, w, 0.0, 0.0) for w in pt.words] for p, pt in zip(pieces, prepared)
        ]
        todo = [k for k, pt in enumerate(prepared) if pt.units and len(pieces[k].audio)]
        post = dict(zip(todo, self.posteriors([pieces[k].audio for k in todo])))
        for k in todo:
            frames = post[k][0].shape[0]
            labels = torch.tensor([prepared[k].labels])
            try:
                check_inputs(
                    torch.empty(1, frames, self.n_classes + 1),
                    labels,
                    torch.tensor([frames]),
                    torch.tensor([labels.shape[1]]),
                    self.blank_id,
                )
                cells = frames * (2 * labels.shape[1] + 1)
                if cells > MAX_ROW_CELLS:
                    raise AlignmentError(
                        f"row 0: {frames} frames x {2 * labels.shape[1] + 1} states would need {cells / 2**30:.1f} GiB "
                        f"of back-pointers (at most {MAX_ROW_CELLS / 2**30:.0f}): align long audio a segment at a time "
                        f"(transcribe with an align model does)"
                    )
            except AlignmentError as e:
                if not return_exceptions:
                    raise AlignmentError(f"{pieces[k].text[:40]!r}: {str(e).split(': ', 1)[1]}") from None
                results[k] = e
        rows = sorted((k for k in todo if not isinstance(results[k], Exception)), key=lambda k: post[k][0].shape[0])
        start = 0
        while start < len(rows):  # similar lengths share a batch, of at most MAX_BATCH_CELLS cells
            stop, cells = start, 0
            while stop < len(rows):
                k = rows[stop]
                t, s = post[k][0].shape[0], 2 * len(prepared[k].labels) + 1
                if stop > start and (stop - start + 1) * max(cells, t * s) > MAX_BATCH_CELLS:
                    break
                cells, stop = max(cells, t * s), stop + 1
            batch = rows[start:stop]
            start = stop
            for k, words in zip(batch, self._viterbi([post[k] for k in batch], [prepared[k] for k in batch])):
                for word in words:
                    word.start += pieces[k].offset
                    word.end += pieces[k].offset
                results[k] = words
        return results

    def _viterbi(
        self, post: list[tuple[torch.Tensor, np.ndarray]], texts: list[PreparedText]
    ) -> list[list[AlignedWord]]:
        """One padded Viterbi batch: posteriors (with the star column) and labels of each row."""
        b, t_max = len(post), max(lp.shape[0] for lp, _ in post)
        l_max = max(len(pt.labels) for pt in texts)
        width = self.n_classes + any(pt.star_id is not None for pt in texts)
        log_probs = torch.full((b, t_max, width), float("-inf"))
        targets = torch.zeros((b, l_max), dtype=torch.long)
        for row, ((lp, _), pt) in enumerate(zip(post, texts)):
            log_probs[row, : lp.shape[0], : lp.shape[1]] = lp
            if width > self.n_classes:
                log_probs[row, :, self.n_classes] = 0.0 if pt.star_id is not None else float("-inf")
            targets[row, : len(pt.labels)] = torch.tensor(pt.labels, dtype=torch.long)
        lens = torch.tensor([lp.shape[0] for lp, _ in post])
        paths, scores = forced_align(
            log_probs, targets, lens, torch.tensor([len(pt.labels) for pt in texts]), blank=self.blank_id
        )
        return [
            word_spans(paths[row, :n].numpy(), scores[row, :n].numpy(), pt, self.blank_id, times)
            for row, ((_, times), pt, n) in enumerate(zip(post, texts, lens.tolist()))
        ]


__all__ = ["CtcAligner", "MAX_BATCH_CELLS", "MAX_ROW_CELLS", "Piece", "WINDOW_S"]
