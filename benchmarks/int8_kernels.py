"""CPU GEMM kernels for whisper-base's linear shapes: float32 against the int8 / fp16 / bf16
paths PyTorch ships, per shape, at 1 and 2 threads.

Each kernel runs ``y = x @ W.T + b`` for x (rows, in) and W (out, in) with its weight
prepared once outside the timed loop (prepacked, cast or quantised as the kernel needs),
so the figures are the per-call cost a model pays after load. Activation quantisation,
where a kernel needs it, is inside the timed call. Medians over ``--repeats`` timed calls
(after warm-up); the machine is shared, so read ratios within one row, not absolutes.

    python benchmarks/int8_kernels.py --threads 1 2 --markdown benchmarks/results/int8_kernels_cpu2.md
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")

D, FF, VOCAB = 512, 2048, 51865  # whisper-base: d_model, FFN width, vocabulary

# (label, rows, in, out)
SHAPES = [
    ("enc qkv/out", 1500, D, D),
    ("enc fc1", 1500, D, FF),
    ("enc fc2", 1500, FF, D),
    *[(f"dec qkv/out r{r}", r, D, D) for r in (1, 4, 8)],
    *[(f"dec fc1 r{r}", r, D, FF) for r in (1, 4, 8)],
    *[(f"dec fc2 r{r}", r, FF, D) for r in (1, 4, 8)],
    *[(f"dec head r{r}", r, D, VOCAB) for r in (1, 4, 8)],
]


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8, as ``oasr.layers.quant.Int8Linear.from_weight``."""
    s = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    return torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8), s


def qtensor(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return torch._make_per_channel_quantized_tensor(q, s.double(), torch.zeros(len(s), dtype=torch.long), 0)


def kernels(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> dict:
    """name -> zero-argument callable running the GEMM, its weight prepared here."""
    q, s = quantize_weight(w)
    out = {"fp32 F.linear": lambda: F.linear(x, w, b)}

    for engine in ("fbgemm", "x86", "onednn"):
        torch.backends.quantized.engine = engine
        packed = torch.ops.quantized.linear_prepack(qtensor(q, s), b)
        for rr in (False, True) if engine == "fbgemm" else (False,):
            name = f"{engine} dyn int8" + (" rr" if rr else "")

            def run(packed=packed, engine=engine, rr=rr):
                torch.backends.quantized.engine = engine
                return torch.ops.quantized.linear_dynamic(x, packed, rr)

            out[name] = run
    torch.backends.quantized.engine = "x86"

    packed16 = torch.ops.quantized.linear_prepack_fp16(w, b)
    out["fbgemm dyn fp16"] = lambda: torch.ops.quantized.linear_dynamic_fp16(x, packed16)

    # Weight-only int8: int8 weight, float activations; the scale applied in the kernel. Its
    # float32 kernel is a plain loop (50x slower than float32 at 1500 rows in a first run):
    # timed on the decoder's rows only.
    if x.shape[0] <= 16:
        out["w8 int8pack_mm"] = lambda: torch.ops.aten._weight_int8pack_mm(x, q, s) + b
    xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    out["w8 int8pack_mm bf16"] = lambda: torch.ops.aten._weight_int8pack_mm(xb, q, s.bfloat16()) + bb

    # int8 x int8 -> int32 (torch._int_mm), activations quantised per row in Python.
    qt = q.t().contiguous()

    def int_mm():
        xs = x.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
        xq = torch.round(x / xs).to(torch.int8)
        return torch._int_mm(xq, qt) * (xs * s) + b

    if x.shape[0] > 16:  # _int_mm needs rows > 16 on CPU
        out["_int_mm + quant"] = int_mm

    # oneDNN's PT2E qlinear (the path inductor uses on x86): uint8 activations, one scale.
    wpack = torch.ops.onednn.qlinear_prepack(q, list(x.shape))
    wzp = torch.zeros(len(s), dtype=torch.long)

    def onednn_pt2e():
        lo, hi = torch.aminmax(x)
        xs = float(max(hi - lo, 1e-8)) / 255.0
        zp = int(round(-float(lo) / xs))
        xq = torch.clamp(torch.round(x / xs) + zp, 0, 255).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise(xq, xs, zp, wpack, s, wzp, b, 1.0, 0, torch.float32, "none", [], "")

    out["onednn qlinear u8 (pt2e)"] = onednn_pt2e

    out["bf16 F.linear"] = lambda: F.linear(xb, wb, bb)

    # Static int8: the input and output scales fixed in advance (calibrated here on this very
    # call, the best case), input quantised and output dequantised per call.
    torch.backends.quantized.engine = "x86"
    xscale = float(x.abs().amax()) / 127.0
    yscale = float(F.linear(x, w, b).abs().amax()) / 127.0
    packed_static = torch.ops.quantized.linear_prepack(qtensor(q, s), b)

    def static():
        torch.backends.quantized.engine = "x86"
        qx = torch.quantize_per_tensor(x, xscale, 128, torch.quint8)
        return torch.ops.quantized.linear(qx, packed_static, yscale, 128).dequantize()

    out["x86 static int8"] = static
    return out


def time_interleaved(fns: dict, rounds: int, budget_s: float) -> dict[str, float]:
    """Median seconds per call of each kernel, the kernels taking turns call by call (so
    a burst of load from the machine's other users falls on all of them alike)."""
    for fn in fns.values():
        fn()
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    deadline = time.perf_counter() + budget_s
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
        if time.perf_counter() > deadline and len(times["fp32 F.linear"]) >= 5:
            break
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=50, help="rounds (one call of each kernel)")
    ap.add_argument("--budget-s", type=float, default=10.0, help="time cap per shape (all kernels)")
    ap.add_argument("--markdown", help="write the table here")
    args = ap.parse_args()

    torch.manual_seed(0)
    rows_out = []
    names: list[str] = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for label, rows, k, n in SHAPES:
            x = torch.randn(rows, k)
            w = torch.randn(n, k) / k**0.5
            b = torch.randn(n) * 0.1
            with torch.inference_mode():
                ks = kernels(x, w, b)
                ref = ks["fp32 F.linear"]()
                errs = {n: (fn().float() - ref).abs().max().item() / ref.abs().max().item() for n, fn in ks.items()}
                times = time_interleaved(ks, args.repeats, args.budget_s)
                res = {n: (times[n], errs[n]) for n in ks}
            for name in ks:
                if name not in names:
                    names.append(name)
            rows_out.append((threads, label, rows, k, n, res))
            base = res["fp32 F.linear"][0]
            best = min(res, key=lambda m: res[m][0])
            speedup = base / res[best][0]
            print(f"t{threads} {label:18s} fp32 {base * 1e3:8.3f} ms  best {best} {speedup:.2f}x", flush=True)

    lines = [
        "| threads | shape | rows×in→out | fp32 ms | " + " | ".join(n for n in names if n != "fp32 F.linear") + " |",
        "|---:|---|---|---:|" + "---:|" * (len(names) - 1),
    ]
    for threads, label, rows, k, n, res in rows_out:
        base = res["fp32 F.linear"][0]
        cells = []
        for name in names:
            if name == "fp32 F.linear":
                continue
            if name not in res:
                cells.append("–")
                continue
            t, err = res[name]
            cells.append(f"{base / t:.2f}×" + (f" (err {err:.0e})" if err > 0.05 else ""))
        lines.append(f"| {threads} | {label} | {rows}×{k}→{n} | {base * 1e3:.3f} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
