"""What a TF Hub BERT's files are, for the reader (tfhub) and the writer (tfhub_writer) alike: the
directories convert_checkpoint.py --output_format=tfhub writes, and the names of Model Garden's
encoder variables (`transformer/layer_0/self_attention/query/kernel`, [H, N, D]) against the
original's (`bert/encoder/layer_0/attention/self/query/kernel`, [H, N * D]). keras-hub's
BertBackbone keeps the same shapes (keras_hub)."""
import re

# convert_checkpoint.py --output_format=tfhub writes DIR/encoder and DIR/preprocess; DIR reads
# as its encoder.
ENCODER_DIR = "encoder"
PREPROCESS_DIR = "preprocess"

WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"
# Model Garden's BertEncoder (and BertPretrainerV2's masked LM) variables, by the end of their
# names, -> the original's names.
_NAMES = (
    ("word_embeddings/embeddings", WORD_EMBEDDINGS),
    ("position_embedding/embeddings", "bert/embeddings/position_embeddings"),
    ("type_embeddings/embeddings", "bert/embeddings/token_type_embeddings"),
    ("embeddings/layer_norm/gamma", "bert/embeddings/LayerNorm/gamma"),
    ("embeddings/layer_norm/beta", "bert/embeddings/LayerNorm/beta"),
    ("pooler_transform/kernel", "bert/pooler/dense/kernel"),
    ("pooler_transform/bias", "bert/pooler/dense/bias"),
    ("cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/kernel"),
    ("cls/predictions/transform/dense/bias", "cls/predictions/transform/dense/bias"),
    ("cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/gamma"),
    ("cls/predictions/transform/LayerNorm/beta", "cls/predictions/transform/LayerNorm/beta"),
    ("cls/predictions/output_bias/bias", "cls/predictions/output_bias"),
)
# Inside transformer/layer_<i>/ -> inside bert/encoder/layer_<i>/.
_LAYER_PARTS = {
    "self_attention/query": "attention/self/query",
    "self_attention/key": "attention/self/key",
    "self_attention/value": "attention/self/value",
    "self_attention/attention_output": "attention/output/dense",
    "self_attention_output": "attention/output/dense",  # Model Garden's encoders of 2020
    "self_attention_layer_norm": "attention/output/LayerNorm",
    "intermediate": "intermediate/dense",
    "output": "output/dense",
    "output_layer_norm": "output/LayerNorm",
}
_LAYER = re.compile(r"(?:^|/)transformer/layer_(\d+)/(.+)/(kernel|bias|gamma|beta)$")
MLM_NAMES = tuple(tf1 for _, tf1 in _NAMES if tf1.startswith("cls/"))


def tf1_name(name):
  """The original's TF1 name of a Model Garden encoder or masked-LM variable, or None."""
  layer = _LAYER.search(name)
  if layer:
    part = _LAYER_PARTS.get(layer.group(2))
    return f"bert/encoder/layer_{layer.group(1)}/{part}/{layer.group(3)}" if part else None
  for end, tf1 in _NAMES:
    if name == end or name.endswith("/" + end):
      return tf1
  return None


def tf1_shape(name, shape):
  """The original's shape of a variable of Model Garden's shape: attention kernels [H, N, D]
  and [N, D, H] are [H, N * D] and [N * D, H], their biases [N, D] are [N * D]."""
  shape = list(shape)
  if len(shape) == 3:
    if name.endswith("attention/output/dense/kernel"):
      return [shape[0] * shape[1], shape[2]]
    return [shape[0], shape[1] * shape[2]]
  if len(shape) == 2 and name.endswith("/bias"):
    return [shape[0] * shape[1]]
  return shape
