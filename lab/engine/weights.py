"""Load an `LM` from a Hugging Face checkpoint (Llama or Qwen2 names) or seeded dummy weights.

Real weights come from a local directory holding `config.json` and `*.safetensors`, or from a
hub id when the hub is reachable. Dummy weights let every speed rung run on the right shapes
without a download, but they produce noise: such a model carries `is_dummy=True` so that a UI
can say so loudly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import torch

from lab.engine.llm import LM, LM_SHAPES, Llama3RopeScaling, LMConfig
from lab.quant.precision import DTYPES

SUPPORTED_TYPES = ("llama", "qwen2")
# Rotary tables are built up front; TTS requests stay far below the 128k Llama-3.2 allows.
MAX_CONTEXT = 8192
DUMMY_STD = 0.02
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class WeightsError(ValueError):
    """A checkpoint is missing, unreadable or not a Llama/Qwen2 decoder."""


def as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise WeightsError(f"dtype {dtype!r} is not valid; choose one of {list(DTYPES)}")
    return DTYPES[dtype]


def config_from_hf(hf: Mapping) -> LMConfig:
    """An `LMConfig` from a config.json dict, old (rope_theta, rope_scaling) or new style."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_TYPES:
        raise WeightsError(
            f"model_type {model_type!r} is not supported; this loader reads {list(SUPPORTED_TYPES)}"
        )
    rope = dict(hf.get("rope_parameters") or {})
    rope.update(hf.get("rope_scaling") or {})
    rope_base = hf.get("rope_theta", rope.get("rope_theta", 10000.0))
    scaling = None
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "llama3":
        scaling = Llama3RopeScaling(
            factor=float(rope["factor"]),
            low_freq_factor=float(rope["low_freq_factor"]),
            high_freq_factor=float(rope["high_freq_factor"]),
            original_max_position=int(rope["original_max_position_embeddings"]),
        )
    elif kind != "default":
        raise WeightsError(f"rope_type {kind!r} is not supported (default and llama3 are)")
    n_heads = hf["num_attention_heads"]
    cfg = LMConfig(
        vocab_size=hf["vocab_size"],
        dim=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        intermediate_size=hf["intermediate_size"],
        rope_base=float(rope_base),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        qkv_bias=model_type == "qwen2" or bool(hf.get("attention_bias", False)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_seq_len=min(int(hf.get("max_position_embeddings", MAX_CONTEXT)), MAX_CONTEXT),
        rope_scaling=scaling,
    )
    head_dim = hf.get("head_dim")
    if head_dim not in (None, cfg.head_dim):
        raise WeightsError(f"head_dim={head_dim} differs from hidden_size/heads={cfg.head_dim}")
    return cfg


def hf_to_lm(state: Mapping[str, torch.Tensor], cfg: LMConfig) -> dict[str, torch.Tensor]:
    """Rename HF tensors to ours, fusing q|k|v and gate|up into one matmul each."""
    missing = [name for name in _hf_names(cfg) if name not in state]
    if missing:
        raise WeightsError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
    out = {
        "embed.weight": state["model.embed_tokens.weight"],
        "norm.weight": state["model.norm.weight"],
    }
    out["lm_head.weight"] = state.get("lm_head.weight", out["embed.weight"])
    for i in range(cfg.n_layers):
        hf, us = f"model.layers.{i}.", f"layers.{i}."
        attn = [hf + f"self_attn.{p}_proj." for p in "qkv"]
        out[us + "attn.qkv.weight"] = torch.cat([state[a + "weight"] for a in attn])
        if cfg.qkv_bias:
            out[us + "attn.qkv.bias"] = torch.cat([state[a + "bias"] for a in attn])
        out[us + "attn.o.weight"] = state[hf + "self_attn.o_proj.weight"]
        out[us + "mlp.gate_up.weight"] = torch.cat(
            [state[hf + "mlp.gate_proj.weight"], state[hf + "mlp.up_proj.weight"]]
        )
        out[us + "mlp.down.weight"] = state[hf + "mlp.down_proj.weight"]
        out[us + "attn_norm.weight"] = state[hf + "input_layernorm.weight"]
        out[us + "mlp_norm.weight"] = state[hf + "post_attention_layernorm.weight"]
    return out


def lm_to_hf(state: Mapping[str, torch.Tensor], cfg: LMConfig) -> dict[str, torch.Tensor]:
    """Our tensors under HF names; the fused weights are split as views, sharing storage."""
    hd = cfg.head_dim
    qkv_sizes = [cfg.n_heads * hd, cfg.n_kv_heads * hd, cfg.n_kv_heads * hd]
    out = {
        "model.embed_tokens.weight": state["embed.weight"],
        "model.norm.weight": state["norm.weight"],
        "lm_head.weight": state["lm_head.weight"],
    }
    for i in range(cfg.n_layers):
        hf, us = f"model.layers.{i}.", f"layers.{i}."
        kinds = ("weight", "bias") if cfg.qkv_bias else ("weight",)
        for kind in kinds:
            parts = state[us + f"attn.qkv.{kind}"].split(qkv_sizes)
            for p, t in zip("qkv", parts, strict=True):
                out[hf + f"self_attn.{p}_proj.{kind}"] = t
        out[hf + "self_attn.o_proj.weight"] = state[us + "attn.o.weight"]
        gate, up = state[us + "mlp.gate_up.weight"].chunk(2)
        out[hf + "mlp.gate_proj.weight"], out[hf + "mlp.up_proj.weight"] = gate, up
        out[hf + "mlp.down_proj.weight"] = state[us + "mlp.down.weight"]
        out[hf + "input_layernorm.weight"] = state[us + "attn_norm.weight"]
        out[hf + "post_attention_layernorm.weight"] = state[us + "mlp_norm.weight"]
    return out


def _hf_names(cfg: LMConfig) -> list[str]:
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        names += [p + f"self_attn.{x}_proj.weight" for x in "qkvo"]
        names += [p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    return names


def empty_lm(cfg: LMConfig, dtype: torch.dtype, device: torch.device | str) -> LM:
    """An LM with uninitialised storage on `device` (or none at all on 'meta')."""
    with torch.device("meta"):
        lm = LM(cfg)
    lm = lm.to(dtype=dtype)
    if torch.device(device).type == "meta":
        return lm
    lm = lm.to_empty(device=device)
    lm.tie_weights()
    lm.reset_rope()
    return lm


def check_host_memory(cfg: LMConfig, dtype: torch.dtype, device: torch.device | str,
                      name: str) -> None:
    """Refuse, with the numbers, a CPU model that would not fit in free RAM.

    Picking the orpheus family in the app on a laptop would otherwise try to fill 3B random
    weights in host memory and take the machine down instead of failing with a reason.
    """
    if torch.device(device).type != "cpu":
        return
    import psutil

    need = cfg.n_params * torch.empty((), dtype=dtype).element_size()
    free = psutil.virtual_memory().available
    if need > 0.8 * free:
        raise WeightsError(
            f"shape {name!r} needs {need / 2**30:.1f} GiB of weights in {dtype} but only "
            f"{free / 2**30:.1f} GiB of RAM is free; use a GPU or a small shape such as "
            "'tiny-llama' (preset orpheus-tiny-cpu)")


def dummy_lm(shape: str | LMConfig, dtype: torch.dtype, device: torch.device | str,
             seed: int = 0) -> LM:
    """Seeded random weights of a named shape (or a trained model's own config). They make
    noise, not speech."""
    if isinstance(shape, str) and shape not in LM_SHAPES:
        raise WeightsError(f"model {shape!r} is not a known LM shape for dummy weights; "
                           f"choose one of {sorted(LM_SHAPES)}")
    cfg = LM_SHAPES[shape] if isinstance(shape, str) else shape
    check_host_memory(cfg, dtype, device, shape if isinstance(shape, str) else "this shape")
    lm = empty_lm(cfg, dtype, device)
    lm.is_dummy = True
    if torch.device(device).type == "meta":
        return lm
    gen = torch.Generator(device=lm.embed.weight.device).manual_seed(seed)
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, DUMMY_STD, generator=gen)
    return lm


def read_safetensors(directory: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise WeightsError(f"no *.safetensors files in {directory}")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                state[name] = f.get_tensor(name).to(dtype)
    return state


def load_checkpoint_dir(directory: Path, dtype: torch.dtype, device) -> tuple[LM, LMConfig]:
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise WeightsError(f"{directory} has no config.json; expected a Hugging Face checkpoint")
    cfg = config_from_hf(json.loads(config_path.read_text()))
    state = hf_to_lm(read_safetensors(directory, dtype), cfg)
    lm = empty_lm(cfg, dtype, device)
    lm.load_state_dict(state, strict=True)
    lm.tie_weights()
    return lm, cfg


def fetch_from_hub(repo_id: str) -> Path:
    """Download config and safetensors for a hub id; a clear error when the hub is out of reach."""
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors"])
    except Exception as err:
        why = " ".join(str(err).split())
        raise WeightsError(
            f"could not fetch {repo_id!r} from the Hugging Face hub ({type(err).__name__}: "
            f"{why}). Pass a local directory holding config.json and *.safetensors instead."
        ) from err
    return Path(path)


def load_lm(
    source: str,
    *,
    shape: str | LMConfig | None = None,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> tuple[LM, LMConfig]:
    """An LM in eval mode from a local checkpoint dir, a hub id, or "dummy" (needs `shape`)."""
    dtype = as_dtype(dtype)
    if source == "dummy":
        if shape is None:
            raise WeightsError(f"dummy weights need a shape; choose one of {sorted(LM_SHAPES)}")
        lm = dummy_lm(shape, dtype, device, seed)
    else:
        path = Path(source)
        if not path.is_dir():
            if not HUB_ID.match(source):
                raise WeightsError(
                    f"{source!r} is neither a checkpoint directory nor a hub id (owner/name)"
                )
            path = fetch_from_hub(source)
        lm, _ = load_checkpoint_dir(path, dtype, device)
    return lm.eval().requires_grad_(False), lm.cfg
