"""Scale-out of oasr on an existing distributed runtime (Ray), above the single-process surfaces.

* ``oasr.serving.ray``: the OpenAI-compatible app of ``oasr.server`` as a Ray Serve deployment,
  N engine replicas (or autoscaled) behind Ray Serve's HTTP proxy (``oasr serve --ray``).
* ``oasr.serving.ray_batch``: batch transcription of files / directories / manifests with Ray Data,
  one engine per actor (``oasr transcribe --ray``).

Both need the ``ray`` extra (``oasr.install.install_hint("ray")``) and import it only when used.
* ``oasr.serving.common``: what the CLI and the Ray runs share (input files, output names, error
  wording, progress bar, replica ranges); no Ray.

Layering: this package may import ``oasr.server`` and ``oasr.engine``, never ``oasr.cli``; only
``oasr.cli`` imports it (tests/test_layering.py).
"""
