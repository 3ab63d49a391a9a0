"""A private MariaDB server for the tests: Debian's ``mariadb-server`` binaries,
``mariadb-install-db`` and ``mariadbd`` in a temporary directory, on a free loopback port, run
by a user that is not root.

1. ``find_binaries()``: ``WURK_TEST_MARIADB_BIN`` (a directory holding ``mariadbd`` and
   ``mariadb-install-db``), else Debian's ``/usr/sbin/mariadbd`` with ``mariadb-install-db`` on
   ``PATH``; None when MariaDB is not installed — the tests that need it are then skipped,
   each saying why and how to install it.
2. ``--no-defaults`` everywhere: /etc/mysql (the system service's settings) is never read, and
   neither the system service nor /var/lib/mysql is touched. As root (CI) the server runs as
   the ``mysql`` user the package creates (the directory is theirs); the commands run as that
   user (``subprocess``'s ``user=``).
3. ``Server.database(name)`` makes a fresh database and returns its SQLAlchemy URL
   (``mysql+pymysql://``). ``durable=False`` (the tests) writes the log without a flush at
   each commit, no doublewrite buffer, no binary log: the suite measures behaviour, not disks.
4. The start is bounded: the server's socket must answer within ``START_TIMEOUT``, else it is
   killed and the error raised carries its error log. ``stop()`` kills it at once and removes
   the directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.server import free_port
from tests.helpers.wait import wait_until

USER = "wurk"
START_TIMEOUT = 60.0
INSTALL_HINT = ("MariaDB is not installed: `apt-get install mariadb-server` (Debian) puts "
                "mariadbd in /usr/sbin and mariadb-install-db on PATH (the suite starts its "
                "own server; the system service need not run), or set WURK_TEST_MARIADB_BIN")


@dataclass(frozen=True)
class Binaries:
    server: Path  # mariadbd
    install_db: Path  # mariadb-install-db


def find_binaries() -> Binaries | None:
    explicit = os.environ.get("WURK_TEST_MARIADB_BIN")
    if explicit:
        return Binaries(Path(explicit) / "mariadbd", Path(explicit) / "mariadb-install-db")
    server = next((Path(p) for p in ("/usr/sbin/mariadbd", shutil.which("mariadbd") or "")
                   if p and Path(p).is_file()), None)
    install_db = shutil.which("mariadb-install-db")
    if server is None or install_db is None:
        return None
    return Binaries(server, Path(install_db))


def _owner() -> pwd.struct_passwd | None:
    """The user the server runs as: None (this one) unless this is root."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam("mysql")  # made by Debian's mariadb-server package


@dataclass
class Server:
    directory: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.directory / "mariadbd.sock"

    def url(self, database: str) -> str:
        return f"mysql+pymysql://{USER}@127.0.0.1:{self.port}/{database}"

    def _admin(self, *statements: str) -> None:
        """Run ``statements`` as root, over the server's socket."""
        import pymysql

        conn = pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True,
                               connect_timeout=5)
        try:
            with conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
        finally:
            conn.close()

    def database(self, name: str) -> str:
        """A new, empty database; its URL."""
        self._admin(f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
        return self.url(name)

    def error_log(self) -> str:
        try:
            return (self.directory / "error.log").read_text(errors="replace")
        except OSError as exc:
            return f"(no error log: {exc})"

    def stop(self) -> None:
        try:
            self.process.kill()
            self.process.wait(30)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _run_as(owner: pwd.struct_passwd | None) -> dict[str, object]:
    if owner is None:
        return {}
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}


def start_server(*, durable: bool = False) -> Server:
    """``mariadb-install-db`` and ``mariadbd`` a new server; raises when MariaDB is missing or
    does not answer within ``START_TIMEOUT``, with its error log."""
    binaries = find_binaries()
    if binaries is None:
        raise FileNotFoundError(INSTALL_HINT)
    owner = _owner()
    # Under /tmp, not pytest's tmp_path: that is private to this user, and the server's user
    # must reach its directory (and a socket's path must be short).
    directory = Path(tempfile.mkdtemp(prefix="wurk-maria-"))
    data = directory / "data"
    data.mkdir()
    if owner is not None:
        for path in (directory, data):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "LANG": "C"}
    try:
        done = subprocess.run(
            [str(binaries.install_db), "--no-defaults", f"--datadir={data}",
             "--auth-root-authentication-method=normal", "--skip-test-db",
             "--skip-name-resolve", "--innodb-use-native-aio=0"],
            capture_output=True, text=True, env=env, cwd=directory, timeout=START_TIMEOUT,
            **_run_as(owner))  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed ({done.returncode}):\n"
                               f"{done.stdout}\n{done.stderr}")
        port = free_port()
        settings = [f"--datadir={data}", f"--socket={directory / 'mariadbd.sock'}",
                    f"--pid-file={directory / 'mariadbd.pid'}",
                    f"--log-error={directory / 'error.log'}", f"--tmpdir={directory}",
                    "--bind-address=127.0.0.1", f"--port={port}", "--skip-name-resolve",
                    "--innodb-use-native-aio=0", "--innodb-buffer-pool-size=64M",
                    "--max-connections=200"]
        if not durable:
            settings += ["--skip-log-bin", "--innodb-flush-log-at-trx-commit=0",
                         "--innodb-doublewrite=0", "--sync-frm=0"]
        process = subprocess.Popen(
            [str(binaries.server), "--no-defaults", *settings], env=env, cwd=directory,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            **_run_as(owner))  # type: ignore[call-overload]
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    server = Server(directory, port, process)
    try:
        _wait_ready(server)
        server._admin(f"CREATE USER '{USER}'@'127.0.0.1'",
                      f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1'")
    except BaseException:
        log = server.error_log()
        server.stop()
        raise RuntimeError(f"MariaDB did not start in {directory}:\n{log}") from None
    return server


def _wait_ready(server: Server) -> None:
    """Until the server's socket answers a query; at most ``START_TIMEOUT``, or until the
    server exits."""
    import pymysql

    def answers() -> bool:
        if server.process.poll() is not None:
            raise RuntimeError(f"mariadbd exited ({server.process.returncode})")
        try:
            server._admin("SELECT 1")
        except pymysql.err.OperationalError:
            return False
        return True

    wait_until(answers, timeout=START_TIMEOUT, what="MariaDB's socket")
