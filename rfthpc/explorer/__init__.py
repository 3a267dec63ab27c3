"""The explorer role: tasks -> workflows on a rollout engine -> scored groups in the experience store.

| module       | does                                                                        |
| ------------ | --------------------------------------------------------------------------- |
| `setup`      | config -> engine settings, tasksets, prompt builder                         |
| `follow`     | poll `weights/latest`, load complete step dirs in place, reader lease       |
| `staleness`  | expected trainer step of a task, the oldest allowed policy version          |
| `rollout`    | run a batch of workflows concurrently, their generate calls batched         |
| `eval`       | eval tasksets -> `eval/<taskset>/...` metrics                               |
| `shaping`    | DAPO's overlong penalty and dynamic sampling, applied before a commit        |
| `meta`       | `explorer_meta/<name>/<rank>.json` progress                                 |
| `loop`       | the explorer process tying it together                                      |
"""
