"""veRL's data, rollout sampling, reward and validation as rfthpc's tasksets, `model` and
`explorer.rollout_model` settings, for `verl_import`.

veRL's rows (its `examples/data_preprocess/*.py`) hold the prompt as a chat in the `data.prompt_key`
column, the reference answer at `reward_model.ground_truth` and the data source, which picks veRL's
scorer, in the `data.reward_fn_key` column: a taskset of `prompt_type: messages` with
`response_key: reward_model.ground_truth`, scored by `verl_reward` (rfthpc.rewards.verl_reward).
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

from rfthpc.dialects.translation import Translation, scalar
from rfthpc.dialects.verl import REMOTE_CODE
from rfthpc.dialects.vllm_args import name_problem
from rfthpc.not_built import MULTIMODAL

_R = "actor_rollout_ref.rollout"
_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16", "float32": "float32", "fp32": "float32", "auto": "auto"}
_ENGINE_TUNING = ("cudagraph_capture_sizes", "max_num_batched_tokens", "max_num_seqs", "scheduling_policy",
                  "disable_log_stats", "mode", "layered_summon")
_HYBRID = ("free_cache_engine", "load_format", "multi_stage_wake_up", "skip_tokenizer_init")
_TRAINER_PASSES = ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu", "log_prob_use_dynamic_bsz",
                   "log_prob_max_token_len_per_gpu")
_DATA_LOADING = ("use_shm", "dataloader_num_workers", "filter_overlong_prompts_workers", "return_raw_input_ids",
                 "return_raw_chat", "return_full_prompt", "return_multi_modal_inputs", "image_patch_size")
_ANSWER = "reward_model.ground_truth"
_ENGINES = {"sglang": "SGLang", "trtllm": "TensorRT-LLM"}
_OTHER_ENGINE_TUNING = {
    "sglang": {
        "attention_backend": "its attention kernels (vLLM picks its own for the GPU; VLLM_ATTENTION_BACKEND forces one)",
        "chunked_prefill_size": "its prefill chunks (vLLM's are max_num_batched_tokens, left at its default)",
        "cuda_graph_max_bs": "its CUDA graph sizes (vLLM captures its own)",
        "disable_cuda_graph": "its CUDA graphs (explorer.rollout_model.enforce_eager turns vLLM's off)",
        "disable_radix_cache": "its prefix cache (explorer.rollout_model.enable_prefix_caching is vLLM's)",
        "enable_torch_compile": "its torch.compile (vLLM's compilation is its own)",
        "max_running_requests": "its batch size (vLLM's max_num_seqs, left at its default)",
        "schedule_policy": "the order it serves queued requests in",
    },
    "trtllm": {
        "batch_wait_timeout_iters": "how long its scheduler waits to fill a batch (vLLM batches continuously)",
        "batch_wait_max_tokens_ratio": "how full its scheduler waits for a batch to be (vLLM batches continuously)",
        "cuda_graph_config": "its CUDA graphs (vLLM captures its own)",
        "enable_chunked_prefill": "its prefill chunks (explorer.rollout_model.enable_chunked_prefill is vLLM's)",
        "max_num_tokens": "its tokens per batch (vLLM's max_num_batched_tokens, left at its default)",
    },
}
"""Arguments of the engines rfthpc does not run that only tune their speed: the same samples come from
vLLM without them, and what each tunes."""
_ROLLOUT_MODEL_FIELDS = ("gpu_memory_utilization", "enforce_eager", "enable_chunked_prefill", "enable_prefix_caching",
                         "max_model_len")
"""vLLM arguments that are settings of `explorer.rollout_model` of the same name."""


def translate_rollout(t: Translation, multimodal: bool = False) -> int:
    """`actor_rollout_ref.rollout`: engine, sampling, group size and token limits; its tensor parallel size.
    `multimodal`: the run is refused for its images, so the engine's image settings are not refused again."""
    name = t.get(f"{_R}.name", "vllm")
    t.set("explorer.rollout_model.engine_type", "vllm", f"{_R}.name: {name}" if name == "vllm" else "")
    if name != "vllm":
        t.notes.append(f"{_R}.name: {scalar(name)}: rfthpc's rollout engine is vLLM (the same sampling)")
    tp = t.whole(f"{_R}.tensor_model_parallel_size", 2)
    t.set("explorer.rollout_model.tensor_parallel_size", tp, f"{_R}.tensor_model_parallel_size")
    for key in ("data_parallel_size", "expert_parallel_size", "pipeline_model_parallel_size"):
        t.same_if(f"{_R}.{key}", 1, "rfthpc's engines split a model by tensor parallelism only: use "
                                    "tensor_model_parallel_size (more engines: explorer.rollout_model.engine_num)")
    greedy = t.get(f"{_R}.do_sample", True) is False
    for key, default in (("temperature", 1.0), ("top_p", 1.0), ("top_k", -1)):
        value = t.get(f"{_R}.{key}", default)
        if key == "temperature" and greedy:
            t.set("model.temperature", 0.0, f"{_R}.do_sample: false (greedy)")
        else:
            t.set(f"model.{key}", value, f"{_R}.{key}")
    t.set("algorithm.repeat_times", t.whole(f"{_R}.n", 1), f"{_R}.n")
    response = t.whole(f"{_R}.response_length", 512)
    t.set("model.max_response_tokens", response, f"{_R}.response_length")
    dtype = t.get(f"{_R}.dtype", "bfloat16")
    if dtype in _DTYPES:
        t.set("explorer.rollout_model.dtype", _DTYPES[dtype], f"{_R}.dtype")
    else:
        t.refuse(f"{_R}.dtype", f"{scalar(dtype)}: rfthpc's engines compute in bfloat16, float16 or float32")
    for key in _ROLLOUT_MODEL_FIELDS:
        if t.get(f"{_R}.{key}") is not None:
            t.set(f"explorer.rollout_model.{key}", t.get(f"{_R}.{key}"), f"{_R}.{key}")
    t.same_if(f"{_R}.ignore_eos", False, "generation past the end-of-sequence token is not available in rfthpc")
    t.same_if(f"{_R}.over_sample_rate", 0, "rfthpc's explorers generate each task's whole group")
    t.same_if(f"{_R}.skip_rollout", False, "rfthpc always generates its rollouts")
    t.same_if(f"{_R}.enable_rollout_routing_replay", False, "MoE router replay is not in rfthpc")
    t.same_if(f"{_R}.quantization", None, "rfthpc's engines run the policy unquantized (the weights it trains)")
    t.same_if(f"{_R}.quantization_config_file", None, "rfthpc's engines run the policy unquantized")
    _engine_kwargs(t, str(name), multimodal)
    t.same_if(f"{_R}.multi_turn.enable", False, "veRL's multi-turn tool calling: rfthpc's multi-turn rollouts are "
                                                "workflows (toolcall_workflow, env_workflow); set "
                                                "buffer.explorer_input.default_workflow_type by hand")
    t.note(f"{_R}.multi_turn", "read only with multi_turn.enable")
    t.same_if(f"{_R}.agent.default_agent_loop", "single_turn_agent", "veRL's agent loops: rfthpc's multi-turn "
                                                                     "rollouts are workflows (env_workflow)")
    t.same_if(f"{_R}.agent.agent_loop_config_path", None, "veRL's agent loops: rfthpc's are workflows")
    t.same_if(f"{_R}.agent.custom_async_server.path", None, "rfthpc starts its own engines")
    t.note(f"{_R}.agent", "veRL's agent-loop workers; rfthpc's explorers run explorer.runner_per_model tasks per "
                          "engine at once")
    t.note([f"{_R}.{k}" for k in _ENGINE_TUNING], "engine tuning rfthpc leaves at vLLM's defaults")
    t.note([f"{_R}.{k}" for k in _HYBRID], "how veRL's hybrid engine hands the GPUs between rollouts and training; "
                                           "rfthpc's explorers keep theirs")
    t.note([f"{_R}.{k}" for k in _TRAINER_PASSES], "batching of the trainer's log-probability passes; rfthpc packs "
                                                   "them like its training micro-batches (trainer.*)")
    t.note([f"{_R}.calculate_log_probs", f"{_R}.logprobs_mode"], "rfthpc always records each sampled token's "
                                                                 "log-probability as the engine computes it")
    t.note([f"{_R}.checkpoint_engine", f"{_R}.update_weights_bucket_megabytes", f"{_R}.layer_name_map"],
           "how veRL moves weights into the engine; rfthpc's explorers load each published policy from "
           "<run dir>/weights/")
    t.note([f"{_R}.profiler", f"{_R}.prometheus", f"{_R}.trace", f"{_R}.skip_dump_dir"],
           "profiling, metrics and tracing of veRL's rollout workers")
    t.note(f"{_R}.mtp", "the model's multi-token prediction settings (actor_rollout_ref.model.mtp), read there")
    return tp


