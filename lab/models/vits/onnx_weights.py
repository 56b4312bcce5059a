"""Read a Piper voice's trained weights out of its ONNX file into the PyTorch module tree.

The export keeps most parameter names, but three kinds were renamed or folded when weight norm
was removed and constants were folded: the phoneme embedding, the flows' WaveNet conv weights, and
the duration predictor's affine scale (stored as exp(-logs)). Each is recovered from the graph
itself (which node consumes it), never from a hard-coded list of anonymous names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn


class VoiceFileError(ValueError):
    """The voice file is missing or does not hold the weights this model needs."""


def _load_graph(path: Path):
    import onnx
    from onnx import numpy_helper

    if not path.exists():
        raise VoiceFileError(f"voice model file not found: {path}")
    model = onnx.load(str(path))
    tensors = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return model.graph, tensors


def _renamed(graph, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Parameter name -> array for the weights the export stored under other names."""
    found: dict[str, np.ndarray] = {}
    for node in graph.node:
        if node.op_type == "Conv" and len(node.input) == 3 and node.input[2].endswith(".bias"):
            weight = node.input[2][: -len(".bias")] + ".weight"
            if weight not in tensors:
                found[weight] = tensors[node.input[1]]
        if node.op_type == "Gather" and node.name == "/enc_p/emb/Gather":
            found["enc_p.emb.weight"] = tensors[node.input[0]]
    exp_neg_logs = tensors.get("/dp/flows.0/Exp_output_0")
    if exp_neg_logs is not None:
        found["dp.flows.0.logs"] = -np.log(exp_neg_logs)
    return found


def load_onnx_weights(module: nn.Module, path: Path) -> None:
    """Copy every parameter of `module` from the ONNX file; fail loudly on any gap or mismatch."""
    graph, tensors = _load_graph(path)
    source = {**tensors, **_renamed(graph, tensors)}
    state = module.state_dict()
    missing = [name for name in state if name not in source]
    if missing:
        raise VoiceFileError(f"{path.name} lacks {len(missing)} weights, e.g. {missing[:3]}")
    loaded = {}
    for name, current in state.items():
        array = source[name]
        if tuple(array.shape) != tuple(current.shape):
            raise VoiceFileError(
                f"{path.name}: {name} has shape {tuple(array.shape)}, "
                f"expected {tuple(current.shape)}"
            )
        loaded[name] = torch.from_numpy(np.array(array, dtype=np.float32))
    module.load_state_dict(loaded)
