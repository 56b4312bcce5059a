"""The status quo beside ours: the same weights through transformers' `generate`.

The HF model is built from our `LMConfig` and shares our tensors (no copy), so a ladder run
compares code paths, not checkpoints. Per-step times come from a stopping criterion, which
`generate` calls once after every new token.
"""

from __future__ import annotations

import torch

from lab.engine.generate import GenerationResult, StepClock
from lab.engine.llm import LM, LMConfig
from lab.engine.weights import lm_to_hf


def hf_config(cfg: LMConfig, dtype: torch.dtype):
    """A transformers LlamaConfig (or Qwen2Config when q/k/v carry biases) for `cfg`."""
    from transformers import LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.dim,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        rms_norm_eps=cfg.norm_eps,
        max_position_embeddings=max(cfg.max_seq_len, _original_context(cfg)),
        tie_word_embeddings=cfg.tie_embeddings,
        rope_theta=cfg.rope_base,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
        dtype=dtype,
    )
    if cfg.qkv_bias:
        return Qwen2Config(**common)
    s = cfg.rope_scaling
    if s is not None:
        common["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position,
        }
    return LlamaConfig(**common, head_dim=cfg.head_dim)


def _original_context(cfg: LMConfig) -> int:
    return cfg.rope_scaling.original_max_position if cfg.rope_scaling else 0


def to_hf_model(lm: LM):
    """A transformers causal LM whose parameters are views of `lm`'s (eval mode)."""
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    weight = lm.embed.weight
    config = hf_config(lm.cfg, weight.dtype)
    cls = Qwen2ForCausalLM if lm.cfg.qkv_bias else LlamaForCausalLM
    with torch.device("meta"):
        hf = cls(config)
    state = lm_to_hf(lm.state_dict(), lm.cfg)
    if lm.cfg.tie_embeddings:
        state.pop("lm_head.weight")
    hf.load_state_dict(state, strict=False, assign=True)
    hf.tie_weights()
    # Rotary tables are non-persistent buffers: rebuild them where the weights live.
    hf.model.rotary_emb = type(hf.model.rotary_emb)(config).to(weight.device)
    leftover = [n for n, p in hf.named_parameters() if p.device.type == "meta"]
    if leftover:
        raise RuntimeError(f"HF model parameters left unset: {leftover[:3]}")
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    return hf.eval()


class _StepTimer:
    """A stopping criterion that never stops: it only timestamps each generated token."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        self.clock.tick()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


HF_CACHES = ("dynamic", "static")
"""transformers' default growing cache, and its preallocated one; with `static`, `generate`
compiles the model's forward itself (its automatic compile), the strongest way to run it."""


@torch.inference_mode()
def hf_generate(hf_model, prompt_ids: torch.Tensor, max_new_tokens: int,
                cache: str = "dynamic") -> GenerationResult:
    """Greedy `generate` with one of HF's caches (`HF_CACHES`), timed per step."""
    from transformers import StoppingCriteriaList

    if cache not in HF_CACHES:
        raise ValueError(f"cache={cache!r}; choose one of {list(HF_CACHES)}")
    extra = {"cache_implementation": "static"} if cache == "static" else {}
    clock = StepClock(prompt_ids.device)
    clock.tick()
    out = hf_model.generate(
        prompt_ids,
        attention_mask=torch.ones_like(prompt_ids),
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        do_sample=False,
        use_cache=True,
        stopping_criteria=StoppingCriteriaList([_StepTimer(clock)]),
        **extra,
    )
    times = clock.intervals_ms()
    return GenerationResult(out, prompt_ids.shape[1], times[0], times[1:],
                            label=f"transformers ({cache} cache)")
