"""A PyTorch port of the VITS inference path, loaded from Piper voice files."""

from lab.models.vits.onnx_weights import VoiceFileError, load_onnx_weights
from lab.models.vits.synthesizer import Latents, Synthesizer, VitsHyper

__all__ = ["Latents", "Synthesizer", "VitsHyper", "VoiceFileError", "load_onnx_weights"]
