"""Where the time goes, oasr beside its reference, for the families with a speed aim (issue 30).

Each family's pair runs the same input, as its benchmark runs it (the same random checkpoint
builders, so both sides read the same files):

* ``icefall``: the Zipformer-medium transducer (``icefall_bench.py``), greedy at batch 8:
  icefall's ``forward_encoder`` + ``_greedy_search_batch`` over padded batches of 8 sorted by
  length, against ``ASREngine(max_batch_size=8)``;
* ``nemotron`` / ``tdt``: the 0.6B Nemotron RNN-T and parakeet-tdt shapes
  (``nemo_transducer_bench.py``), greedy at batch 8: transformers' feature extractor +
  ``generate`` over one padded batch, against ``ASREngine(max_batch_size=8)``;
* ``paraformer``: paraformer-large (``paraformer_bench.py``): funasr's ``generate`` (its
  default, one input per forward on a CPU) against ``ASREngine(max_batch_size=8)``.

Every side runs twice: once plain, timing its phases (``features``, ``encoder``, ``search`` /
``predictor + decoder``; the rest is the engine's own bookkeeping or the reference's glue) with a
wall clock around the functions that do them; once under ``torch.profiler`` (``record_shapes``),
where each op's self time goes to a group: GEMM (``mm``/``addmm``/``bmm``/linear), convolution,
attention (SDPA and softmax), recurrent (LSTM), host syncs (``item``/``nonzero``/``is_nonzero``:
a tensor read back into Python, a pause in the op stream on any device), other ops (elementwise,
norms, copies, indexing), and Python (time inside a phase spent outside every op: the
interpreter between ops). The profiled run is slower (the profiler's cost per op), so the
shares come from it and the seconds from the plain run.

Seconds are process CPU seconds (``time.process_time``; wall seconds beside them): on a machine
shared with other work a single-threaded run's CPU time moves far less than its wall time. The
ceiling of a speed-up that keeps the same kernels is (reference's CPU seconds) / (oasr's GEMM +
convolution + attention + LSTM seconds): what is left if everything else took no time.

    python benchmarks/family_profile.py --families icefall paraformer nemotron tdt --threads 1 \\
        --json benchmarks/results/family_profiles_cpu2.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")  # icefall wraps Swoosh in torch.compile

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GEMM = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::addbmm",
    "aten::_addmm_activation",
    "aten::matmul",
    "aten::einsum",
}
SYNC = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal"}
GROUPS = ("GEMM", "conv", "attention", "recurrent", "host sync", "other ops", "python")


def group(name: str, labels: set[str]) -> str:
    """The group of one profiler event, by its name."""
    n = name.lower()
    if name in labels:
        return "python"
    if "lstm" in n or "rnn" in n:
        return "recurrent"
    if "conv" in n:
        return "conv"
    if name in GEMM or "linear" in n:
        return "GEMM"
    if "scaled_dot_product" in n or name in ("aten::softmax", "aten::_softmax"):
        return "attention"
    if name in SYNC:
        return "host sync"
    return "other ops"


class Phases:
    """CPU-time accumulators (and profiler labels) around the functions that do each phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[str] = []

    def wrap(self, fn, label: str):
        def inner(*a, **kw):
            self.stack.append(label)
            t0 = time.process_time()
            try:
                with torch.profiler.record_function(label):
                    return fn(*a, **kw)
            finally:
                took = time.process_time() - t0
                self.stack.pop()
                self.seconds[label] += took
                if self.stack:  # a phase inside another (the encoder inside generate) leaves the outer one
                    self.seconds[self.stack[-1]] -= took

        return inner

    def patch(self, obj, attr: str, label: str) -> None:
        """Time ``obj.attr`` (a method, or a callable object whose other attributes stay readable)."""
        target = getattr(obj, attr)
        timed = self.wrap(target, label)
        setattr(obj, attr, timed if inspect.ismethod(target) else _Proxy(target, timed))


class _Proxy:
    """A callable object with its call timed, its attributes its own."""

    def __init__(self, target, call) -> None:
        self._target, self._call = target, call

    def __call__(self, *a, **kw):
        return self._call(*a, **kw)

    def __getattr__(self, name: str):
        return getattr(self._target, name)


LABELS = {"total", "features", "encoder", "search", "predictor", "decoder"}


