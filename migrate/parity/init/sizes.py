"""The tiny sizes a parity case builds a model with: a value per configuration field or constructor
argument, chosen from its name and its default, and the ratios the code asserts kept.

Sizes are canonical and small (width 64, 4 heads of 16, 2 key/value groups, 2 layers, vocabulary
128, context 64): they divide one another the way real configurations do (heads divide the width,
query heads divide into key/value groups, rotary dims fit a head). Widths derived from another one
(the feed-forward's ``intermediate_size``, a rotary dim) keep their default's ratio to it.
``assert a % b == 0`` in the model's constructors is read and, when the chosen values break it,
``a`` is raised to the next multiple of ``b``.
"""

from __future__ import annotations

import ast
import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

import libcst as cst

from .source import code_of, dotted

NOTHING = object()  # "no literal default"

LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, VOCAB, CONTEXT = 2, 64, 4, 2, 16, 128, 64
FEED_FORWARD = 128  # when no default gives the ratio to the width
IMAGE, PATCH, FRAMES, FRAME_PATCH = 32, 8, 4, 2

# name -> group: the canonical names a configuration or constructor spells each size with
GROUPS: Dict[str, Tuple[str, ...]] = {
    "layers": ("n_layer", "n_layers", "num_layers", "num_hidden_layers", "depth", "layers", "num_blocks", "n_blocks",
               "num_decoder_layers", "num_encoder_layers", "encoder_layers", "decoder_layers", "encoder_depth",
               "decoder_depth", "n_layers_per_block"),
    "width": ("n_embd", "n_embed", "hidden_size", "dim", "d_model", "embed_dim", "embedding_dim", "model_dim", "width",
              "emb_dim", "d_embed", "hidden_dim_model", "attn_dim", "embed_size", "encoder_dim", "decoder_dim"),
    "heads": ("n_head", "n_heads", "num_heads", "num_attention_heads", "heads", "nhead", "attn_heads", "n_attn_heads",
              "encoder_heads", "decoder_heads"),
    "kv_heads": ("n_kv_heads", "num_key_value_heads", "n_query_groups", "num_kv_heads", "kv_heads", "n_kv_head",
                 "num_query_groups", "n_kv_groups"),
    "head_dim": ("head_dim", "dim_head", "head_size", "d_head", "kv_channels", "attention_head_dim"),
    "vocab": ("vocab_size", "n_vocab", "num_tokens", "vocab", "ntokens", "ntoken", "num_embeddings",
              "padded_vocab_size", "codebook_size"),
    "context": ("block_size", "max_position_embeddings", "max_seq_len", "n_positions", "context_length", "seq_len",
                "max_seq_length", "n_ctx", "max_len", "max_length", "max_sequence_length", "seq_length", "n_ctx_max",
                "max_seq_len_cached"),
    "feed_forward": ("intermediate_size", "ffn_dim", "mlp_dim", "ffn_hidden_size", "d_ff", "dim_feedforward", "n_inner",
                     "inner_dim", "d_inner", "ff_dim", "moe_intermediate_size", "hidden_dim", "ffn_embed_dim"),
    "experts": ("num_experts", "n_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"),
    "experts_per_token": ("num_experts_per_tok", "top_k", "n_activated_experts", "experts_per_token",
                          "num_experts_per_token", "moe_top_k"),
    "image": ("image_size", "img_size", "input_size", "resolution", "input_shape", "image_shape"),
    "spatial_dims": ("ndim", "n_dims", "spatial_dims", "num_spatial_dims", "input_axis"),  # 2: images
    "patch": ("patch_size", "image_patch_size"),
    "frames": ("frames", "num_frames"),
    "frame_patch": ("frame_patch_size",),
    "classes": ("num_classes", "n_classes", "nb_classes"),
    "rotary_dim": ("rotary_dim", "rope_dim", "rotary_emb_dim", "rotary_ndims", "qk_rope_head_dim"),
    "multiple_of": ("multiple_of", "padding_multiple", "ffn_dim_multiplier_round"),
    "batch": ("max_batch_size",),
    "eps": ("eps", "norm_eps", "layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon", "epsilon"),
    # a frequency bound or base (Fourier features' max_freq, a rotary base): any positive value works
    "frequency": ("freq", "max_freq", "min_freq", "base_freq", "theta", "rope_theta", "rotary_base", "rope_base"),
}
GROUP_OF = {name: group for group, names in GROUPS.items() for name in names}
SUFFIX_ONLY_EXACT = {"batch", "multiple_of", "classes"}  # groups a suffix alone does not tell
FIXED = {"layers": LAYERS, "width": WIDTH, "heads": HEADS, "head_dim": HEAD_DIM, "vocab": VOCAB, "context": CONTEXT,
         "experts": 4, "experts_per_token": 2, "image": IMAGE, "patch": PATCH, "frames": FRAMES,
         "frame_patch": FRAME_PATCH, "classes": 10, "multiple_of": 16, "batch": 4, "count": 4, "index": 0, "eps": 1e-5,
         "frequency": 10.0, "spatial_dims": 2}
