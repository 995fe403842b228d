"""MMS language adapters (facebook/mms-1b-all and its kind): one wav2vec2 encoder, and per
language a small bottleneck adapter after every transformer layer plus its own CTC head and
character vocabulary.

The layout, as transformers reads it (``Wav2Vec2ForCTC.load_adapter`` /
``Wav2Vec2CTCTokenizer.set_target_lang``):

* ``config.json`` sets ``adapter_attn_dim`` (the bottleneck width); every stable-layer-norm
  encoder layer then ends with ``h = h + linear_2(relu(linear_1(norm(h))))``, its LayerNorm
  at ``nn.LayerNorm``'s own epsilon (1e-5), not the config's;
* ``model.safetensors`` holds one language's adapters and ``lm_head`` (the checkpoint's own:
  what ``from_pretrained`` without ``target_lang`` runs);
* ``adapter.<lang>.safetensors`` beside it holds each other language's: the
  ``wav2vec2.encoder.layers.<i>.adapter_layer.{norm,linear_1,linear_2}.{weight,bias}`` of every
  layer and ``lm_head.{weight,bias}``, whose row count is that language's vocabulary;
* ``vocab.json`` is a dict language -> that language's character vocabulary, and
  ``tokenizer_config.json``'s ``target_lang`` names the vocabulary of the checkpoint's own head.

Serving many languages at once: a batch's rows may name different languages. The rows are
grouped by language (``RowAdapters``) and each group runs its own adapter weights and head
(``AdapterLayer.forward``, ``row_logits``), so a row's arithmetic is exactly what transformers
does for that language alone; the heads' outputs meet in one tensor as wide as the widest
head, the narrower rows padded with ``PAD_LOGIT`` (never a best path, nothing to a softmax), and
a row's search reads only its own head's columns. The languages' weights come from their files
on first use and stay resident, a bounded number of them (``AdapterBank``, least recently used
out first); every file's names and shapes are checked when the checkpoint loads, so a bad file
fails the load, not a request.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers import LayerNorm, Linear
from oasr.layers.ctc import PAD_LOGIT

ADAPTER_FILE = "adapter.{}.safetensors"  # transformers' WAV2VEC2_ADAPTER_SAFE_FILE
ADAPTER_EPS = 1e-5  # the adapter's nn.LayerNorm keeps torch's default epsilon
CACHED_LANGUAGES = 16  # languages' weights kept resident beyond the checkpoint's own (~9 MB each for mms-1b-all)
_ADAPTER_NAME = re.compile(r"adapter\.(.+)\.safetensors")
_LAYER_KEY = "wav2vec2.encoder.layers.{}.adapter_layer.{}"
_PARTS = ("norm.weight", "norm.bias", "linear_1.weight", "linear_1.bias", "linear_2.weight", "linear_2.bias")
HEAD_KEYS = ("lm_head.weight", "lm_head.bias")


# ---------------------------------------------------------------------------
# The files


def adapter_files(directory: str | Path) -> dict[str, Path]:
    """The ``adapter.<lang>.safetensors`` files of a checkpoint directory, by language."""
    found = {}
    for path in sorted(Path(directory).glob("adapter.*.safetensors")):
        m = _ADAPTER_NAME.fullmatch(path.name)
        if m is not None:
            found[m.group(1)] = path
    return found


def read_vocabularies(path: str | Path) -> dict[str, dict[str, int]] | None:
    """A nested ``vocab.json`` (language -> token -> id), or None for a flat one.

    Raises:
        ValueError: a file that mixes languages and tokens, or ids that are not integers.
    """
    with open(path, encoding="utf-8") as f:
        vocab = json.load(f)
    if not isinstance(vocab, dict) or not any(isinstance(v, dict) for v in vocab.values()):
        return None
    if not all(isinstance(v, dict) for v in vocab.values()):
        raise ValueError(f"{path}: a vocab.json with some languages' vocabularies must hold only those")
    for lang, table in vocab.items():
        if not all(isinstance(i, int) for i in table.values()):
            raise ValueError(f"{path}: the vocabulary of {lang!r} has ids that are not integers")
    return vocab


def adapter_shapes(num_layers: int, hidden: int, attn_dim: int, vocab_size: int) -> dict[str, tuple[int, ...]]:
    """Every tensor an adapter file holds, with its shape (transformers' ``_get_adapters()``)."""
    shapes = {}
    per_part = {
        "norm.weight": (hidden,),
        "norm.bias": (hidden,),
        "linear_1.weight": (attn_dim, hidden),
        "linear_1.bias": (attn_dim,),
        "linear_2.weight": (hidden, attn_dim),
        "linear_2.bias": (hidden,),
    }
    for i in range(num_layers):
        for part in _PARTS:
            shapes[_LAYER_KEY.format(i, part)] = per_part[part]
    shapes["lm_head.weight"] = (vocab_size, hidden)
    shapes["lm_head.bias"] = (vocab_size,)
    return shapes


def check_adapter_file(path: Path, num_layers: int, hidden: int, attn_dim: int) -> int:
    """Check an adapter file's names and shapes from its header (no tensor is read); returns its
    head's rows (the language's vocabulary size).

    Raises:
        ValueError: missing or unexpected tensors, or a shape that does not fit the model.
    """
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (a safe_open handle)
    head = shapes.get("lm_head.weight")
    if head is None or len(head) != 2:
        raise ValueError(f"{path.name}: no lm_head.weight of shape (vocab, {hidden})")
    want = adapter_shapes(num_layers, hidden, attn_dim, head[0])
    missing, unexpected = sorted(set(want) - set(shapes)), sorted(set(shapes) - set(want))
    if missing or unexpected:
        raise ValueError(
            f"{path.name}: not an adapter of this model: missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    wrong = [f"{k} {shapes[k]} (want {want[k]})" for k in want if shapes[k] != want[k]]
    if wrong:
        raise ValueError(f"{path.name}: wrong shapes: {', '.join(wrong[:4])}")
    return int(head[0])


# ---------------------------------------------------------------------------
# One language's weights, and which rows run which


@dataclass(frozen=True)
class LanguageAdapter:
    """One language's weights, on the model's device and dtype.

    Attributes:
        language: its name (the file's ``<lang>``).
        layers: per encoder layer, (norm weight (D,), norm bias (D,), linear_1 weight (A, D),
            linear_1 bias (A,), linear_2 weight (D, A), linear_2 bias (D,)).
        head_weight, head_bias: its CTC head, (V, D) and (V,).
    """

    language: str
    layers: tuple[tuple[torch.Tensor, ...], ...]
    head_weight: torch.Tensor
    head_bias: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return int(self.head_weight.shape[0])

    @classmethod
    def from_file(
        cls, language: str, path: Path, num_layers: int, device: torch.device, dtype: torch.dtype
    ) -> LanguageAdapter:
        """Read ``adapter.<language>.safetensors`` (already checked by ``check_adapter_file``)."""
        from safetensors.torch import load_file

        state = load_file(path, device=str(device))
        state = {k: v.to(dtype) for k, v in state.items()}
        layers = tuple(tuple(state[_LAYER_KEY.format(i, p)] for p in _PARTS) for i in range(num_layers))
        return cls(language, layers, state["lm_head.weight"], state["lm_head.bias"])


@dataclass(frozen=True)
class RowAdapters:
    """Which language's weights each row of a batch runs.

    Attributes:
        groups: (indices, adapter) pairs: the rows of one language as indices along the
            batch's leading axis (frames of a packed batch; None: every row), and its weights
            (None: the checkpoint's own, the modules' parameters).
    """

    groups: tuple[tuple[torch.Tensor | None, LanguageAdapter | None], ...]

    @classmethod
    def of_rows(cls, adapters: Sequence[LanguageAdapter | None], device: torch.device) -> RowAdapters:
        """Group rows by their language's weights (``adapters[i]``: row i's; None: the own)."""
        keys = [None if a is None else a.language for a in adapters]
        if len(set(keys)) == 1:
            return cls(((None, adapters[0]),))
        groups = []
        for key in dict.fromkeys(keys):
            rows = [i for i, k in enumerate(keys) if k == key]
            groups.append((torch.tensor(rows, dtype=torch.long, device=device), adapters[rows[0]]))
        return cls(tuple(groups))

    def of_frames(self, cu_seqlens: torch.Tensor) -> RowAdapters:
        """The same groups over the frames of packed rows (``cu_seqlens``: (B + 1,) row bounds)."""
        if len(self.groups) == 1:
            return self
        lengths = cu_seqlens.diff()
        row_of_frame = torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)
        groups = []
        for rows, adapter in self.groups:
            assert rows is not None
            mask = torch.isin(row_of_frame, rows.to(lengths.device))
            groups.append((mask.nonzero().squeeze(1).to(rows.device), adapter))
        return RowAdapters(tuple(groups))


def _by_group(x: torch.Tensor, rows: RowAdapters, fn) -> torch.Tensor:
    """``fn(x_of_group, adapter)`` for each group of rows (leading axis), put back in place."""
    if len(rows.groups) == 1:
        return fn(x, rows.groups[0][1])
    out = None
    for index, adapter in rows.groups:
        y = fn(x.index_select(0, index), adapter)
        if out is None:
            out = y.new_empty((x.shape[0], *y.shape[1:]))
        out.index_copy_(0, index, y)
    assert out is not None
    return out


class AdapterLinear(Linear):
    """An adapter projection: a ``Linear`` that int8 quantisation leaves in float (it swaps
    ``Linear`` itself, not its subclasses, as it leaves ``CtcProjection``), so the checkpoint's own
    language runs in the compute dtype as every adapter file's does (and they are tiny)."""


class AdapterLayer(nn.Module):
    """The adapter after one encoder layer, transformers' ``Wav2Vec2AttnAdapterLayer``: its
    parameters are the checkpoint's own language; ``forward`` runs each row with its language's
    weights.

    Shapes:
        h: (B, T, D) or packed (N, D) -> the adapter's output (to be added to ``h``), same shape
    """

    def __init__(self, index: int, hidden: int, attn_dim: int) -> None:
        super().__init__()
        self.index = index
        self.norm = LayerNorm(hidden, ADAPTER_EPS)
        self.linear_1 = AdapterLinear(hidden, attn_dim)
        self.linear_2 = AdapterLinear(attn_dim, hidden)

    def _run(self, h: torch.Tensor, adapter: LanguageAdapter | None) -> torch.Tensor:
        if adapter is None:
            nw, nb, w1, b1, w2, b2 = (
                self.norm.weight,
                self.norm.bias,
                self.linear_1.weight,
                self.linear_1.bias,
                self.linear_2.weight,
                self.linear_2.bias,
            )
        else:
            nw, nb, w1, b1, w2, b2 = adapter.layers[self.index]
        x = F.layer_norm(h, (h.shape[-1],), nw, nb, ADAPTER_EPS)
        return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)

    def forward(self, h: torch.Tensor, rows: RowAdapters | None = None) -> torch.Tensor:
        if rows is None:
            return self._run(h, None)
        return _by_group(h, rows, self._run)