def _engine_kwargs(t: Translation, name: str, multimodal: bool) -> None:
    """`rollout.engine_kwargs.<engine>`: veRL passes those of the engine it runs (`rollout.name`) to it
    as given; vLLM's become `explorer.rollout_model`'s settings or its `engine_kwargs`, checked by name
    against the installed vLLM; another engine's cannot be passed to vLLM."""
    key = f"{_R}.engine_kwargs"
    for engine in t.keys(key):
        given = t.get(f"{key}.{engine}") or {}
        if not given:
            t.same.append(f"{key}.{engine}: {{}}")
        elif engine != name:
            t.notes.append(f"{key}.{engine}: no effect: veRL passes only the arguments of the engine it runs "
                           f"({_R}.name: {name})")
        elif engine != "vllm":
            _other_engine_kwargs(t, engine, given)
        else:
            for arg, value in given.items():
                source = f"{key}.vllm.{arg}"
                if multimodal and "mm_" in arg:  # vLLM's multimodal arguments
                    t.notes.append(f"{source}: {scalar(value)}: vLLM's handling of images, which rfthpc does not have "
                                   "(see data.image_key)")
                elif arg in _ROLLOUT_MODEL_FIELDS:
                    t.set(f"explorer.rollout_model.{arg}", value, source)
                elif (why := name_problem(arg, "explorer.rollout_model")) is not None:
                    t.refuse(source, f"{scalar(value)}: {why}")
                else:
                    t.set(f"explorer.rollout_model.engine_kwargs.{arg}", value, source)


