"""``oasr transcribe --ray``: batch transcription of many files with Ray Data.

The life of a run:

1. ``list_inputs`` lists the inputs: audio files as given, directories (their audio files,
   by the CLI's extensions; subdirectories too with ``recursive``), JSONL manifests (one
   object a line with an ``audio`` key, relative to the manifest's directory unless
   absolute); a file named twice is kept once. Only paths are listed; the audio is read by
   the actor that transcribes it (on a multi-node cluster the inputs must be at the same
   path on every node, e.g. a shared file system).
2. Each input gets the output files ``oasr transcribe -o DIR -f FORMAT`` would write for
   the same inputs (``oasr.serving.common.output_names``: ``DIR/<stem>.<ext>``, the whole
   name or the sub-directory where names clash). An input whose every output file already
   exists is skipped (a rerun resumes an interrupted run; failed inputs have no output and
   are tried again).
3. A Ray Data dataset of the remaining paths goes through ``map_batches`` with
   ``Transcriber``, a callable class: one ``ASREngine`` per actor (``num_actors`` actors of
   ``num_cpus`` / ``num_gpus`` each), which decodes its batch with its own continuous
   batching and returns, per input, the documents rendered by ``oasr.formatting`` (the
   bytes the CLI writes) or the error that input met.
4. The driver consumes the results as they stream in: it writes the documents (to a
   temporary name, then renamed, so that an interrupted write never counts as finished),
   appends one line per input to ``DIR/results.jsonl`` (``audio``, ``status`` ok / error,
   ``text``, ``language``, ``duration_s``, ``error``, ``outputs``) and moves a progress bar.
   A failed input is a line with its error, never the end of the run. At the end
   ``DIR/results.parquet`` holds the latest line of every input ever recorded there (when
   pyarrow is installed).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS_JSONL = "results.jsonl"
RESULTS_PARQUET = "results.parquet"


def list_inputs(paths: Iterable[str | os.PathLike], *, recursive: bool = False) -> list[str]:
    """Expand files, directories and ``.jsonl`` manifests into audio paths, in order.

    Raises:
        FileNotFoundError: a path that does not exist (named).
        ValueError: a directory without audio files, or a manifest line that is not a JSON
            object with a string ``audio`` key (named by file and line).
    """
    from oasr.serving.common import AUDIO_EXTENSIONS

    found: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            walk = path.rglob("*") if recursive else path.iterdir()
            audio = sorted(str(p) for p in walk if p.suffix[1:].lower() in AUDIO_EXTENSIONS and p.is_file())
            if not audio:
                raise ValueError(f"directory {path} has no audio files{'' if recursive else ' (not recursive)'}")
            found += audio
        elif path.suffix.lower() == ".jsonl" and path.is_file():
            found += _manifest(path)
        elif path.exists():
            found.append(str(path))
        else:
            raise FileNotFoundError(f"no such file or directory: {path}")
    seen: set[str] = set()
    unique = []
    for item in found:
        key = os.path.normcase(os.path.abspath(item))
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def _manifest(path: Path) -> list[str]:
    found = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not JSON ({e.msg})") from None
            audio = entry.get("audio") if isinstance(entry, dict) else None
            if not isinstance(audio, str) or not audio:
                raise ValueError(f"{path}:{number}: expected an object with a string 'audio' key")
            found.append(str(path.parent / audio))  # an absolute ``audio`` stays as it is
    return found


def output_targets(output_dir: Path, files: list[str], formats: Iterable[str]) -> list[dict[str, Path]]:
    """Per input, ``format -> file``: what ``oasr transcribe -o output_dir`` writes for ``files``."""
    from oasr.formatting import EXTENSIONS
    from oasr.serving.common import output_names

    formats = tuple(formats)
    return [{f: output_dir / f"{name}.{EXTENSIONS[f]}" for f in formats} for name in output_names(files)]


class Transcriber:
    """The ``map_batches`` callable class: one engine per Ray actor.

    Args:
        model: what ``ASREngine`` loads (on the actor's node).
        engine_options: ``EngineConfig`` fields (device, num_threads, max_batch_size, ...).
        decode_options: ``TranscribeOptions`` of every input (the CLI's ``decode_kwargs``).
        formats: the documents to render per input.
        layout: the subtitle layout of SRT / WebVTT (``oasr.formatting.SubtitleLayout``).
        min_duration_s: shorter audio fails, as in ``oasr transcribe --min-duration``.
    """

    def __init__(
        self,
        model: str | None,
        engine_options: dict[str, Any],
        decode_options: dict[str, Any],
        formats: tuple[str, ...],
        layout=None,
        min_duration_s: float = 0.0,
    ) -> None:
        from oasr.engine import ASREngine

        options = dict(engine_options)
        if options.get("device", "auto") == "auto":
            import torch

            options["device"] = "cuda" if torch.cuda.is_available() else "cpu"
        self.engine = ASREngine(model, **options)
        self.engine.make_options(**decode_options)  # bad options fail the actor at once, not each input
        self.decode_options = decode_options
        self.formats = formats
        self.layout = layout
        self.min_duration_s = min_duration_s
        self.words = bool(decode_options.get("word_timestamps"))
        self.worker = f"{os.uname().nodename}:{os.getpid()}"

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        from oasr.formatting import format_output
        from oasr.serving.common import Source, describe_error, problem

        paths = [str(p) for p in batch["audio"]]
        rows: list[dict[str, Any] | None] = [None] * len(paths)
        try:
            results = self.engine.transcribe_iter(
                paths, return_exceptions=True, min_duration_s=self.min_duration_s, **self.decode_options
            )
            for index, result in results:
                if isinstance(result, Exception):
                    rows[index] = _error_row(problem(Source(paths[index], paths[index]), result))
                    continue
                try:
                    docs = {f: format_output(result, f, words=self.words, layout=self.layout) for f in self.formats}
                except Exception as e:  # noqa: BLE001 - one input's rendering must not fail the batch
                    rows[index] = _error_row(f"cannot format the transcript: {describe_error(e)}")
                    continue
                rows[index] = {
                    "status": "ok",
                    "text": result.text,
                    "language": result.language,
                    "duration_s": float(result.duration or 0.0),
                    "error": None,
                    **{f"doc_{f}": docs[f] for f in self.formats},
                }
        except Exception as e:  # noqa: BLE001 - the engine failed the batch itself: its unfinished inputs fail
            message = f"the engine failed: {describe_error(e)}"
            rows = [row or _error_row(message) for row in rows]
        rows = [row or _error_row("the engine returned no result") for row in rows]
        keys = ("status", "text", "language", "duration_s", "error", *(f"doc_{f}" for f in self.formats))
        out: dict[str, list] = {"index": list(batch["index"]), "worker": [self.worker] * len(paths)}
        for key in keys:
            out[key] = [row.get(key) for row in rows]
        return out


def _error_row(message: str) -> dict[str, Any]:
    return {"status": "error", "text": None, "language": None, "duration_s": None, "error": message}


@dataclass
class BatchSummary:
    """What a run did: inputs listed, skipped (already done), transcribed, failed."""

    total: int = 0
    skipped: int = 0
    done: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (audio, error)
    seconds: float = 0.0
    results: Path | None = None


def init_ray(address: str | None = None) -> None:
    """Join the cluster at ``address`` (``auto``: the one ``ray start`` made on this node), or
    start a local Ray (no dashboard, usage stats off) when none is given; nothing when Ray is up."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(address="local", include_dashboard=False, log_to_driver=False)


def transcribe_dataset(
    inputs: Iterable[str | os.PathLike],
    output_dir: str | os.PathLike,
    *,
    model: str | None = None,
    formats: Iterable[str] = ("text",),
    recursive: bool = False,
    layout=None,
    min_duration_s: float = 0.0,
    engine_options: dict[str, Any] | None = None,
    decode_options: dict[str, Any] | None = None,
    address: str | None = None,
    num_actors: int = 1,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    batch_size: int = 16,
    progress: bool = True,
) -> BatchSummary:
    """Transcribe ``inputs`` on Ray Data into ``output_dir`` (see the module notes).

    Args:
        inputs: files, directories, ``.jsonl`` manifests.
        output_dir: where the documents, ``results.jsonl`` and ``results.parquet`` go.
        model: what each actor's engine loads.
        formats: ``oasr.formatting.FORMATS`` names.
        recursive: directories contribute the audio files of their subdirectories too.
        layout, min_duration_s: as ``Transcriber``'s (``oasr transcribe``'s subtitle layout
            and ``--min-duration``).
        engine_options: ``EngineConfig`` fields for each actor's engine.
        decode_options: ``TranscribeOptions`` for every input.
        address: a Ray cluster to join; None starts a local Ray (unless one is up).
        num_actors: engine actors (each one model copy).
        num_cpus, num_gpus: Ray resources per actor (fractions allowed).
        batch_size: inputs handed to an actor at a time.
        progress: show a progress bar on stderr (when it is a terminal); each failed input is
            reported on stderr as ``oasr transcribe`` reports it.

    Returns:
        a ``BatchSummary``.

    Raises:
        ValueError: two inputs would write the same output file, or a bad manifest.
        FileNotFoundError: an input path that does not exist.
    """
    from oasr.formatting import FORMATS
    from oasr.serving.common import progress_bar

    started = time.perf_counter()
    formats = tuple(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown output format(s) {unknown} (choose from {', '.join(FORMATS)})")
    out_dir = Path(output_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"output directory {out_dir} is not a directory")
    items = list_inputs(inputs, recursive=recursive)
    targets = output_targets(out_dir, items, formats)
    pending = [i for i, per_format in enumerate(targets) if not all(t.exists() for t in per_format.values())]
    summary = BatchSummary(total=len(items), skipped=len(items) - len(pending), results=out_dir / RESULTS_JSONL)
    out_dir.mkdir(parents=True, exist_ok=True)
    if pending:
        bar = progress_bar(len(pending), not progress)
        try:
            with open(out_dir / RESULTS_JSONL, "a", encoding="utf-8") as results:
                constructor = {
                    "model": model,
                    "engine_options": dict(engine_options or {}),
                    "decode_options": dict(decode_options or {}),
                    "formats": formats,
                    "layout": layout,
                    "min_duration_s": min_duration_s,
                }
                for row in _run(items, pending, constructor, address, num_actors, num_cpus, num_gpus, batch_size):
                    item = items[row["index"]]
                    record = _record(item, row, targets[row["index"]], formats)
                    if record["status"] == "ok":
                        summary.done += 1
                    else:
                        summary.failed.append((item, record["error"]))
                        bar.write(f"oasr transcribe: {item}: {record['error']}", file=sys.stderr)
                    results.write(json.dumps(record, ensure_ascii=False) + "\n")
                    results.flush()
                    bar.update(1)
        finally:
            bar.close()
    _write_parquet(out_dir)
    summary.seconds = time.perf_counter() - started
    return summary


def _run(items, pending, constructor, address, num_actors, num_cpus, num_gpus, batch_size) -> Iterator[dict[str, Any]]:
    """The rows of the Ray Data pipeline, as they finish."""
    init_ray(address)
    import ray.data

    logging.getLogger("ray.data").setLevel(logging.WARNING)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # ours counts files; Ray's count blocks
    # at least two batches an actor, so that every actor gets work and one slow batch does not hold the end
    batch_size = max(1, min(batch_size, -(-len(pending) // (2 * num_actors))))
    blocks = -(-len(pending) // batch_size)
    dataset = ray.data.from_items([{"index": i, "audio": items[i]} for i in pending], override_num_blocks=blocks)
    dataset = dataset.map_batches(
        Transcriber,
        fn_constructor_kwargs=constructor,
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=max(1, min(num_actors, blocks))),
        num_cpus=num_cpus,
        num_gpus=num_gpus,
    )
    for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
        columns = {k: list(v) for k, v in batch.items()}
        for n in range(len(columns["index"])):
            yield {k: _plain(v[n]) for k, v in columns.items()}


def _plain(value: Any) -> Any:
    """numpy scalars -> Python values (NaN / None for a missing value -> None)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def _record(item: str, row: dict[str, Any], targets: dict[str, Path], formats) -> dict[str, Any]:
    """Write the documents of one finished input; its line of ``results.jsonl``."""
    from oasr.serving.common import describe_error

    record: dict[str, Any] = {
        "audio": item,
        "status": row["status"],
        "text": row.get("text"),
        "language": row.get("language"),
        "duration_s": row.get("duration_s"),
        "error": row.get("error"),
        "outputs": {},
        "worker": row.get("worker"),
    }
    if row["status"] != "ok":
        return record
    try:
        for f in formats:
            path = targets[f]
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            partial.write_text(row[f"doc_{f}"], encoding="utf-8")
            os.replace(partial, path)
            record["outputs"][f] = str(path)
    except OSError as e:
        record.update(status="error", error=f"cannot write {path}: {describe_error(e)}")
    return record


def read_results(output_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The latest ``results.jsonl`` line of every input recorded in ``output_dir``, by audio path."""
    latest: dict[str, dict[str, Any]] = {}
    path = Path(output_dir) / RESULTS_JSONL
    if not path.exists():
        return latest
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                latest[record["audio"]] = record
    return latest


def _write_parquet(output_dir: Path) -> Path | None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    records = list(read_results(output_dir).values())
    if not records:
        return None
    for r in records:
        r["outputs"] = json.dumps(r.get("outputs") or {})
    path = output_dir / RESULTS_PARQUET
    pq.write_table(pa.Table.from_pylist(records), path)
    return path
