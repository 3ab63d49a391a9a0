"""The YAML configuration file, in the shape of ``sidekiq.yml``.

1. Top-level keys are settings (``concurrency``, ``queues``, ``timeout``, any ``Config``
   field); Sidekiq's ``:concurrency:`` symbol spelling is accepted too.
2. ``queues`` entries are ``name``, ``"name,weight"`` or ``[name, weight]``, checked as
   ``-q`` is (``wurk.options.parse_queue``): a name with a space, or a ``' - '`` left by a
   list item indented too deep, is refused with the file's name.
3. ``capsules: {name: {concurrency: N, async_concurrency: N, queues: [...], shard: S}}``
   adds Sidekiq 7 capsules (``shard``: the one of ``shards: {S: URL}`` it serves; a
   capsule's ``server_middleware`` is code, refused by name as a top-level one is);
   ``periodic: [{cron: "*/5 * * * *", job: Name, tz: …, args: […], queue: …}]`` registers
   cron loops (checked entry by entry in ``wurk.periodic.loops``).
4. A top-level mapping that is not a setting is an environment section; the one named by
   ``-e`` (else by ``WURK_ENV`` / ``APP_ENV``, as Sidekiq's ``APP_ENV``) is merged over the
   top level, the others are ignored. A file with sections but none named by ``-e`` is an
   error (a typo would silently run with the top level only); one named by the environment
   variable alone is not (a variable set for the whole app, ``staging``, may have no
   section: the top level, as in Sidekiq). In a file without sections, the name only names
   the environment.
5. ``${VAR}`` and ``${VAR:-default}`` are replaced from the environment — no code runs
   (Sidekiq's ERB was a security hole). They are replaced inside each parsed scalar, never in
   the YAML text: a value holding a newline or ``key: value`` stays one value and cannot add
   settings. An unquoted scalar that holds a variable is typed after the replacement
   (``concurrency: ${N}`` is an int), as if the value had been written there. Any other
   ``${NAME…`` (the shell's ``${NAME-x}``, ``${NAME:?x}``, a nested default, an unclosed
   brace) is an error: kept as text it would set the setting to those characters.
6. ``health_port: true`` turns the health check on at its default port
   (``DEFAULT_HEALTH_PORT``, 7434, as ``wurk worker --health`` does); ``false`` or no value
   leaves it off; a number is the port. Anything else is refused (YAML's ``true`` is no port
   1, though Python's ``True == 1``).
7. Every problem is a ``ConfigError`` naming the file and the key; an unknown key is given
   the closest known setting (``retries`` → ``max_retries``).
"""

from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from .config import (
    CODE_SETTINGS,
    DEFAULT_HEALTH_PORT,
    SETTING_ALIASES,
    Capsule,
    Config,
    did_you_mean,
    environment_variable,
    parse_queue,
)
from .errors import ConfigError

__all__ = ["load_file", "settings_from_mapping"]

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# What is left of a ``${NAME…`` that is none of the two forms above: the shell's others
# (``${NAME-x}``, ``${NAME:?x}``, ``${NAME:=x}``), a nested default, an unclosed brace.
_OTHER_FORM = re.compile(r"\$\{[A-Za-z_][^}]*\}?")
# Keys that take a mapping as their value, so they are not environment sections.
_MAPPING_SETTINGS = {"capsules", "swarm", "shards"}
_CAPSULE_KEYS = {"concurrency", "async_concurrency", "queues", "shard"}
# A capsule's settings that hold Python objects: never in a file (its own server chain; a
# capsule has no client chain, but the name is refused as code, not as a typo).
_CAPSULE_CODE_SETTINGS = {"server_middleware", "client_middleware"}
_SETTINGS = {f.name for f in fields(Config) if f.init}
# The file may not set these: they hold Python objects, not data.
_CODE_SETTINGS = set(CODE_SETTINGS)


def load_file(path: str | os.PathLike[str], environment: str | None = None) -> dict[str, Any]:
    """Read a YAML file into ``Config`` keyword arguments (plus ``swarm`` if present): the
    section ``environment`` names (``-e``; a missing one is an error), else the one
    ``WURK_ENV`` / ``APP_ENV`` name (``wurk.config.environment_variable``), if it has it."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {source}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text (byte {exc.start}); save it as UTF-8") \
            from None
    try:
        data = _parse(text, source)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested too deeply to be a configuration") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of settings")
    if environment is None:
        named = environment_variable()
        return settings_from_mapping(data, environment=named, source=str(source), strict=False)
    return settings_from_mapping(data, environment=environment, source=str(source))


def _one_line(exc: Exception) -> str:
    """PyYAML's messages span lines (with a caret under the spot); a CLI error is one line."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip())