def _other_engine_kwargs(t: Translation, engine: str, given: dict[str, Any]) -> None:
    """The arguments of the SGLang or TensorRT-LLM engine veRL would run: those that only tune its speed
    are noted (vLLM samples the same without them); any other is refused, since it may change the samples."""
    key = f"{_R}.engine_kwargs.{engine}"
    tuning = _OTHER_ENGINE_TUNING.get(engine, {})
    label = _ENGINES.get(engine, engine)
    for arg, value in given.items():
        t.get(f"{key}.{arg}")
        if arg in tuning:
            t.notes.append(f"{key}.{arg}: {scalar(value)}: tunes {label}'s speed only, {tuning[arg]}; rfthpc's "
                           "rollouts run on vLLM")
        else:
            t.refuse(f"{key}.{arg}", f"{scalar(value)}: an argument of {label}, which rfthpc does not have (its "
                                     f"rollouts run on vLLM) and the import cannot tell to change only speed; "
                                     f"remove it, and give vLLM's own as {_R}.engine_kwargs.vllm if you need any")


_VISION_MODEL = re.compile(r"(?i)([-_.]vl([-_.]|$)|\d[v]([-_.]|$)|minicpm-[ov]|llava|vision|omni)")
"""Names of vision-language models (Qwen2.5-VL-7B, GLM-4.1V-9B, MiniCPM-o-2_6, LLaVA, Qwen2.5-Omni)."""


