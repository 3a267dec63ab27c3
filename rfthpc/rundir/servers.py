"""Where a shared auxiliary model is served: `servers/<name>/<engine>/`, one journal per engine.

An auxiliary model with `placement: shared` is served by a job array of its own (one task per
engine, `rfthpc.engines.server`); explorers reach it over HTTP (`rfthpc.engines.remote`). The run
directory is still the only channel: each engine publishes its address here, and the client reads
it. Each journal (`rfthpc.sharedfs.journal`) has one writer for its whole life, the engine's task
(requeued or not), which appends the address when it starts serving (with the next `generation`)
and when it stops (state `stopped`), each a new entry that clients on other nodes see at once;
after each it rings the model's doorbell (`servers/<name>/doorbell/`), so a client that waits for a
server to come back notices at once. An engine killed outright leaves its
`serving` address behind: clients find nothing answering there and keep retrying until the
requeued task publishes the next generation.

The address carries an API key the engine's server requires (drawn at each start): the run
directory's permissions are the server's access control, as they are the run's.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rfthpc.rundir.paths import RunDir
from rfthpc.sharedfs.handoff import Doorbell
from rfthpc.sharedfs.journal import Journal, journal_at

ServerState = Literal["starting", "serving", "stopped"]
DOORBELL_FILE = "doorbell"
ADDRESSES_KEPT = 8


@dataclass(frozen=True)
class ServerAddress:
    """How to reach one engine of a shared auxiliary model, as its server task published it."""

    name: str
    """The auxiliary model's name."""
    engine: int
    """Its engine index (the task of the server's job array)."""
    url: str
    """Base URL of the OpenAI-compatible API, e.g. http://node12:41237 (requests go to `<url>/v1/...`)."""
    api_key: str
    """Bearer token the server requires."""
    served_model: str
    """The `model` field of requests."""
    generation: int
    """Starts of this engine so far (1 for the first): a new one means a new process, a new address."""
    state: ServerState = "serving"
    max_model_len: int | None = None
    """The served model's context length (prompt + response tokens)."""
    host: str = ""
    pid: int = 0
    job_id: str = ""
    """Slurm job (array task) serving it, empty outside Slurm."""
    published: float = 0.0
    """Unix time of the publication."""

    @property
    def serving(self) -> bool:
        """True if the engine said it serves (it may since have died without saying so)."""
        return self.state == "serving"

    @classmethod
    def from_dict(cls, data: Any) -> ServerAddress | None:
        """The address in `data` (unknown keys ignored); None if it is not one."""
        if not isinstance(data, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError:
            return None


def servers_dir(run_dir: Path, name: str) -> Path:
    """The folder of auxiliary model `name`'s addresses."""
    return RunDir(run_dir).servers / name


def address_journal(run_dir: Path, name: str, engine: int) -> Journal:
    """Where engine `engine` of auxiliary model `name` publishes its addresses, the newest current."""
    return journal_at(servers_dir(run_dir, name) / str(engine), keep=ADDRESSES_KEPT)


def doorbell(run_dir: Path, name: str) -> Doorbell:
    """Rung after every publication of an address of auxiliary model `name`."""
    return Doorbell(servers_dir(run_dir, name) / DOORBELL_FILE)


def read_address(run_dir: Path, name: str, engine: int) -> ServerAddress | None:
    """The newest address of engine `engine` of auxiliary model `name`; None if it published none."""
    _, data = address_journal(run_dir, name, engine).latest()
    try:
        return None if data is None else ServerAddress.from_dict(json.loads(data))
    except ValueError:
        return None


def read_addresses(run_dir: Path, name: str) -> list[ServerAddress]:
    """Every engine's newest address of auxiliary model `name`, by engine."""
    try:
        engines = sorted(int(p.name) for p in servers_dir(run_dir, name).iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []
    found = [read_address(run_dir, name, engine) for engine in engines]
    return [a for a in found if a is not None]


def next_generation(run_dir: Path, name: str, engine: int) -> int:
    """The generation the next start of engine `engine` publishes: one more than the last."""
    previous = read_address(run_dir, name, engine)
    return 1 if previous is None else previous.generation + 1


def publish(run_dir: Path, address: ServerAddress) -> None:
    """Append the engine's address to its journal, then ring the model's doorbell."""
    address_journal(run_dir, address.name, address.engine).append(json.dumps(dataclasses.asdict(address)).encode())
    doorbell(run_dir, address.name).ring()
