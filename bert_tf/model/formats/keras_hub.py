"""A keras-hub BERT preset as a model, in and out: the directory BertBackbone.save_to_preset and
BertTokenizer.save_to_preset write (Keras 3's BERT), read and written here file by file, without
keras-hub or Keras 3 (neither is a bert_tf dependency):

  config.json                       BertBackbone's config (vocabulary_size, num_layers, ...)
  model.weights.h5                  its weights, as Keras 3 lays them out (h5py)
  tokenizer.json                    BertTokenizer's config (lowercase, strip_accents)
  assets/tokenizer/vocabulary.txt   the WordPiece vocabulary, one token a line
  metadata.json                     what wrote it (and, from bert_tf, the model's bert_config)

The preset is the model (authoritative). keras-hub's BertBackbone has no pretraining heads and
computes GELU in its tanh form (the original's "gelu"); a model of another GELU is written with
its bert_config in metadata.json, which bert_tf reads back.
"""
import io
import json
import os

from absl import logging
import h5py
import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model.config import BertConfig
from bert_tf.model.formats import hugging_face
from bert_tf.model.formats import output_directory
from bert_tf.model.formats.base import Described
from bert_tf.model.formats.base import Source
from bert_tf.model.formats import tfhub_layout
from bert_tf.text import tokenization

NAME = "keras_hub"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
TOKENIZER_FILE = "tokenizer.json"
VOCABULARY_FILE = os.path.join("assets", "tokenizer", "vocabulary.txt")
METADATA_FILE = "metadata.json"
BACKBONE = "keras_hub>BertBackbone"
TOKENIZER = "keras_hub>BertTokenizer"
# hidden_act that keras-hub's BertBackbone computes (gelu_approximate) or nearly so.
_GELUS = ("gelu", "gelu_new", "gelu_exact")

# BertBackbone's layers as Keras 3 writes them: (path under layers/, layer name, the TF1 names
# of its vars/0, vars/1, ...). A transformer layer's own sub-layers are _LAYER_PARTS.
_EMBEDDINGS = (
    ("input_layer", "token_ids", ()), ("input_layer_1", "segment_ids", ()),
    ("input_layer_2", "padding_mask", ()),
    ("reversible_embedding", "token_embedding", ("bert/embeddings/word_embeddings",)),
    ("position_embedding", "position_embedding", ("bert/embeddings/position_embeddings",)),
    ("embedding", "segment_embedding", ("bert/embeddings/token_type_embeddings",)),
    ("add", "embeddings_add", ()),
    ("layer_normalization", "embeddings_layer_norm",
     ("bert/embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/beta")),
    ("dropout", "embeddings_dropout", ()),
)
_POOLER = ("dense", "pooled_dense", ("bert/pooler/dense/kernel", "bert/pooler/dense/bias"))
_DENSE, _NORM = ("kernel", "bias"), ("gamma", "beta")
_LAYER_PARTS = (  # (path under the transformer layer, layer name, TF1 scope, leaf names)
    ("_self_attention_layer", "self_attention_layer", None, ()),
    ("_self_attention_layer/query_dense", "query", "attention/self/query", _DENSE),
    ("_self_attention_layer/key_dense", "key", "attention/self/key", _DENSE),
    ("_self_attention_layer/value_dense", "value", "attention/self/value", _DENSE),
    ("_self_attention_layer/output_dense", "attention_output", "attention/output/dense", _DENSE),
    ("_self_attention_layer/_softmax", "softmax", None, ()),
    ("_self_attention_layer/_dropout_layer", "dropout", None, ()),
    ("_self_attention_layer_norm", "self_attention_layer_norm", "attention/output/LayerNorm",
     _NORM),
    ("_self_attention_dropout", "self_attention_dropout", None, ()),
    ("_feedforward_intermediate_dense", "feedforward_intermediate_dense", "intermediate/dense",
     _DENSE),
    ("_feedforward_output_dense", "feedforward_output_dense", "output/dense", _DENSE),
    ("_feedforward_layer_norm", "feedforward_layer_norm", "output/LayerNorm", _NORM),
    ("_feedforward_dropout", "feedforward_dropout", None, ()),
)


def layout(num_layers):
  """[(top layer's name, its group as Keras names it, the path inside it or "", the layer's
  name, the TF1 names of its vars in order)] of a BertBackbone."""
  rows = [(name, f"layers/{group}", "", name, names) for group, name, names in _EMBEDDINGS]
  for i in range(num_layers):
    top, group = f"transformer_layer_{i}", "layers/transformer_encoder" + (f"_{i}" if i else "")
    rows.append((top, group, "", top, ()))
    rows += [(top, group, sub, name, tuple(f"bert/encoder/layer_{i}/{scope}/{leaf}"
                                             for leaf in leaves))
             for sub, name, scope, leaves in _LAYER_PARTS]
  group, name, names = _POOLER
  rows.append((name, f"layers/{group}", "", name, names))
  return rows


