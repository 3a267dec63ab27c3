"""ROLL's RLVR data, rewards and validation as rfthpc tasksets, for `roll_import`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rfthpc.dialects.translation import ROLL_DEFAULT, Translation


def sampling(t: Translation, section: str, target: str, defaults: dict[str, Any]) -> None:
    """ROLL GeneratingArguments at `section` onto rfthpc sampling settings under `target` (model or a
    taskset's rollout_args); `defaults` are ROLL's for keys the section leaves out."""
    greedy = t.get(f"{section}.do_sample", True) is False
    for key, default in defaults.items():
        value = t.get(f"{section}.{key}", default)
        if key == "temperature" and greedy:
            t.set(f"{target}.temperature", 0.0, f"{section}.do_sample: false (greedy)")
            continue
        t.set(f"{target}.{key}", value, f"{section}.{key}" if t.has(f"{section}.{key}") else ROLL_DEFAULT)
    t.same_if(f"{section}.num_beams", 1, "rfthpc samples; it has no beam search")
    t.same_if(f"{section}.repetition_penalty", 1.0, "rfthpc's sampling has no repetition penalty")
    t.same_if(f"{section}.stop_strings", None, "rfthpc stops at the end-of-turn token only")
    t.note([f"{section}.length_penalty", f"{section}.max_length"],
           "no effect: it applies to beam search / without max_new_tokens only")
    t.note([f"{section}.logprobs", f"{section}.include_stop_str_in_output"],
           "rfthpc always records the sampled tokens' log-probabilities and returns the text it generated")


_MEDIA = ("image_max_pixels", "image_min_pixels", "video_max_pixels", "video_min_pixels", "video_total_pixels",
          "video_fps", "video_max_frames", "video_resize_chunk_frames", "image_folder", "video_folder", "audio_folder")
"""ROLL's DataArguments of images, video and audio: a multimodal config."""


def translate_data(t: Translation) -> None:
    """RLVR: the training data and rewards, and the validation set."""
    data = "actor_train.data_args"
    media = [f"{section}.{k}" for section in (data, "validation.data_args") for k in _MEDIA
             if t.has(f"{section}.{k}")]
    if media:
        # Its data, rewards and validation all serve the multimodal task: one refusal says it all.
        t.refuse(media[0], "multimodal training (images, video or audio in the prompts: "
                           f"{', '.join(dict.fromkeys(k.rsplit('.', 1)[-1] for k in media))}) is not in rfthpc, "
                           "whose policies read text only")
        for key in (data, "rewards", "validation", "eval_steps", "val_batch_size"):
            t.get(key)
        return
    files = t.get(f"{data}.file_name")
    files = [files] if isinstance(files, str) else files or []
    if len(files) != 1:
        t.refuse(f"{data}.file_name", f"{files!r}: rfthpc reads one file per taskset; concatenate them into one "
                                      "(ROLL mixes them into one dataset)" if files else "not set: name the data")
    else:
        ts = "buffer.explorer_input.tasksets[0]"
        t.set(f"{ts}.name", "train", "")
        t.set(f"{ts}.path", str(files[0]), f"{data}.file_name")
        _format(t, data, f"{ts}.format")
        t.set(f"{ts}.total_epochs", t.whole("max_steps", 500), "ROLL cycles through the data until max_steps")
        t.set(f"{ts}.task_selector.selector_type", "shuffle", "ROLL shuffles each pass (seed + pass)")
        t.set(f"{ts}.task_selector.seed", t.get("seed", 42), "seed" if t.has("seed") else ROLL_DEFAULT)
    domains = t.get(f"{data}.domain_interleave_probs") or {"math_rule": 1.0}
    if len(domains) > 1:
        t.refuse(f"{data}.domain_interleave_probs", "rfthpc scores a taskset with one reward function; import each "
                                                    "domain's data as its own run, or write a reward function that "
                                                    "dispatches on the row's tag")
    t.note([f"{data}.preprocessing_num_workers", f"{data}.tag", f"{data}.id"],
           "rfthpc reads the rows as they are (no tag routing with one reward domain)")
    t.set("buffer.explorer_input.default_workflow_type", "simple_workflow", "ROLL's RLVR: one turn, the prompt "
                                                                           "as given")
    rewards = t.keys("rewards")
    if not rewards:
        t.refuse("rewards", "not set: name the reward worker of the domain (e.g. math_rule)")
    for domain in rewards:
        _reward(t, domain)
    _validation(t)


def _format(t: Translation, data: str, target: str) -> None:
    messages, prompt = t.get(f"{data}.messages"), t.get(f"{data}.prompt")
    if messages or not prompt:
        t.set(f"{target}.prompt_type", "messages", f"{data}.messages" if messages else ROLL_DEFAULT)
        t.set(f"{target}.messages_key", messages or "messages", f"{data}.messages" if messages else ROLL_DEFAULT)
    else:
        t.set(f"{target}.prompt_key", prompt, f"{data}.prompt")
    t.set(f"{target}.response_key", "ground_truth", "ROLL's math reward reads the ground_truth column")
    t.note(f"{data}.response", "ROLL's math reward reads the ground_truth column, not this one")


def _reward(t: Translation, domain: str) -> None:
    key = f"rewards.{domain}"
    worker = str(t.get(f"{key}.worker_cls", ""))
    if worker.endswith("MathRuleRewardWorker"):
        t.set("buffer.explorer_input.default_reward_fn_type", "math_reward",
              f"{key}.worker_cls: MathRuleRewardWorker (1 if math-verify finds the answer equal, else 0)")
        t.notes.append(f"{key}.worker_cls: rfthpc's math_reward reads the answer after `####`, else the last "
                       "\\boxed{}, else the last number; ROLL's reads the last \\boxed{}, else what math-verify "
                       "parses in the whole response: the same on boxed answers")
    else:
        t.refuse(f"{key}.worker_cls", f"{worker!r}: the importer translates ROLL's MathRuleRewardWorker; name an "
                                      "rfthpc reward function (buffer.explorer_input.default_reward_fn_type, or "
                                      "module:function), or an LLM judge (rubric_judge_workflow)")
    t.note([f"{key}.model_args", f"{key}.data_args", f"{key}.world_size", f"{key}.infer_batch_size",
            f"{key}.tag_included"], "rfthpc scores responses in the explorer, one domain per taskset")
    t.note([f"{key}.format_pattern", f"{key}.reward_type", f"{key}.response_length_penalty_coef"],
           "not part of the reward ROLL's math worker trains on")
    for kind in ("query_filter_config", "response_filter_config"):
        t.same_if(f"{key}.{kind}.type", "no_filter", "use algorithm.filter_groups (groups without contrast are "
                                                     "replaced by fresh tasks)")
        t.note(f"{key}.{kind}.filter_args", "no effect without a filter")


def _validation(t: Translation) -> None:
    if not t.has("validation"):
        t.note(["eval_steps", "val_batch_size"], "no effect: the config has no validation data")
        return
    files = t.get("validation.data_args.file_name")
    files = [files] if isinstance(files, str) else files or []
    every = t.get("eval_steps", 10)
    t.set("explorer.eval_interval", every, "eval_steps" if t.has("eval_steps") else ROLL_DEFAULT)
    t.set("explorer.eval_on_startup", True, "ROLL evaluates at step 0")
    greedy = t.get("val_greedy", False)
    for i, path in enumerate(files):
        ts = f"buffer.explorer_input.eval_tasksets[{i}]"
        t.set(f"{ts}.name", Path(str(path)).stem, "")
        t.set(f"{ts}.path", str(path), "validation.data_args.file_name")
        _format(t, "actor_train.data_args", f"{ts}.format")
        sampling(t, "validation.generating_args", f"{ts}.rollout_args",
                 {"temperature": 0.95, "top_p": 0.7, "top_k": 50})
        if greedy:
            t.set(f"{ts}.rollout_args.temperature", 0.0, "val_greedy: true")
        repeat = t.get("validation.generating_args.num_return_sequences", t.get("val_n_sample", 1))
        t.set(f"{ts}.repeat_times", repeat, "validation.generating_args.num_return_sequences"
              if t.has("validation.generating_args.num_return_sequences") else "val_n_sample")
    if not files:
        t.refuse("validation.data_args.file_name", "not set: name the validation data, or remove validation")
    t.note("validation.generating_args.max_new_tokens", "ROLL replaces it by the training token limit")
    t.note(["validation.data_args.template", "val_batch_size"], "rfthpc evaluates every row of an eval taskset "
                                                                 "with the model's chat template")
    t.note("validation.data_args.preprocessing_num_workers", "rfthpc reads the rows as they are")
    t.note(["validation.data_args.messages", "validation.data_args.prompt"],
           "ROLL encodes the validation data with actor_train.data_args's columns; so does the import")
