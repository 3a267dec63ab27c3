"""The addresses of shared auxiliary model servers: a journal per engine, each address a new entry, a
doorbell rung after each, a generation counted across restarts; readers skip what is not an address."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rfthpc.rundir.servers import (
    ServerAddress,
    address_journal,
    doorbell,
    next_generation,
    publish,
    read_address,
    read_addresses,
)
from rfthpc.sharedfs.fileops import TMP_PREFIX


def _address(engine: int, generation: int = 1, **fields) -> ServerAddress:
    base = {"url": f"http://node{engine}:4100{engine}", **fields}
    return ServerAddress(name="judge", engine=engine, api_key="k", served_model="judge", generation=generation,
                         **base)


def test_publish_appends_to_the_engines_journal_and_rings(tmp_path: Path) -> None:
    bell = doorbell(tmp_path, "judge")
    assert read_addresses(tmp_path, "judge") == [] and bell.signature() == 0
    assert next_generation(tmp_path, "judge", 0) == 1
    publish(tmp_path, _address(1, max_model_len=512))
    publish(tmp_path, _address(0))
    rung = bell.signature()
    assert rung == 2
    assert [a.engine for a in read_addresses(tmp_path, "judge")] == [0, 1]
    assert read_address(tmp_path, "judge", 1).max_model_len == 512
    # A restart publishes the next generation at a new address, as a new entry: nothing is edited.
    restarted = _address(0, generation=next_generation(tmp_path, "judge", 0), url="http://node7:5000")
    assert restarted.generation == 2
    publish(tmp_path, restarted)
    assert bell.signature() != rung
    assert read_addresses(tmp_path, "judge")[0] == restarted
    publish(tmp_path, dataclasses.replace(restarted, state="stopped"))
    assert [a.serving for a in read_addresses(tmp_path, "judge")] == [False, True]
    assert address_journal(tmp_path, "judge", 0).path == tmp_path / "servers" / "judge" / "0"
    assert address_journal(tmp_path, "judge", 0).newest() == 3


def test_readers_skip_what_is_not_an_address(tmp_path: Path) -> None:
    publish(tmp_path, _address(0))
    folder = tmp_path / "servers" / "judge"
    (folder / "0" / f"{TMP_PREFIX}entry.host-1-abc").write_text("{")  # a writer's temporary file
    address_journal(tmp_path, "judge", 2).append(b'{"name": "judge", "engi')  # not JSON
    address_journal(tmp_path, "judge", 3).append(b'["not", "an", "address"]')
    (folder / "notes").mkdir()  # not an engine
    assert [a.engine for a in read_addresses(tmp_path, "judge")] == [0]
    assert read_address(tmp_path, "judge", 9) is None
    assert next_generation(tmp_path, "judge", 2) == 1