# --- Reading ------------------------------------------------------------------------------------

def describe(path):
  """A Described of a keras-hub preset directory, else None; a preset of another backbone is
  refused in one line."""
  if not path or not tf.io.gfile.isdir(path):
    return None
  config_path = os.path.join(path, CONFIG_FILE)
  weights = os.path.join(path, WEIGHTS_FILE)
  if not tf.io.gfile.exists(weights) or not tf.io.gfile.exists(config_path):
    return None
  backbone = hugging_face.read_json(config_path)
  if backbone.get("registered_name") != BACKBONE:
    raise BertTfError(f"{config_path}: a keras-hub preset of "
                      f"{backbone.get('registered_name') or backbone.get('class_name')}, not of "
                      f"{BACKBONE}: bert_tf reads BERT presets")
  config = _config(backbone.get("config") or {}, config_path,
                   hugging_face.read_json(os.path.join(path, METADATA_FILE)) or {})
  tokenizer = (hugging_face.read_json(os.path.join(path, TOKENIZER_FILE)) or {}).get("config")
  casing = (tokenizer or {}).get("lowercase")
  vocab = os.path.join(path, VOCABULARY_FILE)
  return Described(format=NAME, weights=weights, config=config, config_file=config_path,
                   vocab_file=vocab if tf.io.gfile.exists(vocab) else None,
                   do_lower_case=casing if isinstance(casing, bool) else None,
                   authoritative=True)


_CONFIG_NAMES = {"vocab_size": "vocabulary_size", "hidden_size": "hidden_dim",
                 "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
                 "intermediate_size": "intermediate_dim",
                 "max_position_embeddings": "max_sequence_length",
                 "type_vocab_size": "num_segments"}


def _config(backbone, source, metadata):
  """The BertConfig of BertBackbone's config (and of the bert_config bert_tf recorded in
  metadata.json, where it describes the same architecture)."""
  missing = [theirs for theirs in _CONFIG_NAMES.values() if theirs not in backbone]
  if missing:
    raise BertTfError(f"{source}: BertBackbone's config lacks {', '.join(missing)}")
  dropout = backbone.get("dropout", 0.1)
  values = {ours: backbone[theirs] for ours, theirs in _CONFIG_NAMES.items()}
  recorded = metadata.get("bert_config")
  same = isinstance(recorded, dict) and all(recorded.get(k) == v for k, v in values.items())
  values.update(hidden_act="gelu", hidden_dropout_prob=dropout,
                attention_probs_dropout_prob=dropout)
  if same:
    values.update({k: recorded[k] for k in ("hidden_act", "attention_probs_dropout_prob",
                                            "initializer_range") if k in recorded})
  return BertConfig(source=source, **values)


def _h5_array(dataset):
  """A weight of the file as float32 (Keras keeps bfloat16 as its raw 16 bits, marked so)."""
  if dataset.attrs.get("dtype") == "bfloat16":
    bits = np.asarray(dataset).view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32)
  return np.asarray(dataset, dtype=np.float32)


def source(described):
  """The preset's weights under the original's names; each top layer found by its name (the
  groups' numbering is Keras's), its sub-layers by their paths."""
  config = described.read_config()
  try:
    h5 = h5py.File(tf.io.gfile.GFile(described.weights, "rb"), "r")
  except OSError as e:
    raise BertTfError(f"{described.weights}: not an HDF5 weights file ({e})") from None
  layers = h5.get("layers", {})
  tops = {layers[key]["vars"].attrs.get("name"): f"layers/{key}" for key in layers
          if "vars" in layers[key]}
  datasets = {}
  for top, group, sub, name, names in layout(config.num_hidden_layers):
    path = "/".join(p for p in (tops.get(top, group), sub, "vars") if p)
    if not names:
      continue
    if path not in h5 or len(h5[path]) < len(names):
      raise BertTfError(f"{described.weights}: has no weights of BertBackbone's {name} "
                        f"(expected {path})")
    for index, tf1 in enumerate(names):
      datasets[tf1] = h5[path][str(index)]
  shapes = {tf1: tfhub_layout.tf1_shape(tf1, dataset.shape) for tf1, dataset in datasets.items()}
  return Source(described.weights, shapes,
                lambda name: _h5_array(datasets[name]).reshape(shapes[name]))


# --- Writing ------------------------------------------------------------------------------------

