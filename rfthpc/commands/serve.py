"""`rfthpc serve --run-dir R --model NAME [--engine K] [--explorer N]`: one engine of a shared auxiliary model.

A task of the model's server job array (`rfthpc submit` queues it beside the explorers) or a local
process of `rfthpc run`. It reads the config explorer array N reads (`R/explorers/<N>/config.yaml`
if that exists, else `R/config.yaml`), starts vLLM's OpenAI-compatible server for auxiliary model
NAME and publishes its address in `R/servers/NAME/K.json` (`rfthpc.engines.server`). `--engine`
defaults to `$SLURM_ARRAY_TASK_ID`, else 0. Exit codes: 0 the run needs it no more, 124 stopped by
SIGTERM/SIGUSR2 (requeue), 1 the server kept failing, 2 a user error.
"""

from __future__ import annotations

import argparse
import logging

from rfthpc.commands.explore import default_rank
from rfthpc.errors import UserError
from rfthpc.rundir.paths import RunDir


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    from rfthpc.config import load_resolved
    from rfthpc.config.schema import trains
    from rfthpc.config.settings import explorer_settings
    from rfthpc.engines.server import ModelServer, shared_model

    run = RunDir(args.run_dir)
    path = run.role_config(args.explorer)
    if not path.is_file():
        raise UserError(f"{path} does not exist; pass the run directory `rfthpc submit` or `rfthpc run` created")
    loaded = load_resolved(path)
    settings = explorer_settings(loaded.stages)
    model = shared_model(settings.auxiliary_models, args.model, path)
    engine = default_rank() if args.engine is None else args.engine
    if not 0 <= engine < model.engine_num:
        raise UserError(f"--engine {engine}: auxiliary model {model.name!r} has engines 0 to {model.engine_num - 1} "
                        "(engine_num)")
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format=f"%(asctime)s %(levelname)s [server {model.name}/{engine}] %(name)s: %(message)s",
    )
    has_trainer = any(trains(s.config.mode) for s in loaded.stages)
    return ModelServer(run.root, model, engine, has_trainer).run_forever()


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `serve` command."""
    p = sub.add_parser("serve", help="serve one engine of a shared auxiliary model (an LLM judge) to the explorers")
    p.add_argument("--run-dir", required=True, help="the run directory (holds config.yaml)")
    p.add_argument("--model", required=True, help="the auxiliary model's name (explorer.auxiliary_models[i].name)")
    p.add_argument("--engine", type=int, default=None,
                   help="engine index (default: $SLURM_ARRAY_TASK_ID or 0)")
    p.add_argument("--explorer", default=None,
                   help="explorer array whose config names the model (default: the run's config)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging level")
    p.set_defaults(handler=_run)
