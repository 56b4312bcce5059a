"""The lab's voice LM on disk: one fp16 safetensors file whose metadata holds its `LMConfig`.

One file travels and ships more safely than a directory, and the config inside it cannot drift
from the tensors. fp16 rather than bf16: CPUs without native bf16 would emulate it, slowly, on
every load. Every way the file can be wrong (missing, truncated, not safetensors, no config,
tensors missing or unknown, shapes that contradict the config) ends in a `WeightsError` that
names the file.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from lab.engine.llm import LM, Llama3RopeScaling, LMConfig
from lab.engine.weights import WeightsError, empty_lm

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "data" / "voice"
LM_FILE, CODEBOOK_FILE, DECODER_FILE = "lm.safetensors", "codebooks.safetensors", \
    "decoder.safetensors"
WEIGHTS_FORMAT = "lab-lm-1"


def weights_dir(model: str) -> Path:
    """The folder a config's `model` names: the shipped weights for "default"."""
    return WEIGHTS_DIR if model == "default" else Path(model)


def teacher_voice(model: str) -> str:
    """The Piper voice whose frontend and generator the model was trained with: the embedded
    one, unless the weights directory carries an export of it in `voice/` (for machines
    without the voice's package)."""
    folder = weights_dir(model) / "voice"
    return str(folder) if folder.is_dir() else "default"


def lm_config_from_dict(d: dict) -> LMConfig:
    scaling = d.get("rope_scaling")
    if scaling is not None:
        scaling = Llama3RopeScaling(**scaling)
    return LMConfig(**{**d, "rope_scaling": scaling})


def untied(state: dict[str, torch.Tensor], cfg: LMConfig) -> dict[str, torch.Tensor]:
    """A tied head is the embedding under a second name; files carry it once."""
    if not cfg.tie_embeddings:
        return dict(state)
    return {k: v for k, v in state.items() if k != "lm_head.weight"}


def tied(state: dict[str, torch.Tensor], cfg: LMConfig) -> dict[str, torch.Tensor]:
    if not cfg.tie_embeddings:
        return state
    return {**state, "lm_head.weight": state["embed.weight"]}


def save_voice_lm(model: LM, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.float16).contiguous()
               for k, v in untied(model.state_dict(), model.cfg).items()}
    save_file(tensors, str(path), metadata={"format": WEIGHTS_FORMAT,
                                            "lm_config": json.dumps(asdict(model.cfg))})
    return path


def _open(path: Path, tensors: bool) -> tuple[dict, dict[str, torch.Tensor]]:
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            data = {k: f.get_tensor(k) for k in f.keys()} if tensors else {}
    except (SafetensorError, OSError) as err:
        raise WeightsError(f"{path} is not a readable safetensors file (truncated or "
                           f"corrupt?): {err}") from err
    return meta, data


def _config(path: Path, meta: dict) -> LMConfig:
    try:
        return lm_config_from_dict(json.loads(meta["lm_config"]))
    except (KeyError, TypeError, ValueError) as err:
        raise WeightsError(f"{path} carries no valid LMConfig in its metadata "
                           f"({type(err).__name__}: {err})") from err


def read_voice_config(path: Path) -> LMConfig:
    """The LMConfig stored in a weights file's header, without reading its tensors."""
    path = Path(path)
    return _config(path, _open(path, tensors=False)[0])


def load_voice_lm(path: Path, *, device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32) -> tuple[LM, LMConfig]:
    """The LM in eval mode, checked tensor by tensor against its stored config."""
    path = Path(path)
    meta, tensors = _open(path, tensors=True)
    cfg = _config(path, meta)
    with torch.device("meta"):
        expected = untied(LM(cfg).state_dict(), cfg)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise WeightsError(f"{path} does not hold the tensors of its LMConfig: missing "
                           f"{missing[:5]}, unknown {extra[:5]}")
    wrong = [f"{k}: file {tuple(tensors[k].shape)}, config {tuple(v.shape)}"
             for k, v in expected.items() if tensors[k].shape != v.shape]
    if wrong:
        raise WeightsError(f"{path}: tensor shapes do not match its LMConfig ({cfg}): "
                           + "; ".join(wrong[:3]))
    lm = empty_lm(cfg, dtype, device)
    lm.load_state_dict(tied({k: v.to(dtype) for k, v in tensors.items()}, cfg), strict=True)
    lm.tie_weights()
    return lm.eval().requires_grad_(False), cfg
