"""oasr's transducer strategy against icefall's own search (the ``zipformer`` package, icefall's
modules) on CPU, same process, same weights.

The model has the shape of icefall's LibriSpeech Zipformer transducer recipe (``zipformer/train.py``
defaults, the "medium" model: ``--num-encoder-layers 2,2,3,4,3,2 --downsampling-factor 1,2,4,8,4,2
--feedforward-dim 512,768,1024,1536,1024,768 --num-heads 4,4,4,8,4,4 --encoder-dim
192,256,384,512,384,256 --encoder-unmasked-dim 192,192,256,256,256,192 --cnn-module-kernel
31,31,15,15,15,31 --query-head-dim 32 --value-head-dim 12 --pos-head-dim 4 --pos-dim 48
--decoder-dim 512 --joiner-dim 512 --context-size 2``, BPE 500, non-causal; about 65M
parameters), random weights built by the package's ``AsrModel`` and saved as icefall's export does
(``pretrained.pt`` holding ``{"model": state_dict}`` and ``tokens.txt``). The joiner's blank bias is
set so that about one encoder frame in seven emits a token at the start window (a real model's
rate on read English at BPE 500, ~3.5 tokens a second).

The corpus is 16 clips of 5 to 20 s cut from the shared speech (``OASR_SHARED_DIR``/data/audio).
Each round times, alternating, over the whole corpus:

* icefall, as its ``decode.py`` runs a model: fbank (oasr's kaldi fbank, the same on both sides:
  the package has no front end of its own), ``forward_encoder``, then the package's
  ``greedy_search`` or ``modified_beam_search(beam=4)`` one clip at a time ("batch 1"), and over
  padded batches of 8 clips sorted by length ("batch 8": ``_greedy_search_batch``, its batched
  greedy search, and ``modified_beam_search``, which is batched across utterances);
* oasr ``ASREngine(dir, architecture="transducer")`` at ``max_batch_size`` 1 and 8, greedy and
  ``beam_size=4``.

    python benchmarks/icefall_bench.py --rounds 3 --threads 1 --json benchmarks/results/icefall_cpu.json

Needs the zipformer package (see ``.ci/run``) and ``TORCH_COMPILE_DISABLE=1`` (set here).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")  # icefall wraps Swoosh in torch.compile

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# icefall egs/librispeech/ASR/zipformer/train.py defaults.
MEDIUM = dict(
    feature_dim=80,
    downsampling_factor=(1, 2, 4, 8, 4, 2),
    num_encoder_layers=(2, 2, 3, 4, 3, 2),
    feedforward_dim=(512, 768, 1024, 1536, 1024, 768),
    num_heads=(4, 4, 4, 8, 4, 4),
    encoder_dim=(192, 256, 384, 512, 384, 256),
    encoder_unmasked_dim=(192, 192, 256, 256, 256, 192),
    cnn_module_kernel=(31, 31, 15, 15, 15, 31),
    query_head_dim=32,
    value_head_dim=12,
    pos_head_dim=4,
    pos_dim=48,
    decoder_dim=512,
    joiner_dim=512,
    context_size=2,
    vocab_size=500,
)
EMIT_RATE = 0.15  # non-blank frames at the start window


def token_table(n: int) -> list[str]:
    """icefall's BPE-500 layout: <blk> 0, <sos/eos> 1, <unk> 2, then word pieces (▁ starts a word)."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    pieces = [f"▁{a}{b}" for a in letters for b in letters] + [f"{a}{b}" for a in letters for b in letters]
    return ["<blk>", "<sos/eos>", "<unk>", *pieces[: n - 3]]