def profile_side(run, clips, phases: Phases) -> dict:
    """One side over ``clips``: a warm-up on one second, a plain run (wall and phase seconds),
    then a profiled one (groups per phase)."""
    run([clips[0][:16000]])
    phases.seconds.clear()
    t0, c0 = time.perf_counter(), time.process_time()
    run(clips)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    plain = dict(phases.seconds)
    phases.seconds.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with torch.profiler.record_function("total"):
            t0 = time.perf_counter()
            run(clips)
            profiled_wall = time.perf_counter() - t0
    per_phase: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    calls: dict[str, int] = defaultdict(int)
    syncs: dict[str, int] = defaultdict(int)
    events = prof.events()
    for ev in events:
        phase, up = None, ev
        while up is not None:
            if up.name in LABELS:
                phase = up.name
                break
            up = up.cpu_parent
        phase = phase or "outside"
        if phase == "total":
            phase = "rest"
        g = group(ev.name, LABELS)
        per_phase[phase][g] += ev.self_cpu_time_total / 1e6
        if ev.name not in LABELS:
            calls[phase] += 1
            if g == "host sync":
                syncs[phase] += 1
    total = {g: sum(p.get(g, 0.0) for p in per_phase.values()) for g in GROUPS}
    profiled = sum(total.values()) or 1.0
    top = sorted(prof.key_averages(group_by_input_shape=True), key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "phases_cpu_s": {k: round(v, 3) for k, v in plain.items()},
        "rest_cpu_s": round(cpu - sum(plain.values()), 3),
        "profiled_wall_s": round(profiled_wall, 3),
        "share": {g: round(total[g] / profiled, 4) for g in GROUPS},
        "groups_cpu_s": {g: round(total[g] / profiled * cpu, 3) for g in GROUPS},
        "per_phase_profiled_s": {p: {g: round(v, 3) for g, v in d.items() if v} for p, d in per_phase.items()},
        "ops_per_phase": dict(calls),
        "host_syncs_per_phase": dict(syncs),
        "top_ops": [
            {
                "op": e.key,
                "shapes": str(e.input_shapes)[:120],
                "calls": e.count,
                "self_s": round(e.self_cpu_time_total / 1e6, 3),
            }
            for e in top
        ],
    }


def ceiling(ref: dict, ours: dict) -> dict:
    """The figures the note reads: the ratio, each side's matmul-bound seconds, and the ceiling."""
    heavy = ("GEMM", "conv", "attention", "recurrent")
    ours_heavy = sum(ours["groups_cpu_s"][g] for g in heavy)
    ref_heavy = sum(ref["groups_cpu_s"][g] for g in heavy)
    return {
        "ratio_wall": round(ref["wall_s"] / ours["wall_s"], 2),
        "ratio_cpu": round(ref["cpu_s"] / ours["cpu_s"], 2),
        "oasr_heavy_cpu_s": round(ours_heavy, 3),
        "reference_heavy_cpu_s": round(ref_heavy, 3),
        "oasr_heavy_share": round(ours_heavy / ours["cpu_s"], 3),
        "reference_heavy_share": round(ref_heavy / ref["cpu_s"], 3),
        "ceiling_same_kernels": round(ref["cpu_s"] / ours_heavy, 2),
    }


# --- the families -----------------------------------------------------------------------------


def icefall_pair(clips, threads: int) -> dict:
    from zipformer.decode import search

    import oasr
    from benchmarks.icefall_bench import build_medium
    from oasr.audio.fbank import KaldiFbank
    from oasr.models.base import FeatureSpec
    from oasr.models.zipformer.convert import FBANK_PARAMS

    fbank = KaldiFbank.from_spec(FeatureSpec("kaldi_fbank", 16000, FBANK_PARAMS))
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "zipformer-medium"
        ref, _ = build_medium(directory, fbank.compute(clips[0], dtype=torch.float32))
        engine = oasr.ASREngine(str(directory), architecture="transducer", max_batch_size=8, num_threads=threads)
    torch.set_num_threads(threads)
    ph_ref, ph_ours = Phases(), Phases()
    compute = ph_ref.wrap(lambda c: fbank.compute(c, dtype=torch.float32), "features")
    forward_encoder = ph_ref.wrap(ref.forward_encoder, "encoder")
    greedy = ph_ref.wrap(search._greedy_search_batch, "search")

    def icefall(clips):
        order = sorted(range(len(clips)), key=lambda i: -len(clips[i]))
        with torch.inference_mode():
            for at in range(0, len(order), 8):
                feats = [compute(clips[i]) for i in order[at : at + 8]]
                lens = torch.tensor([f.shape[0] for f in feats])
                x = feats[0].new_full((len(feats), int(lens.max()), feats[0].shape[1]), math.log(1e-10))
                for j, f in enumerate(feats):
                    x[j, : f.shape[0]] = f
                enc, enc_lens = forward_encoder(x, lens)
                greedy(ref, enc, enc_lens)

    strategy = engine.strategy
    ph_ours.patch(strategy, "frontend", "features")
    ph_ours.patch(strategy.model, "encode_offline", "encoder")
    ph_ours.patch(strategy.model, "transducer_search", "search")
    return {
        "reference": "icefall (zipformer package) greedy, padded batches of 8",
        "oasr": "ASREngine(architecture='transducer', max_batch_size=8), greedy",
        "icefall": profile_side(icefall, clips, ph_ref),
        "oasr_side": profile_side(lambda c: engine.transcribe(list(c), beam_size=1), clips, ph_ours),
    }


