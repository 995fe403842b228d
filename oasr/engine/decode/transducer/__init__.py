"""The ``transducer`` decode strategy (RNN-T / TDT / icefall stateless transducers)."""

from oasr.engine.decode.transducer.strategy import TransducerDecodeStrategy

__all__ = ["TransducerDecodeStrategy"]