def multimodal_evidence(t: Translation) -> list[str]:
    """What shows that the run trains a vision-language model on images (empty: nothing does): the
    model's config.json (where it can be read here) or name, the data, veRL's image settings."""
    found = []
    model = str(t.leaves.get("actor_rollout_ref.model.path") or "")
    config = Path(os.path.expanduser(model)) / "config.json"
    try:
        vision = "vision_config" in json.loads(config.read_text(encoding="utf-8"))
        if vision:
            found.append(f"the model's config.json has a vision_config ({config})")
    except (OSError, ValueError):
        if _VISION_MODEL.search(Path(model).name):
            found.append(f"the model {model} is a vision-language model")
    files = [*_files(t, "data.train_files"), *_files(t, "data.val_files")]
    images = [f for f in files if "geo3k" in f or "geometry3k" in f]
    if images:
        found.append(f"the data ({', '.join(images)}) is geometry3k, whose rows hold images")
    if t.leaves.get("actor_rollout_ref.actor.freeze_vision_tower"):
        found.append("actor_rollout_ref.actor.freeze_vision_tower is set")
    image_args = [k for k in t.leaves if k.startswith(f"{_R}.engine_kwargs.") and "mm_" in k]
    if image_args:
        found.append(f"{', '.join(image_args)} set")
    return found


def refuse_multimodal(t: Translation, evidence: list[str]) -> None:
    """Refuse a vision-language run once, first, for its images: its other image settings are noted."""
    t.refuse("data.image_key", f"multimodal inputs (images, videos) are not in rfthpc, which trains text-only "
                               f"models on text prompts; this is a vision-language run ({'; '.join(evidence)}). "
                               "Train a text-only model on text data instead")
    t.leading = "data.image_key"
    for key in [k for k, why in t.problems.items() if k != "data.image_key" and MULTIMODAL in why]:
        t.notes.append(f"{key}: {t.problems.pop(key)} (see data.image_key)")


def translate_data(t: Translation) -> None:
    """`data` and the reward: the training and eval tasksets, prompt limits, batch size, order."""
    t.set("buffer.batch_size", t.whole("data.train_batch_size", 1024), "data.train_batch_size")
    _prompts(t)
    t.set("buffer.explorer_input.default_workflow_type", "simple_workflow", "veRL's single-turn rollout: the "
                                                                           "prompt's chat as given")
    reward_args = _reward(t)
    files = _files(t, "data.train_files")
    if not files:
        t.refuse("data.train_files", "not set: name the training data (veRL's parquet files)")
    shuffle = t.get("data.shuffle", True)
    seed = t.get("data.seed")
    if files:
        ts = "buffer.explorer_input.tasksets[0]"
        # veRL concatenates the files into one dataset, so every row weighs the same: one taskset of
        # all their rows (each file's share of a batch is its share of the rows), not a taskset per file.
        _taskset(t, ts, "train", files[0] if len(files) == 1 else files, "data.train_files" if len(files) == 1 else
                 f"data.train_files ({len(files)} files, concatenated as veRL does)", reward_args)
        if shuffle:
            t.set(f"{ts}.task_selector.selector_type", "shuffle", "data.shuffle: true (a new order each epoch)")
            if seed is not None:
                t.set(f"{ts}.task_selector.seed", seed, "data.seed")
    if shuffle and seed is None:
        t.notes.append("data.seed: null: rfthpc shuffles with its own seed (task_selector.seed, 42), so the order "
                       "of tasks differs from veRL's")
    _validation(t, reward_args)
    t.same_if("data.train_max_samples", -1, "rfthpc reads every row: cut the dataset beforehand")
    t.same_if("data.val_max_samples", -1, "rfthpc evaluates every row: cut the dataset beforehand")
    t.same_if("data.tokenizer", None, "rfthpc reads the tokenizer from model.model_path")
    if t.get("data.trust_remote_code"):
        t.notes.append(f"data.trust_remote_code: {REMOTE_CODE}")
    t.same_if("data.tool_config_path", None, "veRL's tools for multi-turn rollouts: rfthpc's are workflows "
                                             "(toolcall_workflow)")
    for section, what in (("custom_cls", "a dataset class of your own"),
                          ("sampler", "a sampler of your own (curriculum)"),
                          ("datagen", "a data generator of your own")):
        key = "class_path" if section == "sampler" else "path"
        t.same_if(f"data.{section}.{key}", None, f"{what} is not in rfthpc: prepare the dataset beforehand")
        t.note(f"data.{section}", f"read only with data.{section}.{key}")
    t.note([f"data.{k}" for k in _DATA_LOADING], "how veRL's data loader hands rows to its workers; rfthpc's "
                                                 "explorers read the tasksets themselves")
    for key, value in (t.get("data.apply_chat_template_kwargs") or {}).items():
        if key == "enable_thinking":
            t.set("model.enable_thinking", bool(value), "data.apply_chat_template_kwargs.enable_thinking")
        else:
            t.refuse(f"data.apply_chat_template_kwargs.{key}", f"{scalar(value)}: rfthpc passes only enable_thinking "
                                                               "to the chat template (model.enable_thinking)")
    t.note(["data.image_key", "data.video_key"], "columns of images and videos: rfthpc trains text-only models, "
                                                 "so rows must hold text")
    t.note(["data.val_batch_size", "data.validation_shuffle"], "rfthpc evaluates every row of an eval taskset")