TOKEN_ID_SUFFIXES = ("_token_id", "padding_idx", "pad_id", "bos_id", "eos_id")


def literal(node: Optional[cst.BaseExpression]) -> Any:
    """The Python value of a literal expression, else ``NOTHING``."""
    if node is None:
        return NOTHING
    try:
        return ast.literal_eval(code_of(node).strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return NOTHING


def group(name: str) -> Optional[str]:
    """The size group of a name, or of its longest ``_``-suffix that has one (``enc_depth`` is
    ``depth``, a number of layers; ``attn_dim_head`` is ``dim_head``)."""
    parts = name.lower().split("_")
    for start in range(len(parts)):
        found = GROUP_OF.get("_".join(parts[start:]))
        if found and (start == 0 or found not in SUFFIX_ONLY_EXACT):
            return found
    if parts[-1] in ("idx", "index") or name in ("layer_id", "block_id", "layer_number"):  # layer_idx: the first
        return "index"
    if parts[0] == "dim" and len(parts) > 1:  # dim_in, dim_out
        return "width"
    if len(parts) > 1 and (parts[0] in ("num", "n") or parts[-1] == "count"):  # num_latents, n_bands
        return "count"
    return None


def _round8(value: float) -> int:
    return max(8, int(math.ceil(value / 8.0)) * 8)


def choose(names_defaults: Dict[str, Any]) -> Dict[str, Any]:
    """The tiny value of every size-like name (others are left out), from ``{name: default}``."""
    width_default = next((d for n, d in names_defaults.items() if group(n) == "width" and _is_int(d)), None)
    heads_default = next((d for n, d in names_defaults.items() if group(n) == "heads" and _is_int(d)), None)
    head_default = next((d for n, d in names_defaults.items() if group(n) == "head_dim" and _is_int(d)), None)
    if head_default is None and width_default and heads_default:
        head_default = width_default // heads_default
    chosen: Dict[str, Any] = {}
    for name, default in names_defaults.items():
        kind = group(name)
        if default is None and kind not in (None, "layers", "width", "heads", "vocab", "context", "image", "patch"):
            continue  # None: the code derives it (kv heads = heads, head_dim = width / heads, ...)
        if kind in ("count", "index", "eps", "frequency", "spatial_dims") and default is not NOTHING:
            continue  # a count with a default keeps it (only a required one is chosen)
        if kind in FIXED:
            if kind == "vocab" and _is_int(default) and default < VOCAB:
                chosen[name] = default  # a small vocabulary (a codebook) is kept
            elif not isinstance(default, bool) and (default is NOTHING or default is None or _is_int(default)):
                chosen[name] = FIXED[kind]
        elif kind == "kv_heads":
            chosen[name] = HEADS if _is_int(default) and default == heads_default else KV_HEADS
        elif kind == "feed_forward":
            if _is_int(default) and width_default:
                chosen[name] = _round8(default * WIDTH / width_default)
            elif default is NOTHING:
                chosen[name] = FEED_FORWARD
        elif kind == "rotary_dim":
            if _is_int(default) and head_default:
                chosen[name] = max(2, int(HEAD_DIM * default / head_default) // 2 * 2)
            elif default is NOTHING:
                chosen[name] = HEAD_DIM // 2
        elif name.endswith(TOKEN_ID_SUFFIXES) and _is_int(default) and default >= VOCAB:
            chosen[name] = VOCAB - 1
    return chosen


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Asserts(cst.CSTVisitor):
    """``assert a % b == 0`` pairs (last attribute or name of each side)."""

    def __init__(self):
        self.pairs: List[Tuple[str, str]] = []

    def visit_Assert(self, node: cst.Assert) -> None:
        test = node.test
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and \
                isinstance(test.comparisons[0].operator, cst.Equal) and literal(test.comparisons[0].comparator) == 0:
            left = test.left
            if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo):
                a, b = dotted(left.left), dotted(left.right)
                if a and b:
                    self.pairs.append((a.split(".")[-1], b.split(".")[-1]))


def asserted_divisions(functions: Iterable[cst.FunctionDef]) -> List[Tuple[str, str]]:
    visitor = _Asserts()
    for function in functions:
        function.visit(visitor)
    return visitor.pairs


def keep_divisions(values: Dict[str, Any], pairs: List[Tuple[str, str]]) -> None:
    """Raise ``a`` to the next multiple of ``b`` for every asserted ``a % b == 0`` they break."""
    for a, b in pairs:
        if _is_int(values.get(a)) and _is_int(values.get(b)) and values[b] and values[a] % values[b]:
            values[a] = int(math.ceil(values[a] / values[b])) * values[b]
