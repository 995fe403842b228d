"""Pieces the subcommands share: engine / decoding options, loading the engine, and
running a batch of files so that one bad file does not stop the others."""

from __future__ import annotations

import argparse
import glob
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oasr.serving.common import AUDIO_EXTENSIONS, Source, describe_error, output_names

if TYPE_CHECKING:  # the engine (and torch) load when a command runs, not for `oasr --help`
    from oasr.engine.outputs import RequestOutput


CUT_WARNING = (
    "the decode stopped at its token budget (finish_reason 'length'): the end of the transcript may be "
    "missing; a larger --max-new-tokens lets it finish"
)
"""What stderr says, after the input's label, of a result a token budget cut (the result itself is kept)."""


class CliError(Exception):
    """A failure reported as one line on stderr (no traceback) with an exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# ---------------------------------------------------------------------------
# argparse value types (their ArgumentTypeError becomes "argument --x: invalid ...")


def _parsed(text: str, cast: Callable[[str], Any], what: str) -> Any:
    """``cast(text)``, or the ArgumentTypeError argparse prints (``expected <what>, got '...'``)."""
    try:
        return cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _checked(value: Any, ok: bool, rule: str, shown: object) -> Any:
    if not ok:
        raise argparse.ArgumentTypeError(f"{rule}, got {shown}")
    return value


def positive_int(text: str) -> int:
    value = _parsed(text, int, "an integer")
    return _checked(value, value >= 1, "must be >= 1", value)


def nonnegative_int(text: str) -> int:
    value = _parsed(text, int, "an integer")
    return _checked(value, value >= 0, "must be >= 0", value)


def positive_float(text: str) -> float:
    value = _parsed(text, float, "a number")
    return _checked(value, value > 0, "must be > 0", text)


def nonnegative_float(text: str) -> float:
    value = _parsed(text, float, "a number")
    return _checked(value, value >= 0, "must be >= 0", text)


def finite_float(text: str) -> float:
    value = _parsed(text, float, "a number")
    return _checked(value, math.isfinite(value), "must be a finite number", text)


def temperatures(text: str) -> float | tuple[float, ...]:
    """``0`` or a comma-separated fallback sequence ``0,0.2,0.4``."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or comma-separated numbers, got {text!r}") from None
    if any(not (v >= 0) for v in values):
        raise argparse.ArgumentTypeError(f"temperatures must be >= 0, got {text!r}")
    return values[0] if len(values) == 1 else tuple(values)


# ---------------------------------------------------------------------------
# Option groups


DTYPE_CHOICES = ("auto", "float32", "float16", "bfloat16")
DTYPE_HELP = (
    "compute dtype (default auto: float32 on CPU; on CUDA the model family's safe choice, float16 for Whisper "
    "and the CTC / transducer families, bfloat16 for Qwen3-ASR and Qwen2-Audio); a dtype the family is not safe "
    "in (float16 for Qwen3-ASR) is refused at load. With --quantize int8 it is the activations' dtype"
)