def _files(t: Translation, key: str) -> list[str]:
    value = t.get(key)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _taskset(t: Translation, target: str, name: str, path: str | list[str], source: str,
             reward_args: dict[str, Any]) -> None:
    t.set(f"{target}.name", name, "")
    t.set(f"{target}.path", path, source)
    t.set(f"{target}.format.prompt_type", "messages", "veRL's rows hold the prompt as a chat")
    t.set(f"{target}.format.messages_key", t.get("data.prompt_key", "prompt"), "data.prompt_key")
    t.set(f"{target}.format.response_key", _ANSWER, "veRL's reward reads reward_model.ground_truth")
    if reward_args:
        t.set(f"{target}.reward_fn_args", reward_args, "custom_reward_function, data.reward_fn_key")


def _prompts(t: Translation) -> None:
    """Prompt limit and what happens to a longer prompt; the response limit veRL's rollout reads."""
    t.set("model.max_prompt_tokens", t.whole("data.max_prompt_length", 512), "data.max_prompt_length")
    if t.get(f"{_R}.prompt_length") != t.get("data.max_prompt_length", 512):
        t.notes.append(f"{_R}.prompt_length: {t.get(f'{_R}.prompt_length')}: rfthpc's prompts are limited by "
                       "data.max_prompt_length (model.max_prompt_tokens)")
    response = t.get("data.max_response_length", 512)
    if response != t.get(f"{_R}.response_length", response):
        t.notes.append(f"data.max_response_length: {response}: veRL generates {_R}.response_length tokens, as "
                       "rfthpc does (model.max_response_tokens)")
    filtered = t.get("data.filter_overlong_prompts", False)
    truncation = t.get("data.truncation", "error")
    if filtered:
        t.set("model.enable_prompt_truncation", False, "data.filter_overlong_prompts: true (veRL drops them when it "
                                                       "loads the data, rfthpc when it meets them; counted)")
        if truncation != "error":
            t.notes.append(f"data.truncation: {truncation}: no effect, longer prompts are dropped")
    elif truncation == "error":
        t.set("model.enable_prompt_truncation", False, "data.truncation: error")
        t.notes.append("data.truncation: error: veRL stops at a prompt longer than data.max_prompt_length; rfthpc "
                       "skips it and counts it")
    elif truncation == "left":
        t.set("model.enable_prompt_truncation", True, "data.truncation: left")
        t.notes.append("data.truncation: left: rfthpc cuts the start of the prompt's last message, keeping the chat "
                       "template's framing, where veRL cuts the first tokens of the whole prompt")
    else:
        t.refuse("data.truncation", f"{scalar(truncation)}: rfthpc cuts the start of an over-long prompt (left) or "
                                    "skips it (filter_overlong_prompts: true); use one of those")


