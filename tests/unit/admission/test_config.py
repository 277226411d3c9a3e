"""The configuration file: the packaged example loads, and every bad file fails with its key."""

from __future__ import annotations

import pytest

from admission.cli import parse_args
from admission.config import EXAMPLE, ConfigError, load_config
from admission.versions import VersionRange, parse_version


def test_the_packaged_example_is_a_complete_valid_config():
    config = load_config(EXAMPLE)
    assert config.launcher.image == "ghcr.io/kubevirt-ch/ch-launcher:v0.1.0"
    assert config.launcher.command == ["/usr/bin/ch-launcher"]
    assert config.launcher.imagePullPolicy == "IfNotPresent"
    assert config.kubevirt.supportedVersions == ">=1.8.0, <1.10.0"
    assert (config.kubevirt.namespace, config.kubevirt.name) == ("kubevirt", "kubevirt")
    assert str(config.overhead.ratio) == "1.0"
    assert config.overhead.launcherMiB is None and config.overhead.vmmMiB is None


def test_no_path_loads_the_example_as_defaults():
    assert load_config(None) == load_config(EXAMPLE)


@pytest.mark.parametrize(("text", "expected"), [
    ("launcher: {image: x, command: [/a]}\nextra: 1\n", "extra: unknown key"),
    ("launcher: {image: x, command: [/a], imag: y}\n", "launcher.imag: unknown key"),
    ("launcher: {command: [/a]}\n", "launcher.image: Field required"),
    ("launcher: {image: x, command: []}\n", "launcher.command"),
    ("launcher: {image: x, command: [/a], imagePullPolicy: Sometimes}\n", "launcher.imagePullPolicy"),
    ("launcher: {image: x, command: [/a]}\nkubevirt: {supportedVersions: '>=one'}\n",
     "kubevirt.supportedVersions"),
    ("launcher: {image: x, command: [/a]}\noverhead: {additionalGuestMemoryOverheadRatio: '0.5'}\n",
     "must be at least 1.0"),
    ("launcher: {image: x, command: [/a]}\noverhead: {launcherMiB: -3}\n", "overhead.launcherMiB"),
    ("- a list\n", "expected a mapping"),
    ("launcher: [unclosed\n", "not valid YAML"),
])
def test_a_bad_config_file_is_refused_naming_the_key(tmp_path, text, expected):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert expected in str(e.value)
    assert str(path) in str(e.value)


def test_a_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "absent.yaml")


def test_an_unquoted_ratio_is_accepted_as_kubevirt_writes_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("launcher: {image: x, command: [/a]}\noverhead: {additionalGuestMemoryOverheadRatio: 1.5}\n")
    assert str(load_config(path).overhead.ratio) == "1.5"


@pytest.mark.parametrize(("version", "inside"), [
    ("v1.8.0", True), ("v1.9.0", True), ("v1.9.0-beta.0-1264-gd923fdb815cd", True), ("1.9.3", True),
    ("v1.7.9", False), ("v1.10.0", False), ("v1.10.0-rc.1", False), ("v2.0.0", False),
])
def test_supported_versions_treat_builds_as_their_release(version, inside):
    assert VersionRange.parse(">=1.8.0, <1.10.0").contains(version) is inside


def test_an_empty_range_accepts_every_version():
    assert VersionRange.parse("").contains("v0.1.0")


@pytest.mark.parametrize("bad", ["", "latest", "v", "1.x"])
def test_a_malformed_version_is_a_value_error(bad):
    with pytest.raises(ValueError, match="not a version"):
        parse_version(bad)


def test_serve_is_the_default_subcommand_with_the_shared_flag_defaults(monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    ns = parse_args(["--self-signed"])
    assert ns.command == "serve"
    assert ns.port == 8443
    assert ns.config == "/etc/kubevirt-ch/config.yaml"
    assert ns.cert_dir == "/var/run/ch-admission/certs"
    assert (ns.namespace, ns.service, ns.cert_secret) == ("kubevirt-ch", "ch-admission", "ch-admission-tls")
    assert ns.webhook_configurations == "kubevirt-ch-validator,kubevirt-ch-launcher-mutator"
    assert ns.kubeconfig == ""


def test_the_namespace_flag_defaults_to_pod_namespace(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "elsewhere")
    assert parse_args([]).namespace == "elsewhere"
