"""Encrypted jobs: the last argument sealed with AES-256-GCM, opened only around the job.

1. ``enable(active_version=..., key_for=...)`` turns encryption on for a configuration: new
   pushes of jobs with ``encrypt=True`` seal their **last** argument with the active key
   (such a push of fewer than two arguments is refused: ``InvalidArguments``);
   ``key_for(version)`` returns the 32-byte key of any version still in use (or, without a
   function, ``WURK_ENCRYPTION_KEY_<version>`` in the environment: 32 bytes in base64, read
   when a key is needed). The settings are ``encryption_version`` and ``encryption_keys``.
   However encryption was turned on (``enable``, the YAML file, ``wurk.configure``), a
   missing or short key of the active version is a ``ConfigError`` naming the version and
   where it was looked for: at ``enable``, when a worker starts (``check_active_key``, beside
   ``Config.check_worker``) and at a push — never a bare KeyError. The dashboard never
   needs a key: it shows ``[encrypted data]`` and opens nothing.
2. The envelope replaces the argument: ``{"__wurk_enc__": true, "v": <version>, "iv": <12
   bytes, base64>, "ct": <ciphertext, base64>, "tag": <16 bytes, base64>}``, the plaintext
   being the argument's JSON, no associated data — Ruby wurk's layout. ``seal`` never seals
   an envelope again, so a job pushed a second time (the scheduler in client mode, a limiter
   rescheduling it, a periodic or batch push of stored options) keeps one envelope.
3. ``Opener`` is a server middleware of every worker (``wurk.launcher.BUILT_IN``, innermost of
   the built-ins): it opens the envelope into a copy of the arguments that the job receives,
   and puts the envelope back before anything after the job — a retry, a reschedule, the
   dead set — stores the payload. The opened value is never logged.
4. A job that cannot be opened — an unknown key version, tampered or truncated bytes, bad
   base64, an argument that is no envelope, an ``encrypt`` that is no boolean, an envelope
   where nothing is sealed (an earlier argument; any, when the payload's ``encrypt`` is
   false, null or missing — a job declared ``encrypt=True`` too: ``ENCRYPTED_JOBS`` makes
   the ``Opener`` see it) — raises ``DecryptionError`` naming the jid and
   the version (never the value): it is unretryable, so the job goes straight to the dead
   set, its death handlers run, and the execution metrics count a failure of that class.
5. Without ``cryptography`` installed (``pip install 'wurk[encryption]'``) enabling, sealing
   or opening raises ``ConfigError`` saying so; a push of ``encrypt=True`` while encryption
   is off is refused (``wurk.client``), naming the fix.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import os
from collections.abc import Callable
from typing import Any

from . import payload as P
from .config import Config, check_encryption, default_config
from .errors import ConfigError, DecryptionError, InvalidArguments
from .middleware import Leave

__all__ = ["ENCRYPTED_JOBS", "ENVELOPE_MARK", "KEY_ENV", "check_active_key", "declare", "enable",
           "is_envelope", "looks_sealed", "open_envelope"]

ENVELOPE_MARK = "__wurk_enc__"
# The environment variable a key version is read from without a ``key_for`` function.
KEY_ENV = "WURK_ENCRYPTION_KEY_{version}"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
_FIELDS = frozenset({ENVELOPE_MARK, "v", "iv", "ct", "tag"})


def enable(active_version: int, key_for: Callable[[int], bytes] | None = None, *,
           config: Config | None = None) -> Config:
    """Seal the last argument of ``encrypt=True`` jobs with key ``active_version`` from now
    on; ``key_for`` gives any version's key (else the environment). The key of the active
    version is checked now, so a missing or short key fails at boot, not at a push."""
    cfg = config if config is not None else default_config()
    # checked before anything changes: a version no envelope carries (True, 1.0: its key
    # found all the same, every job sealed would die unopened), a refused key, or no
    # cryptography package leaves the configuration as it was
    check_encryption(active_version, key_for)
    _cipher(_active_key(key_for, active_version))
    cfg.encryption_version = active_version
    cfg.encryption_keys = key_for
    return cfg


def check_active_key(config: Config) -> None:
    """``ConfigError`` naming the version and where it was looked for, unless encryption is
    off or the active version has a 32-byte key (and the ``cryptography`` package is there
    to use it): what a worker checks before it starts (beside ``Config.check_worker``), so
    a missing key fails at boot, not at the first push."""
    if config.encryption_version is not None:
        _cipher(_active_key(config.encryption_keys, config.encryption_version))


def _active_key(lookup: Callable[[int], bytes] | None, version: int) -> bytes:
    """The key new pushes seal with; a missing one is a ``ConfigError``, not a KeyError."""
    try:
        return _key_from(lookup, version)
    except KeyError:
        raise ConfigError(f"no key for encryption version {version} in {_where(lookup, version)}: "
                          f"give its {KEY_BYTES}-byte key before making it active") from None


def _where(lookup: Callable[[int], bytes] | None, version: int) -> str:
    """Where the key of ``version`` is looked for, for a message."""
    return ("key_for (the encryption_keys setting)" if lookup is not None
            else f"the environment ({KEY_ENV.format(version=version)})")


def key(config: Config, version: int) -> bytes:
    """The 32-byte key of ``version``; ``DecryptionError``-free: a missing key is a
    ``KeyError`` naming the version (the caller decides what it means)."""
    return _key_from(config.encryption_keys, version)


def _key_from(lookup: Callable[[int], bytes] | None, version: int) -> bytes:
    found: Any = lookup(version) if lookup is not None else _env_key(version)
    if found is None:
        raise KeyError(f"no key for encryption version {version}")
    if isinstance(found, str):
        found = _decode_key(found, f"the key of version {version}")
    if not isinstance(found, (bytes, bytearray)) or len(found) != KEY_BYTES:
        raise ConfigError(f"the key of encryption version {version} in "
                          f"{_where(lookup, version)} must be {KEY_BYTES} bytes (AES-256), not "
                          f"{type(found).__name__} of "
                          f"{len(found) if hasattr(found, '__len__') else '?'}")
    return bytes(found)


def _env_key(version: int) -> bytes | None:
    text = os.environ.get(KEY_ENV.format(version=version))
    return None if text is None else _decode_key(text, KEY_ENV.format(version=version))


def _decode_key(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{where} must be {KEY_BYTES} bytes in base64") from None


@functools.lru_cache(maxsize=16)
def _cipher(secret: bytes) -> Any:
    """AES-256-GCM with ``secret``, made once per key (its key schedule is most of the cost
    of a small argument). The ``cryptography`` package (the ``encryption`` extra) is
    imported on first use: a process that never meets an encrypted job never loads it."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigError("encrypted jobs need the cryptography package: "
                          "pip install 'wurk[encryption]'") from None
    return AESGCM(secret)