def nemo_pair(kind: str, clips, threads: int) -> dict:
    import oasr
    from benchmarks.nemo_transducer_bench import build, hf_labels

    with tempfile.TemporaryDirectory(prefix=f"oasr_{kind}_") as tmp:
        torch.manual_seed(0)
        model, fe, _ = build(kind, Path(tmp), clips[0][: 4 * 16000])
        engine = oasr.ASREngine(tmp, dtype="float32", max_batch_size=8, num_threads=threads)
    torch.set_num_threads(threads)
    ph_ref, ph_ours = Phases(), Phases()
    fe_call = ph_ref.wrap(fe, "features")
    ph_ref.patch(model.encoder, "forward", "encoder")
    # generate's loop: everything in generate but the encoder is the search.
    ph_ref.patch(model, "generate", "search")
    strategy = engine.strategy
    ph_ours.patch(strategy, "frontend", "features")
    ph_ours.patch(strategy.model, "encode_offline", "encoder")
    ph_ours.patch(strategy.model, "transducer_search", "search")
    return {
        "reference": f"transformers {kind} generate, one padded batch of {len(clips)}",
        "oasr": "ASREngine(max_batch_size=8), greedy",
        "phase_names": {"search": "generate less its encoder call: the label loop"},
        "transformers": profile_side(lambda c: hf_labels(model, fe_call, c), clips, ph_ref),
        "oasr_side": profile_side(lambda c: engine.transcribe(list(c), beam_size=1), clips, ph_ours),
    }


def paraformer_pair(clips, threads: int) -> dict:
    from funasr import AutoModel

    import oasr
    from benchmarks.paraformer_bench import write_large_dir

    with tempfile.TemporaryDirectory() as tmp:
        directory, _ = write_large_dir(Path(tmp) / "paraformer-large")
        ref = AutoModel(model=str(directory), disable_update=True, device="cpu", ncpu=threads, log_level="ERROR")
        engine = oasr.ASREngine(str(directory), max_batch_size=8, num_threads=threads)
    torch.set_num_threads(threads)
    ph_ref, ph_ours = Phases(), Phases()
    m = ref.model
    ph_ref.patch(ref.kwargs["frontend"], "forward", "features")
    ph_ref.patch(m, "encode", "encoder")
    ph_ref.patch(m, "calc_predictor", "predictor")
    ph_ref.patch(m, "cal_decoder_with_predictor", "decoder")
    strategy = engine.strategy
    ph_ours.patch(strategy, "frontend", "features")
    ph_ours.patch(strategy.model, "encode_offline", "encoder")
    ph_ours.patch(strategy.model, "cif", "predictor")
    ph_ours.patch(strategy.model, "decode_cif", "decoder")
    return {
        "reference": "funasr AutoModel.generate(batch_size_s=300): one input per forward on a CPU",
        "oasr": "ASREngine(max_batch_size=8)",
        "phase_names": {"predictor": "CIF predictor", "decoder": "SANM decoder + log-softmax"},
        "funasr": profile_side(
            lambda c: ref.generate(input=list(c), disable_pbar=True, batch_size_s=300), clips, ph_ref
        ),
        "oasr_side": profile_side(lambda c: engine.transcribe(list(c)), clips, ph_ours),
    }


