"""The dialects sit below the config: they know rfthpc's top-level sections as data, which must be the schema's."""

from __future__ import annotations

import dataclasses

from rfthpc.config.schema import Config
from rfthpc.dialects.translation import SECTIONS, in_schema_order


def test_imported_configs_are_written_in_the_schemas_section_order() -> None:
    assert SECTIONS == tuple(f.name for f in dataclasses.fields(Config))
    shuffled = {"slurm": {}, "model": {}, "mode": "both", "stages": [], "project": "p"}
    assert list(in_schema_order(shuffled)) == ["project", "mode", "model", "stages", "slurm"]