def _keras_shape(name, shape, heads):
  """The shape BertBackbone keeps a TF1 tensor in: attention kernels [H, N, D] (the output
  one [N, D, H]), the query, key and value biases [N, D]; the rest as they are."""
  if name.endswith("attention/output/dense/kernel"):
    return [heads, shape[0] // heads, shape[1]]
  if "/attention/self/" in name:
    return [shape[0], heads, shape[1] // heads] if name.endswith("/kernel") else [
        heads, shape[0] // heads]
  return list(shape)


def _config_json(config):
  return {"module": "keras_hub.src.models.bert.bert_backbone", "class_name": "BertBackbone",
          "config": dict({"name": "bert_backbone", "trainable": True, "dtype": _policy("float32")},
                         **{theirs: getattr(config, ours)
                            for ours, theirs in _CONFIG_NAMES.items()},
                         dropout=config.hidden_dropout_prob),
          "registered_name": BACKBONE}


def _policy(dtype):
  return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": dtype},
          "registered_name": None}


def _tokenizer_json(do_lower_case):
  """BertTokenizer's config: the original's uncased tokenizer lower-cases and strips accents,
  its cased one does neither."""
  return {"module": "keras_hub.src.models.bert.bert_tokenizer", "class_name": "BertTokenizer",
          "config": {"name": "bert_tokenizer", "trainable": True, "dtype": _policy("int32"),
                     "config_file": TOKENIZER_FILE, "vocabulary": None, "sequence_length": None,
                     "lowercase": do_lower_case, "strip_accents": do_lower_case, "split": True,
                     "suffix_indicator": "##", "oov_token": "[UNK]", "special_tokens": None,
                     "special_tokens_in_strings": False},
          "registered_name": TOKENIZER}


def _check_writable(tensors, config):
  if config.hidden_act.lower() not in _GELUS:
    raise BertTfError(f"--output_format=keras_hub: keras-hub's BertBackbone computes GELU, and "
                      f"this model's hidden_act is {config.hidden_act!r}")
  missing = [n for *_, names in layout(config.num_hidden_layers) for n in names
             if n not in tensors]
  if missing:
    raise BertTfError(f"--output_format=keras_hub: the input lacks {len(missing)} of "
                      f"BertBackbone's weights (e.g. {missing[0]}): a preset is whole, its "
                      f"pooler included")


def _weights_h5(tensors, config):
  """model.weights.h5's bytes: BertBackbone's groups as Keras 3 writes them."""
  buffer = io.BytesIO()
  with h5py.File(buffer, "w") as h5:
    h5.create_group("vars").attrs["name"] = "bert_backbone"
    for _, group, sub, name, names in layout(config.num_hidden_layers):
      variables = h5.create_group("/".join(p for p in (group, sub, "vars") if p))
      variables.attrs["name"] = name
      for index, tf1 in enumerate(names):
        shape = _keras_shape(tf1, tensors[tf1].shape, config.num_attention_heads)
        variables[str(index)] = np.reshape(tensors[tf1], shape).astype(np.float32)
  return buffer.getvalue()


def write(output, tensors, config, vocab_file, do_lower_case):
  """convert_checkpoint.py --output_format=keras_hub: the preset directory `output` of
  `tensors` (TF1 name -> array) of a model of `config`; returns it."""
  _check_writable(tensors, config)
  if config.hidden_act.lower() == "gelu_exact":
    logging.warning("keras-hub's BertBackbone computes GELU in its tanh form, this model in its "
                    "exact one: keras-hub's outputs differ slightly from bert_tf's (bert_tf "
                    "reads the preset back as gelu_exact)")
  left_out = sorted({n.rsplit("/", 1)[0] for n in tensors if n.startswith("cls/")})
  if left_out:
    logging.info("keras-hub's BertBackbone has no pretraining heads: %s left out",
                 ", ".join(left_out))
  vocab = tokenization.load_vocab(vocab_file)
  count = sum(int(np.prod(tensors[n].shape)) for *_, names in layout(config.num_hidden_layers)
              for n in names)
  metadata = {"parameter_count": count, "tasks": ["MaskedLM", "TextClassifier", "TextEmbedder"],
              "written_by": "bert_tf convert_checkpoint.py", "bert_config": config.to_dict()}
  output_directory.check_new(output)
  with output_directory.new_directory(output) as tmp:
    with tf.io.gfile.GFile(os.path.join(tmp, WEIGHTS_FILE), "wb") as f:
      f.write(_weights_h5(tensors, config))
    for name, value in ((CONFIG_FILE, _config_json(config)),
                        (TOKENIZER_FILE, _tokenizer_json(bool(do_lower_case))),
                        (METADATA_FILE, metadata)):
      write_text_atomically(os.path.join(tmp, name), json.dumps(value, indent=4) + "\n")
    tf.io.gfile.makedirs(os.path.dirname(os.path.join(tmp, VOCABULARY_FILE)))
    write_text_atomically(os.path.join(tmp, VOCABULARY_FILE), "".join(t + "\n" for t in vocab))
  return output
