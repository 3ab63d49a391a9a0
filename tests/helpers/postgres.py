"""A private PostgreSQL cluster for the tests: Debian's ``postgresql`` binaries, ``initdb`` and
``pg_ctl`` in a temporary directory, on a free loopback port, run by a user that is not root.

1. ``find_binaries()``: ``WURK_TEST_PG_BIN``, else the newest ``/usr/lib/postgresql/<v>/bin``
   (Debian's layout), else ``pg_ctl`` on ``PATH``; None when PostgreSQL is not installed —
   the tests that need it are then skipped, each saying why and how to install it.
2. PostgreSQL refuses to run as root. As root (CI), the cluster belongs to the ``postgres``
   user the package creates, or to ``wurk-pg`` (made with ``useradd``) where there is none;
   the commands run as that user (``subprocess``'s ``user=``), the directory is theirs.
3. ``Cluster.database(name)`` makes a fresh database and returns its URL (``postgresql://``,
   for psycopg; ``url(driver)`` for SQLAlchemy). ``durable=False`` (the tests) turns
   fsync off: the suite measures behaviour, not disks; the benchmark starts one with it on.
4. ``stop()`` stops it at once (``-m immediate``) and removes the directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.server import free_port

SUPERUSER = "wurk"
INSTALL_HINT = ("PostgreSQL is not installed: `apt-get install postgresql` (Debian) puts its "
                "binaries under /usr/lib/postgresql/<version>/bin, or set WURK_TEST_PG_BIN")


def find_binaries() -> Path | None:
    explicit = os.environ.get("WURK_TEST_PG_BIN")
    if explicit:
        return Path(explicit)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _owner() -> pwd.struct_passwd | None:
    """The user the cluster runs as: None (this one) unless this is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "wurk-pg"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    "wurk-pg"], check=True, capture_output=True)
    return pwd.getpwnam("wurk-pg")


@dataclass
class Cluster:
    binaries: Path
    directory: Path
    port: int
    owner: pwd.struct_passwd | None
    made: list[str] = field(default_factory=list)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        options: dict[str, object] = {}
        if self.owner is not None:
            options = {"user": self.owner.pw_uid, "group": self.owner.pw_gid,
                       "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "LANG": "C"}
        done = subprocess.run(list(args), capture_output=True, text=True, env=env,
                              cwd=self.directory, timeout=60, **options)  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}"
                               f"\n{done.stderr}")
        return done  # type: ignore[no-any-return]

    def url(self, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def database(self, name: str) -> str:
        """A new, empty database; its URL."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.binaries / "pg_ctl"), "-D", str(self.directory / "data"),
                      "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_cluster(*, durable: bool = False) -> Cluster:
    """``initdb`` and ``pg_ctl start`` a new cluster; raises when PostgreSQL is missing."""
    binaries = find_binaries()
    if binaries is None:
        raise FileNotFoundError(INSTALL_HINT)
    owner = _owner()
    # Under /tmp, not pytest's tmp_path: that is private to this user, and the cluster's
    # user must reach its directory.
    directory = Path(tempfile.mkdtemp(prefix="wurk-pg-"))
    if owner is not None:
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    cluster = Cluster(binaries, directory, free_port(), owner)
    data = directory / "data"
    cluster._run(str(binaries / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
                 "-E", "UTF8", "--no-locale", "--no-sync")
    settings = ["-c", "listen_addresses=127.0.0.1", "-c", f"port={cluster.port}",
                "-c", f"unix_socket_directories={directory}", "-c", "max_connections=100"]
    if not durable:
        settings += ["-c", "fsync=off", "-c", "synchronous_commit=off",
                     "-c", "full_page_writes=off"]
    try:
        cluster._run(str(binaries / "pg_ctl"), "-D", str(data), "-l",
                     str(directory / "server.log"), "-o", " ".join(settings), "-w", "-t", "60",
                     "start")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return cluster
