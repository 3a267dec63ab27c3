"""The weight channel: how the trainer hands policies to explorers through `weights/`, both ends.

| module              | does                                                                              |
| ------------------- | --------------------------------------------------------------------------------- |
| `published`         | the layout of `weights/`: full snapshots, `latest`, checksums, reader leases       |
| `delta`             | a version as the XOR of its bits with the previous version's, zstd-compressed      |
| `publisher`         | the trainer's end: a full snapshot every K versions, deltas in between             |
| `chain`             | how to rebuild any version from a snapshot and deltas; clean-up of what nobody needs |
| `follow`            | the explorer's end: prefetch the next version into node-local memory, load in place |
| `asking`            | explorers asking the trainer for weights (`sync_style: explorer_driven`)           |
| `safetensors_write` | tensors streamed into sharded safetensors files (also `rfthpc convert`'s writer)    |
| `safetensors_read`  | safetensors files mapped and read tensor by tensor (also the engines' loader)     |

The experience store (`rfthpc.store`) is the channel the other way.
"""
