"""int8 weight quantisation of the linear layers.

``quantize_linears_`` swaps every ``Linear`` / ``LinearActivation`` of a model (and the
tied output projections a decoder declares through a ``tied_head`` slot) for an
``Int8Linear``: weights stored as int8 with one float32 scale per output channel
(symmetric, round to nearest), a quarter of the float32 memory.

An ``Int8Linear`` runs one of two kernels, chosen per call by the number of rows:

* few rows (up to ``DYNAMIC_MAX_ROWS``: decoder steps, prompt prefill, the vocabulary
  projection; memory bound), on CPU with float32 activations: dynamic int8, the
  activations quantised per call (one asymmetric uint8 scale per call) and the GEMM in
  int8 through PyTorch's FBGEMM kernels (``torch.ops.quantized.linear_dynamic``) on a
  weight prepacked once (``prepack_int8_``, at load): 2-30x float32 on whisper-base's
  decoder shapes. On a CPU with VNNI (int8 dot products accumulating in int32) the
  activations keep all 8 bits; without it they drop to 7 (``reduce_range``), so that
  AVX2's int16 pair sums cannot saturate.
* many rows (encoder windows): the int8 weight is dequantised once per call (``N * K``
  multiplies, under 1 % of the GEMM) and multiplied in the activation dtype, or, on CPU
  with float32 activations and bf16 dot products (AVX512_BF16, AMX), in bfloat16 with
  float32 accumulation: 1.6-2.3x float32 at 1500 rows, a 0.6 % relative error on top of
  the weight rounding. With VNNI, FBGEMM's int8 GEMM is 2-6x float32 at 1500 rows
  (``benchmarks/results/int8_kernels_cpu2.md``), but one per-call activation scale over
  a whole encoder window costs accuracy: whisper-base's English WER rose 6.62 -> 7.55 %
  with every encoder GEMM dynamic, and stayed ~1.5 points up with the FFN's second
  layers kept in float (``benchmarks/results/README.md``), so those rows stay off it
  until a kernel with per-row activation scales pays.

Other dtypes (bfloat16, float16), other devices and autograd take the dequantised path
in the activation dtype.
Both read the same int8 weight, so the result differs from float32 only by the weight
rounding (and, on the dynamic path, the activation rounding).

``quantize_linears_from_checkpoint_`` does the same swap while a checkpoint is loaded,
straight from its tensors, into a model built under ``linear_weights_on_meta`` (its linear
weights take no memory), so a model loaded for int8 never holds its linear layers in
float32 (the loaders' ``quantize=`` argument).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.activation import apply_activation
from oasr.layers.linear import Linear, LinearActivation

QUANT_MODES = ("int8",)

# Rows (flattened leading dimensions) up to which the dynamic int8 kernel is used.
DYNAMIC_MAX_ROWS = 256

# Rows quantised at a time: bounds the float temporaries of quantising a large matrix (a
# 51865 x 512 tied vocabulary head took ~3 float32 copies, 300 MB, at once).
QUANT_BLOCK_ROWS = 4096


@functools.cache
def _fbgemm_available() -> bool:
    try:
        return "fbgemm" in torch.backends.quantized.supported_engines and hasattr(torch.ops.quantized, "linear_dynamic")
    except Exception:  # pragma: no cover - builds without the quantized backend
        return False


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """This CPU's feature flags from /proc/cpuinfo; empty where it cannot be read (other OSes)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_vnni() -> bool:
    """Whether this CPU has int8 dot products accumulating in int32 (AVX512_VNNI, AVX_VNNI)."""
    return bool(_cpu_flags() & {"avx512_vnni", "avx_vnni"})


def cpu_has_bf16() -> bool:
    """Whether this CPU has bfloat16 dot products (AVX512_BF16, AMX): oneDNN's bf16 GEMM is
    then ~2x float32's."""
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16"})