def _reward(t: Translation) -> dict[str, Any]:
    """veRL's reward as `verl_reward`: by each row's data source, or the user's veRL function; the
    reward function's arguments, the same for every taskset."""
    args: dict[str, Any] = {}
    column = t.get("data.reward_fn_key", "data_source")
    if column != "data_source":
        args["data_source_key"] = column
    path = t.get("custom_reward_function.path")
    t.set("buffer.explorer_input.default_reward_fn_type", "verl_reward",
          "custom_reward_function: veRL's reward, as rfthpc.rewards.verl_reward computes it" if path else
          "custom_reward_function.path: null: veRL's default reward, each row scored as its data source asks "
          "(rfthpc.rewards.verl_reward)")
    name = t.get("custom_reward_function.name", "compute_score") or "compute_score"
    kwargs = t.get("custom_reward_function.reward_kwargs") or {}
    if path:
        file = Path(os.path.expanduser(str(path)))
        if not file.is_absolute():
            file = Path.cwd() / file
            t.notes.append(f"custom_reward_function.path: {path} is read from {file} (veRL reads it from the "
                           "directory it runs in)")
        problem = _function_problem(file, str(name))
        if problem:
            t.refuse("custom_reward_function.path", problem)
        args["compute_score"] = f"{file}:{name}"
        if kwargs:
            args["reward_kwargs"] = dict(kwargs)
        return args
    if name != "compute_score" or kwargs:
        t.note(["custom_reward_function.name", "custom_reward_function.reward_kwargs"],
               "read only with custom_reward_function.path")
    unscored, unread = _data_sources(t, column)
    if unscored:
        listed = "; ".join(f"{source!r}: {why}" for source, why in sorted(unscored.items()))
        t.refuse("custom_reward_function.path", f"null: veRL's default reward scores each row by its data source "
                                                f"({column}), and rfthpc has no scorer for some of this data's: "
                                                f"{listed}. Give your own veRL function "
                                                "(custom_reward_function.path, name)")
    if unread:
        t.notes.append(f"{', '.join(unread)}: not readable here, so the data sources of its rows are not checked; a "
                       f"row whose source rfthpc has no scorer for ({', '.join(DATA_SOURCES)} have one) scores 0 "
                       "and its group is marked")
    return args


def _function_problem(file: Path, name: str) -> str | None:
    """Why the veRL reward function `name` cannot be read from `file`; None if it can (read, not run)."""
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError) as e:
        return f"{file}: cannot be read as Python ({e}); give a file that every node can read"
    if not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body):
        return f"{file} defines no function {name!r} (custom_reward_function.name)"
    return None


def _data_sources(t: Translation, column: str) -> tuple[dict[str, str], list[str]]:
    """The data sources of the tasksets' rows that rfthpc cannot score (source -> why), and the files
    that could not be read here."""
    found: dict[str, str] = {}
    unread: list[str] = []
    for path in [*_files(t, "data.train_files"), *_files(t, "data.val_files")]:
        sources = _column_values(Path(os.path.expanduser(path)), column)
        if sources is None:
            unread.append(path)
            continue
        for source in sources:
            why = unscored(str(source))
            if why:
                found[str(source)] = why
    return found, unread


def _column_values(path: Path, column: str) -> list[Any] | None:
    """The distinct values of a parquet file's column; None if it cannot be read here."""
    if path.suffix != ".parquet" or not path.is_file():
        return None
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, columns=[column]).column(column).unique().to_pylist()
    except Exception:  # noqa: BLE001 — a file that cannot be read here is read, and reported, by the explorer
        return None


