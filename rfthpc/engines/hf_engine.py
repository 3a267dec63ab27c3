"""The transformers fallback engine (`engine_type: transformers`): `generate` with per-token logprobs.

For machines or models vLLM does not serve. Requests with equal sampling parameters are batched
into one left-padded `generate` call; a seeded request (`SamplingArgs.seed`) is generated alone,
from its own RNG stream, so its samples do not depend on what else is requested. Logprobs follow
the convention of `rfthpc.engines.base`: the log softmax of the processed scores (after
temperature, top-k, top-p), of the sampled token; top alternatives (`SamplingArgs.logprobs`) come
from the same distribution. New weights are copied into the live model from a step directory's
safetensors; a LoRA run's versions are adapters, which peft applies to the live model (wrapped once,
at the first adapter; each later one is copied into it).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rfthpc.engines.base import EngineSettings, GenerateRequest, check_prompt_fits, is_greedy
from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.errors import UserError
from rfthpc.weights import published
from rfthpc.weights.safetensors_read import iter_safetensors_dir


def _top(logprobs: Any, k: int) -> list[dict[int, float]]:
    """Per position (rows of `logprobs`, one per token), the `k` most likely tokens and their logprobs;
    tokens cut by top-k/top-p (logprob -inf) are left out."""
    values, ids = logprobs.topk(k, dim=-1)
    return [{t: v for t, v in zip(row_ids, row_values, strict=True) if math.isfinite(v)}
            for row_ids, row_values in zip(ids.tolist(), values.tolist(), strict=True)]


class TransformersEngine:
    """A `transformers` causal LM used as a rollout engine."""

    def __init__(self, settings: EngineSettings) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.settings = settings
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dtype = settings.dtype
        if dtype == "auto":
            dtype = "float32" if self.device.type == "cpu" else "bfloat16"
        path = str(Path(settings.model_path).expanduser())
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        torch.manual_seed(settings.seed)
        eos = self.model.generation_config.eos_token_id
        eos_ids = set([eos] if isinstance(eos, int) else (eos or []))
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]
        self.max_model_len = settings.max_model_len or int(self.model.config.max_position_embeddings)
        self.adapted = False
        """The model is a peft model: versions are adapters."""

    def _generation_config(self, n: int, params: SamplingArgs, max_new_tokens: int):
        from transformers import GenerationConfig

        sample = not is_greedy(params.temperature)
        sampling = {}
        if sample:
            sampling = {"temperature": params.temperature, "top_p": params.top_p, "top_k": max(params.top_k, 0)}
        # A complete config, so no sampling default of the model's generation_config.json leaks in.
        return GenerationConfig(
            do_sample=sample,
            **sampling,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min(self.settings.min_response_tokens, max_new_tokens),
            num_return_sequences=n,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            output_scores=True,
            return_dict_in_generate=True,
        )

    def _generate_same_params(
        self, prompts: list[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        import torch

        if params.seed is not None:
            # A private RNG stream, so seeding leaves the unseeded requests' sampling random.
            cuda = [torch.cuda.current_device()] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(params.seed)
                return self._generate_unseeded(prompts, n, params)
        return self._generate_unseeded(prompts, n, params)

    def _generate_unseeded(
        self, prompts: list[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        import torch

        if is_greedy(params.temperature) and n > 1:
            # transformers refuses several greedy sequences per prompt; greedy decoding repeats itself.
            return [[c for c in group for _ in range(n)] for group in self._generate_unseeded(prompts, 1, params)]

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
        max_new = min(params.max_tokens, self.max_model_len - width)
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                generation_config=self._generation_config(n, params, max_new),
            )
        generated = out.sequences[:, width:].cpu()
        # scores[t][row]: processed logits of step t; row = prompt index * n + sample index.
        logprobs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1).cpu()
        chosen = logprobs.gather(2, generated[:, :, None])[:, :, 0]
        eos = torch.tensor(self.eos_ids)
        results: list[list[Completion]] = []
        for i in range(len(prompts)):
            group = []
            for j in range(n):
                row = i * n + j
                tokens = generated[row].tolist()
                ends = torch.isin(generated[row], eos).nonzero()
                stop = int(ends[0]) + 1 if len(ends) else len(tokens)
                tokens = tokens[:stop]
                group.append(
                    Completion(
                        token_ids=tokens,
                        logprobs=chosen[row, :stop].tolist(),
                        text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                        finish_reason="stop" if len(ends) else "length",
                        top_logprobs=_top(logprobs[row, :stop], params.logprobs) if params.logprobs else None,
                    )
                )
            results.append(group)
        return results

    def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Completion]]:
        """Requests grouped by (n, sampling parameters), one `generate` call per group."""
        for r in requests:
            check_prompt_fits(r, self.max_model_len)
        by_params: dict[tuple[int, SamplingArgs], list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            by_params[(r.n, r.params)].append(i)
        results: list[list[Completion]] = [[] for _ in requests]
        for (n, params), indices in by_params.items():
            # Seeded requests go one by one: batch neighbours (and their padding) would change the samples.
            batches = [[i] for i in indices] if params.seed is not None else [indices]
            for batch in batches:
                out = self._generate_same_params([requests[i].prompt_token_ids for i in batch], n, params)
                for i, completions in zip(batch, out, strict=True):
                    results[i] = completions
        for i, r in enumerate(requests):
            if r.params.prompt_logprobs:
                scored = self._prompt_logprobs(r.prompt_token_ids)
                results[i] = [dataclasses.replace(c, prompt_logprobs=scored) for c in results[i]]
        return results

    def _prompt_logprobs(self, prompt: Sequence[int]) -> list[float]:
        """Log-probability of each prompt token after the first, by the plain logits (as vLLM's prompt logprobs)."""
        import torch

        ids = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        with torch.no_grad():
            logits = self.model(input_ids=ids).logits[0, :-1].float()
        return torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0].cpu().tolist()

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        """For each prompt, `n` samples."""
        return self.generate_batch([GenerateRequest(p, n, params) for p in prompts_token_ids])

    def load_weights(self, path: Path) -> None:
        """Copy the tensors of `path/*.safetensors` into the live model (tied output layer included), or
        of the adapter in PEFT directory `path` into the live model's adapter."""
        if published.is_adapter_dir(path):
            self._load_adapter(Path(path))
            return
        if self.adapted:
            raise UserError(f"{path} holds a whole model, but this engine applies LoRA adapters to its base model; "
                            "a LoRA run publishes adapters only")
        tensors = dict(iter_safetensors_dir(path))
        missing, unexpected = self.model.load_state_dict(tensors, strict=False)
        tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise UserError(
                f"weights in {path} do not fit the rollout model: missing {sorted(set(missing) - tied)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}; publish weights of the same architecture"
            )
        if tied:
            self.model.tie_weights()

    def _load_adapter(self, path: Path) -> None:
        """Apply the adapter in `path`: the first one wraps the live model in peft (no reload of the
        base), each one is then copied into it."""
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

        if not self.adapted:
            config = LoraConfig.from_pretrained(str(path))
            config.inference_mode = True
            self.model = get_peft_model(self.model, config).eval()
            self.adapted = True
        result = set_peft_model_state_dict(self.model, dict(iter_safetensors_dir(path)))
        missing = [k for k in result.missing_keys if ".lora_" in k]
        if missing or result.unexpected_keys:
            raise UserError(f"the adapter in {path} does not fit the rollout model's adapter: missing {missing[:3]}, "
                            f"unexpected {sorted(result.unexpected_keys)[:3]}; one run publishes one adapter shape")

    def sleep(self) -> None:
        """Free the GPU memory while a colocated trainer steps: the model to CPU memory (on a CPU, nothing)."""
        if self.settings.enable_sleep_mode and self.device.type == "cuda":
            import torch

            self.model.to("cpu")
            torch.cuda.empty_cache()

    def wake_up(self) -> None:
        """The model back on its GPU after `sleep`."""
        if self.settings.enable_sleep_mode and self.device.type == "cuda":
            self.model.to(self.device)

    def close(self, process_ending: bool = False) -> None:
        """Drop the model."""
        del self.model
