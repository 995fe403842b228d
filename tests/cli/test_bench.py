"""``oasr bench``: aggregation and reporting on fake child results, the round order,
the workloads it builds, its refusals, and one real oasr-only run on a short clip."""

from __future__ import annotations

import json
import sys

import pytest

from oasr import ASREngine
from oasr.cli import bench
from oasr.cli.main import build_parser, main
from oasr.models.bundled import bundled_path
from tests.conftest import checkout_hint

needs_whisper_base = pytest.mark.skipif(
    bundled_path("whisper-base") is None,
    reason="whisper-base is not installed (oasr's whisper-base extra)",
)


def _run(
    wall_s: float,
    tokens: int = 100,
    rss: float = 500.0,
    load_s: float = 1.0,
    first: float | None = None,
    cpu: float | None = None,
) -> dict:
    run = {"wall_s": wall_s, "tokens": tokens, "peak_rss_mb": rss, "load_s": load_s, "texts": ["hello"]}
    optional = {"first_delta_s": first, "cpu_s": cpu}
    return run | {k: v for k, v in optional.items() if v is not None}


def _report(results: list[dict]) -> dict:
    settings = {
        "model": "whisper-base",
        "compute_type": "float32",
        "beam_size": 1,
        "language": "en",
        "timestamps": False,
        "rounds": 3,
    }
    return {"settings": settings, "machine": {"cpus": 2, "platform": "Linux"}, "results": results}


# ---------------------------------------------------------------------------
# Aggregation and reporting


def test_summarize_median_spread_rtfx_and_tokens_per_s():
    stats = bench.summarize([_run(2.0, 100, 600), _run(4.0, 100, 500), _run(5.0, 100, 700)], audio_s=20.0)
    assert stats["wall_s"] == {"median": 4.0, "min": 2.0, "max": 5.0}
    assert stats["rtfx"] == {"median": 5.0, "min": 4.0, "max": 10.0}
    assert stats["tokens_per_s"] == {"median": 25.0, "min": 20.0, "max": 50.0}
    assert stats["peak_rss_mb"] == {"median": 600, "min": 500, "max": 700}
    assert set(stats) == set(bench.METRICS)
    # CPU seconds where every round reported them
    assert bench.summarize([_run(1.0, cpu=1.5), _run(1.0, cpu=2.5)], 1.0)["cpu_s"]["median"] == 2.0
    assert "cpu_s" not in bench.summarize([_run(1.0, cpu=1.5), _run(1.0)], 1.0)
    # an even number of rounds takes the mean of the middle two
    assert bench.summarize([_run(1.0), _run(3.0)], audio_s=6.0)["wall_s"]["median"] == 2.0


def test_ratios_are_oasr_over_peer_of_the_medians():
    oasr_stats = bench.summarize([_run(1.0, rss=400), _run(2.0, rss=400), _run(9.0, rss=400)], audio_s=10.0)
    peer_stats = bench.summarize([_run(4.0, rss=800), _run(4.0, rss=800), _run(4.0, rss=800)], audio_s=10.0)
    r = bench.ratios(oasr_stats, peer_stats)
    assert r["rtfx"] == pytest.approx(2.0)  # oasr twice as fast
    assert r["wall_s"] == pytest.approx(0.5)
    assert r["peak_rss_mb"] == pytest.approx(0.5)