def build_medium(directory: Path, feats: torch.Tensor, seed: int = 0):
    """The package's AsrModel at the medium shape, heads set to emit at ``EMIT_RATE``, saved
    icefall-style in ``directory``; (model in eval mode, parameter count)."""
    from zipformer.modules.model import AsrModel

    torch.manual_seed(seed)
    cfg = {k: ",".join(map(str, v)) if isinstance(v, tuple) else v for k, v in MEDIUM.items()}
    for k in ("query_head_dim", "value_head_dim", "pos_head_dim"):
        cfg[k] = str(cfg[k])
    model = AsrModel(
        **cfg, causal=False, chunk_size="-1", left_context_frames="-1", use_ctc=False, use_transducer=True
    ).eval()
    with torch.no_grad():
        model.joiner.output_linear.weight.mul_(8.0)
        enc, _ = model.forward_encoder(feats[None], torch.tensor([feats.shape[0]]))
        start = torch.tensor([[-1] * (model.decoder.context_size - 1) + [model.decoder.blank_id]])
        pred = model.joiner.decoder_proj(model.decoder(start, need_pad=False))[0]
        logits = model.joiner(model.joiner.encoder_proj(enc[0]), pred.expand(enc.shape[1], -1), project_input=False)
        margin = logits[:, 0] - logits[:, 1:].max(dim=-1).values
        model.joiner.output_linear.bias[0] -= torch.quantile(margin, EMIT_RATE)
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict()}, directory / "pretrained.pt")
    tokens = token_table(MEDIUM["vocab_size"])
    (directory / "tokens.txt").write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    return model, sum(p.numel() for p in model.parameters())


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from zipformer.decode import search

    import oasr
    from benchmarks.paraformer_bench import corpus
    from oasr.audio.fbank import KaldiFbank
    from oasr.models.base import FeatureSpec
    from oasr.models.zipformer.convert import FBANK_PARAMS

    torch.set_num_threads(args.threads)
    shared = Path(os.environ.get("OASR_SHARED_DIR", REPO.parent / "shared"))
    clips = corpus(shared / "data" / "audio", args.clips)
    audio_s = sum(len(c) for c in clips) / 16000
    fbank = KaldiFbank.from_spec(FeatureSpec("kaldi_fbank", 16000, FBANK_PARAMS))

    tmp = tempfile.TemporaryDirectory()
    directory = Path(tmp.name) / "zipformer-medium"
    t_build, (ref, params) = timed(lambda: build_medium(directory, fbank.compute(clips[0], dtype=torch.float32)))
    print(
        f"model: {params / 1e6:.1f}M parameters, built in {t_build:.1f} s; corpus {len(clips)} clips, {audio_s:.1f} s"
    )
    engines = {
        b: oasr.ASREngine(str(directory), architecture="transducer", max_batch_size=b, num_threads=args.threads)
        for b in (1, 8)
    }
    torch.set_num_threads(args.threads)

    def icefall(beam: int, batch: int) -> list[list[int]]:
        out: list[list[int] | None] = [None] * len(clips)
        order = sorted(range(len(clips)), key=lambda i: -len(clips[i]))  # icefall's sampler: by length
        with torch.inference_mode():
            for at in range(0, len(order), batch):
                rows = order[at : at + batch]
                feats = [fbank.compute(clips[i], dtype=torch.float32) for i in rows]
                lens = torch.tensor([f.shape[0] for f in feats])
                x = feats[0].new_full((len(feats), int(lens.max()), feats[0].shape[1]), math.log(1e-10))
                for j, f in enumerate(feats):
                    x[j, : f.shape[0]] = f
                enc, enc_lens = ref.forward_encoder(x, lens)
                if beam > 1:
                    hyps = search.modified_beam_search(ref, enc, enc_lens, beam=beam)
                elif batch > 1:
                    hyps = search._greedy_search_batch(ref, enc, enc_lens)
                else:
                    hyps = [search.greedy_search(ref, enc, enc_lens)[0]]
                for i, h in zip(rows, hyps):
                    out[i] = list(h)
        return out  # type: ignore[return-value]

    def ours(beam: int, batch: int) -> list[list[int]]:
        outs = engines[batch].transcribe(clips, beam_size=beam)
        return [[t for seg in o.segments for t in seg.tokens] for o in outs]

    sides = {}
    for beam, what in ((1, "greedy"), (4, "modified beam 4")):
        for batch in (1, 8):
            sides[f"icefall {what} batch {batch}"] = lambda beam=beam, batch=batch: icefall(beam, batch)
            sides[f"oasr {what} batch {batch}"] = lambda beam=beam, batch=batch: ours(beam, batch)
    # Warm-up: one clip through each engine and each icefall search.
    for e in engines.values():
        e.transcribe(clips[0])
    with torch.inference_mode():
        f = fbank.compute(clips[0], dtype=torch.float32)
        enc, enc_lens = ref.forward_encoder(f[None], torch.tensor([f.shape[0]]))
        search.greedy_search(ref, enc, enc_lens)
        search.modified_beam_search(ref, enc, enc_lens, beam=4)

    times: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}  # process CPU seconds: steadier on a shared machine
    tokens: dict[str, list[list[int]]] = {}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            c0 = time.process_time()
            seconds, out = timed(sides[name])
            cpu[name].append(time.process_time() - c0)
            times[name].append(seconds)
            tokens[name] = out
            print(
                f"round {r + 1} {name}: {seconds:.1f} s ({cpu[name][-1]:.1f} s CPU), RTFx {audio_s / seconds:.2f}",
                flush=True,
            )

    rtfx = {k: audio_s / statistics.median(v) for k, v in times.items()}
    cpu_s = {k: statistics.median(v) for k, v in cpu.items()}
    ratios, cpu_ratios, agree = {}, {}, {}
    for what in ("greedy", "modified beam 4"):
        base = tokens[f"icefall {what} batch 1"]
        for batch in (1, 8):
            key = f"{what} batch {batch}"
            ratios[f"oasr {key} / icefall {key}"] = round(rtfx[f"oasr {key}"] / rtfx[f"icefall {key}"], 2)
            cpu_ratios[f"oasr {key} / icefall {key}"] = round(cpu_s[f"icefall {key}"] / cpu_s[f"oasr {key}"], 2)
            ratios[f"oasr {key} / icefall {what} batch 1"] = round(
                rtfx[f"oasr {key}"] / rtfx[f"icefall {what} batch 1"], 2
            )
            for side in ("oasr", "icefall"):
                got = tokens[f"{side} {key}"]
                agree[f"{side} {key}"] = f"{sum(a == b for a, b in zip(got, base))}/{len(clips)}"
    result = {
        "command": "python " + " ".join([os.path.relpath(__file__, REPO), *sys.argv[1:]]),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
            "zipformer": _version("zipformer"),
            "load_average": os.getloadavg(),
        },
        "model": {"shape": "icefall zipformer medium transducer (BPE 500)", "parameters": params},
        "corpus": {
            "clips": len(clips),
            "audio_s": round(audio_s, 2),
            "lengths_s": [round(len(c) / 16000, 2) for c in clips],
        },
        "rounds": args.rounds,
        "seconds": times,
        "cpu_seconds": cpu,
        "rtfx": {k: round(v, 2) for k, v in rtfx.items()},
        "ratio": ratios,
        "ratio_cpu_seconds": cpu_ratios,
        "token_sequences_equal_to_icefall_batch_1": agree,
        "tokens_icefall_greedy": sum(len(t) for t in tokens["icefall greedy batch 1"]),
    }
    print(
        json.dumps(
            {k: result[k] for k in ("rtfx", "ratio", "ratio_cpu_seconds", "token_sequences_equal_to_icefall_batch_1")},
            indent=2,
        )
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.cleanup()
    return 0


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    raise SystemExit(main())
