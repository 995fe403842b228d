"""Canary-Qwen (NVIDIA, NeMo speechlm2's ``SALM``): a FastConformer perception feeding a Qwen3
causal LM with LoRA, decoded by the ``llm`` strategy. Reads the directory ``SALM.save_pretrained``
writes."""

from __future__ import annotations

from oasr.lazy import lazy_exports

__all__ = ["CanaryQwenConfig", "ModalityAdapterConfig"]

# The config module loads torch (through the model contract); import it on first use so that
# listing the families (`oasr models`) needs no torch.
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "oasr.models.canary_qwen.config"))
