"""The transducer tests share the Zipformer tests' tiny icefall checkpoints (hybrid: CTC head
and transducer, causal and full-context) and clips."""

from tests.models.zipformer.conftest import features, reference  # noqa: F401 (fixtures)
