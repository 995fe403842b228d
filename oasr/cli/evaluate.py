"""``oasr eval MANIFEST``: word / character error rates of a model on a manifest.

The manifest is JSON Lines, one utterance a line: ``audio`` (a path, relative to
the manifest's directory unless absolute), ``text`` (the reference) and
``language`` (ISO code; decoded in that language unless ``--detect-language``).
Scores use ``oasr.metrics.error_rates``: Whisper's normalisers, WER, or CER for
unspaced scripts (zh, ja, ko, ...), pooled over the utterances of each language
(errors / reference units, not a mean of per-utterance rates).

Prints one row per language, an ``all`` row when every language uses the same
metric, and the overall counts; ``--json FILE`` writes the figures and every
hypothesis. Utterances whose audio fails are reported on stderr, left out of the
scores and make the exit code 1; a hypothesis a token budget cut (``finish_reason`` "length")
is scored as it is, with a warning on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from oasr.cli.common import (
    CUT_WARNING,
    CliError,
    add_transcription_options,
    decode_kwargs,
    load_engine,
    positive_int,
    run_batch,
)
from oasr.serving.common import Source, describe_error, progress_bar

NAME = "eval"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        NAME,
        help="score a model on a manifest (WER / CER per language)",
        description="Transcribe the utterances of a JSON Lines manifest (fields: audio, text, language) and "
        "print the word error rate per language (character error rate for zh, ja, ko, ...).",
    )
    p.add_argument("manifest", type=Path, metavar="MANIFEST", help="JSON Lines manifest")
    p.add_argument(
        "--language-filter",
        default=None,
        metavar="L1,L2",
        help="only utterances in these languages (comma-separated ISO codes)",
    )
    p.add_argument("--limit", type=positive_int, default=None, metavar="N", help="only the first N utterances")
    p.add_argument(
        "--detect-language",
        action="store_true",
        help="let the model detect the language instead of passing the manifest's",
    )
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="print each reference and hypothesis")
    add_transcription_options(p, language=False, task=False)
    p.set_defaults(func=run, parser=p)


def read_manifest(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON Lines manifest with ``path`` resolved against its directory.

    Raises:
        CliError: (exit 2) the file cannot be read, or a line is not a JSON object
            with string ``audio`` and ``text``.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise CliError(f"cannot read manifest {path}: {describe_error(e)}", exit_code=2) from None
    except UnicodeDecodeError as e:
        raise CliError(f"manifest {path} is not UTF-8 text: {e}", exit_code=2) from None
    rows = []
    base = path.parent
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise CliError(f"{path}:{number}: not JSON: {e}", exit_code=2) from None
        if not isinstance(row, dict):
            raise CliError(f"{path}:{number}: expected a JSON object", exit_code=2)
        for key in ("audio", "text"):
            if not isinstance(row.get(key), str):
                raise CliError(f"{path}:{number}: missing string field {key!r}", exit_code=2)
        if row.get("language") is not None and not isinstance(row["language"], str):
            raise CliError(f"{path}:{number}: field 'language' must be a string", exit_code=2)
        row["path"] = str(base / row["audio"])
        rows.append(row)
    return rows


def _format_table(rates: dict, overall_row) -> str:
    header = ("language", "metric", "utterances", "ref units", "errors", "rate")
    rows = [header]
    for r in [*rates.values(), *([overall_row] if overall_row is not None else [])]:
        rows.append(
            (r.language, r.metric.upper(), str(r.utterances), str(r.reference_units), str(r.errors), f"{r.rate:.2%}")
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(row[2:], widths[2:])]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from oasr.metrics import ErrorRate, error_rates

    parser: argparse.ArgumentParser = args.parser
    base_options = decode_kwargs(args)

    rows = read_manifest(args.manifest)
    if args.language_filter:
        wanted = {x.strip() for x in args.language_filter.split(",") if x.strip()}
        rows = [r for r in rows if r.get("language") in wanted]
    if args.limit is not None:
        rows = rows[: args.limit]
    if not rows:
        raise CliError(f"no utterances to evaluate in {args.manifest} (after --language-filter / --limit)", 2)

    # Options are per batch, and the language is an option: one batch per language.
    groups: dict[str | None, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(None if args.detect_language else row.get("language"), []).append(i)

    engine = load_engine(args)
    try:
        engine.make_options(**base_options)
    except (TypeError, ValueError) as e:
        parser.error(str(e))

    hypotheses: dict[int, Any] = {}
    errors: dict[int, str] = {}
    bar = progress_bar(len(rows), args.no_progress, unit="utt")
    started = time.perf_counter()
    try:
        for language, indices in groups.items():
            options = dict(base_options)
            if language is not None:
                options["language"] = language
            try:
                engine.make_options(**options)
            except ValueError as e:  # e.g. a language the model does not know: fail the group, go on
                for i in indices:
                    errors[i] = str(e)
                    bar.write(f"oasr {NAME}: {rows[i]['path']}: {e}", file=sys.stderr)
                bar.update(len(indices))
                continue
            sources = [Source(rows[i]["audio"], rows[i]["path"]) for i in indices]

            def on_result(k: int, output, indices=indices) -> None:
                bar.update(1)
                hypotheses[indices[k]] = output
                if output.finish_reason == "length":  # scored as it is, but its errors may be the budget's
                    bar.write(f"oasr {NAME}: {rows[indices[k]]['path']}: warning: {CUT_WARNING}", file=sys.stderr)

            def on_error(k: int, exc: BaseException, indices=indices) -> None:
                bar.update(1)
                errors[indices[k]] = describe_error(exc)
                bar.write(f"oasr {NAME}: {rows[indices[k]]['path']}: {errors[indices[k]]}", file=sys.stderr)

            run_batch(engine, sources, options, on_result, on_error)
    finally:
        bar.close()
    wall = time.perf_counter() - started

    scored = sorted(hypotheses)
    rates = error_rates((rows[i]["text"], hypotheses[i].text, rows[i].get("language")) for i in scored)
    overall = None
    if len(rates) > 1 and len({r.metric for r in rates.values()}) == 1:
        vals = list(rates.values())
        overall = ErrorRate(
            "all",
            vals[0].metric,
            sum(r.errors for r in vals),
            sum(r.reference_units for r in vals),
            sum(r.utterances for r in vals),
        )
    audio_s = sum(hypotheses[i].duration for i in scored)

    out = sys.stdout
    if args.verbose:
        for i in scored:
            out.write(f"[{rows[i].get('language')}] {rows[i]['audio']}\n  REF: {rows[i]['text']}\n")
            out.write(f"  HYP: {hypotheses[i].text}\n")
        out.write("\n")
    if rates:
        out.write(_format_table(rates, overall) + "\n")
    out.write(
        f"\n{len(scored)} of {len(rows)} utterances scored ({len(errors)} failed); "
        f"{audio_s:.1f} s of audio in {wall:.1f} s"
        + (f" ({audio_s / wall:.1f}x real time)" if wall > 0 and audio_s > 0 else "")
        + "\n"
    )

    if args.json is not None:
        doc = {
            "manifest": str(args.manifest),
            "model": engine.loaded.name,
            "model_source": engine.loaded.source,
            "options": {**base_options, "detect_language": args.detect_language},
            "languages": {
                lang: {
                    "metric": r.metric,
                    "rate": r.rate,
                    "errors": r.errors,
                    "reference_units": r.reference_units,
                    "utterances": r.utterances,
                }
                for lang, r in rates.items()
            },
            "overall": {
                "utterances": len(rows),
                "scored": len(scored),
                "failed": len(errors),
                "audio_seconds": round(audio_s, 3),
                "wall_seconds": round(wall, 3),
                **(
                    {
                        "metric": overall.metric,
                        "rate": overall.rate,
                        "errors": overall.errors,
                        "reference_units": overall.reference_units,
                    }
                    if overall is not None
                    else {}
                ),
            },
            "utterances": [
                {
                    "audio": rows[i]["audio"],
                    "language": rows[i].get("language"),
                    "reference": rows[i]["text"],
                    **(
                        {
                            "hypothesis": hypotheses[i].text,
                            "detected_language": hypotheses[i].language,
                            "duration": round(hypotheses[i].duration, 3),
                        }
                        if i in hypotheses
                        else {"error": errors.get(i, "not transcribed")}
                    ),
                }
                for i in range(len(rows))
            ],
        }
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot write --json {args.json}: {describe_error(e)}") from None
    return 1 if errors else 0
