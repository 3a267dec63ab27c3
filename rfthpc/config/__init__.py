"""Typed configuration in Trinity-RFT's shape: load, override, derive, validate.

| module                | does                                                                          |
| --------------------- | ----------------------------------------------------------------------------- |
| `schema`              | the whole config (`Config`)                                                   |
| `algorithm`, `model`, `lora`, `buffer`, `explorer`, `trainer`, `synchronizer`, `monitor`, `slurm` | its sections |
| `typed`               | plain YAML -> the typed dataclasses, every problem collected                  |
| `load`                | YAML < command-line overrides, other frameworks' keys read (`rfthpc.dialects`) |
| `derive`              | every value a user may leave unset, resolved once; stages                     |
| `validate`            | consistency checks; components' own checks through `COMPONENT_CHECKS`         |
| `settings`            | each role's settings, frozen                                                  |
| `reference`           | docs/config.md, generated from the dataclasses                                |

It imports no component but the algorithm declarations (`rfthpc.algorithms`: presets fill the
`algorithm` section) and the dialects: every component imports it.
"""


from rfthpc.config.derive import Stage, finalize, resolve_stages
from rfthpc.config.load import LoadedConfig, dump_yaml, load_config, load_resolved, read_yaml
from rfthpc.config.schema import Config

__all__ = [
    "Config", "LoadedConfig", "Stage", "dump_yaml", "finalize", "load_config", "load_resolved",
    "read_yaml", "resolve_stages",
]