def add_model_flags(g: argparse._ArgumentGroup) -> None:
    """Which model and where it runs (``-m/--model``, ``--device``, ``--dtype``, ``--threads``):
    every command that loads a model, ``serve`` too."""
    g.add_argument(
        "-m",
        "--model",
        default=None,
        help="model directory, bundled name (whisper-base, tiny.en) or Hub id; default: the bundled whisper-base",
    )
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... or auto (cuda when available; default)")
    g.add_argument("--dtype", choices=DTYPE_CHOICES, default=None, help=DTYPE_HELP)
    g.add_argument("--threads", type=nonnegative_int, default=0, metavar="N", help="CPU threads (0: torch's default)")


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model and engine")
    add_model_flags(g)
    g.add_argument(
        "--batch-size",
        type=positive_int,
        default=8,
        metavar="N",
        help="encoder windows / decode rows per batch (default 8)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_engine_options(g)


def context_pair(text: str) -> tuple[int, int]:
    """``L,R`` -> (L, R) integers (argparse type of ``--att-context-size``)."""
    parts = text.replace(" ", "").strip("[]()").split(",")
    try:
        left, right = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LEFT,RIGHT integers (e.g. 128,128), got {text!r}") from None
    return left, right


def add_attention_flags(g) -> None:
    """``--attention-model`` / ``--att-context-size`` (``EngineConfig.attention_model`` /
    ``att_context_size``), read back by ``engine_extras``."""
    g.add_argument(
        "--attention-model",
        choices=("rel_pos", "rel_pos_local_attn"),
        default=None,
        help="NeMo FastConformer: switch the encoder's attention as NeMo's change_attention_model does; "
        "rel_pos_local_attn (with --att-context-size, e.g. 128,128) takes memory linear in the audio's length "
        "(default: the checkpoint's)",
    )
    g.add_argument(
        "--att-context-size",
        type=context_pair,
        default=None,
        metavar="L,R",
        help="NeMo FastConformer: encoder frames each query attends to left and right: the band of local "
        "attention, or which of a cache-aware checkpoint's trained contexts (its lookahead) runs "
        "(default: the checkpoint's first)",
    )


def add_model_engine_options(g) -> None:
    """The ``EngineConfig`` options beyond the basics (read back by ``engine_extras``):
    decode type, the CTC n-gram LM, int8 quantisation. Shared by ``transcribe`` / ``eval``
    and ``serve``."""
    g.add_argument(
        "--decode-type",
        default=None,
        metavar="TYPE",
        help="decode family when the model serves several: ctc, ctc_aed_rescoring, aed, ... (default: the model's)",
    )
    g.add_argument(
        "--lm", default=None, metavar="PATH", help="CTC: n-gram LM (ARPA or KenLM binary) fused into beam search"
    )
    g.add_argument("--lm-alpha", type=float, default=None, metavar="A", help="CTC: LM weight (default 0.5)")
    g.add_argument("--lm-beta", type=float, default=None, metavar="B", help="CTC: word insertion bonus (default 1.0)")
    add_attention_flags(g)
    g.add_argument(
        "--window-seconds",
        type=positive_float,
        default=None,
        metavar="S",
        help="CTC / transducer: the longest stretch encoded in one pass (default 30); longer audio is cut at "
        "quiet points. With --attention-model rel_pos_local_attn a long file can go in one pass",
    )
    g.add_argument(
        "--quantize",
        choices=("int8",),
        default=None,
        help="store linear-layer weights as int8, quantised as the checkpoint loads (a quarter of their float32 "
        "size; measured peak RSS of this command with whisper-base on an 11-s clip, CPU: 678 MiB against 759 MiB in "
        "float32); int8 GEMMs for decoder steps on CPU",
    )
    g.add_argument(
        "--step-graphs",
        choices=("auto", "on", "off"),
        default=None,
        help="record decoder steps into CUDA graphs and replay them (auto: on CUDA when the decoder supports it)",
    )
    g.add_argument(
        "--architecture",
        default=None,
        metavar="NAME",
        help="load the checkpoint as this architecture (e.g. an icefall hybrid as 'transducer'); default: detect it",
    )
    g.add_argument(
        "--max-audio-seconds",
        type=positive_float,
        default=None,
        metavar="S",
        help="longer audio is refused (checked from the header, enforced while decoding; default 4 h)",
    )
    g.add_argument(
        "--sequence-packing",
        choices=("auto", "on", "off"),
        default=None,
        help="CTC: encode batches of unequal windows packed end to end, no padding (auto: on when the model can)",
    )
    g.add_argument(
        "--punctuate",
        default=None,
        metavar="DIR",
        help="restore punctuation with a FunASR CT-Transformer model directory (ct-punc: config.yaml, model.pt, "
        "tokens.json) in every transcript that has none (Paraformer, WeNet, lowercase CTC, SenseVoice without ITN); "
        "a transcript's segments are then written when it finishes",
    )
    g.add_argument(
        "--punctuate-always",
        action="store_true",
        default=None,
        help="with --punctuate: punctuate transcripts that already have punctuation too",
    )


def add_search_flags(g: argparse._ArgumentGroup, *, every_request: bool = False) -> None:
    """The search flags ``oasr serve`` shares with ``transcribe`` / ``eval`` (where they set the
    option for every request). None set: the chosen strategy's own default."""
    scope = " for every request" if every_request else ""
    g.add_argument(
        "--beam-size",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"beams at temperature 0{scope} (1: greedy, at most 64; default: the decoding's own: Whisper 5, "
        "CTC 1, CTC + attention rescoring 10, transducer the checkpoint's: 1 unless it names a beam search)",
    )
    g.add_argument(
        "--search",
        default=None,
        metavar="NAME",
        help=f"transducer search{scope}: greedy, NeMo's malsd / maes / beam, icefall's modified_beam (the model "
        "names those it runs; default: the checkpoint's, a NeMo archive's decoding.strategy, else greedy for "
        "beam size 1 and the model's first beam search for more)",
    )
    g.add_argument(
        "--best-of",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"Whisper: samples at temperature > 0{scope} (default 5)",
    )
    g.add_argument(
        "--max-sym-per-frame",
        type=positive_int,
        default=None,
        metavar="N",
        help="transducer greedy search: symbols emitted per encoder frame at most (default: the model's, icefall 1)",
    )
    g.add_argument(
        "--blank-penalty",
        type=finite_float,
        default=None,
        metavar="X",
        help="transducer: subtracted from the blank logit before the search (default 0)",
    )
    g.add_argument(
        "--max-new-tokens",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"token budget{scope}: speech-LLM: new tokens per request (default: the checkpoint's, else one that "
        "grows with the audio's duration); Whisper: per 30-s window, the prompt plus N is the decode's length limit "
        "(default: the model's context). A transcript cut by it is reported (finish_reason 'length')",
    )
    g.add_argument(
        "--repetition-penalty",
        type=positive_float,
        default=None,
        metavar="X",
        help=f"Whisper / speech-LLM{scope}: > 1 penalises tokens already generated (Whisper default 1.0: off; "
        "speech-LLM: the checkpoint's)",
    )


LANGUAGE_HELP = (
    "ISO 639-1 / 639-3 code, English name (any case) or locale (de, deu, German, pt-BR, de_DE) of a language "
    "the model has (a locale it lacks: its base language); auto / none: detect it, or the model's default "
    "prompt where it cannot (default); one it lacks: exit 2, naming its languages"
)


def add_speaker_count_flags(g: argparse._ArgumentGroup) -> None:
    """``--num-speakers`` / ``--min-speakers`` / ``--max-speakers`` (``oasr transcribe --diarize``,
    ``oasr diarize``): None set, the diarizer decides."""
    g.add_argument("--num-speakers", type=positive_int, default=None, metavar="N", help="the number of speakers")
    g.add_argument("--min-speakers", type=positive_int, default=None, metavar="N", help="at least N speakers")
    g.add_argument("--max-speakers", type=positive_int, default=None, metavar="N", help="at most N speakers")


def add_transcription_options(parser: argparse.ArgumentParser, *, language: bool = True, task: bool = True) -> None:
    """What every command that transcribes takes: the decode options, then the model and
    engine options (``language`` / ``task``: whether it offers ``-l`` and ``--task``)."""
    _add_decode_options(parser, language=language, task=task)
    _add_engine_options(parser)


def _add_decode_options(parser: argparse.ArgumentParser, *, language: bool = True, task: bool = True) -> None:
    g = parser.add_argument_group("decoding")
    if language:
        g.add_argument("-l", "--language", default=None, metavar="L", help=LANGUAGE_HELP)
    if task:
        g.add_argument("--task", choices=("transcribe", "translate"), default=None, help="default: transcribe")
    add_search_flags(g)
    g.add_argument(
        "--patience", type=positive_float, default=None, metavar="P", help="Whisper: beam search patience (default 1.0)"
    )
    g.add_argument(
        "--temperature",
        type=temperatures,
        default=None,
        metavar="T[,T...]",
        help="Whisper: temperature or fallback sequence (default 0,0.2,0.4,0.6,0.8,1.0); speech-LLM: "
        "one temperature (default: the checkpoint's)",
    )
    if task:
        g.add_argument("--word-timestamps", action="store_true", help="time every word")
    g.add_argument(
        "--initial-prompt", default=None, metavar="TEXT", help="Whisper: text to prompt the first window with"
    )
    g.add_argument(
        "--no-condition-on-previous-text",
        dest="condition_on_previous_text",
        action="store_false",
        default=True,
        help="Whisper: do not prompt each window with the previous window's text",
    )
    g.add_argument("--without-timestamps", action="store_true", help="Whisper: decode text tokens only")
    g.add_argument(
        "--vad",
        action="store_true",
        help="cut the audio at speech with Silero VAD into chunks of <= 30 s decoded as one batch "
        "(needs oasr's vad extra: silero-vad)",
    )
    g.add_argument(
        "--hotwords",
        default=None,
        metavar="TEXT",
        help="phrases to favour (Whisper: prompt hint; CTC: beam-search boost, comma-separated)",
    )
    g.add_argument(
        "--hotword-weight",
        type=float,
        default=None,
        metavar="W",
        help="CTC / transducer: bonus per hotword token (default 1.5; NeMo CTC: boosting_tree_alpha)",
    )
    g.add_argument(
        "--ctc-weight",
        type=float,
        default=None,
        metavar="W",
        help="attention rescoring: weight of the CTC score (default: the checkpoint's, else 0.5)",
    )
    g.add_argument(
        "--reverse-weight",
        type=float,
        default=None,
        metavar="W",
        help="attention rescoring: weight of the right-to-left decoder (default: the checkpoint's, else 0)",
    )
    g.add_argument(
        "--context",
        default=None,
        metavar="TEXT",
        help="speech-LLM: text for the prompt's system turn (biasing); Canary 2: the decoder context",
    )
    g.add_argument(
        "--target-language",
        default=None,
        metavar="LANG",
        help="Canary: the output's language (another than --language translates; --task translate: English "
        "unless given)",
    )
    g.add_argument(
        "--punctuation",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Canary: punctuation and capitalisation (default: the checkpoint's prompt defaults, else on)",
    )
    g.add_argument(
        "--itn",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="inverse text normalisation: SenseVoice (funasr's use_itn; default off), Canary 2 (default: the "
        "checkpoint's prompt defaults, else off)",
    )
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="Whisper (temperature fallback, --best-of) / speech-LLM sampling seed: the same seed replays the "
        "same transcript (default: a fresh seed per request)",
    )
    g.add_argument(
        "--top-k",
        type=nonnegative_int,
        default=None,
        metavar="K",
        help="speech-LLM sampling: top-k (0: off; default: the checkpoint's)",
    )
    g.add_argument(
        "--top-p",
        type=positive_float,
        default=None,
        metavar="P",
        help="speech-LLM sampling: top-p (1.0: off; default: the checkpoint's)",
    )


_OPTION_NAMES = (
    "language",
    "task",
    "beam_size",
    "best_of",
    "patience",
    "temperature",
    "initial_prompt",
    "hotwords",
    "hotword_weight",
    "max_sym_per_frame",
    "blank_penalty",
    "search",
    "max_new_tokens",
    "repetition_penalty",
    "ctc_weight",
    "reverse_weight",
    "context",
    "seed",
    "top_k",
    "top_p",
    "target_language",
    "punctuation",
    "itn",
    "num_speakers",
    "min_speakers",
    "max_speakers",
)


def decode_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The ``TranscribeOptions`` the user set (everything else keeps the engine's default),
    checked against the command's parser (``args.parser``, set by every command) before any
    model loads: a bad combination is a usage error (``check_decode_kwargs``)."""
    kwargs = {name: getattr(args, name) for name in _OPTION_NAMES if getattr(args, name, None) is not None}
    if getattr(args, "word_timestamps", False):
        kwargs["word_timestamps"] = True
    if getattr(args, "without_timestamps", False):
        kwargs["without_timestamps"] = True
    if not getattr(args, "condition_on_previous_text", True):
        kwargs["condition_on_previous_text"] = False
    if getattr(args, "vad", False):
        kwargs["vad_filter"] = True
    parser = getattr(args, "parser", None)
    if parser is not None:
        check_decode_kwargs(parser, kwargs)
    return kwargs


def check_decode_kwargs(parser: argparse.ArgumentParser, kwargs: dict[str, Any]) -> None:
    """Refuse bad option combinations before the model is loaded (argparse-style, exit 2).

    Raises:
        CliError: (exit code 2) ``--vad`` without the silero-vad package.
    """
    from oasr.engine.config import TranscribeOptions

    try:
        TranscribeOptions.from_kwargs(**kwargs)
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    if kwargs.get("vad_filter"):
        from oasr.audio.vad import require_silero

        try:
            require_silero()
        except ImportError as e:
            raise CliError(f"--vad: {e}", exit_code=2) from None


# ---------------------------------------------------------------------------
# Input files and output files (-f / -o), as transcribe and stream read and write them


def add_output_flags(parser: argparse.ArgumentParser, format_help: str, dir_help: str) -> None:
    """``-f/--output-format`` (default text; ``all``: openai-whisper's set) and ``-o/--output-dir``."""
    from oasr.formatting import FORMAT_ALIASES, FORMATS

    parser.add_argument(
        "-f", "--output-format", choices=(*FORMATS, *FORMAT_ALIASES, "all"), default="text", help=format_help
    )
    parser.add_argument("-o", "--output-dir", type=Path, default=None, metavar="DIR", help=dir_help)


@dataclass
class FilePlan:
    """What a file command reads and writes: ``-f``'s formats, the input files, and per input,
    format -> the file ``-o`` writes it to (``targets``; None without ``-o``)."""

    formats: list[str]
    files: list[str]
    targets: list[dict[str, Path]] | None
    output_dir: Path | None

    def create_output_dir(self) -> None:
        """Create ``-o``'s directory (and its parents) when one is given: after the usage checks
        and the model load, so that a refused command leaves nothing behind.

        Raises:
            CliError: it cannot be created (naming it and why).
        """
        if self.output_dir is None:
            return
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"cannot create --output-dir {self.output_dir}: {describe_error(e)}") from None


def plan_files(args: argparse.Namespace, recursive: bool) -> FilePlan:
    """The ``FilePlan`` of ``args`` (inputs through ``expand_inputs``).

    Raises:
        SystemExit: (usage error) ``-f all`` without ``-o``, an ``-o`` that is not a directory,
            two inputs that would write one file, or what ``expand_inputs`` refuses.
    """
    from oasr.formatting import EXTENSIONS, output_formats

    parser: argparse.ArgumentParser = args.parser
    out: Path | None = args.output_dir
    formats = output_formats(args.output_format)
    if len(formats) > 1 and out is None:
        parser.error("-f all writes one file per format: give --output-dir")
    if out is not None and out.exists() and not out.is_dir():
        parser.error(f"--output-dir {out} is not a directory")
    files = expand_inputs(args.files, recursive, parser)
    if out is None:
        return FilePlan(formats, files, None, None)
    targets = [{f: out / f"{name}.{EXTENSIONS[f]}" for f in formats} for name in output_names(files)]
    seen: dict[Path, str] = {}
    for name, per_format in zip(files, targets):
        for t in per_format.values():
            if t in seen:
                parser.error(f"{seen[t]} and {name} would both be written to {t}")
            seen[t] = name
    return FilePlan(formats, files, targets, out)


_GLOB_CHARS = frozenset("*?[")


def expand_inputs(files: list[str], recursive: bool, parser: argparse.ArgumentParser) -> list[str]:
    """Files as given; directories -> their audio files (sorted); patterns -> their matches
    (sorted, when no file has that literal name). A file named twice is kept once.

    Raises:
        SystemExit: (usage error) a directory without audio files, a pattern matching nothing.
    """
    expanded: list[str] = []
    for item in files:
        if item == "-":
            expanded.append(item)
        elif os.path.isdir(item):
            found = _audio_in(Path(item), recursive)
            if not found:
                more = "" if recursive else " (--recursive searches its subdirectories)"
                parser.error(f"directory {item} has no audio files{more}")
            expanded.extend(found)
        elif not os.path.exists(item) and _GLOB_CHARS & set(item):
            matches = sorted(m for m in glob.glob(item, recursive=recursive) if os.path.isfile(m))
            if not matches:
                parser.error(f"no file matches {item}")
            expanded.extend(matches)
        else:
            expanded.append(item)
    seen: set[str] = set()
    unique = []
    for item in expanded:
        key = item if item == "-" else os.path.normcase(os.path.abspath(item))
        if key not in seen:
            seen.add(key)
            unique.append(item)
    if unique.count("-") > 1:
        parser.error("stdin (-) can be given only once")
    return unique


def _audio_in(directory: Path, recursive: bool) -> list[str]:
    paths = directory.rglob("*") if recursive else directory.iterdir()
    return sorted(str(p) for p in paths if p.suffix[1:].lower() in AUDIO_EXTENSIONS and p.is_file())


# ---------------------------------------------------------------------------
# Engine


def resolve_device(device: str) -> str:
    """``auto`` -> cuda when available, else cpu; other names are checked.

    Raises:
        CliError: (exit code 2) an unknown device, or CUDA asked for and not available.
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise CliError(f"--device {device} is not a device: {e}", exit_code=2) from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise CliError(
                f"--device {device}: CUDA is not available (torch {torch.__version__}, "
                f"{'built without CUDA' if torch.version.cuda is None else 'no usable GPU'})",
                exit_code=2,
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise CliError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s)", exit_code=2)
    return device


def engine_extras(args: argparse.Namespace) -> dict[str, Any]:
    """``EngineConfig`` fields beyond the basics that the user set (decode type, CTC LM).

    Raises:
        CliError: (exit code 2) ``--punctuate-always`` without ``--punctuate``.
    """
    if getattr(args, "punctuate_always", None) and getattr(args, "punctuate", None) is None:
        raise CliError("--punctuate-always needs --punctuate DIR (the punctuation model)", exit_code=2)
    extras: dict[str, Any] = {}
    for arg, field_name in (
        ("decode_type", "decode_type"),
        ("lm", "lm_path"),
        ("lm_alpha", "lm_alpha"),
        ("lm_beta", "lm_beta"),
        ("quantize", "quantize"),
        ("max_audio_seconds", "max_audio_s"),
        ("architecture", "architecture"),
        ("attention_model", "attention_model"),
        ("att_context_size", "att_context_size"),
        ("window_seconds", "ctc_window_s"),
        ("punctuate", "punc_model"),
        ("punctuate_always", "punc_always"),
        ("diarize_model", "diarize_model"),
    ):
        value = getattr(args, arg, None)
        if value is not None:
            extras[field_name] = value
    for arg in ("step_graphs", "sequence_packing"):
        switch = getattr(args, arg, None)
        if switch is not None:
            extras[arg] = {"auto": None, "on": True, "off": False}[switch]
    return extras


def load_engine(args: argparse.Namespace, **config: Any):
    """Build the ``ASREngine`` the options ask for (``config``: further ``EngineConfig`` fields).

    Raises:
        CliError: (exit code 2) no model is available, or the model cannot be loaded.
    """
    from oasr.engine import ASREngine
    from oasr.models.loaders import ModelNotFoundError

    device = resolve_device(args.device)
    try:
        return ASREngine(
            args.model,
            device=device,
            dtype=args.dtype,
            num_threads=args.threads,
            max_batch_size=args.batch_size,
            **engine_extras(args),
            **config,
        )
    except ModelNotFoundError as e:
        raise CliError(str(e), exit_code=2) from None
    except (ValueError, OSError, RuntimeError) as e:
        raise CliError(f"could not load model {args.model or '(default)'}: {e}", exit_code=2) from None


# ---------------------------------------------------------------------------
# Running a batch


def run_batch(
    engine,
    sources: Sequence[Source],
    options: dict[str, Any],
    on_result: Callable[[int, RequestOutput], None],
    on_error: Callable[[int, BaseException], None],
) -> None:
    """Transcribe ``sources`` in one batched pass, reporting each by its index.

    The engine decodes each input as it admits it (long files in pieces); an input
    that fails is reported through ``on_error`` while the rest carry on. Every
    index gets exactly one ``on_result`` or ``on_error``.
    """
    for index, result in engine.transcribe_iter((s.data for s in sources), return_exceptions=True, **options):
        if isinstance(result, Exception):
            on_error(index, result)
        else:
            on_result(index, result)
