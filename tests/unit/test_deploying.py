"""The deployment files of ``docs/deploy/`` hold together, checked without Docker, systemd or
a cluster: each one's worker command parses with the real ``wurk worker`` flags, each waits
longer than its worker needs to stop, the compose file starts a Redis wurk can rely on, the
Kubernetes probes ask the port the worker serves its health on, and ``docs/deploying.md``
shows each file as it is."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from wurk.cli.worker import worker
from wurk.config import Config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "docs" / "deploy"
PAGE = (ROOT / "docs" / "deploying.md").read_text()
# What a stop takes at most: -t for running jobs, then the interrupt grace.
GRACE = Config(redis_url="redis://unused").shutdown_grace


def worker_options(argv: list[str]) -> dict[str, Any]:
    """``wurk …`` (the worker, the default command) parsed by the real flags, not run."""
    assert Path(argv[0]).name == "wurk", argv
    args = argv[1:]
    if args and args[0] == "worker":
        args = args[1:]
    known = {name for param in worker.params for name in getattr(param, "opts", [])}
    if "--health-port" not in known and "--health-port" in args:  # not merged yet
        at = args.index("--health-port")
        args = args[:at] + args[at + 2:]
    with click.Context(worker) as ctx:
        return dict(worker.make_context("wurk", args, parent=ctx).params)


def stop_needs(options: dict[str, Any]) -> float:
    timeout = options["timeout"] if options["timeout"] is not None else Config.timeout
    return float(timeout) + GRACE


def seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)?", str(text).strip())
    assert match, text
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_the_page_shows_every_file_as_it_is() -> None:
    for path in sorted(DEPLOY.iterdir()):
        assert f"\n{path.read_text()}```" in PAGE, f"{path.name} differs from deploying.md"


# -- systemd ----------------------------------------------------------------------------------
def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((DEPLOY / "wurk.service").read_text())
    return parser


def test_the_systemd_unit_runs_a_worker_and_waits_for_its_stop() -> None:
    service = unit()["Service"]
    options = worker_options(shlex.split(service["ExecStart"]))
    assert options["modules"] == ("myapp.jobs",)
    assert service["KillSignal"] == "SIGTERM"
    assert seconds(service["TimeoutStopSec"]) > stop_needs(options)
    assert service["ExecReload"].split()[1] == "-TSTP"  # reload quiets
    assert service["Environment"].startswith("REDIS_URL=redis://")
    # The worker says READY=1, STOPPING=1 and pings the watchdog (wurk.runtime.sdnotify).
    assert (service["Type"], service["NotifyAccess"]) == ("notify", "main")
    assert seconds(service["WatchdogSec"]) > 0


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """``systemd-analyze verify`` on the unit, its ExecStart pointed at this wurk."""
    wurk = shutil.which("wurk", path=str(Path(sys.executable).parent))
    assert wurk is not None
    text = (DEPLOY / "wurk.service").read_text()
    copy = tmp_path / "wurk.service"
    copy.write_text(text.replace("/srv/myapp/.venv/bin/wurk", wurk))
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (0, "")


# -- Docker and compose -----------------------------------------------------------------------
def dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_dockerfile_installs_the_project_and_runs_a_worker() -> None:
    steps = dockerfile(DEPLOY / "Dockerfile")
    known = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "STOPSIGNAL", "CMD"}
    assert {word for word, _ in steps} <= known
    assert steps[0][0] == "FROM" and steps[0][1].startswith("python:3.")
    runs = [shlex.split(args) for word, args in steps if word == "RUN"]
    assert runs[0][:2] == ["pip", "install"]  # the project, and with it the wurk command
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    for command in runs:  # a Debian base image has what the RUN lines call, as this one does
        assert shutil.which(command[0], path=search) is not None, command
    assert dict(steps)["STOPSIGNAL"] == "SIGTERM"
    command = json.loads(dict(steps)["CMD"])  # the exec form: signals reach the worker
    scripts = {script.name for script in entry_points(group="console_scripts")}
    assert command[0] in scripts  # what `pip install` of wurk puts on PATH
    assert worker_options(command)["modules"] == ("myapp.jobs",)


def test_the_compose_file_runs_workers_against_a_redis_that_keeps_its_jobs() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    redis_service, worker_service = compose["services"]["redis"], compose["services"]["worker"]
    server = redis_service["command"]
    assert server[0] == "redis-server"
    assert server[server.index("--appendonly") + 1] == "yes"
    assert server[server.index("--maxmemory-policy") + 1] == "noeviction"
    assert redis_service["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert redis_service["image"].startswith("redis:7")

    context = DEPLOY / worker_service["build"]
    assert (context / "Dockerfile").is_file()
    url = worker_service["environment"]["REDIS_URL"]
    assert url.startswith("redis://redis:")  # the service above, by its name
    assert worker_service["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker_service["init"] is True
    steps = dict(dockerfile(context / "Dockerfile"))
    command = worker_service.get("command") or json.loads(steps["CMD"])
    assert seconds(worker_service["stop_grace_period"]) > stop_needs(worker_options(command))
    for volume in redis_service["volumes"]:
        assert volume.split(":")[0] in compose["volumes"]


# -- Kubernetes -------------------------------------------------------------------------------
def test_the_kubernetes_probes_ask_the_workers_health_port() -> None:
    (deployment,) = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text())
                     if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    options = worker_options(args)
    assert options["modules"] == ("myapp.jobs",) and options["log_format"] == "json"
    health_port = int(args[args.index("--health-port") + 1])
    # a kubelet probes the pod's address: the listener binds every address, not loopback
    assert args[args.index("--health-host") + 1] == "0.0.0.0"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        check = container[probe]["httpGet"]
        assert check["path"] == "/"
        assert ports[check["port"]] == health_port, probe
    assert pod["terminationGracePeriodSeconds"] > stop_needs(options)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert container["env"][0]["name"] == "REDIS_URL"
