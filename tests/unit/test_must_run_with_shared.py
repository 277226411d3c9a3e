"""tests/conftest.py: with ../shared beside the checkout, a skipped `real_vmm`, `probe` or
`apiserver` test is a failure (so CI cannot silently stop running them); without it, a skip."""

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


def _run(tmp_path, shared_dir: str) -> str:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f'''
        import pathlib
        import tests.conftest as project
        from tests.conftest import pytest_runtest_makereport  # noqa: F401 - the hook under test
        project.SHARED = pathlib.Path({shared_dir!r})

        def pytest_configure(config):
            for marker in project.MUST_RUN_WITH_SHARED:
                config.addinivalue_line("markers", marker)
    '''))
    (tmp_path / "test_marked.py").write_text(TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "-c", "/dev/null", "-m", "", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
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
