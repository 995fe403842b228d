"""The ``paraformer`` decode strategy: FunASR Paraformer / BiCifParaformer, non-autoregressive.

Life of a request:

1. ``prepare`` (off the engine loop): decode the audio at the front end's rate, cut it into
   windows of at most ``EngineConfig.ctc_window_s`` at the quietest 100 ms of each
   window's last third (``plan_windows``, as the CTC strategy), and featurise each window
   (LFR fbank; CMVN is inside the encoder).
2. ``step``: up to ``max_batch_size`` windows, of any requests (the oldest and those nearest
   its length), go through batched passes of ``encoder_batch_size`` windows (all of them on a
   GPU, one at a time on a CPU): ``encode_offline`` -> CIF (``model.cif``) -> the SANM
   decoder over all CIF tokens (``model.decode_cif``); each position takes its best token
   (greedy; an external-LM beam is out of scope). Blank, ``<s>`` and ``</s>`` are dropped as FunASR drops them.
3. Times: each token's start / end from the CIF as funasr 1.4.16 computes them
   (``timestamps.token_times``): from the V2 fires, or from BiCif's upsampled timestamp
   head. Words join the pieces as FunASR does (``text.group_pieces``: CJK characters
   without spaces, ``@@`` pieces glued); segments split at gaps longer than
   ``SEGMENT_GAP_S``; every segment carries its tokens' times (``Segment.token_times``, in
   seconds: funasr's ``timestamp`` of each token) and ``word_timestamps`` attaches the words
   with their times. A ``seg_dict`` only segments training text and plays no part here.

Options: the model only transcribes, with no prompt, sampling or hotwords: those are refused
with a ValueError naming the option. It has no language control: ``language`` is taken only
where the checkpoint declares what it transcribes (``LoadedModel.languages``, as for CTC); a
FunASR directory declares nothing, so only unset / "auto" is accepted. ``beam_size`` has no
effect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oasr.audio.frontends import pad_features
from oasr.engine.config import EngineConfig, StrategyOptions, TranscribeOptions
from oasr.engine.decode.base import StepEvent
from oasr.engine.decode.paraformer.text import group_pieces, is_cjk, join_words
from oasr.engine.decode.paraformer.timestamps import sequential_cif_peaks, token_times
from oasr.engine.decode.windowed import Window, WindowedFeatures, WindowedRequest, WindowedStrategy
from oasr.engine.outputs import Word, compression_ratio
from oasr.models.base import DecodeType
from oasr.models.loaders import LoadedModel

SEGMENT_GAP_S = 1.5  # a longer silence between two tokens starts a new segment
BICIF_UPSAMPLE_RATE = 3  # funasr times BiCif's upsampled head at a fixed 3x (20 ms) rate


@dataclass
class CifToken:
    """One decoded token: id, piece, probability and its CIF time (seconds, window-absolute)."""

    id: int
    piece: str
    prob: float
    start: float
    end: float


ParaformerWindow = Window  # feats (T, lfr_m * n_mels): LFR features before CMVN
ParaformerFeatures = WindowedFeatures


def greedy_tokens(log_probs: torch.Tensor, n: int, skip: frozenset[int]) -> tuple[list[int], list[float], list[int]]:
    """Best token at each of the first ``n`` CIF positions, without ``skip`` ids.

    Shapes:
        log_probs: (N, V) -> ids, probabilities, their positions
    """
    top, ids = log_probs[:n].max(dim=-1)
    keep = [(i, int(t), float(p)) for i, (t, p) in enumerate(zip(ids.tolist(), top.exp().tolist())) if t not in skip]
    return [t for _, t, _ in keep], [p for _, _, p in keep], [i for i, _, _ in keep]


def cif_token_spans(
    model, hidden: torch.Tensor, lens: torch.Tensor, cif, row: int, n_tokens: int
) -> list[tuple[int, int]]:
    """Token times (ms within the window) of one row as funasr computes them: V2 from the
    CIF fires and tail alphas over ``len + 1`` frames; BiCif from the upsampled head."""
    n = int(lens[row])
    if model.config.predictor.bicif:
        one = slice(row, row + 1)
        us_alphas = model.predictor.upsampled_alphas(hidden[one, :n], lens[one], cif.token_lens[one])[0]
        us_peaks = sequential_cif_peaks(us_alphas)
        return token_times(us_alphas, us_peaks, n_tokens, upsample_rate=BICIF_UPSAMPLE_RATE)
    t = min(n + (1 if model.config.predictor.tail_threshold > 0.0 else 0), cif.fires.shape[1])
    return token_times(cif.fires[row, :t], cif.alphas[row, :t], n_tokens, upsample_rate=1)


@dataclass(frozen=True)
class ParaformerOptions(StrategyOptions):
    """Paraformer decodes in one non-autoregressive pass (CIF, then the parallel decoder): it has
    no search to configure, so it reads only the common options."""


class ParaformerDecodeStrategy(WindowedStrategy):
    """Batched encoder + CIF + parallel decoder over the windows of all admitted requests."""

    decode_type = DecodeType.PARAFORMER
    options_class = ParaformerOptions
    features_on_device = False  # funasr's fbank runs on the CPU

    def __init__(self, loaded: LoadedModel, config: EngineConfig) -> None:
        super().__init__(loaded, config)
        cfg = self.model.config
        self.skip = frozenset({cfg.blank_id, cfg.sos, cfg.eos})
        # Windows per model pass. On a CPU one window's GEMMs already fill the cores, padding a
        # batch to its longest window is pure waste, and int8 layers keep their integer kernel
        # only for small row counts (1 thread, paraformer-large shape, 16 clips of 5-20 s:
        # float32 26.3 s one at a time against 29.4 s in length-grouped batches of 8).
        self.encoder_batch = config.encoder_batch_size or (config.max_batch_size if self.device.type == "cuda" else 1)

    # -- admission ---------------------------------------------------------------------

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        return ("cif",)

    def validate(self, options: TranscribeOptions) -> TranscribeOptions:
        options = super().validate(options)
        what = f"{type(self.model).__name__} decoded by 'paraformer'"
        if options.hotwords:
            raise ValueError(f"hotwords={options.hotwords!r}: {what} has no hotword biasing")
        return options

    # -- the step ------------------------------------------------------------------------

    def _run_batch(self, batch: list[tuple[WindowedRequest, int]], events: list[StepEvent]) -> None:
        try:
            feats = [r.windows[i].feats for r, i in batch]
            rows = []
            for k in range(0, len(feats), self.encoder_batch):
                rows += decode_batch(self.model, feats[k : k + self.encoder_batch], self.device, self.dtype)
        except Exception as e:  # a failed batch fails its requests, not the engine
            for req, _ in batch:
                self._fail(req, e, events)
            return
        for (req, index), row in zip(batch, rows):
            if req.done:
                continue
            win = req.windows[index]
            tokens = [
                CifToken(t, self.tokenizer.id_to_token(t) or "", p, win.start_s + s / 1000, win.start_s + e / 1000)
                for t, p, (s, e) in zip(*row)
            ]
            req.results[index] = self._window_segments(req, win, tokens)
            self._touched[req.rid] = req

    # -- results ------------------------------------------------------------------------

    def _window_segments(self, req: WindowedRequest, win: Window, tokens: list[CifToken]) -> list[dict]:
        words = group_pieces([t.piece for t in tokens])
        texts = join_words(words)
        seek = round(win.start_s / 0.01)
        groups: list[list[int]] = []
        for k, w in enumerate(words):
            if groups and tokens[w.start].start - tokens[words[k - 1].end - 1].end <= SEGMENT_GAP_S:
                groups[-1].append(k)
            else:
                groups.append([k])
        segments = []
        for group in groups:
            timed = [
                Word(
                    start=round(tokens[words[k].start].start, 3),
                    end=round(tokens[words[k].end - 1].end, 3),
                    word=texts[k].lstrip(" ") if k == group[0] else texts[k],
                    probability=float(np.mean([t.prob for t in tokens[words[k].start : words[k].end]])),
                )
                for k in group
            ]
            first, last = words[group[0]].start, words[group[-1]].end
            text = "".join(w.word for w in timed)
            probs = [t.prob for t in tokens[first:last]]
            segments.append(
                dict(
                    seek=seek,
                    start=timed[0].start,
                    end=timed[-1].end,
                    text=text,
                    tokens=[t.id for t in tokens[first:last]],
                    token_times=[(round(t.start, 3), round(t.end, 3)) for t in tokens[first:last]],
                    avg_logprob=float(np.mean(np.log(np.maximum(probs, 1e-30)))),
                    compression_ratio=compression_ratio(text),
                    words=timed if req.opts.word_timestamps else None,
                )
            )
        return segments

    def _segment_text(self, req: WindowedRequest, seg: dict) -> dict:
        """A space joins two segments unless either side of the join is a CJK character."""
        if req.segments and not _is_cjk_boundary(req.segments[-1].text, seg["text"]):
            return {**seg, "text": " " + seg["text"]}
        return seg


def _is_cjk_boundary(before: str, after: str) -> bool:
    """No space joins two segments where either side of the join is a CJK character."""
    a, b = before.rstrip()[-1:], after.lstrip()[:1]
    return not a or not b or is_cjk(a) or is_cjk(b)


def decode_batch(
    model, feats: list[torch.Tensor], device: torch.device, dtype: torch.dtype
) -> list[tuple[list[int], list[float], list[tuple[int, int]]]]:
    """One batched pass over windows' LFR features: encoder, CIF, decoder, greedy tokens and
    their CIF times (ms within the window).

    Returns:
        per row: token ids, their probabilities, their (start, end) in ms.
    """
    x, lens = pad_features(feats)
    x, lens = x.to(device=device, dtype=dtype), lens.to(device)
    hidden, hidden_lens = model.encode_offline(x, lens)
    cif = model.cif(hidden, hidden_lens)
    skip = frozenset({model.config.blank_id, model.config.sos, model.config.eos})
    out = []
    if int(cif.token_lens.max()) < 1:
        return [([], [], []) for _ in feats]
    log_probs = model.decode_cif(hidden, hidden_lens, cif).float().cpu()
    for row in range(len(feats)):
        ids, probs, _ = greedy_tokens(log_probs[row], int(cif.token_lens[row]), skip)
        spans = cif_token_spans(model, hidden, hidden_lens, cif, row, len(ids)) if ids else []
        if len(spans) < len(ids):  # funasr leaves such tokens untimed; give them the window's end
            end = int(hidden_lens[row]) * model.config.lfr_n * 10
            spans = spans + [(end, end)] * (len(ids) - len(spans))
        out.append((ids, probs, spans))
    return out


__all__ = ["ParaformerDecodeStrategy", "ParaformerFeatures", "ParaformerWindow", "decode_batch", "greedy_tokens"]
