"""A throwaway PostgreSQL cluster for tests (Debian's ``postgresql`` package), run as user ``postgres``.

Its Unix socket lives in a temporary folder, no TCP port; it is stopped and removed afterwards. Missing
PostgreSQL fails the test under CI (``CI=true``: the serving tests are core) and skips it elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def require(what: str, present: bool, how: str) -> None:
    """Fail (CI) or skip (elsewhere) a core test whose system dependency is missing."""
    if present:
        return
    message = f"{what} is missing: {how} (make test installs it)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def _as_postgres(*args: str) -> None:
    command = [str(a) for a in args]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True, timeout=120)


@contextmanager
def pg_cluster() -> Iterator[str]:
    """Start a cluster; yield its SQLAlchemy URL (``postgresql://hyde@/hyde?host=<socket dir>``)."""
    require("PostgreSQL 15", (PG_BIN / "initdb").exists(), "apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="hyde-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    try:
        _as_postgres(PG_BIN / "initdb", "-D", str(data), "-A", "trust", "-U", "hyde")
        _as_postgres(PG_BIN / "pg_ctl", "-D", str(data), "-o", f"-k {root} -c listen_addresses= -c max_connections=200",
                     "-l", str(root / "log"), "-w", "start")
        try:
            _as_postgres(PG_BIN / "createdb", "-h", str(root), "-U", "hyde", "hyde")
            yield f"postgresql://hyde@/hyde?host={root}"
        finally:
            _as_postgres(PG_BIN / "pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
