"""What a training run leaves on disk, in three forms for three journeys.

`state.pt` is everything `train` needs to go on exactly where it stopped, optimizer moments
included; it stays on the machine that trains. The portable export is what can travel: a GPU
command hands back at most eight files of 16 MB and the next one uploads at most 64 MiB, so
it carries bf16 weights and the schedule's position in small safetensors shards, and the
optimizer starts afresh on the far side. The finished model ships as one weights file
(`lab.models.voice_weights`), which any CPU loads without the trainer.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save

from lab.engine.llm import LM
from lab.engine.weights import empty_lm
from lab.models.voice_weights import lm_config_from_dict, tied, untied

STATE_FILE = "state.pt"
LOG_FILE = "log.jsonl"
INDEX_FILE = "portable.json"
PORTABLE_FORMAT = "lab-portable-1"
SHARD = "weights-{:05d}.safetensors"
# Bytes a shard spends besides tensor data: the 8-byte length, braces, padding to 8 bytes...
FILE_OVERHEAD = 64
# ...and per tensor its header entry: name, dtype, shape and offsets, written out in JSON.
ENTRY_OVERHEAD = 128


@dataclass
class TrainState:
    """One run's progress. `optimizer` is None after a portable import: fresh moments."""

    model: dict[str, torch.Tensor]
    optimizer: dict | None
    step: int
    epoch: int
    position: int
    elapsed_s: float
    rng: dict[str, torch.Tensor]
    lm_config: dict
    train_config: dict


def save_state(run_dir: Path, state: TrainState) -> Path:
    """Write through a temporary file, so a command killed mid-write keeps the last state."""
    path = Path(run_dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    torch.save({f.name: getattr(state, f.name) for f in fields(state)}, tmp)
    os.replace(tmp, path)
    return path


def load_state(run_dir: Path) -> TrainState | None:
    path = Path(run_dir) / STATE_FILE
    if not path.is_file():
        return None
    return TrainState(**torch.load(path, map_location="cpu", weights_only=True))


def model_from_state(run_dir: Path) -> LM:
    """The fp32 model of `run_dir/state.pt`, for `save_weights` where the run's GPU cannot
    send one whole weights file back (fp16 weights pass 16 MB at about 8M parameters)."""
    state = load_state(run_dir)
    if state is None:
        raise FileNotFoundError(f"no {STATE_FILE} in {run_dir}")
    lm = empty_lm(lm_config_from_dict(state.lm_config), torch.float32, "cpu")
    lm.load_state_dict(state.model)
    lm.tie_weights()
    return lm


def _pieces(tensors: dict[str, torch.Tensor], max_bytes: int):
    """(name, key, tensor) pieces that each fit a file alone; larger tensors split flat."""
    for name, t in tensors.items():
        cap = (max_bytes - FILE_OVERHEAD - ENTRY_OVERHEAD - len(name) - 8) // t.element_size()
        if cap <= 0:
            raise ValueError(f"max_bytes={max_bytes} cannot hold even one value of {name}")
        if t.numel() <= cap:
            yield name, name, t.contiguous()
            continue
        flat = t.reshape(-1)
        for i, start in enumerate(range(0, flat.numel(), cap)):
            yield name, f"{name}#{i}", flat[start:start + cap].clone()


def export_portable(run_dir: Path, out_dir: Path, max_bytes: int = 15_000_000) -> list[Path]:
    """Shards of bf16 weights, each at most `max_bytes`, an index with the run's position and
    configs, and the loss log, so the plot spans every command. Returns the files written."""
    state = load_state(run_dir)
    if state is None:
        raise FileNotFoundError(f"no {STATE_FILE} in {run_dir} to export")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(SHARD.replace("{:05d}", "*")):
        stale.unlink()
    cfg = lm_config_from_dict(state.lm_config)
    weights = {k: v.to(torch.bfloat16) for k, v in untied(state.model, cfg).items()}
    shards: list[dict[str, torch.Tensor]] = [{}]
    used, parts = FILE_OVERHEAD, {}
    for name, key, piece in _pieces(weights, max_bytes):
        cost = piece.numel() * piece.element_size() + ENTRY_OVERHEAD + len(key)
        if shards[-1] and used + cost > max_bytes:
            shards.append({})
            used = FILE_OVERHEAD
        shards[-1][key] = piece
        used += cost
        parts.setdefault(name, []).append([SHARD.format(len(shards) - 1), key])
    written = []
    for i, shard in enumerate(shards):
        blob = save(shard)
        if len(blob) > max_bytes:
            raise RuntimeError(f"shard {i} came to {len(blob)} bytes, over {max_bytes}")
        written.append(out_dir / SHARD.format(i))
        written[-1].write_bytes(blob)
    log = Path(run_dir) / LOG_FILE
    if log.is_file():
        if log.stat().st_size > max_bytes:
            raise ValueError(f"{log} is over {max_bytes} bytes; log less often (log_every)")
        written.append(Path(shutil.copyfile(log, out_dir / LOG_FILE)))
    index = {
        "format": PORTABLE_FORMAT, "step": state.step, "epoch": state.epoch,
        "position": state.position, "elapsed_s": state.elapsed_s,
        "lm_config": state.lm_config, "train_config": state.train_config,
        "tensors": {name: {"shape": list(weights[name].shape), "parts": parts[name]}
                    for name in weights},
    }
    written.append(out_dir / INDEX_FILE)
    written[-1].write_text(json.dumps(index, indent=1))
    return written


def import_portable(in_dir: Path, run_dir: Path) -> int:
    """Rebuild `run_dir/state.pt` from an export, with no optimizer moments; returns the step
    `train` will resume from. A full state already there at the same or a later step wins."""
    in_dir, run_dir = Path(in_dir), Path(run_dir)
    index_path = in_dir / INDEX_FILE
    if not index_path.is_file():
        raise FileNotFoundError(f"no {INDEX_FILE} in {in_dir}: not a portable export")
    index = json.loads(index_path.read_text())
    if index.get("format") != PORTABLE_FORMAT:
        raise ValueError(f"{index_path} is format {index.get('format')!r}, not {PORTABLE_FORMAT}")
    existing = load_state(run_dir)
    if existing is not None and existing.step >= index["step"]:
        return existing.step
    files: dict[str, dict[str, torch.Tensor]] = {}
    model = {}
    for name, entry in index["tensors"].items():
        chunks = []
        for file, key in entry["parts"]:
            if file not in files:
                with safe_open(str(in_dir / file), framework="pt") as f:
                    files[file] = {k: f.get_tensor(k) for k in f.keys()}
            chunks.append(files[file][key].reshape(-1))
        model[name] = torch.cat(chunks).reshape(entry["shape"]).float()
    cfg = lm_config_from_dict(index["lm_config"])
    run_dir.mkdir(parents=True, exist_ok=True)
    if (in_dir / LOG_FILE).is_file() and in_dir.resolve() != run_dir.resolve():
        shutil.copyfile(in_dir / LOG_FILE, run_dir / LOG_FILE)
    save_state(run_dir, TrainState(
        model=tied(model, cfg), optimizer=None, step=index["step"], epoch=index["epoch"],
        position=index["position"], elapsed_s=index["elapsed_s"], rng={},
        lm_config=index["lm_config"], train_config=index["train_config"]))
    return index["step"]
