"""What a run is doing and did: metrics sinks, where each role's time goes, charts, status.

| module     | does                                                                                 |
| ---------- | ------------------------------------------------------------------------------------ |
| `monitor`  | one role's metrics to `monitor/<role>.jsonl`, the console, wandb and TensorBoard     |
| `timeline` | where each role's time went, from its metric records                                 |
| `plot`     | `rfthpc plot`: PNG charts of a run                                                   |
| `status`   | `rfthpc status`: jobs and their Slurm states, trainer, store, explorers, servers    |

Everything here reads the run directory (`rfthpc.rundir`, `rfthpc.store`) and changes nothing in it
but the monitor's own files.
"""