def _parse(text: str, source: Path) -> Any:
    """``yaml.safe_load``, with the environment variables replaced inside the parsed nodes
    (between composing and constructing, so an unquoted value is still typed)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _substitute(node, loader, source, set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


_STR_TAG = "tag:yaml.org,2002:str"


def _substitute(node: yaml.Node, loader: yaml.SafeLoader, source: Path, seen: set[int]) -> None:
    if id(node) in seen:  # an alias: the node it names is replaced once
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if "${" not in node.value:
            return
        node.value = _interpolate(node.value, source)
        if node.style is None and node.tag == _STR_TAG:  # unquoted, no explicit tag
            node.tag = loader.resolve(  # type: ignore[no-untyped-call]
                yaml.ScalarNode, node.value, (True, False))
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _substitute(item, loader, source, seen)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _substitute(key, loader, source, seen)
            _substitute(value, loader, source, seen)


def _interpolate(text: str, source: Path) -> str:
    last = 0
    for match in _VARIABLE.finditer(text):
        _refuse_other_forms(text[last:match.start()], source)
        _refuse_other_forms(match.group(2) or "", source)
        last = match.end()
    _refuse_other_forms(text[last:], source)

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value is None:
            if default is None:
                raise ConfigError(f"{source}: ${{{name}}} is used but {name} is not set "
                                  f"(write ${{{name}:-default}} to give a default)")
            return default
        return value

    # One pass: a value that itself holds ``${…}`` is kept as it is, never expanded again.
    return _VARIABLE.sub(replace, text)


def _refuse_other_forms(text: str, source: Path) -> None:
    """A ``ConfigError`` for a ``${NAME…`` of ``text`` that wurk does not replace: kept as
    text, ``key_prefix: ${PREFIX-app}`` would run on other keys, ``web_password:
    ${PASSWORD:?}`` would set that very password. ``${`` before no name (``${}``,
    ``${1}``) is no variable and stays text."""
    found = _OTHER_FORM.search(text)
    if found:
        raise ConfigError(f"{source}: {found.group()!r} is not a variable wurk replaces: "
                          "write ${NAME} or ${NAME:-default} (no other shell form, no "
                          "variable inside a default)")


def settings_from_mapping(data: dict[Any, Any], *, environment: str | None = None,
                          source: str = "configuration", strict: bool = True
                          ) -> dict[str, Any]:
    flat = {_key(k): v for k, v in data.items()}
    sections = {k: v for k, v in flat.items()
                if isinstance(v, dict) and k not in _SETTINGS and k not in _MAPPING_SETTINGS}
    settings = {k: v for k, v in flat.items() if k not in sections}
    if environment and environment in sections:
        settings.update({_key(k): v for k, v in sections[environment].items()})
    elif environment and sections and strict:
        raise ConfigError(f"{source}: no section {environment!r} for -e; the sections are "
                          f"{', '.join(map(repr, sorted(sections)))}")
    if environment:
        settings["environment"] = environment
    return _convert(settings, source)


def _key(key: Any) -> str:
    return str(key).lstrip(":")


def _convert(settings: dict[str, Any], source: str) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "swarm":
            result["swarm"] = value
        elif key == "queues":
            result["queues"] = [_queue(entry, source) for entry in _list(value, key, source)]
        elif key == "capsules":
            result["capsules"] = _capsules(value, source)
        elif key == "health_port":
            result["health_port"] = _health_port(value, source)
        elif key in _CODE_SETTINGS:
            raise ConfigError(f"{source}: unknown setting {key!r} for a file: it holds "
                              "Python objects; set it in code, on wurk.default_config() in "
                              "a module loaded with -r")
        elif key not in _SETTINGS and key not in SETTING_ALIASES:
            raise ConfigError(f"{source}: unknown setting {key!r}{did_you_mean(key)}")
        else:
            result[key] = value
    return result


def _health_port(value: Any, source: str) -> int | None:
    """``true``: on at the default port; ``false`` / null: off; else a TCP port (point 6)."""
    if value is True:
        return DEFAULT_HEALTH_PORT
    if value is False or value is None:
        return None
    if isinstance(value, int) and 0 <= value <= 65535:
        return value
    raise ConfigError(f"{source}: health_port must be true (on, at port {DEFAULT_HEALTH_PORT}), "
                      f"false (off) or a TCP port (0-65535; 0 picks a free one), not {value!r}")


def _list(value: Any, key: str, source: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: {key} must be a list, not {value!r}")
    return value


def _queue(entry: Any, source: str) -> str:
    if isinstance(entry, str):
        spec = entry
    elif isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str):
        spec = f"{entry[0]},{entry[1]}"
    else:
        raise ConfigError(f"{source}: queue entry {entry!r} must be a name, 'name,weight' "
                          "or [name, weight]")
    try:
        parse_queue(spec)  # the checks -q gets, named with the file
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return spec


def _capsules(value: Any, source: str) -> list[Capsule]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: capsules must map a name to its settings")
    capsules = []
    for name, spec in value.items():
        code = sorted(set(map(_key, spec)) & _CAPSULE_CODE_SETTINGS) \
            if isinstance(spec, dict) else []
        if code == ["client_middleware"]:
            raise ConfigError(f"{source}: capsule {_key(name)!r}: 'client_middleware' is no "
                              "capsule's: a push is the application's, not a capsule's (the "
                              "configuration's client_middleware, in code)")
        if code:
            raise ConfigError(f"{source}: capsule {_key(name)!r}: 'server_middleware' cannot "
                              "be set in a file: it holds Python objects; set it in code, "
                              f"config.capsule({_key(name)!r}).server_middleware.add(TheClass) "
                              "in a module loaded with -r")
        if not isinstance(spec, dict) or set(map(_key, spec)) - _CAPSULE_KEYS:
            raise ConfigError(f"{source}: capsule {name!r} takes concurrency, "
                              "async_concurrency, queues and shard only")
        spec = {_key(k): v for k, v in spec.items()}
        queues = [_queue(q, source) for q in _list(spec.get("queues", ["default"]),
                                                   "queues", source)]
        capsules.append(Capsule(name=_key(name), queues=[parse_queue(q) for q in queues],
                                concurrency=spec.get("concurrency", 5),
                                async_concurrency=spec.get("async_concurrency", 100),
                                shard=spec.get("shard")))
    return capsules
