"""The front-end table (``oasr.audio.frontends``) names the families' front ends by lazy
``"module:Class"`` strings: importing it, or building a shared front end, imports no family."""

from __future__ import annotations

import subprocess
import sys

import pytest

from oasr.audio.frontends import build_frontend
from oasr.specs import FeatureSpec


def test_the_table_imports_a_family_only_when_its_front_end_is_built():
    code = (
        "import sys\n"
        "from oasr.audio.frontends import build_frontend\n"
        "from oasr.specs import FeatureSpec\n"
        "build_frontend(FeatureSpec('whisper_mel', 16000, {'n_mels': 80}))\n"
        "assert not [m for m in sys.modules if m.startswith('oasr.models')], sorted(sys.modules)\n"
        "build_frontend(FeatureSpec('lasr_mel', 16000, {}))\n"
        "assert 'oasr.models.lasr.features' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown feature kind 'nope'.*whisper_mel"):
        build_frontend(FeatureSpec("nope", 16000, {}))
