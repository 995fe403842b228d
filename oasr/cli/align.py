"""``oasr align AUDIO --text "..."``: word times of known text, by CTC forced alignment.

The model (``-m DIR``) is a CTC checkpoint with a character vocabulary (the wav2vec2 family:
wav2vec2, HuBERT, data2vec, WavLM, MMS; ``oasr.alignment.CtcAligner``). The text (``--text``, or
``--text-file``; ``-`` reads stdin) is aligned as a whole; each of its non-empty lines is a segment
of the output (a subtitle cue in SRT / WebVTT, as ctc-forced-aligner writes its lines), its words
the line's words as written, timed by the aligner.

Formats (``-f``): ``json`` (the default: the text, the duration and every word with ``start``,
``end``, ``score``, the summed log-probability of its frames, and ``probability``), and
``oasr transcribe``'s ``verbose_json``, ``srt``, ``vtt``, ``tsv`` and ``text``, written from the
same segments and words (subtitle cues laid out by words with ``--max-line-width`` and friends).
Output goes to stdout, or to ``-o FILE``.

Exit codes: 0 aligned; 1 the audio cannot be read, or the text does not fit it (more characters
than the audio has frames; the message says by how much); 2 usage errors and a model that cannot
align (not CTC, not a character vocabulary).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from oasr.cli.common import CliError, add_model_flags, model_load_errors, positive_int, resolve_device

NAME = "align"
FORMATS = ("json", "verbose_json", "srt", "vtt", "tsv", "text")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        NAME,
        help="word times of known text (CTC forced alignment)",
        description="Align a transcript to audio with a CTC model (wav2vec2 family): each word's start and end.",
    )
    p.add_argument("audio", metavar="AUDIO", help="an audio file (any format FFmpeg reads); - for stdin")
    text = p.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", default=None, help="the transcript")
    text.add_argument("--text-file", default=None, metavar="FILE", help="a UTF-8 file of the transcript (- for stdin)")
    p.add_argument("-f", "--output-format", choices=FORMATS, default="json", help="output format (default json)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE", help="write to FILE (default stdout)")
    p.add_argument(
        "--star",
        choices=("none", "segment", "edges"),
        default="none",
        help="star tokens (any audio) before every word (segment, as ctc-forced-aligner), at the ends, or only for "
        "words with nothing to align (none; default)",
    )
    p.add_argument(
        "--no-romanize",
        action="store_true",
        help="do not romanise words with characters the vocabulary lacks (uroman, or accents dropped)",
    )
    g = p.add_argument_group("model")
    add_model_flags(g)
    g.add_argument("--batch-size", type=positive_int, default=8, metavar="N", help="windows per forward (default 8)")
    s = p.add_argument_group("subtitles (srt, vtt)")
    s.add_argument("--max-line-width", type=positive_int, default=None, metavar="N", help="characters per line")
    s.add_argument("--max-line-count", type=positive_int, default=None, metavar="N", help="lines per cue")
    s.add_argument("--max-words-per-line", type=positive_int, default=None, metavar="N", help="words per cue")
    p.set_defaults(func=run, parser=p)


def _read_text(args: argparse.Namespace) -> str:
    if args.text is not None:
        return args.text
    if args.text_file == "-":
        return sys.stdin.read()
    try:
        return Path(args.text_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read --text-file {args.text_file}: {e}", exit_code=2) from None


def aligned_output(lines: list[str], words: list, duration: float):
    """A ``RequestOutput`` of aligned ``words`` (``AlignedWord`` s of the lines' words in order):
    one segment a line."""
    from oasr.engine.outputs import RequestOutput, Segment, Word

    segments, at = [], 0
    for line in lines:
        n = len(line.split())
        mine = words[at : at + n]
        at += n
        start = mine[0].start if mine else 0.0
        end = mine[-1].end if mine else 0.0
        timed = [Word(w.start, w.end, " " + w.word, w.probability) for w in mine]
        segments.append(Segment(id=len(segments), seek=0, start=start, end=end, text=" " + line, words=timed))
    return RequestOutput("align", " ".join(lines), segments, duration=duration)


def to_json(text: str, words: list, duration: float) -> str:
    """``-f json``: the text, the duration and the words with their scores."""
    rows = [
        {
            "word": w.word,
            "start": round(w.start, 3),
            "end": round(w.end, 3),
            "score": w.score,
            "probability": w.probability,
        }
        for w in words
    ]
    return json.dumps({"text": text, "duration": duration, "words": rows}, ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    from oasr.alignment import AlignmentError, CtcAligner
    from oasr.audio import AudioDecodeError, load_audio
    from oasr.formatting import SubtitleLayout, format_output

    if args.model is None:
        args.parser.error("-m/--model: give a CTC model directory to align with (the wav2vec2 family)")
    text = _read_text(args)
    lines = [" ".join(line.split()) for line in text.splitlines() if line.split()]
    if not lines:
        args.parser.error("the text has no words to align")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    with model_load_errors(f"aligner {args.model}"):
        aligner = CtcAligner.from_pretrained(
            args.model,
            device=resolve_device(args.device),
            dtype=args.dtype,
            romanize=not args.no_romanize,
            star=args.star,
            max_batch_size=args.batch_size,
        )
    source = sys.stdin.buffer.read() if args.audio == "-" else args.audio
    try:
        audio = load_audio(source, aligner.sampling_rate)
        words = aligner.align(audio, " ".join(lines))
    except (AudioDecodeError, AlignmentError, OSError) as e:
        print(f"oasr {NAME}: {args.audio}: {e}", file=sys.stderr)
        return 1
    duration = len(audio) / aligner.sampling_rate
    if args.output_format == "json":
        doc = to_json(" ".join(lines), words, duration)
    else:
        layout = SubtitleLayout(
            max_line_width=args.max_line_width,
            max_line_count=args.max_line_count,
            max_words_per_line=args.max_words_per_line,
        )
        doc = format_output(aligned_output(lines, words, duration), args.output_format, words=True, layout=layout)
    if args.output is None:
        sys.stdout.write(doc)
    else:
        try:
            args.output.write_text(doc, encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot write {args.output}: {e}") from None
    return 0