def _invalid_tag() -> type[Exception]:
    from cryptography.exceptions import InvalidTag

    return InvalidTag


# -- sealing ----------------------------------------------------------------------------------
def is_envelope(value: Any) -> bool:
    return isinstance(value, dict) and value.get(ENVELOPE_MARK) is True


def looks_sealed(value: Any) -> bool:
    """Whether ``value`` looks like an envelope, a damaged one too: a dict with the mark (of
    any value), or with exactly an envelope's other fields (the mark lost). Never what a
    job receives as an argument unless the payload's ``encrypt`` says it is sealed."""
    return isinstance(value, dict) and (ENVELOPE_MARK in value
                                        or value.keys() == _FIELDS - {ENVELOPE_MARK})


# The names of the jobs registered in this process with ``encrypt=True``: the ``Opener``
# sees their payloads even without an ``encrypt`` key (one with an envelope must not run).
ENCRYPTED_JOBS: set[str] = set()


def declare(name: str, encrypted: bool) -> None:
    """Record whether the job registered as ``name`` is declared ``encrypt=True``."""
    if encrypted:
        ENCRYPTED_JOBS.add(name)
    else:
        ENCRYPTED_JOBS.discard(name)


def seal(config: Config, job: P.Payload) -> None:
    """Seal ``job``'s last argument (a push of an ``encrypt`` job): its ``args`` become a new
    list ending in the envelope, unless the last is an envelope already. Fewer than two
    arguments is ``InvalidArguments``: the last is the secret, so with one nothing readable
    would be left to tell the job by (with none, nothing would be sealed)."""
    args = job.get(P.ARGS)
    if not isinstance(args, list) or (args and is_envelope(args[-1])):
        return
    if len(args) < 2:
        raise InvalidArguments(
            f"{job.get(P.CLASS)} has encrypt=True, which seals its last argument and leaves "
            f"the others readable, so it takes at least two arguments, not {len(args)}: "
            "pass the secret last and something public first (None if there is nothing)")
    version = config.encryption_version
    if version is None:
        raise ConfigError(f"{job.get(P.CLASS)} has encrypt=True but encryption is not enabled: "
                          "call wurk.crypto.enable(active_version=..., key_for=...) (or set "
                          "encryption_version and WURK_ENCRYPTION_KEY_<version>) first")
    # Set on the object after its checks (``config.encryption_version = 1.0``), a version no
    # envelope carries would seal jobs no worker opens: refused here, before any is pushed.
    check_encryption(version, config.encryption_keys)
    plaintext = json.dumps(args[-1], ensure_ascii=False, separators=(",", ":"),
                           allow_nan=False).encode("utf-8")
    nonce = os.urandom(NONCE_BYTES)
    sealed = _cipher(_active_key(config.encryption_keys, version)).encrypt(nonce, plaintext,
                                                                          None)
    # A new list: the payload's may be the caller's own (a raw push copies the item, not
    # its args), which must keep the value it holds.
    job[P.ARGS] = [*args[:-1], {ENVELOPE_MARK: True, "v": version, "iv": _b64(nonce),
                                "ct": _b64(sealed[:-TAG_BYTES]),
                                "tag": _b64(sealed[-TAG_BYTES:])}]