def row_logits(hidden: torch.Tensor, rows: RowAdapters | None, own_head: nn.Module) -> torch.Tensor:
    """Each row's CTC logits through its language's head, as wide as the widest head in the
    batch (narrower rows padded with ``PAD_LOGIT``).

    Args:
        own_head: the checkpoint's own head (a ``CtcProjection``: its ``logits``).

    Shapes:
        hidden: (B, T', D) or packed (N, D) -> (B, T', V_max) or (N, V_max)
    """

    def logits(h: torch.Tensor, adapter: LanguageAdapter | None) -> torch.Tensor:
        if adapter is None:
            return own_head.logits(h)
        return F.linear(h, adapter.head_weight, adapter.head_bias)

    if rows is None or len(rows.groups) == 1:
        return logits(hidden, None if rows is None else rows.groups[0][1])
    widths = [own_head.vocab_size if a is None else a.vocab_size for _, a in rows.groups]
    width = max(widths)

    def padded(h: torch.Tensor, adapter: LanguageAdapter | None) -> torch.Tensor:
        y = logits(h, adapter)
        return F.pad(y, (0, width - y.shape[-1]), value=PAD_LOGIT)

    return _by_group(hidden, rows, padded)


# ---------------------------------------------------------------------------
# The languages a checkpoint offers, and the resident ones


