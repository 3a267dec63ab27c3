"""Other frameworks' configs as rfthpc reads them: Trinity-RFT, veRL and ROLL, and Hydra composition.

rfthpc's own config (`rfthpc.config`) knows only its keys; loading a config runs these passes over
the raw YAML first, and the importers translate a whole foreign config into an rfthpc one.

| module           | does                                                                                 |
| ---------------- | ------------------------------------------------------------------------------------ |
| `mapping`        | how a foreign key is answered (mapped, ignored with a note, refused), and mapped       |
| `trinity`        | Trinity-RFT: renamed keys and values, its settings kept elsewhere, keys refused        |
| `verl`           | veRL's settings (`trainer.trainer_config`, a run's overrides): mapped or answered     |
| `roll`           | ROLL's keys and role sections: mapped or answered                                    |
| `detect`         | which framework a config file is written for (what `load_config` imports first)      |
| `hydra`          | Hydra's `defaults:` composition and overrides, as veRL and ROLL use them              |
| `translation`    | what `rfthpc config import` builds: the translated config and each value's source     |
| `verl_import`    | `config import --from verl`: a veRL run (its Hydra config and launch script)          |
| `verl_script`    | a veRL launch script read: its command, overrides and variables                       |
| `verl_data`      | veRL's data, rollout and reward sections; its data sources' rewards                   |
| `roll_import`    | `config import --from roll`: a ROLL pipeline config (RLVR or agentic)                 |
| `roll_algorithm` | ROLL's algorithm and optimizer settings                                               |
| `roll_data`      | ROLL's data and sampling settings                                                      |
| `roll_envs`      | ROLL's agentic environments                                                            |

Nothing here imports `rfthpc.config`: the dialects sit below the schema they translate into.
"""
