"""Text generation behind one interface: HF `generate` (works everywhere) and vLLM (GPU, optional).

Both decode greedily and take prompts that are already rendered (chat template applied).
`token_probabilities` gives, for each prompt, the next-token probabilities of a few candidate
tokens (used for LANCER's expected rating). The HF backend reads them from the full softmax.
The vLLM backend asks for the top-20 log-probabilities of the first position (vLLM reports
them from the unrestricted distribution): a candidate outside the top 20 counts as 0.

Both backends see the same token ids: the rendered prompt already holds the chat template's
special tokens, so it is tokenised with ``add_special_tokens=False`` (HF) and sent to vLLM as
token ids (``{"prompt_token_ids": [...]}``) tokenised the same way; sending the text would let
vLLM tokenise with ``add_special_tokens=True`` and double the BOS of Llama-3-style tokenizers.
Both tokenise with `purecover.models.prompt_tokens.encode_prompt`: a prompt rendered by purecover (a
`PromptText`) keeps control-token strings inside its messages as plain text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from ..utils.progress import tqdm
from .generated import Generated, generate_detailed
from .prompt_tokens import encode_prompt

log = logging.getLogger(__name__)

__all__ = ["Generated", "GenerationBackend", "HFGenerator", "VLLMGenerator", "generate_detailed", "make_generator"]


def _stopping_criteria(tokenizer: Any, stop_when: Callable[[str], bool], start: int) -> Any:
    """A transformers stopping criterion that stops each row of a batch once `stop_when` holds for its continuation
    so far (the tokens from `start`, decoded); transformers is imported here, when it is used."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopWhen(StoppingCriteria):
        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
            texts = tokenizer.batch_decode(input_ids[:, start:], skip_special_tokens=True)
            return torch.tensor([stop_when(t) for t in texts], dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([StopWhen()])


class GenerationBackend(Protocol):
    """Greedy generation for rendered prompts."""

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """The continuation of each prompt (special tokens removed), in order."""
        ...

    def token_probabilities(self, prompts: Sequence[str], token_ids: Sequence[int]) -> list[list[float]]:
        """P(next token = t) for each t in `token_ids`, per prompt (under the full distribution)."""
        ...

    def close(self) -> None:
        """Free the backend's memory (GPU memory for vLLM)."""
        ...


class HFGenerator:
    """`model.generate` with greedy decoding, batched with left padding."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 4, show_progress: bool = False) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.show_progress = show_progress

    def _encode(self, prompts: Sequence[str]) -> dict[str, torch.Tensor]:
        side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "left"
        try:
            enc = self.tokenizer.pad({"input_ids": [encode_prompt(self.tokenizer, p)[0] for p in prompts]},
                                     return_tensors="pt", padding=True)
        finally:
            self.tokenizer.padding_side = side
        device = next(self.model.parameters()).device
        return {k: v.to(device) for k, v in enc.items()}

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        return [g.text for g in self.generate_detailed(prompts, max_new_tokens)]

    def _end_ids(self) -> set[int]:
        ids = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
        return {int(t) for t in [*ids, self.tokenizer.eos_token_id, self.tokenizer.pad_token_id] if t is not None}

    @torch.no_grad()
    def generate_detailed(self, prompts: Sequence[str], max_new_tokens: int,
                          stop_when: Callable[[str], bool] | None = None) -> list[Generated]:
        """Greedy continuations; a row ends at an end-of-sequence token, when `stop_when` holds for its text so far,
        or at `max_new_tokens` (``finished`` False)."""
        out: list[Generated] = []
        ends = self._end_ids()
        bar = tqdm(total=len(prompts), desc="generate", unit="prompt", disable=not self.show_progress)
        for i in range(0, len(prompts), self.batch_size):
            batch = prompts[i : i + self.batch_size]
            enc = self._encode(batch)
            start = enc["input_ids"].shape[1]
            extra = {} if stop_when is None else {
                "stopping_criteria": _stopping_criteria(self.tokenizer, stop_when, start)}
            ids = self.model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                pad_token_id=self.tokenizer.pad_token_id, temperature=None, top_p=None, top_k=None, **extra,
            )
            new = ids[:, start:]
            texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
            for row, text in zip(new.tolist(), texts):
                length = next((n for n, t in enumerate(row) if t in ends), len(row))
                finished = length < max_new_tokens or (stop_when is not None and stop_when(text))
                out.append(Generated(text, bool(finished)))
            bar.update(len(batch))
        bar.close()
        return out

    @torch.no_grad()
    def token_probabilities(self, prompts: Sequence[str], token_ids: Sequence[int]) -> list[list[float]]:
        out: list[list[float]] = []
        ids = torch.tensor(list(token_ids))
        for i in range(0, len(prompts), self.batch_size):
            enc = self._encode(prompts[i : i + self.batch_size])
            logits = self.model(**enc, use_cache=False).logits[:, -1, :].float()
            probs = torch.softmax(logits, dim=-1)[:, ids.to(logits.device)]
            out += probs.cpu().tolist()
        return out

    def close(self) -> None:
        """The HF model is shared with the capture pass; nothing to free here."""


class VLLMGenerator:
    """vLLM's offline `LLM.generate` at temperature 0 (``pip install -e '.[vllm]'``, GPU machines)."""

    def __init__(self, model: str, tensor_parallel_size: int = 1, dtype: str = "auto",
                 max_model_len: int | None = None, trust_remote_code: bool = False, seed: int = 0,
                 gpu_memory_utilization: float = 0.9, tokenizer: Any = None) -> None:
        """`tokenizer`: the HF tokenizer the prompts were rendered with (default: the engine's own)."""
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(
                "teacher.backend is 'vllm' but vLLM is not installed: pip install -e '.[vllm]' "
                "(needs a CUDA GPU), or set teacher.backend=hf"
            ) from exc
        self._vllm = vllm
        self.llm = vllm.LLM(model=model, tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                            trust_remote_code=trust_remote_code, seed=seed,
                            gpu_memory_utilization=gpu_memory_utilization,
                            **({"max_model_len": max_model_len} if max_model_len else {}))
        self.tokenizer = tokenizer if tokenizer is not None else self.llm.get_tokenizer()

    def token_prompts(self, prompts: Sequence[str]) -> list[dict[str, list[int]]]:
        """vLLM token prompts, tokenised like `HFGenerator` (``add_special_tokens=False``)."""
        if not prompts:
            return []
        return [{"prompt_token_ids": [int(t) for t in encode_prompt(self.tokenizer, p)[0]]} for p in prompts]

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        return [g.text for g in self.generate_detailed(prompts, max_new_tokens)]

    def generate_detailed(self, prompts: Sequence[str], max_new_tokens: int,
                          stop_when: Callable[[str], bool] | None = None) -> list[Generated]:
        """Continuations with vLLM's finish reason (``length``: not finished). `stop_when` is not applied during
        generation (vLLM takes stop strings, not predicates); a continuation for which it holds counts as finished."""
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
        outputs = self.llm.generate(self.token_prompts(prompts), params)
        out = []
        for o in outputs:
            text, reason = o.outputs[0].text, getattr(o.outputs[0], "finish_reason", None)
            finished = None if reason is None else reason != "length" or bool(stop_when and stop_when(text))
            out.append(Generated(text, finished))
        return out

    def token_probabilities(self, prompts: Sequence[str], token_ids: Sequence[int]) -> list[list[float]]:
        import math

        ids = list(token_ids)
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=1, logprobs=max(20, len(ids)),
                                           allowed_token_ids=ids)
        outputs = self.llm.generate(self.token_prompts(prompts), params)
        result = []
        for o in outputs:
            first = o.outputs[0].logprobs[0] if o.outputs[0].logprobs else {}
            row = []
            for t in ids:
                entry = first.get(t)
                lp = getattr(entry, "logprob", entry)
                row.append(math.exp(lp) if lp is not None else 0.0)
            result.append(row)
        return result

    def close(self) -> None:
        """Release the engine and its GPU memory before the HF capture model is loaded."""
        from .vllm_utils import release_vllm_memory

        del self.llm
        release_vllm_memory()


def make_generator(backend: str, *, model: Any = None, tokenizer: Any = None, model_name: str | None = None,
                   batch_size: int = 4, tensor_parallel_size: int = 1, dtype: str = "auto",
                   trust_remote_code: bool = False, seed: int = 0, show_progress: bool = False) -> GenerationBackend:
    """The backend named by ``teacher.backend`` (the vLLM import happens only here, only when chosen)."""
    if backend == "hf":
        if model is None or tokenizer is None:
            raise ValueError("the hf backend needs a loaded model and tokenizer")
        return HFGenerator(model, tokenizer, batch_size=batch_size, show_progress=show_progress)
    if backend == "vllm":
        if model_name is None:
            raise ValueError("the vllm backend needs a model name or directory")
        from .loading import resolve_gguf_model  # a catalogue name or .gguf file: its converted directory

        return VLLMGenerator(resolve_gguf_model(model_name), tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                             trust_remote_code=trust_remote_code, seed=seed, tokenizer=tokenizer)
    raise ValueError(f"unknown generation backend {backend!r}; expected hf or vllm")