def markdown(results: dict) -> str:
    """The tables of ``family_profiles_cpu2.md``: per family, each side's CPU seconds by phase and
    by op group, and the ceiling."""
    lines = []
    for fam, res in results.items():
        ref_key = next(k for k in ("icefall", "transformers", "funasr") if k in res)
        sides = ((res["reference"], res[ref_key]), (res["oasr"], res["oasr_side"]))
        phases = sorted({p for _, r in sides for p in r["phases_cpu_s"]})
        lines += [
            f"### {fam}: {res['clips']} clips, {res['audio_s']} s of audio, {res['machine']['threads']} thread(s)",
            "",
            "| side | CPU s (wall s) | " + " | ".join(phases) + " | rest |",
            "|---|---|" + "---|" * (len(phases) + 1),
        ]
        for name, r in sides:
            cells = [f"{r['phases_cpu_s'].get(p, 0.0):.2f}" for p in phases]
            lines.append(
                f"| {name} | {r['cpu_s']:.2f} ({r['wall_s']:.1f}) | "
                + " | ".join(cells)
                + f" | {r['rest_cpu_s']:.2f} |"
            )
        lines += ["", "| side | " + " | ".join(GROUPS) + " |", "|---|" + "---|" * len(GROUPS)]
        for name, r in sides:
            cells = [f"{r['groups_cpu_s'][g]:.2f} s ({100 * r['share'][g]:.0f} %)" for g in GROUPS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        s = res["summary"]
        lines += [
            "",
            f"Ratio (reference CPU s / oasr CPU s) {s['ratio_cpu']}x (wall {s['ratio_wall']}x); GEMM + conv + "
            f"attention + LSTM: oasr {s['oasr_heavy_cpu_s']} s ({100 * s['oasr_heavy_share']:.0f} %), reference "
            f"{s['reference_heavy_cpu_s']} s ({100 * s['reference_heavy_share']:.0f} %); ceiling with the same "
            f"kernels and nothing else: {s['ceiling_same_kernels']}x.",
            "",
        ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--families",
        nargs="*",
        choices=("icefall", "nemotron", "tdt", "paraformer"),
        default=["icefall"],
        help="the pairs to profile (none, with --markdown: only render the --json results)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clips", type=int, default=0, help="clips (0: 16 for icefall/paraformer, 8 for NeMo)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None, help="write the tables of the --json results here")
    args = ap.parse_args()
    if args.markdown and not args.families:
        args.markdown.write_text(markdown(json.loads(args.json.read_text(encoding="utf-8"))), encoding="utf-8")
        return 0
    torch.set_num_threads(args.threads)
    from benchmarks import nemo_transducer_bench, paraformer_bench

    shared = Path(os.environ.get("OASR_SHARED_DIR", REPO.parent / "shared")) / "data" / "audio"
    out: dict = {}
    if args.json and args.json.exists():
        out = json.loads(args.json.read_text(encoding="utf-8"))
    for fam in args.families:
        t0 = time.perf_counter()
        if fam in ("nemotron", "tdt"):
            clips = nemo_transducer_bench.corpus(shared, args.clips or 8)
            res = nemo_pair(fam, clips, args.threads)
            ref_key = "transformers"
        else:
            clips = paraformer_bench.corpus(shared, args.clips or 16)
            res = icefall_pair(clips, args.threads) if fam == "icefall" else paraformer_pair(clips, args.threads)
            ref_key = "icefall" if fam == "icefall" else "funasr"
        res["audio_s"] = round(sum(len(c) for c in clips) / 16000, 2)
        res["clips"] = len(clips)
        res["summary"] = ceiling(res[ref_key], res["oasr_side"])
        res["command"] = "python " + " ".join([os.path.relpath(__file__, REPO), *sys.argv[1:]])
        res["machine"] = {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
            "load_average": os.getloadavg(),
        }
        out[fam] = res
        print(f"[{fam}] {time.perf_counter() - t0:.0f} s: {json.dumps(res['summary'])}", flush=True)
        for side in (ref_key, "oasr_side"):
            r = res[side]
            print(f"  {side}: wall {r['wall_s']} cpu {r['cpu_s']} phases {r['phases_cpu_s']} rest {r['rest_cpu_s']}")
            print(f"    share {r['share']}")
            print(f"    per phase {json.dumps(r['per_phase_profiled_s'])}")
            print(f"    ops {r['ops_per_phase']} syncs {r['host_syncs_per_phase']}")
        if args.json:
            args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(markdown(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
