"""What a batch of several MMS languages costs against a batch of one (issue 31, item 2).

A random wav2vec2-base-sized MMS model (12 layers, width 768, adapters 16 wide, heads of 40-80
characters) with ``--languages`` adapter files written beside it; a padded batch of ``--rows``
rows of ``--seconds`` of noise goes through ``forward_offline_best_path`` as every row the
checkpoint's own language, every row one adapter file's, and the rows spread over all the
languages (each language's rows grouped: their adapters' and heads' GEMMs, plus an index copy
of the states per layer and language). Rounds alternate the three; medians are printed with the
mixed batch's ratio to each::

    python benchmarks/mms_mixed_batch.py [--rows 8] [--seconds 4] [--languages 4] [--threads 1] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oasr.models.wav2vec2.adapters import adapter_shapes  # noqa: E402
from oasr.models.wav2vec2.mms import MmsConfig, MmsCtcModel  # noqa: E402


def build(directory: Path, languages: int) -> MmsCtcModel:
    """A random model and ``languages`` random adapter files (``l0``, ``l1``, ...)."""
    from safetensors.torch import save_file

    base = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    sizes = {}
    for i in range(languages):
        vocab = 40 + 40 * i // max(1, languages - 1)
        shapes = adapter_shapes(base["num_hidden_layers"], base["hidden_size"], 16, vocab)
        save_file({k: torch.randn(s) * 0.05 for k, s in shapes.items()}, directory / f"adapter.l{i}.safetensors")
        sizes[f"l{i}"] = vocab
    config = MmsConfig(
        **base,
        vocab_size=40,
        do_stable_layer_norm=True,
        feat_extract_norm="layer",
        conv_bias=True,
        adapter_attn_dim=16,
        target_lang="own",
        adapter_dir=str(directory),
        adapter_vocab_sizes=sizes,
    )
    return MmsCtcModel(config).eval()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--languages", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model = build(Path(tmp), args.languages)
        n = int(args.seconds * 16000)
        feats = torch.randn(args.rows, n, 1)
        lens = torch.full((args.rows,), n)
        cases = {
            "own": [None] * args.rows,
            "one file": ["l0"] * args.rows,
            "mixed": [f"l{i % args.languages}" for i in range(args.rows)],
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        with torch.inference_mode():
            for languages in cases.values():  # warm-up, and every adapter read once
                model.forward_offline_best_path(feats, lens, languages)
            for _ in range(args.rounds):
                for name, languages in cases.items():
                    t = time.perf_counter()
                    model.forward_offline_best_path(feats, lens, languages)
                    times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.rows} rows x {args.seconds:g} s, {args.languages} languages, "
        f"{args.threads} thread(s), {args.rounds} rounds"
    )
    for name, value in med.items():
        print(f"  {name:9s} {value * 1000:8.1f} ms (median)   mixed / {name}: {med['mixed'] / value:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
