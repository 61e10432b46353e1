"""Generic fixtures for the pytest integration tests (tests/integration).

- repo_root:   the repository root (pathlib.Path)
- build_dir:   the meson build dir ($SLUICE_BUILD_DIR or <repo>/build); may not exist
- run_sluice:  run the `sluice` CLI as a subprocess: run_sluice("status", "--json", check=False)
- socket_dir:  a fresh, short directory under /tmp for sluiced's sockets (removed afterwards;
               short because UNIX socket paths are limited to 107 bytes)

The sluice package is imported from python/ in this repo, so the tests run with or without
`pip install -e python/`.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PY_DIR = REPO_ROOT / "python"
if str(PY_DIR) not in sys.path:
    sys.path.insert(0, str(PY_DIR))


@pytest.fixture(scope="session")
def repo_root():
    return REPO_ROOT


@pytest.fixture(scope="session")
def build_dir():
    return Path(os.environ.get("SLUICE_BUILD_DIR") or REPO_ROOT / "build").resolve()


def _sluice_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PY_DIR) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("SLUICE_SOCKET_DIR", None)
    if extra:
        env.update(extra)
    return env


@pytest.fixture
def run_sluice():
    """run_sluice(*args, env=None, timeout=60, check=False) -> CompletedProcess (text, captured)."""
    def run(*args, env=None, timeout=60, check=False, input=None):
        return subprocess.run([sys.executable, "-m", "sluice", *map(str, args)], env=_sluice_env(env),
                              capture_output=True, text=True, timeout=timeout, check=check,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL)
    return run


@pytest.fixture
def socket_dir():
    d = tempfile.mkdtemp(prefix="sl-", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)
