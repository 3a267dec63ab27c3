"""rfthpc: asynchronous reinforcement fine-tuning of LLMs on Slurm, through a shared run directory.

Each package is one concept; each imports only the ones listed before it (no package imports in
a circle, tests/test_layout.py):

| package      | what                                                                                  |
| ------------ | ------------------------------------------------------------------------------------- |
| `compat`     | Trinity-RFT's workflow API as plugin workflows import it (`trinity`), for agent processes |
| `not_built`  | Trinity-RFT's names rfthpc lacks (not built yet, or outside it), and what comes closest |
| `errors`, `registry`, `signals` | user errors and config problems; functions by name; stop signals   |
| `sharedfs`   | files on a shared filesystem: atomic publish, locks, the one way to wait               |
| `algorithms` | RL algorithm pieces as pure functions, chosen by name; replay and reward shaping       |
| `dialects`   | Trinity-RFT's, veRL's and ROLL's configs as rfthpc reads them                          |
| `config`     | rfthpc's typed config: schema, load, derive, validate, each role's frozen settings     |
| `rundir`     | the run directory: its names and each record roles exchange                           |
| `weights`    | the weight channel, trainer to explorers: publish, delta chains, follow               |
| `engines`    | rollout engines (vLLM, transformers, a shared model's server)                         |
| `tasks`      | tasksets and task claims                                                              |
| `store`      | the experience store, explorers to trainer                                            |
| `rewards`, `envs`, `workflows` | reward functions, text environments, workflows                      |
| `launch`     | Slurm jobs (submitit) and local processes                                             |
| `observe`    | metrics, timeline, charts, status                                                     |
| `explorer`, `trainer` | the two roles                                                                |
| `convert`    | sharded checkpoints to Hugging Face models                                            |
| `demos`      | the CPU demos, tiny models, synthetic data                                            |
| `commands`, `cli` | the `rfthpc` command line                                                        |
"""