def _validation(t: Translation, reward_args: dict[str, Any]) -> None:
    """`data.val_files` as eval tasksets, sampled as `rollout.val_kwargs` says, on veRL's cadence."""
    files = _files(t, "data.val_files")
    if not files:
        t.note(["trainer.test_freq", "trainer.val_before_train", f"{_R}.val_kwargs"],
               "no effect: the run has no validation data (data.val_files)")
        return
    names = [Path(p).stem for p in files]
    kwargs = f"{_R}.val_kwargs"
    greedy = t.get(f"{kwargs}.do_sample", False) is False
    for i, path in enumerate(files):
        ts = f"buffer.explorer_input.eval_tasksets[{i}]"
        name = names[i] if names.count(names[i]) == 1 else f"{names[i]}_{i}"
        _taskset(t, ts, name, path, "data.val_files", reward_args)
        if greedy:
            t.get(f"{kwargs}.temperature")  # not read by veRL's greedy decoding either
            t.set(f"{ts}.rollout_args.temperature", 0.0, f"{kwargs}.do_sample: false (greedy)")
        else:
            t.set(f"{ts}.rollout_args.temperature", t.get(f"{kwargs}.temperature", 0), f"{kwargs}.temperature")
        for key, default in (("top_p", 1.0), ("top_k", -1)):
            t.set(f"{ts}.rollout_args.{key}", t.get(f"{kwargs}.{key}", default), f"{kwargs}.{key}")
        t.set(f"{ts}.repeat_times", t.whole(f"{kwargs}.n", 1), f"{kwargs}.n")
    every = t.get("trainer.test_freq", -1)
    t.set("explorer.eval_interval", every if isinstance(every, int) and every > 0 else 0, "trainer.test_freq")
    t.set("explorer.eval_on_startup", bool(t.get("trainer.val_before_train", True)), "trainer.val_before_train")
    if not isinstance(every, int) or every <= 0:
        t.notes.append(f"trainer.test_freq: {every}: rfthpc still evaluates the final policy (veRL does only with "
                       "test_freq > 0)")


_MATH = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")


DATA_SOURCES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai/gsm8k": ("math_reward", {"strict": True}),
    **{source: ("math_boxed_reward", {}) for source in _MATH},
}
"""veRL data source -> the rfthpc reward function (and its arguments) that reads answers as veRL's
scorer of that source does: GSM8K's `#### 42` only (veRL's strict extraction), MATH's last
`\\boxed{}`; both score 1 or 0. rfthpc compares the answers symbolically (math-verify: `42.0` equals
`42`, `\\frac{1}{2}` equals `0.5`), where veRL compares normalised strings."""


_UNSCORED = (
    (lambda s: s in ("math_dapo", "math", "math_dapo_reasoning") or s.startswith("aime"),
     ("veRL's math_dapo scorer reads the last `Answer:` line (Minerva's normalisation) and scores 1 or -1; "
      "rfthpc's math_dapo_reward reads the last \\boxed{}")),
    (lambda s: s.startswith("numina_"),
     "veRL's prime_math scorer (PRIME's answer grading) has no rfthpc counterpart"),
    (lambda s: s in ("codecontests", "apps", "codeforces", "taco"),
     "veRL runs the code against test cases (prime_code or a sandbox); rfthpc has no code-execution reward"),
    (lambda s: s == "hiyouga/geometry3k",
     "a multimodal data set (images); rfthpc trains text-only models"),
    (lambda s: s.startswith("searchR1_"),
     "veRL's exact-match scorer of a search agent's answer has no rfthpc counterpart"),
)


def unscored(source: str) -> str | None:
    """Why rows of veRL data source `source` cannot be scored by `verl_reward` without a `compute_score`
    of the user's; None if they can."""
    if source in DATA_SOURCES:
        return None
    for matches, why in _UNSCORED:
        if matches(source):
            return why
    return "veRL's default reward does not know this data source either"