def unique_args(config: Config, job: P.Payload) -> list[Any] | None:
    """The arguments a unique ``encrypt`` job's lock digest is taken from (a new list), or
    None when there is nothing to seal. The last argument is stood in for by a keyed hash
    of its JSON (HMAC-SHA256 under a key derived from the active version's): the same
    value gives the same digest, as a plain job's does, though each push draws a fresh
    nonce — and the digest stored in the payload tells nothing of the value to whoever
    lacks the key. An envelope (a re-push) is opened first, so it digests as its value."""
    args = job.get(P.ARGS)
    version = config.encryption_version
    if not isinstance(args, list) or not args or version is None:
        return None
    value = args[-1]
    if is_envelope(value):
        try:
            value = open_envelope(config, value, job.get(P.JID))
        except DecryptionError:
            return None  # no key for it here: the envelope itself is what is digested
    plaintext = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                           allow_nan=False).encode("utf-8")
    secret = _active_key(config.encryption_keys, version)
    derived = hmac.new(secret, b"wurk unique digest", hashlib.sha256).digest()
    stand_in = hmac.new(derived, plaintext, hashlib.sha256).digest()
    return [*args[:-1], f"hmac-sha256:{version}:{_b64(stand_in)}"]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


# -- opening ----------------------------------------------------------------------------------
def open_envelope(config: Config, envelope: Any, jid: Any) -> Any:
    """The value sealed in ``envelope``; ``DecryptionError`` (naming the jid and version, not
    the value) when it cannot be opened."""
    if not is_envelope(envelope) or set(envelope) != _FIELDS:
        raise DecryptionError(f"job {jid}: its last argument is not a wurk encryption envelope "
                              "(a dict with __wurk_enc__, v, iv, ct and tag)")
    version = envelope["v"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise DecryptionError(f"job {jid}: the envelope's key version is not a whole number")
    nonce = _unb64(envelope["iv"], jid, "iv")
    ciphertext = _unb64(envelope["ct"], jid, "ct")
    tag = _unb64(envelope["tag"], jid, "tag")
    if len(nonce) != NONCE_BYTES or len(tag) != TAG_BYTES:
        raise DecryptionError(f"job {jid}: the envelope's iv or tag has the wrong length "
                              f"(version {version})")
    try:
        secret = key(config, version)
    except KeyError:
        raise DecryptionError(f"job {jid}: cannot open encryption version {version}: no key "
                              "for it (give key_for one, or WURK_ENCRYPTION_KEY_"
                              f"{version})") from None
    except ConfigError as exc:
        raise DecryptionError(f"job {jid}: cannot open encryption version {version}: "
                              f"{exc}") from None
    cipher = _cipher(secret)
    try:
        plaintext = cipher.decrypt(nonce, ciphertext + tag, None)
    except _invalid_tag():
        raise DecryptionError(f"job {jid}: the envelope (version {version}) does not "
                              "authenticate: tampered, truncated or sealed with another key"
                              ) from None
    try:
        return P.loads_json(plaintext)
    except ValueError:
        raise DecryptionError(f"job {jid}: the opened value (version {version}) is not "
                              "JSON") from None


def _unb64(value: Any, jid: Any, field: str) -> bytes:
    if not isinstance(value, str):
        raise DecryptionError(f"job {jid}: the envelope's {field} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise DecryptionError(f"job {jid}: the envelope's {field} is not valid base64"
                              ) from None


def sealed_args(config: Config, job: P.Payload) -> list[Any] | None:
    """The job's arguments with the last one opened (a new list), or None when the job is not
    encrypted."""
    args, flag, jid = job.get(P.ARGS), job.get(P.ENCRYPT), job.get(P.JID)
    if not isinstance(args, list):
        return None
    if flag is not None and not isinstance(flag, bool):
        # read from Redis: whether the last argument is sealed cannot be told, and a job
        # must not run with an envelope, nor a plain secret pass for an opened one
        raise DecryptionError(f"job {jid} ({_said(job.get(P.CLASS))}): its encrypt field is "
                              f"{_said(flag)}, not true or false: whether its last argument "
                              "is sealed cannot be told")
    sealed = len(args) - 1 if flag is True else len(args)
    for position, arg in enumerate(args[:sealed]):
        if looks_sealed(arg):
            # What is sealed follows the payload's flag (as Sidekiq Enterprise's does), not
            # the job's declaration: an envelope the flag does not account for never
            # reaches the job as its argument.
            why = ("only the last argument is ever sealed" if flag else
                   "the payload's encrypt is not true" if P.ENCRYPT in job else
                   "the payload has no encrypt: true (the flag says what is sealed)")
            raise DecryptionError(
                f"job {jid} ({_said(job.get(P.CLASS))}): its argument {position + 1} of "
                f"{len(args)} is an encryption envelope, but {why}")
    if flag is not True or not args:
        return None
    return [*args[:-1], open_envelope(config, args[-1], jid)]


def _said(value: Any) -> str:
    """A stored value, cut short for a message (it came from Redis)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:40] + "…"


def _seal_again(payload: P.Payload, sealed: Any, result: Any,
                error: BaseException | None) -> Any:
    payload[P.ARGS] = sealed
    if error is not None:
        raise error
    return result


class Opener:
    """Server middleware: the job runs with its last argument opened; the payload keeps the
    envelope for whatever stores it afterwards."""

    wurk_keys = frozenset({P.ENCRYPT})  # every other job's walk leaves it out...
    wurk_job_names = ENCRYPTED_JOBS  # ...but a job declared encrypt=True (no flag, envelope)

    def __init__(self, config: Config) -> None:
        self.config = config

    def __call__(self, job: Any, payload: P.Payload, queue: str,
                 call_next: Callable[[], Any]) -> Any:
        opened = sealed_args(self.config, payload)
        if opened is None:
            return call_next()
        sealed, payload[P.ARGS] = payload[P.ARGS], opened
        try:
            return call_next()
        finally:
            payload[P.ARGS] = sealed

    def wurk_plan(self, job: Any, payload: P.Payload, queue: str) -> Leave | None:
        """``acall`` without its frame on the job's await chain (``wurk.middleware``); a job
        not encrypted: nothing."""
        opened = sealed_args(self.config, payload)
        if opened is None:
            return None
        sealed, payload[P.ARGS] = payload[P.ARGS], opened
        return functools.partial(_seal_again, payload, sealed)

    async def acall(self, job: Any, payload: P.Payload, queue: str,
                    call_next: Callable[[], Any]) -> Any:
        opened = sealed_args(self.config, payload)
        if opened is None:
            return await call_next()
        sealed, payload[P.ARGS] = payload[P.ARGS], opened
        try:
            return await call_next()
        finally:
            payload[P.ARGS] = sealed
