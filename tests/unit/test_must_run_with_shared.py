"""tests/conftest.py: with ../shared beside the checkout, a skipped `real_vmm`, `probe` or
`apiserver` test is a failure (so CI cannot silently stop running them); without it, a skip, and
the skips for want of a part of ../shared are summed up once per part."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

TESTS = textwrap.dedent('''
    import pytest

    @pytest.mark.real_vmm
    def test_real():
        pytest.skip("no real cloud-hypervisor here")

    @pytest.mark.probe
    def test_probe():
        pytest.skip("no probe here")

    @pytest.fixture
    def needs_apiserver():
        pytest.skip("no API server here")

    @pytest.mark.apiserver
    def test_apiserver(needs_apiserver):
        pass

    def test_unmarked():
        pytest.skip("any other skip stays a skip")

    @pytest.mark.real_vmm
    def test_real_that_runs():
        pass
''')


FOLDED = textwrap.dedent('''
    import pytest

    @pytest.fixture
    def real_vmm():
        pytest.skip("no real cloud-hypervisor: ../shared/vmm is not beside this checkout and CH_BINARY is not set")

    @pytest.mark.real_vmm
    @pytest.mark.parametrize("n", [1, 2])
    def test_in_a_fixture(real_vmm, n):
        pass

    @pytest.mark.real_vmm
    def test_in_other_words():
        pytest.skip("real cloud-hypervisor in a pod sandbox: ../shared/vmm/cloud-hypervisor is absent")

    def test_reference():
        pytest.skip("/x/shared/reference/data/kubevirt-examples is absent: ../shared/reference is not here")

    def test_other():
        pytest.skip("needs root")
''')


def _run(tmp_path, shared_dir: str, tests: str = TESTS) -> str:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f'''
        import pathlib
        import tests.conftest as project
        from tests.conftest import pytest_runtest_makereport  # noqa: F401 - the hook under test
        project.SHARED = pathlib.Path({shared_dir!r})

        def pytest_configure(config):
            for marker in project.MUST_RUN_WITH_SHARED:
                config.addinivalue_line("markers", marker)
    '''))
    (tmp_path / "test_marked.py").write_text(tests)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "-c", "/dev/null", "-m", "", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    return done.stdout + done.stderr


def test_with_shared_beside_the_checkout_a_marked_skip_is_a_failure_naming_the_reason(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    out = _run(tmp_path, str(shared))
    assert "2 failed, 1 passed, 1 skipped, 1 error" in out, out
    assert "a test marked `real_vmm` skipped although ../shared is beside this checkout" in out
    assert "no real cloud-hypervisor here" in out and "no probe here" in out and "no API server here" in out


@pytest.mark.parametrize("shared", ["/nonexistent/shared"])
def test_without_shared_a_marked_skip_stays_a_skip(tmp_path, shared):
    out = _run(tmp_path, shared)
    assert "1 passed, 4 skipped" in out, out


def test_without_shared_its_skips_are_summed_up_once_per_part_of_it(tmp_path):
    out = _run(tmp_path, str(tmp_path / "shared"), FOLDED)
    assert "5 skipped" in out, out
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert sorted(skipped) == [
        ("SKIPPED [1] shared/reference: not beside this checkout: the reference data (Cloud Hypervisor's API spec, "
         "KubeVirt's examples, check_contract.py)"),
        "SKIPPED [1] test_marked.py:21: needs root",
        "SKIPPED [3] shared/vmm: not beside this checkout: the real cloud-hypervisor (or set CH_BINARY to one)",
    ], out
