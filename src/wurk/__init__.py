"""wurk: background jobs for Python on Redis, data-compatible with Sidekiq.

Define a job with ``@wurk.job`` (or subclass ``wurk.Job``), push it with
``perform_async``, and run ``wurk -r your.module`` to work it off.

The public surface is this package's ``__all__`` and these modules' (each pinned by a test):
``wurk.api``, ``wurk.api.values``, ``wurk.batch``, ``wurk.connections.server``,
``wurk.context``, ``wurk.contrib.django``, ``wurk.crypto``, ``wurk.contrib.django.settings``,
``wurk.contrib.django.models``, ``wurk.contrib.django.tasks``, ``wurk.contrib.django.urls``,
``wurk.contrib.fastapi``,
``wurk.contrib.flask``, ``wurk.contrib.sqlalchemy``, ``wurk.deploy``, ``wurk.errors``,
``wurk.expiry``, ``wurk.inprocess``, ``wurk.iteration``, ``wurk.limiter``, ``wurk.metrics``,
``wurk.middleware``, ``wurk.otel``, ``wurk.reliability``, ``wurk.results``,
``wurk.scheduled``, ``wurk.swarm``,
``wurk.testing``, ``wurk.unique``, ``wurk.web``, ``wurk.workflow``. Every other module is
internal: its names may change in any release.
docs/internals.md walks a job through them.

``wurk.testing`` comes with ``import wurk`` (``with wurk.testing.fake(): ...``): its modules
are small and import nothing a worker lacks, and importing them switches no mode. Its pytest
plugin (``wurk.testing.plugin``, which imports pytest) is loaded by pytest alone.
"""

from __future__ import annotations

from . import (
    context,
    crypto,
    deploy,
    expiry,
    iteration,
    limiter,
    metrics,
    reliability,
    results,
    testing,
    unique,
)
from ._version import __version__
from .batch import Batch, BatchStatus, current_batch
from .client.core import Client
from .client.default import apush, apush_bulk, push, push_bulk
from .config import Capsule, Config, configure, default_config, via
from .connections.lending import Connection, redis
from .control import cancel
from .errors import (
    BatchError,
    ConfigError,
    DecryptionError,
    EmbeddedServerError,
    InspectionError,
    Interrupted,
    InvalidArguments,
    InvalidPayload,
    IterationStateError,
    JobCancelled,
    JobDeleted,
    JobFailed,
    JobKilled,
    JobNotRegistered,
    JobTimeout,
    PartlyPushed,
    PayloadTooLarge,
    Poisoned,
    RedisUnavailable,
    RegistrationError,
    Shutdown,
    SwarmError,
    UnparseablePayload,
    UnreadableResult,
    Unretryable,
    UnstorableResult,
    UnsupportedServer,
    WurkError,
)
from .fetch.poison import on_poison
from .inprocess import Embedded, InProcessWorker, embed
from .iteration import IterableJob
from .job import (
    AsyncJobFunction,
    Job,
    JobFunction,
    JobSetter,
    current_jid,
    current_job,
    interrupted,
    job,
    registry,
)
from .results import ResultHandle

__all__ = [
    "AsyncJobFunction",
    "Batch",
    "BatchError",
    "BatchStatus",
    "Capsule",
    "Client",
    "Config",
    "ConfigError",
    "Connection",
    "DecryptionError",
    "Embedded",
    "EmbeddedServerError",
    "InProcessWorker",
    "InspectionError",
    "Interrupted",
    "InvalidArguments",
    "InvalidPayload",
    "IterableJob",
    "IterationStateError",
    "Job",
    "JobCancelled",
    "JobDeleted",
    "JobFailed",
    "JobFunction",
    "JobKilled",
    "JobNotRegistered",
    "JobSetter",
    "JobTimeout",
    "PartlyPushed",
    "PayloadTooLarge",
    "Poisoned",
    "RedisUnavailable",
    "RegistrationError",
    "ResultHandle",
    "Shutdown",
    "SwarmError",
    "UnparseablePayload",
    "UnreadableResult",
    "Unretryable",
    "UnstorableResult",
    "UnsupportedServer",
    "WurkError",
    "__version__",
    "apush",
    "apush_bulk",
    "cancel",
    "configure",
    "context",
    "crypto",
    "current_batch",
    "current_jid",
    "current_job",
    "default_config",
    "deploy",
    "embed",
    "expiry",
    "interrupted",
    "iteration",
    "job",
    "limiter",
    "metrics",
    "on_poison",
    "push",
    "push_bulk",
    "redis",
    "registry",
    "reliability",
    "results",
    "testing",
    "unique",
    "via",
]
