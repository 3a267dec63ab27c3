"""The tasks explorers work on: tasksets read from local datasets, and who explores which task.

| module     | does                                                                                 |
| ---------- | ------------------------------------------------------------------------------------ |
| `tasksets` | a taskset's rows (jsonl, json, parquet, Hugging Face datasets) as `Task`s, prompts     |
| `columns`  | which dataset columns a `format` names, and whether a dataset has them              |
| `claims`   | task claims (`ClaimSet`): explorers split a taskset, each task once per epoch, none lost |
"""
