"""Typed configuration in Trinity-RFT's shape: load, override, derive, validate."""

from rfthpc.config.derive import Stage, finalize, resolve_stages
from rfthpc.config.load import LoadedConfig, dump_yaml, load_config, load_resolved, read_yaml
from rfthpc.config.schema import Config

__all__ = [
    "Config", "LoadedConfig", "Stage", "dump_yaml", "finalize", "load_config", "load_resolved",
    "read_yaml", "resolve_stages",
]
