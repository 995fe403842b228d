"""Scale-out of oasr on an existing distributed runtime (Ray), above the single-process surfaces.

* ``oasr.serving.ray``: the OpenAI-compatible app of ``oasr.server`` as a Ray Serve deployment,
  N engine replicas (or autoscaled) behind Ray Serve's HTTP proxy (``oasr serve --ray``).
* ``oasr.serving.ray_batch``: batch transcription of files / directories / manifests with Ray Data,
  one engine per actor (``oasr transcribe --ray``).

Both need the ``ray`` extra (``oasr.install.install_hint("ray")``) and import it only when used.
Layering: this package may import ``oasr.server``, ``oasr.engine`` and ``oasr.cli`` helpers;
nothing under ``oasr.engine`` or ``oasr.models`` imports it.
"""
