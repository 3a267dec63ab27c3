"""Launching a run: on Slurm (sbatch parameters, submitit jobs, heterogeneous jobs, cancel), or as local processes.

`rfthpc submit` creates the run directory and queues a trainer job and an explorer job array (or
one heterogeneous job holding both) through submitit; the jobs run `rfthpc train` and
`rfthpc explore` and requeue themselves when Slurm warns of preemption or the time limit
(docs/slurm.md). `rfthpc run` starts the same commands as local processes.

| module            | does                                                                          |
| ----------------- | ----------------------------------------------------------------------------- |
| `run_dir`         | create (or reopen) a config's run directory, its config recorded              |
| `submit`          | `rfthpc submit` and `rfthpc add-explorers`: config -> queued jobs in jobs.jsonl |
| `explorer_config` | the config of an explorer array added to a running run                        |
| `submission`      | which jobs a run needs, their scripts, their submission                       |
| `resources`       | the config's `slurm` section as sbatch options                                |
| `executors`       | submitit's Slurm executor, scripts rendered without a cluster                 |
| `hetjob`          | the trainer and explorers in one heterogeneous allocation                     |
| `submitit_jobs`   | what each Slurm task runs: the role's command, requeued on a warning          |
| `torchrun`        | srun + torchrun: the trainer's ranks on 1..N nodes                            |
| `snapshot`        | the package copied at submit, so queued jobs run the code they were queued with |
| `slurmcli`        | bounded calls of Slurm's tools                                                |
| `job_states`      | the Slurm states of a run's jobs (sacct, squeue)                              |
| `cancel`          | `rfthpc cancel`: scancel the run's live jobs                                  |
| `local`           | `rfthpc run`: the roles as local processes                                    |
"""
