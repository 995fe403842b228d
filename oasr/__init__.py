"""oasr: an open speech-recognition inference engine on PyTorch."""

from oasr.models import from_pretrained, list_models, load_pretrained

__version__ = "0.1.0"

__all__ = ["ASREngine", "EngineConfig", "__version__", "from_pretrained", "list_models", "load_pretrained"]


def __getattr__(name: str):
    # The engine pulls in audio decoding; import it only when asked for.
    if name in ("ASREngine", "EngineConfig"):
        from oasr.engine import ASREngine, EngineConfig

        return {"ASREngine": ASREngine, "EngineConfig": EngineConfig}[name]
    raise AttributeError(name)
