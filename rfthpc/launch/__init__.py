"""Launching a run on Slurm: sbatch parameters, submitit jobs, heterogeneous jobs, status, cancel.

`rfthpc submit` creates the run directory and queues a trainer job and an explorer job array (or
one heterogeneous job holding both) through submitit; the jobs run `rfthpc train` and
`rfthpc explore` and requeue themselves when Slurm warns of preemption or the time limit
(docs/slurm.md).
"""