class Int8Linear(nn.Module):
    """``act(x @ dequant(W).T + b)`` with ``W`` stored as per-channel int8.

    Args:
        qweight: (out, in) int8 weight.
        scale: (out,) float32 scale per output channel (``W ~ qweight * scale``).
        bias: (out,) bias or None.
        activation: an ``ACTIVATIONS`` name applied as the epilogue, or None.

    Shapes:
        x: (..., in_features) -> (..., out_features)
    """

    def __init__(
        self,
        qweight: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None = None,
        activation: str | None = None,
    ) -> None:
        super().__init__()
        if qweight.dtype != torch.int8 or qweight.dim() != 2:
            raise ValueError(f"qweight must be a 2-D int8 tensor, got {qweight.dtype} {tuple(qweight.shape)}")
        self.out_features, self.in_features = qweight.shape
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale.to(torch.float32))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.activation = activation
        self._packed = None  # FBGEMM's prepacked weight: prepack_int8_ at load, else on the first dynamic call

    @classmethod
    def from_weight(
        cls,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        activation: str | None = None,
        *,
        dtype: torch.dtype | None = None,
    ) -> Int8Linear:
        """Quantise a float (out, in) weight: symmetric per output channel, round to nearest
        (``QUANT_BLOCK_ROWS`` rows at a time; every row is independent).

        Args:
            dtype: round the weight to this dtype first (the layer's own, when quantising a
                checkpoint tensor of another dtype), block by block, as a load into the
                layer would have.
        """
        weight = weight.detach()
        q = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
        scale = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
        for r in range(0, weight.shape[0], QUANT_BLOCK_ROWS):
            w = weight[r : r + QUANT_BLOCK_ROWS]
            w = (w if dtype is None else w.to(dtype)).to(torch.float32)
            s = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
            q[r : r + QUANT_BLOCK_ROWS] = torch.round(w / s[:, None]).clamp_(-127, 127)
            scale[r : r + QUANT_BLOCK_ROWS] = s
        return cls(q, scale, None if bias is None else bias.detach(), activation)

    @classmethod
    def from_linear(cls, linear: Linear) -> Int8Linear:
        activation = linear.activation if isinstance(linear, LinearActivation) else None
        return cls.from_weight(linear.weight, linear.bias, activation)

    def dequantized_weight(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        w = self.qweight.to(torch.float32) * self.scale[:, None]
        return w if dtype is None else w.to(dtype)

    def prepack(self) -> None:
        """Build FBGEMM's packed weight now (done at load by ``prepack_int8_``), where the
        dynamic int8 kernel can run: CPU weights, FBGEMM present."""
        if self.qweight.device.type == "cpu" and _fbgemm_available():
            self._packed_weight()

    def _packed_weight(self):
        if self._packed is None:
            with warnings.catch_warnings():
                # The quantized-tensor constructors warn about their future; FBGEMM's
                # prepacked format still needs them.
                warnings.simplefilter("ignore")
                # The int8 values as they are (no float copy of the weight on the way).
                qw = torch._make_per_channel_quantized_tensor(
                    self.qweight,
                    self.scale.to(torch.float64),
                    torch.zeros(self.out_features, dtype=torch.long),
                    0,
                )
                bias = None if self.bias is None else self.bias.to(torch.float32)
                self._packed = torch.ops.quantized.linear_prepack(qw, bias)
        return self._packed

    def _apply(self, fn, recurse=True):
        self._packed = None  # moved or cast: repack lazily on the new device
        scale = self.scale
        out = super()._apply(fn, recurse)
        # The scales stay float32 through a cast of the model (a half-precision copy would
        # round every channel's step); they only follow it to its device.
        self.scale = scale.to(device=self.scale.device)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            x.device.type == "cpu"
            and x.dtype == torch.float32
            and not torch.is_grad_enabled()
            and _fbgemm_available()
            and x.numel() <= self.in_features * DYNAMIC_MAX_ROWS
        ):
            # Without VNNI the activations drop to 7 bits (reduce_range), so that FBGEMM's
            # int16 pair sums cannot saturate.
            y = torch.ops.quantized.linear_dynamic(x.contiguous(), self._packed_weight(), not cpu_has_vnni())
        elif x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_grad_enabled() and cpu_has_bf16():
            # Many rows with bf16 dot products: the GEMM in bf16 (float32 accumulation), the
            # bias added in float32.
            y = F.linear(x.to(torch.bfloat16), self.dequantized_weight(torch.bfloat16)).float()
            if self.bias is not None:
                y += self.bias
        else:
            bias = None if self.bias is None else self.bias.to(x.dtype)
            y = F.linear(x, self.dequantized_weight(x.dtype), bias)
        return y if self.activation is None else apply_activation(y, self.activation)

    def extra_repr(self) -> str:
        act = f", activation={self.activation}" if self.activation else ""
        return f"in={self.in_features}, out={self.out_features}, bias={self.bias is not None}, int8{act}"


