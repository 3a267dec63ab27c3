"""The explorer role: tasks -> workflows on a rollout engine -> scored groups in the experience store.

| module       | does                                                                        |
| ------------ | --------------------------------------------------------------------------- |
| `setup`      | config -> engine settings, tasksets, prompt builder                         |
| `staleness`  | expected trainer step of a task, the oldest allowed policy version          |
| `sync`       | `WeightSync`: when new weights are taken (sync_style), waits for a version  |
| `rollout`    | run a batch of workflows concurrently, their generate calls batched         |
| `eval`       | `EvalSchedule`: when rank 0 evaluates; eval tasksets -> `eval/...` metrics  |
| `episodes`   | multi-turn episodes' metrics (success, turns)                               |
| `judged`     | judged responses' metrics                                                   |
| `heartbeat`  | a thread renewing the claims' and the weight reader's leases, and progress  |
| `stage_end`  | how exploring a stage, or a wait in it, ends                                |
| `loop`       | the explorer process tying it together                                      |

What it shares with other roles lies elsewhere: published weights and following them in
`rfthpc.weights`, task claims in `rfthpc.tasks`, its progress record in `rfthpc.rundir`, DAPO's
shaping of rewards in `rfthpc.algorithms.shaping`.
"""
