"""Offline checkpoint merging: sharded trainer checkpoints -> Hugging Face model directories.

`merge.convert_checkpoints` is the entry point; `formats` detects what a path holds,
`rfthpc_dcp` and `verl_fsdp` read the two shard formats tensor by tensor, `hfdir` gathers the
config and tokenizer, `lora` writes an adapter checkpoint as a PEFT adapter, and
`rfthpc.weights.safetensors_write` streams tensors into sharded safetensors files.
"""
