"""The cloud-hypervisor versions the launcher drives (ch_launcher/ch/versions.py)."""

from __future__ import annotations

import pytest

from ch_launcher.ch import versions


@pytest.mark.parametrize("version", ["53.0.0", "53.0", "v53.0.0", "v53.0", "53.1.2", "53.0.0-dirty",
                                     "cloud-hypervisor v53.0.0-dirty", "v53.0-12-gdeadbeef", " 53.0.0\n"])
def test_v53_releases_are_supported(version):
    assert versions.refusal(version) is None


@pytest.mark.parametrize("version", ["52.0.0", "46.0.0", "54.0.0", "60.1.0", "", "main", "v5",
                                     "cloud-hypervisor v54.0.0", "cloud-hypervisor", "rc53.0"])
def test_other_versions_are_refused_naming_the_version_and_the_range(version):
    message = versions.refusal(version)
    assert message == (f"cloud-hypervisor {version or '(no version)'} is not supported: this ch-launcher "
                       "drives cloud-hypervisor >= 53.0.0, < 54.0.0")