def quantize_linears_(model: nn.Module, mode: str = "int8", *, skip: tuple[str, ...] = ()) -> int:
    """Swap ``model``'s linear layers for int8 ones, in place; returns how many were swapped.

    Args:
        mode: "int8" (the only mode).
        skip: module name prefixes to keep in full precision.

    Tied output projections: a module with a ``tied_head`` attribute (None) and an
    ``embed_tokens`` embedding gets ``tied_head`` set to an int8 copy of the embedding
    matrix, which its ``logits`` then uses (the embedding lookup stays float).

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in QUANT_MODES:
        raise ValueError(f"unknown quantization {mode!r}; expected one of {QUANT_MODES}")
    swapped = 0
    for name, module in list(model.named_modules()):
        if any(name == p or name.startswith(p + ".") for p in skip):
            continue
        for child_name, child in list(module.named_children()):
            if type(child) in (Linear, LinearActivation):
                setattr(module, child_name, Int8Linear.from_linear(child))
                swapped += 1
        if hasattr(module, "tied_head") and module.tied_head is None and hasattr(module, "embed_tokens"):
            module.tied_head = Int8Linear.from_weight(module.embed_tokens.weight)
            swapped += 1
    return swapped


def prepack_int8_(model: nn.Module, *, skip: tuple[str, ...] = ()) -> int:
    """Prepack every ``Int8Linear`` of ``model`` for the dynamic int8 kernel, now rather than
    on its first call (inside a timed request); returns how many were packed. Nothing is
    packed for a model whose activations are not float32 (its ``compute_dtype``): those take
    the dequantised path. A layer later moved or cast repacks on its next dynamic call. The
    packed weight is a second int8 copy (FBGEMM's blocked layout): a quarter of float32.

    Args:
        skip: module names (and their submodules) left to pack on their first dynamic call,
            if any: an offline encoder sees a whole window per call (more rows than
            ``DYNAMIC_MAX_ROWS``) and takes the dequantised path, so a copy packed for it at
            load would be memory spent for nothing (~19 MB for whisper-base).
    """
    if getattr(model, "compute_dtype", torch.float32) != torch.float32:
        return 0
    packed = 0
    for name, module in model.named_modules():
        if isinstance(module, Int8Linear) and not any(name == s or name.startswith(s + ".") for s in skip):
            module.prepack()
            packed += module._packed is not None
    return packed


@contextmanager
def linear_weights_on_meta() -> Iterator[None]:
    """Build ``Linear`` layers (and subclasses) with their parameters on the meta device: no
    memory until ``quantize_linears_from_checkpoint_`` replaces them with int8 layers or
    allocates the ones it leaves for the load."""
    init = Linear.__init__

    def meta_init(self, *args, device=None, **kwargs) -> None:
        init(self, *args, device="meta", **kwargs)

    Linear.__init__ = meta_init  # type: ignore[method-assign]
    try:
        yield
    finally:
        Linear.__init__ = init  # type: ignore[method-assign]


def quantize_linears_from_checkpoint_(
    model: nn.Module,
    state_dict: dict[str, torch.Tensor],
    mode: str = "int8",
    *,
    release: Callable[[torch.Tensor], None] | None = None,
) -> tuple[set[str], set[str]]:
    """Swap ``model``'s linear layers for int8 ones built straight from ``state_dict``, in
    place, before the rest of the checkpoint is loaded: the float weights the layers were
    allocated with are never written (so never resident) and each checkpoint tensor used is
    taken out of ``state_dict`` as soon as it is quantised. The result is the one
    ``quantize_linears_`` gives after a full load (the tensor is cast to the layer's dtype
    first). Layers whose checkpoint tensor is absent or of another shape (a head a load hook
    widens) are left for the load and ``quantize_linears_``, tied heads too; a parameter
    still on the meta device (``linear_weights_on_meta``) is allocated for the load.

    Args:
        release: called with each checkpoint tensor once it is quantised (a mapped
            checkpoint's ``CheckpointBundle.release``: its pages leave the RSS layer by layer,
            not after the whole swap).

    Returns:
        (the checkpoint names used, the int8 layers' buffer names), for the load report.

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in QUANT_MODES:
        raise ValueError(f"unknown quantization {mode!r}; expected one of {QUANT_MODES}")
    used: set[str] = set()
    buffers: set[str] = set()
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) not in (Linear, LinearActivation):
                continue
            prefix = f"{name}.{child_name}" if name else child_name
            weight = state_dict.get(f"{prefix}.weight")
            bias = state_dict.get(f"{prefix}.bias") if child.bias is not None else None
            if weight is None or tuple(weight.shape) != tuple(child.weight.shape):
                continue
            if child.bias is not None and (bias is None or tuple(bias.shape) != tuple(child.bias.shape)):
                continue
            activation = child.activation if isinstance(child, LinearActivation) else None
            with torch.no_grad():
                q = Int8Linear.from_weight(
                    weight,
                    None if bias is None else bias.to(child.bias.dtype),
                    activation,
                    dtype=child.weight.dtype,
                )
            setattr(module, child_name, q)
            for key in ("weight", "bias") if child.bias is not None else ("weight",):
                tensor = state_dict.pop(f"{prefix}.{key}")
                if release is not None:
                    release(tensor)
                used.add(f"{prefix}.{key}")
            buffers.update(f"{prefix}.{b}" for b, value in q.named_buffers(recurse=False) if value is not None)
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if param.is_meta:
                empty = torch.empty(param.shape, dtype=param.dtype, device="cpu")
                setattr(module, name, nn.Parameter(empty, requires_grad=param.requires_grad))
    _release_freed_heap()
    return used, buffers


def _release_freed_heap() -> None:
    """Hand the heap pages freed by the quantisation's temporaries back to the OS (glibc's
    ``malloc_trim``). Without it glibc may keep them, interleaved with the new int8
    weights, and the rest of the load then starts ~150 MB higher (whisper-base), which
    made an int8 load's peak RSS depend on allocation order. A no-op off glibc."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # musl and others: nothing to trim this way
        pass