def test_markdown_table():
    oasr_runs = [_run(1.0, first=0.2, cpu=2.0), _run(1.5, first=0.3, cpu=2.5), _run(2.0, first=0.4, cpu=3.0)]
    oasr_stats = bench.summarize(oasr_runs, audio_s=11.0)
    peer_stats = bench.summarize([_run(3.0, rss=1000.0, cpu=6.25)] * 3, audio_s=11.0)
    common = {"workload": "short", "batch_size": 8, "audio_s": 11.0, "files": 1, "compute_type": "int8", "threads": 2}
    oasr_row = {**common, "system": "oasr", "weights": "int8", "stats": oasr_stats, "vs_oasr": None}
    peer_row = {**common, "stats": peer_stats, "vs_oasr": bench.ratios(oasr_stats, peer_stats), "error_rate": {}}
    peer_row["agreement"] = {"same_files": 1, "files": 2, "chars": 0.975}
    table = bench.markdown_table(
        _report(
            [
                {**oasr_row, "error_rate": {"en": 0.0}},
                {**peer_row, "system": "faster-whisper", "weights": "int8"},
                {**peer_row, "system": "whisper.cpp", "weights": "q8_0"},
            ]
        )
    )
    lines = table.splitlines()
    assert lines[0].startswith("| compute | threads | workload | audio s | batch | system | wall s | first text s |")
    assert lines[1].startswith("|---|")
    assert len({line.count("|") for line in lines[:5]}) == 1
    assert lines[2] == (
        "| int8 | 2 | short | 11.0 | 8 | oasr | 1.50 [1.00–2.00] | 0.30 [0.20–0.40] | 7.3 [5.5–11.0] | 66.7 | 500 "
        "| 1.00 | 0.0% | - | - | 2.50 [2.00–3.00] | - | - |"
    )
    assert lines[3] == (
        "| int8 | 2 | short | 11.0 | 8 | faster-whisper | 3.00 [3.00–3.00] | - | 3.7 [3.7–3.7] | 33.3 | 1000 | 1.00 "
        "| - | 2.00× | 0.50× | 6.25 [6.25–6.25] | 2.50× | 1/2, 97.5% |"
    )
    assert lines[4].startswith("| int8 | 2 | short | 11.0 | 8 | whisper.cpp (q8_0) | 3.00")  # its weights named
    assert "whisper-base, beam 1" in table and "3 rounds" in table and "one normaliser" in table


def test_agreement_counts_same_files_and_matched_characters():
    same = bench.agreement(["ab  cd", "xyz"], ["ab cd", "xyz"])  # whitespace runs do not count
    assert same == {"same_files": 2, "files": 2, "chars": 1.0}
    # one substitution and one deletion against the peer's 5 + 4 characters
    assert bench.agreement(["abXde", "abc"], ["abcde", "abcd"]) == {"same_files": 0, "files": 2, "chars": 1 - 2 / 9}
    assert bench.agreement(["", "x"], ["", ""])["chars"] == 0.0  # text where the peer has none
    with pytest.raises(ValueError):
        bench.agreement(["a"], ["a", "b"])


def test_random_weights_print_no_wer():
    stats = bench.summarize([_run(1.0)], audio_s=10.0)
    common = {"workload": "corpus", "batch_size": 1, "audio_s": 10.0, "files": 2, "compute_type": "float32"}
    rows = [
        {**common, "threads": 2, "system": "oasr", "stats": stats, "vs_oasr": None, "error_rate": None},
        {**common, "threads": 2, "system": "transformers", "stats": stats, "vs_oasr": bench.ratios(stats, stats)},
    ]
    report = _report(rows)
    report["settings"] |= {"random_weights": True, "peers": ["transformers"]}
    table = bench.markdown_table(report)
    assert table.count("| random weights |") == 2 and "no WER" in table and "family's defaults" in table


