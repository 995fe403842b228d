"""``oasr transcribe --ray`` over the families that came last (issues 31 and 32): each one's tiny
checkpoint (the surface tests' builders) through Ray Data writes the JSON that plain ``oasr
transcribe`` writes for the same clip: the Ray actors build their engines from the directory as the
CLI does, whatever the family."""

from __future__ import annotations

import pytest

from oasr.cli.main import main
from tests.surfaces.test_default_decoding import CLIP, FAMILIES

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")]

NEW = ["wav2vec2", "sensevoice", "granite-speech5", "moonshine", "voxtral", "granite-speech"]


@pytest.mark.parametrize("family", NEW)
def test_ray_batch_writes_what_the_cli_writes(ray_cluster, family, tmp_path, audio_dir):
    clip = audio_dir / CLIP
    if not clip.exists():
        pytest.skip(f"{CLIP} is not in data/audio")
    path, engine_flags = FAMILIES[family](tmp_path / "ckpt")
    common = ["--model", str(path), *engine_flags, "--threads", "1", "--no-progress", "-f", "json"]
    assert main(["transcribe", str(clip), "-o", str(tmp_path / "cli"), *common]) == 0
    ray_args = ["--ray", "--actors", "1", "--num-cpus-per-actor", "0.5"]
    assert main(["transcribe", *ray_args, str(clip), "-o", str(tmp_path / "ray"), *common]) == 0
    name = f"{clip.stem}.json"
    assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), family
