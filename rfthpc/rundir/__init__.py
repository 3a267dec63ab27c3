"""The run directory, the only channel between roles: its names, and each record roles exchange.

Every role, and `rfthpc status`, imports these small modules rather than another role's internals;
each record has one writer; one another node waits on is a journal, each version a new file
(`rfthpc.sharedfs.journal`), the others are replaced whole (`rfthpc.sharedfs.fileops`).

| module          | what                                                                          | written by        |
| --------------- | ----------------------------------------------------------------------------- | ----------------- |
| `paths`         | `RunDir`: the name of everything in a run directory; safe names (`check_name`) | everyone          |
| `jobs`          | `jobs.jsonl`: one line per submission (role, explorer name, Slurm job id)      | submit            |
| `trainer_meta`  | `trainer_meta/`: the trainer's reports (step, stage, state), a journal       | trainer (rank 0)  |
| `explorer_meta` | `explorer_meta/<name>/<rank>.json`: each explorer process's progress          | each explorer     |
| `servers`       | `servers/<model>/<engine>/`: where a shared auxiliary model is served          | each server task  |
| `endpoints`     | `endpoints/`: where each explorer process serves its policy to agents         | each explorer     |
| `lost_groups`   | `experiences/_reader/losses.json`: groups the trainer lost, per claim set      | trainer's reader  |
| `metrics`       | `monitor/<role>.jsonl`: each role's metric records                             | each role         |

Creating a run (recording its config) is `rfthpc.launch.run_dir`'s; the experience store
(`rfthpc.store`) and the weight channel (`rfthpc.weights`) own what lies under `experiences/` and
`weights/`.
"""