def test_plot_rtfx_against_batch_size(tmp_path):
    pytest.importorskip("matplotlib")
    results = [
        {
            "workload": "corpus",
            "batch_size": b,
            "system": s,
            "compute_type": "float32",
            "threads": t,
            "stats": bench.summarize([_run(w / b / t)], 100.0),
        }
        for b in (1, 4, 8)
        for t in (1, 2)
        for s, w in (("oasr", 10.0), ("faster-whisper-batched", 20.0))
    ]
    out = tmp_path / "rtfx.png"
    assert bench.plot_rtfx(_report(results), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one_size = [r for r in results if r["batch_size"] == 8]  # grouped bars, a group per cell
    assert bench.plot_rtfx(_report(one_size), tmp_path / "bars.png")
    assert (tmp_path / "bars.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not bench.plot_rtfx(_report([]), tmp_path / "none.png")


# ---------------------------------------------------------------------------
# Workloads and the round order


def test_long_recording_is_a_16k_wav_longer_than_asked(audio_dir, tmp_path):
    sf = pytest.importorskip("soundfile")
    rows = bench.read_manifest(audio_dir, "en")
    assert rows and all(r["language"] == "en" for r in rows)
    path, used = bench.long_recording(rows, tmp_path, min_seconds=20.0)
    info = sf.info(str(path))
    assert info.samplerate == 16000 and info.channels == 1 and info.duration > 20.0
    assert path.parent == tmp_path and len(used) < len(rows)
    written = path.stat().st_mtime_ns
    again, _ = bench.long_recording(rows, tmp_path, min_seconds=20.0)
    assert again == path and path.stat().st_mtime_ns == written  # cached, not rewritten


def test_rounds_alternate_oasr_and_peer_in_fresh_children(audio_dir, monkeypatch):
    calls = []

    def fake_child(spec: dict, timeout_s: float) -> dict:
        calls.append((spec["workload"], spec["batch_size"], spec["system"]))
        assert spec["beam_size"] == 1 and spec["language"] == "en" and spec["threads"] == 2
        wall = 1.0 if spec["system"] == bench.OASR else 2.0
        return {**_run(wall), "texts": ["x"] * len(spec["files"])}

    monkeypatch.setattr(bench, "run_child", fake_child)
    monkeypatch.setattr(bench, "ct2_model_dir", lambda model, cache: "ct2")
    argv = ["bench", "--workload", "corpus", "--corpus-limit", "3", "--batch-sizes", "1", "4", "--rounds", "2"]
    args = build_parser().parse_args([*argv, "--threads", "2", "--audio-dir", str(audio_dir)])
    report = bench.run_benchmark(args)
    fw = bench.FW_BATCHED
    assert calls == [("corpus", b, s) for b in (1, 4) for _ in range(2) for s in (bench.OASR, fw)]
    assert [(r["batch_size"], r["system"]) for r in report["results"]] == [(1, "oasr"), (1, fw), (4, "oasr"), (4, fw)]
    assert report["results"][1]["vs_oasr"]["rtfx"] == pytest.approx(2.0)
    assert len(report["workloads"]["corpus"]["files"]) == 3
    json.dumps(report)


def test_the_matrix_runs_every_peer_in_every_cell_on_its_own_weights(audio_dir, monkeypatch):
    calls = []

    def fake_child(spec: dict, timeout_s: float) -> dict:
        calls.append((spec["compute_type"], spec["threads"], spec["system"], spec.get("ggml_path")))
        wall = {bench.OASR: 1.0, bench.FW_BATCHED: 2.0, bench.WCPP: 4.0}[spec["system"]]
        return {**_run(wall * spec["threads"]), "texts": ["x"] * len(spec["files"])}

    prepared = []

    def fake_ggml(model: str, cache_dir, file_type: str) -> str:
        prepared.append(file_type)
        return f"ggml-{file_type}.bin"

    monkeypatch.setattr(bench, "run_child", fake_child)
    monkeypatch.setattr(bench, "ct2_model_dir", lambda model, cache: "ct2")
    monkeypatch.setattr(bench, "ggml_model_file", fake_ggml)
    argv = ["bench", "--workload", "corpus", "--corpus-limit", "2", "--batch-sizes", "1", "--rounds", "1"]
    argv += ["--peer", "faster-whisper", "whisper.cpp", "--threads", "1", "2", "--compute-type", "float32", "int8"]
    report = bench.run_benchmark(build_parser().parse_args([*argv, "--audio-dir", str(audio_dir)]))
    assert prepared == ["f16", "q8_0"]  # once per compute type, q8_0 for int8
    systems = [bench.OASR, bench.FW_BATCHED, bench.WCPP]
    cells = [(c, t) for c in ("float32", "int8") for t in (1, 2)]
    ggml_file = {"float32": "ggml-f16.bin", "int8": "ggml-q8_0.bin"}
    assert calls == [(c, t, s, ggml_file[c] if s == bench.WCPP else None) for c, t in cells for s in systems]
    rows = report["results"]
    assert [(r["compute_type"], r["threads"], r["system"]) for r in rows] == [
        (*cell, s) for cell in cells for s in systems
    ]
    assert [r["weights"] for r in rows[:3]] == ["float32", "float32", "f16"]
    assert [r["weights"] for r in rows[-3:]] == ["int8", "int8", "q8_0"]
    assert [r["vs_oasr"]["wall_s"] for r in rows if r["system"] == bench.WCPP] == [0.25] * 4  # within each cell
    assert report["settings"]["thread_counts"] == [1, 2] and report["settings"]["peers"] == [
        "faster-whisper",
        "whisper.cpp",
    ]
    assert "whisper.cpp (q8_0)" in bench.markdown_table(report)


def test_sherpa_onnx_peer_alternates_on_its_export_for_the_compute_type(audio_dir, monkeypatch):
    calls = []

    def fake_child(spec: dict, timeout_s: float) -> dict:
        calls.append((spec["system"], spec.get("sherpa_encoder")))
        return {**_run(1.0), "texts": ["x"] * len(spec["files"])}

    monkeypatch.setattr(bench, "run_child", fake_child)
    monkeypatch.setattr(bench, "sherpa_onnx_model", lambda model, cache, ct: {"sherpa_encoder": f"enc-{ct}"})
    argv = ["bench", "--workload", "corpus", "--corpus-limit", "3", "--batch-sizes", "1", "--rounds", "2"]
    args = build_parser().parse_args(
        [*argv, "--peer", "sherpa-onnx", "--compute-type", "int8", "--audio-dir", str(audio_dir)]
    )
    report = bench.run_benchmark(args)
    assert calls == [(bench.OASR, None), (bench.SHERPA, "enc-int8")] * 2  # the export goes to its own child
    assert [r["system"] for r in report["results"]] == ["oasr", "sherpa-onnx"]
    assert "no long-form cell" in bench.markdown_table(report)


def test_sherpa_onnx_corpus_keeps_the_clips_it_decodes_whole(audio_dir):
    rows = bench.read_manifest(audio_dir, "en")
    kept = bench.sherpa_onnx_rows(rows)
    assert kept and all(r["duration_s"] <= bench.SHERPA_MAX_S for r in kept)
    assert {r["audio"] for r in rows} - {r["audio"] for r in kept} >= {"moonshine_a_tale_of_two_cities.wav"}  # 86 s


@pytest.mark.real_weights
def test_sherpa_onnx_child_transcribes_without_torch(sherpa_onnx_tiny_en, audio_dir, tmp_path, monkeypatch):
    (tmp_path / "torch.py").write_text("raise ImportError('the sherpa-onnx child imported torch')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # after the checkout in the child's path, before site-packages
    clip = str(audio_dir / "jfk.wav")
    files = sherpa_onnx_tiny_en
    spec = {"system": bench.SHERPA, "workload": "short", "files": [clip], "warmup": clip, "threads": 1}
    spec |= {"language": "en", "sherpa_encoder": str(files.encoder), "sherpa_decoder": str(files.decoder)}
    result = bench.run_child({**spec, "sherpa_tokens": str(files.tokens)}, timeout_s=300.0)
    [text] = result["texts"]
    assert "ask not what your country can do for you" in text and result["tokens"] > 10
    assert result["wall_s"] > 0 and 50 < result["peak_rss_mb"] < 2000


def test_reference_peer_reads_the_same_directory_at_the_familys_defaults(audio_dir, monkeypatch, tmp_path):
    calls = []

    def fake_child(spec: dict, timeout_s: float) -> dict:
        calls.append((spec["workload"], spec["system"], spec["compute_type"], spec.get("model_dir")))
        assert spec["family_defaults"] and spec["batch_size"] == 1
        return {**_run(1.0), "texts": ["x"] * len(spec["files"])}

    monkeypatch.setattr(bench, "run_child", fake_child)
    argv = ["bench", "--model", str(tmp_path), "--peer", "transformers", "--rounds", "1", "--batch-size", "1"]
    argv += ["--batch-sizes", "1", "--corpus-limit", "2", "--compute-type", "int8", "--random-weights"]
    args = build_parser().parse_args([*argv, "--audio-dir", str(audio_dir), "--cache-dir", str(tmp_path / "cache")])
    args.model = args.model[0]  # as run() leaves it
    report = bench.run_benchmark(args)
    ref = str(tmp_path.resolve())
    long_cell = [("long", bench.OASR, "int8", None)]  # the reference has none
    peer = [
        (w, s, "int8", ref if s == "transformers" else None)
        for w in ("short", "corpus")
        for s in ("oasr", "transformers")
    ]
    assert calls == peer[:2] + long_cell + peer[2:]
    rows = [r for r in report["results"] if r["system"] == "transformers"]
    assert [r["weights"] for r in rows] == ["float32", "float32"]  # the reference runs float32
    assert all(r["error_rate"] is None and r["agreement"]["same_files"] == r["files"] for r in rows)


# ---------------------------------------------------------------------------
# Refusals


def test_missing_peer_names_the_bench_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # find_spec -> None, as when not installed
    code = main(["bench", "--workload", "short", "--peer", "faster-whisper"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--peer faster-whisper" in err and checkout_hint("bench") in err
    assert "Traceback" not in err


def test_missing_whisper_cpp_peer_names_its_package(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pywhispercpp", None)
    code = main(["bench", "--workload", "short", "--peer", "faster-whisper", "whisper.cpp"])
    err = capsys.readouterr().err
    assert code == 2 and "--peer whisper.cpp needs the pywhispercpp package" in err


def test_int8_refused_when_oasr_cannot_quantize(monkeypatch, capsys):
    monkeypatch.setattr(bench, "oasr_quantizes", lambda: False)  # as before EngineConfig.quantize
    code = main(["bench", "--workload", "short", "--peer", "none", "--compute-type", "int8"])
    assert code == 2
    assert "--compute-type int8" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--peer", "transformers", "faster-whisper"], "not beside Whisper's peers"),
        (["--peer", "funasr", "--model", "whisper-base"], "must be the checkpoint's directory"),
        (["--peer", "transformers", "--beam-size", "4", "--timestamps"], "drop --beam-size --timestamps"),
    ],
)
def test_reference_peers_refuse_what_they_do_not_compare(extra, said, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "run_benchmark", lambda args: pytest.fail("ran before the refusal"))
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: object())  # every package "installed"
    code = main(["bench", "--model", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err


def test_missing_reference_peer_names_its_package(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "funasr", None)
    code = main(["bench", "--model", str(tmp_path), "--peer", "funasr"])
    err = capsys.readouterr().err
    assert code == 2 and "--peer funasr needs the funasr package: pip install torch==" in err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--workload", "long"], "no long-form cell"),
        (["--workload", "short", "--beam-size", "2"], "greedily only"),
        (["--workload", "short", "--short-clip", "MOONSHINE"], "at most 29.5 s a call: moonshine_a_tale_of_two_cities"),
    ],
)
def test_sherpa_onnx_refuses_what_it_cannot_decode(extra, said, audio_dir, monkeypatch, capsys):
    pytest.importorskip("sherpa_onnx")
    monkeypatch.setattr(bench, "sherpa_onnx_model", lambda *a: pytest.fail("exported before the refusal"))
    extra = [str(audio_dir / "moonshine_a_tale_of_two_cities.wav") if a == "MOONSHINE" else a for a in extra]
    code = main(["bench", "--peer", "sherpa-onnx", "--audio-dir", str(audio_dir), *extra])
    err = capsys.readouterr().err
    assert code == 2 and "--peer sherpa-onnx" in err and said in err and "Traceback" not in err


# ---------------------------------------------------------------------------
# A real run


@pytest.mark.real_weights
@pytest.mark.slow
@needs_whisper_base
def test_short_oasr_only_end_to_end(audio_dir, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--workload", "short", "--rounds", "1", "--peer", "none", "--threads", "2"]
    code = main([*argv, "--audio-dir", str(audio_dir), "--json", str(out), "--markdown", str(tmp_path / "b.md")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["workloads"]["short"]["files"] == ["jfk.wav"]
    [result] = report["results"]
    assert (result["workload"], result["system"], result["vs_oasr"]) == ("short", "oasr", None)
    assert result["audio_s"] == pytest.approx(11.0, abs=0.05)
    [run] = result["runs"]
    assert run["wall_s"] > 0 and run["tokens"] > 10 and run["peak_rss_mb"] > 50 and run["load_s"] > 0
    # The streamed run sends its first text before it ends (greedy, no fallback: token by token).
    assert 0 < run["first_delta_s"] and result["stats"]["first_delta_s"]["median"] == run["first_delta_s"]
    assert result["stats"]["rtfx"]["median"] == pytest.approx(result["audio_s"] / run["wall_s"])
    assert "ask not what your country can do for you" in result["text"]
    assert result["error_rate"]["en"] < 0.1
    assert "| short | 11.0 | 8 | oasr |" in captured.out
    assert (tmp_path / "b.md").read_text(encoding="utf-8") in captured.out


# ---------------------------------------------------------------------------
# The families' references, real children on tiny checkpoints

TINY_WAV2VEC2 = {  # stable layer norm: its feature extractor returns an attention mask
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 37,
    "conv_dim": (32, 32, 32),
    "conv_stride": (5, 4, 4),
    "conv_kernel": (10, 4, 4),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "feat_extract_norm": "layer",
    "do_stable_layer_norm": True,
    "conv_bias": True,
}


@pytest.fixture(scope="module")
def two_clips(audio_dir, tmp_path_factory):
    """A folder whose manifest holds two short 16-kHz English clips of ``audio_dir``."""
    rows = {r["audio"]: r for r in bench.read_manifest(audio_dir, "en")}
    folder = tmp_path_factory.mktemp("two_clips")
    with open(folder / "manifest.jsonl", "w", encoding="utf-8") as f:
        for name in ("speechbrain_spk1_snt1.wav", "speechbrain_spk1_snt3.wav"):
            row = {k: v for k, v in rows[name].items() if k != "path"}
            f.write(json.dumps({**row, "audio": str(audio_dir / name)}) + "\n")
    return folder


def test_transformers_child_batches_as_its_model_card(two_clips, audio_dir, tmp_path):
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCTC, AutoProcessor

    from benchmarks.refpeer_checkpoints import write_wav2vec2
    from oasr.audio import load_audio

    write_wav2vec2(tmp_path, TINY_WAV2VEC2, load_audio(str(audio_dir / "jfk.wav")))
    paths = [r["path"] for r in bench.read_manifest(two_clips, "en")]
    spec = {"system": bench.TRANSFORMERS, "workload": "corpus", "files": paths, "warmup": paths[0], "threads": 1}
    result = bench.run_child({**spec, "batch_size": 2, "model_dir": str(tmp_path)}, timeout_s=300.0)
    processor, model = AutoProcessor.from_pretrained(tmp_path), AutoModelForCTC.from_pretrained(tmp_path).eval()
    alone = []  # each clip by itself: what one padded, masked batch of both must give
    for path in paths:
        with torch.inference_mode():
            logits = model(**processor(load_audio(path), sampling_rate=16000, return_tensors="pt")).logits
        alone.append(processor.batch_decode(logits.argmax(-1))[0].strip())
    assert result["texts"] == alone and all(len(t) > 5 for t in alone)
    assert 0 < result["tokens"] <= sum(len(t) for t in alone) and 50 < result["peak_rss_mb"] < 4000
    engine = ASREngine(str(tmp_path), device="cpu", max_batch_size=2)  # what the oasr child runs
    assert bench.agreement([o.text for o in engine.transcribe(paths)], result["texts"])["same_files"] == 2


def test_funasr_peer_end_to_end_agrees_with_oasr(two_clips, tmp_path):
    pytest.importorskip("funasr")
    from tests.models.paraformer._funasr_format import write_funasr_dir

    model = write_funasr_dir(tmp_path / "paraformer")
    out = tmp_path / "bench.json"
    argv = ["bench", "--model", str(model), "--peer", "funasr", "--workload", "corpus", "--batch-sizes", "2"]
    argv += ["--rounds", "1", "--threads", "1", "--random-weights", "--audio-dir", str(two_clips), "--json", str(out)]
    assert main(argv) == 0
    oasr_row, funasr_row = json.loads(out.read_text(encoding="utf-8"))["results"]
    assert (oasr_row["system"], funasr_row["system"], funasr_row["weights"]) == ("oasr", "funasr", "float32")
    assert funasr_row["agreement"] == {"same_files": 2, "files": 2, "chars": 1.0}  # the parity at batch 2
    assert funasr_row["error_rate"] is None and funasr_row["runs"][0]["tokens"] > 0
