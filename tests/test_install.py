"""Install hints name a command that works for the way oasr is installed."""

from __future__ import annotations

import importlib.metadata
import json
import shlex
from pathlib import Path

import pytest

from oasr import install
from tests.conftest import REPO_ROOT, checkout_hint

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _dist(tmp_path: Path, direct_url: dict | None) -> importlib.metadata.Distribution:
    """An installed-looking ``oasr-engine`` distribution: METADATA from pyproject, optional direct_url.json."""
    info = tmp_path / "site" / "oasr_engine-0.1.0.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {PYPROJECT['project']['name']}", "Version: 0.1.0"]
    for extra, reqs in PYPROJECT["project"]["optional-dependencies"].items():
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return importlib.metadata.PathDistribution(info)


@pytest.fixture
def not_in_a_checkout(tmp_path, monkeypatch):
    """oasr imported from a folder that is not its source tree (site-packages)."""
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(install, "_PACKAGE_ROOT", site)


def test_the_declared_distribution_is_the_one_hints_are_about():
    assert install.DIST_NAME == PYPROJECT["project"]["name"]


def test_in_this_checkout_the_hint_is_an_editable_install_of_it():
    assert install.source_checkout() == REPO_ROOT
    assert install.install_hint("vad") == checkout_hint("vad")


def test_an_editable_install_recorded_by_pip_gives_its_directory(tmp_path, monkeypatch, not_in_a_checkout):
    checkout = tmp_path / "my clone"
    dist = _dist(tmp_path, {"url": (checkout.as_uri()), "dir_info": {"editable": True}})
    monkeypatch.setattr(install, "_distribution", lambda: dist)
    assert install.source_checkout() == checkout
    assert install.install_hint("server") == f"pip install -e '{checkout}[server]'"


def test_a_wheel_install_names_the_extras_packages_not_a_pypi_oasr(tmp_path, monkeypatch, not_in_a_checkout):
    for direct in (None, {"url": "file:///tmp/oasr_engine-0.1.0-py3-none-any.whl", "archive_info": {}}):
        dist = _dist(tmp_path / str(bool(direct)), direct)
        monkeypatch.setattr(install, "_distribution", lambda dist=dist: dist)
        assert install.source_checkout() is None
        hint = install.install_hint("vad")
        want = " ".join(shlex.quote(r) for r in PYPROJECT["project"]["optional-dependencies"]["vad"])
        assert hint.startswith(f"pip install {want}  ")
        assert "pip install -e '.[vad]'" in hint  # the form for a clone, named beside it
        assert f"{install.DIST_NAME}[" not in hint


def test_a_non_editable_install_from_a_directory_is_not_a_checkout(tmp_path, monkeypatch, not_in_a_checkout):
    dist = _dist(tmp_path, {"url": (tmp_path / "src").as_uri(), "dir_info": {}})
    monkeypatch.setattr(install, "_distribution", lambda: dist)
    assert install.source_checkout() is None
    assert install.install_hint("lm").startswith("pip install 'kenlm>=0.2'")


def test_not_installed_and_not_a_checkout_falls_back_to_the_given_packages(monkeypatch, not_in_a_checkout):
    monkeypatch.setattr(install, "_distribution", lambda: None)
    assert install.install_hint("vad", ["silero-vad"]).startswith("pip install silero-vad  (")
    assert install.install_hint("vad") == "from a clone of oasr: pip install -e '.[vad]'"


def test_another_projects_pyproject_is_not_oasrs_checkout(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    monkeypatch.setattr(install, "_PACKAGE_ROOT", tmp_path)
    monkeypatch.setattr(install, "_distribution", lambda: None)
    assert install.source_checkout() is None


def test_no_hint_in_the_package_names_a_pypi_distribution():
    offenders = [
        str(p.relative_to(REPO_ROOT))
        for p in (REPO_ROOT / "oasr").rglob("*.py")
        if f"{install.DIST_NAME}[" in p.read_text(encoding="utf-8")
    ]
    assert offenders == []