class AdapterBank:
    """A checkpoint's languages: its own (``default``, the weights of ``model.safetensors``) and
    one per adapter file with a vocabulary; the files' weights resident on demand, at most
    ``capacity`` of them (least recently used out first; a batch's own always stay for it).

    Args:
        files: ``adapter_files`` of the directory.
        vocab_sizes: each language's head rows (``check_adapter_file``).
        default: the checkpoint's own language (``tokenizer_config.json``'s ``target_lang``),
            or None when it names none.
        num_layers: encoder layers (each has an adapter).
    """

    def __init__(
        self,
        files: Mapping[str, Path],
        vocab_sizes: Mapping[str, int],
        default: str | None,
        num_layers: int,
        capacity: int = CACHED_LANGUAGES,
    ) -> None:
        self.files = dict(files)
        self.vocab_sizes = dict(vocab_sizes)
        self.default = default
        self.num_layers = num_layers
        self.capacity = capacity
        self._resident: OrderedDict[tuple[str, torch.device, torch.dtype], LanguageAdapter] = OrderedDict()
        self._lock = threading.Lock()  # the engine's and a stream core's strategies share the model
        self.loads = 0  # files read so far (tests and stats)

    @property
    def languages(self) -> tuple[str, ...]:
        """Every language a request may name: the adapter files', and the default."""
        names = set(self.files)
        if self.default is not None:
            names.add(self.default)
        return tuple(sorted(names))

    def adapters(
        self, languages: Sequence[str | None], device: torch.device, dtype: torch.dtype
    ) -> list[LanguageAdapter | None]:
        """Each row's weights: None (the checkpoint's own) for no language, else its file's,
        read now if not resident. The default language named explicitly reads its file where
        there is one (transformers' ``load_adapter(target_lang)``), else runs the own weights.

        Raises:
            KeyError: a language the checkpoint lacks (the engine resolved the request's
                against ``languages`` already).
        """
        out: list[LanguageAdapter | None] = []
        with self._lock:
            needed = []
            for lang in languages:
                if lang is None or lang not in self.files:
                    if lang is not None and lang != self.default:
                        raise KeyError(f"no adapter for language {lang!r}")
                    out.append(None)
                    continue
                key = (lang, torch.device(device), dtype)
                adapter = self._resident.get(key)
                if adapter is None:
                    adapter = LanguageAdapter.from_file(lang, self.files[lang], self.num_layers, device, dtype)
                    self._resident[key] = adapter
                    self.loads += 1
                self._resident.move_to_end(key)
                needed.append(key)
                out.append(adapter)
            keep = set(needed)
            for key in list(self._resident):
                if len(self._resident) <= max(self.capacity, len(keep)):
                    break
                if key not in keep:
                    del self._resident[key]
        return out

    def vocab_size(self, language: str | None, own: int) -> int:
        """A row's head width: its file's rows, or ``own`` (the checkpoint's head) for the own weights."""
        if language is not None and language in self.files:
            return self.vocab_sizes[language]
        return own


__all__ = [
    "ADAPTER_EPS",
    "ADAPTER_FILE",
    "AdapterBank",
    "AdapterLayer",
    "AdapterLinear",
    "LanguageAdapter",
    "RowAdapters",
    "adapter_files",
    "adapter_shapes",
    "check_adapter_file",
    "read_vocabularies",
    "row_logits",
]
