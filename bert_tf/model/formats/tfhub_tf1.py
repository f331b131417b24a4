"""The original release's TF Hub modules (TF1 hub.Module format: tfhub_module.pb beside a TF1
SavedModel, read by its run_classifier_with_tfhub.py) as a model, where bert_tf can read them
as TF2 reads a TF1 SavedModel: a `tokens` signature (input_ids, input_mask, segment_ids ->
pooled_output, sequence_output), a `tokenization_info` one (vocab_file, do_lower_case), and the
original's BertModel variables (`bert/encoder/layer_0/...`) in variables/.

Nothing runs: the config comes from the variables' shapes and the graph (the heads from the
attention's reshape, the activation from the intermediate layer's ops), the casing from
tokenization_info's constant. A module of other weights is refused in one line naming the TF2
module to use instead.
"""
import os
import re

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model.config import BertConfig
from bert_tf.model.formats.base import Described

TOKENS_INPUTS = ("input_ids", "input_mask", "segment_ids")
TOKENS_OUTPUTS = ("pooled_output", "sequence_output")
WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"
HEAD_SIZE = 64  # every Google BERT's, where the graph does not say the heads
# The original's intermediate activation, by the op its graph computes it with.
_ACTIVATION_OPS = (("Erf", "gelu_exact"), ("Tanh", "gelu"), ("Relu", "relu"))


def tf2_module_name(config, do_lower_case):
  """The TF2 module that replaces the original's TF1 module of this model, as Kaggle names it."""
  if config is None:
    return "tensorflow/bert_en_uncased_L-12_H-768_A-12 (Kaggle: tensorflow/bert)"
  casing = "cased" if do_lower_case is False else "uncased"
  return (f"tensorflow/bert_en_{casing}_L-{config.num_hidden_layers}_H-{config.hidden_size}"
          f"_A-{config.num_attention_heads} (Kaggle: tensorflow/bert)")


def describe(directory, saved_model):
  """A Described of a TF1 hub.Module directory (tfhub_module.pb present); refused in one line
  where its signature or weights are not the original BERT's."""
  meta_graph = next((m for m in saved_model.meta_graphs if not m.meta_info_def.tags),
                    saved_model.meta_graphs[0])
  nodes = {node.name: node for node in meta_graph.graph_def.node}
  casing = _tokenization_casing(meta_graph, nodes)
  prefix = os.path.join(directory, "variables", "variables")
  try:
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  except (tf.errors.OpError, ValueError) as e:
    raise BertTfError(f"{directory}: its variables/ are unreadable "
                      f"({e.__class__.__name__})") from None
  if WORD_EMBEDDINGS not in shapes:
    raise BertTfError(f"{directory}: a TF1 hub.Module whose variables are not the original "
                      f"BERT's (no {WORD_EMBEDDINGS}): bert_tf reads it where TF2 can, so use "
                      f"its TF2 SavedModel instead, {tf2_module_name(None, casing)}")
  tokens = meta_graph.signature_def.get("tokens")
  missing = ([f"input {n}" for n in TOKENS_INPUTS if n not in tokens.inputs] + [
      f"output {n}" for n in TOKENS_OUTPUTS if n not in tokens.outputs]) if tokens else [
          "the tokens signature"]
  config = _config(directory, shapes, nodes)
  if missing:
    raise BertTfError(f"{directory}: a TF1 hub.Module without the original BERT's signature "
                      f"(it lacks {', '.join(missing)}): use the TF2 SavedModel "
                      f"{tf2_module_name(config, casing)}")
  vocab = _asset(directory, meta_graph, "vocab.txt")
  return Described(format="tfhub", weights=directory, config=config, vocab_file=vocab,
                   do_lower_case=casing, authoritative=True,
                   extras={"prefix": prefix, "keys": {name: name for name in shapes},
                           "shapes": shapes})


def _constant(nodes, tensor_name):
  """The value of a Const a signature's tensor is (through Identity ops), or None."""
  node = nodes.get(tensor_name.split(":")[0])
  while node is not None and node.op == "Identity" and node.input:
    node = nodes.get(node.input[0].split(":")[0].lstrip("^"))
  if node is None or node.op != "Const":
    return None
  return tf.make_ndarray(node.attr["value"].tensor)


def _tokenization_casing(meta_graph, nodes):
  info = meta_graph.signature_def.get("tokenization_info")
  if info is None or "do_lower_case" not in info.outputs:
    return None
  value = _constant(nodes, info.outputs["do_lower_case"].name)
  return bool(value) if value is not None else None


def _asset(directory, meta_graph, default):
  names = [a.filename for a in meta_graph.asset_file_def]
  name = next((n for n in names if n.endswith("vocab.txt")), names[0] if names else default)
  path = os.path.join(directory, "assets", name)
  return path if tf.io.gfile.exists(path) else None


def _heads(nodes, hidden_size):
  """num_attention_heads: the hidden size over the head size D whose 1 / sqrt(D) the original's
  attention scales its scores by (its `attention/self/Mul` constant)."""
  node = nodes.get("bert/encoder/layer_0/attention/self/Mul/y")
  if node is not None and node.op == "Const":
    scale = float(tf.make_ndarray(node.attr["value"].tensor))
    head_size = round(1.0 / (scale * scale)) if scale > 0 else 0
    if head_size and hidden_size % head_size == 0:
      return hidden_size // head_size
  return max(1, hidden_size // HEAD_SIZE)


def _activation(nodes):
  ops = {node.op for name, node in nodes.items()
         if name.startswith("bert/encoder/layer_0/intermediate/")}
  return next((act for op, act in _ACTIVATION_OPS if op in ops), "gelu")


def _config(directory, shapes, nodes):
  layers = {int(m.group(1)) for m in map(re.compile(r"bert/encoder/layer_(\d+)/").match, shapes)
            if m}
  vocab_size, hidden_size = shapes[WORD_EMBEDDINGS]
  return BertConfig(
      vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=len(layers),
      num_attention_heads=_heads(nodes, hidden_size),
      intermediate_size=shapes["bert/encoder/layer_0/intermediate/dense/kernel"][1],
      hidden_act=_activation(nodes),
      max_position_embeddings=shapes["bert/embeddings/position_embeddings"][0],
      type_vocab_size=shapes["bert/embeddings/token_type_embeddings"][0], source=directory)
