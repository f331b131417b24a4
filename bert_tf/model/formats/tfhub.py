"""A TF Hub (Kaggle Models) BERT encoder as a model: a TF2 SavedModel that takes input_word_ids,
input_mask and input_type_ids and returns pooled_output, sequence_output, encoder_outputs and
default, with its vocabulary as an asset (assets/vocab.txt) and a do_lower_case variable, as
Model Garden's export_tfhub writes them (tfhub.dev's and Kaggle's BERTs are such modules). The
original release's TF1 hub.Modules are read by tfhub_tf1.

The module is the model (authoritative): a flag the user gave may only agree with it. Nothing
here runs a TensorFlow op: the signature and the encoder's Keras config come from saved_model.pb
(and keras_metadata.pb), the weights from its variables/ checkpoint, whose Model Garden names
(`transformer/layer_0/self_attention/query/kernel`, [H, N, D]) map to the original's
(`bert/encoder/layer_0/attention/self/query/kernel`, [H, N * D]) by a reshape, bit for bit.
"""
import hashlib
import json
import os
import re
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.core.protobuf import trackable_object_graph_pb2

from bert_tf.errors import BertTfError
from bert_tf.model.config import BertConfig
from bert_tf.model.formats.base import Described
from bert_tf.model.formats.base import Source
from bert_tf.model.formats.tfhub_layout import ENCODER_DIR
from bert_tf.model.formats.tfhub_layout import tf1_name
from bert_tf.model.formats.tfhub_layout import tf1_shape
from bert_tf.model.formats.tfhub_layout import WORD_EMBEDDINGS

NAME = "tfhub"
SAVED_MODEL_FILE = "saved_model.pb"
KERAS_METADATA_FILE = "keras_metadata.pb"
TF1_MODULE_FILE = "tfhub_module.pb"  # what makes a SavedModel a TF1 hub.Module
INPUTS = ("input_word_ids", "input_mask", "input_type_ids")
OUTPUTS = ("pooled_output", "sequence_output", "encoder_outputs", "default")
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

# Model Garden's activations as its Keras config names them -> bert_config's hidden_act (its
# "Text>gelu" is the tanh form, the original's "gelu"; Keras's own "gelu" is the exact one).
ACTIVATIONS = {"text>gelu": "gelu", "gelu": "gelu_exact", "relu": "relu", "tanh": "tanh",
               "linear": "linear", "text>identity": "linear", "swish": "swish", "silu": "silu",
               "text>simple_swish": "swish"}


def encoder_directory(path):
  """The SavedModel directory `path` is, or holds as encoder/, or None."""
  if not path or not tf.io.gfile.isdir(path):
    return None
  for directory in (path, os.path.join(path, ENCODER_DIR)):
    if tf.io.gfile.exists(os.path.join(directory, SAVED_MODEL_FILE)):
      return directory.rstrip("/")
  return None


def module_directory(handle, flag="--bert_hub_module_handle"):
  """The local (or gs://) directory of a TF Hub module handle: the directory itself, or a URL's
  copy in tensorflow_hub's cache ($TFHUB_CACHE_DIR, else <tmp>/tfhub_modules, keyed as
  tensorflow_hub keys it). Nothing is downloaded."""
  if not handle.startswith(("http://", "https://")):
    if encoder_directory(handle) is None:
      raise BertTfError(f"{flag}: {handle} is not a TF Hub module directory (it holds no "
                        f"{SAVED_MODEL_FILE})")
    return handle
  cache = os.environ.get("TFHUB_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                             "tfhub_modules")
  cached = os.path.join(cache, hashlib.sha1(handle.encode("utf8")).hexdigest())
  if encoder_directory(cached) is None:
    raise BertTfError(f"{flag}: {handle} is a URL, and bert_tf downloads nothing: download the "
                      f"module (tfhub.dev and Kaggle serve it as a .tar.gz), extract it and pass "
                      f"its directory")
  return cached


def read_saved_model(directory):
  """The SavedModel proto of saved_model.pb (a one-line error when it does not parse)."""
  path = os.path.join(directory, SAVED_MODEL_FILE)
  saved_model = saved_model_pb2.SavedModel()
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      saved_model.ParseFromString(f.read())
  except Exception as e:  # a truncated or foreign file: protobuf's DecodeError
    raise BertTfError(f"{path}: not a SavedModel ({e.__class__.__name__})") from None
  if not saved_model.meta_graphs:
    raise BertTfError(f"{path}: a SavedModel without a graph")
  return saved_model


def describe(path):
  """A Described of a TF Hub BERT encoder (or of a directory that holds one as encoder/), else
  None; a SavedModel that is not one is refused in one line naming what it lacks."""
  directory = encoder_directory(path)
  if directory is None:
    return None
  saved_model = read_saved_model(directory)
  if tf.io.gfile.exists(os.path.join(directory, TF1_MODULE_FILE)):
    from bert_tf.model.formats import tfhub_tf1  # pylint: disable=import-outside-toplevel
    return tfhub_tf1.describe(directory, saved_model)
  meta_graph = saved_model.meta_graphs[0]
  _check_signature(directory, meta_graph)
  prefix = os.path.join(directory, "variables", "variables")
  variables = _variables(directory, prefix)
  keys, shapes, raw = {}, {}, {}
  for name, (key, shape) in variables.items():
    tf1 = tf1_name(name)
    if tf1 is not None and tf1 not in keys:
      keys[tf1], shapes[tf1], raw[tf1] = key, tf1_shape(tf1, shape), shape
  keras = keras_encoder_config(directory, meta_graph)
  config = _config(directory, shapes, raw, keras, variables)
  return Described(format=NAME, weights=directory, config=config,
                   vocab_file=_vocab_file(directory, meta_graph),
                   do_lower_case=_do_lower_case(prefix, variables),
                   authoritative=True, extras={"prefix": prefix, "keys": keys, "shapes": shapes})


def source(described):
  """The module's weights under the original's names, read as they are asked for."""
  reader = tf.train.load_checkpoint(described.extras["prefix"])
  keys, shapes = described.extras["keys"], described.extras["shapes"]
  return Source(described.weights, dict(shapes),
                lambda name: np.reshape(reader.get_tensor(keys[name]), shapes[name]))


def write(output, tensors, config, vocab_file, do_lower_case):
  """convert_checkpoint.py --output_format=tfhub: DIR/encoder and DIR/preprocess, made by Model
  Garden (imported here, when asked for: tfhub_writer)."""
  from bert_tf.model.formats import tfhub_writer  # pylint: disable=import-outside-toplevel
  return tfhub_writer.write(output, tensors, config, vocab_file, do_lower_case)


# --- The signature ------------------------------------------------------------------------------

def _structure_names(value, names):
  """Adds the dict keys and tensor names of a SavedModel StructuredValue to `names`; returns the
  number of tensors at its top level when it is a list or tuple (the 2020 modules' outputs)."""
  kind = value.WhichOneof("kind")
  if kind == "dict_value":
    for key, item in value.dict_value.fields.items():
      names.add(key)
      _structure_names(item, names)
  elif kind in ("list_value", "tuple_value"):
    items = getattr(value, kind).values
    for item in items:
      _structure_names(item, names)
    return len(items)
  elif kind == "tensor_spec_value" and value.tensor_spec_value.name:
    names.add(value.tensor_spec_value.name)
  return None


def call_signature(meta_graph):
  """(input names, output names) of the module's call (its __call__, and serving_default)."""
  inputs, outputs = set(), set()
  graph = meta_graph.object_graph_def
  if graph.nodes:
    for child in graph.nodes[0].children:
      if child.local_name != "__call__":
        continue
      for name in graph.nodes[child.node_id].function.concrete_functions:
        function = graph.concrete_functions[name]
        _structure_names(function.canonicalized_input_signature, inputs)
        if _structure_names(function.output_signature, outputs) == 2:
          outputs.update(("pooled_output", "sequence_output"))  # [pooled, sequence]
  serving = meta_graph.signature_def.get("serving_default")
  if serving is not None:
    inputs.update(serving.inputs)
    outputs.update(serving.outputs)
  return inputs, outputs


def _check_signature(directory, meta_graph):
  inputs, outputs = call_signature(meta_graph)
  missing = [f"input {n}" for n in INPUTS if n not in inputs] + [
      f"output {n}" for n in OUTPUTS[:2] if n not in outputs]
  if missing:
    takes = ", ".join(sorted(inputs)) or "nothing"
    hint = (" (a preprocessing model? pass the encoder)" if "sentences" in inputs else "")
    raise BertTfError(f"{directory}: a SavedModel but not a BERT encoder: it lacks "
                      f"{', '.join(missing)} of TF Hub's BERT signature (its call takes "
                      f"{takes}){hint}")


# --- Variables, vocabulary, casing --------------------------------------------------------------

def _variables(directory, prefix):
  """{variable name: (checkpoint key, shape)} of the SavedModel's variables."""
  try:
    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH_KEY))
  except (tf.errors.OpError, ValueError) as e:
    raise BertTfError(f"{directory}: its variables/ are unreadable "
                      f"({e.__class__.__name__})") from None
  shapes = reader.get_variable_to_shape_map()
  variables = {}
  for node in graph.nodes:
    for attribute in node.attributes:
      if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key in shapes:
        variables.setdefault(attribute.full_name, (attribute.checkpoint_key,
                                                   shapes[attribute.checkpoint_key]))
  return variables


def _root_child(meta_graph, name):
  graph = meta_graph.object_graph_def
  if not graph.nodes:
    return None
  ids = [c.node_id for c in graph.nodes[0].children if c.local_name == name]
  return graph.nodes[ids[0]] if ids else None


def _vocab_file(directory, meta_graph):
  """The module's vocab_file asset (assets/vocab.txt), or None."""
  if _root_child(meta_graph, "sp_model_file") is not None:
    raise BertTfError(f"{directory}: a module with a SentencePiece model (sp_model_file, as "
                      f"ALBERT's), not a WordPiece vocabulary: bert_tf reads BERT modules")
  asset = _root_child(meta_graph, "vocab_file")
  name = "vocab.txt"
  if asset is not None and asset.WhichOneof("kind") == "asset":
    name = meta_graph.asset_file_def[asset.asset.asset_file_def_index].filename
  path = os.path.join(directory, "assets", name)
  return path if tf.io.gfile.exists(path) else None


def _do_lower_case(prefix, variables):
  """The module's do_lower_case variable, or None."""
  for name, (key, shape) in variables.items():
    if key.startswith("do_lower_case/") and not shape:
      return bool(tf.train.load_checkpoint(prefix).get_tensor(key))
  return None


# --- The config ---------------------------------------------------------------------------------

def _metadata_strings(directory, meta_graph):
  """The Keras metadata (JSON) of the SavedModel's objects."""
  path = os.path.join(directory, KERAS_METADATA_FILE)
  if tf.io.gfile.exists(path):
    from tf_keras.protobuf import saved_metadata_pb2  # pylint: disable=import-outside-toplevel
    metadata = saved_metadata_pb2.SavedMetadata()
    with tf.io.gfile.GFile(path, "rb") as f:
      metadata.ParseFromString(f.read())
    return [node.metadata for node in metadata.nodes]
  return [node.user_object.metadata for node in meta_graph.object_graph_def.nodes
          if node.WhichOneof("kind") == "user_object"]


def keras_encoder_config(directory, meta_graph):
  """The Keras config of the module's encoder network (Model Garden's BertEncoder), or {}."""
  for text in _metadata_strings(directory, meta_graph):
    try:
      metadata = json.loads(text) if text else {}
    except ValueError:
      continue
    class_name = str(metadata.get("class_name", ""))
    if class_name.split(">")[-1] in ("BertEncoder", "BertEncoderV2", "TransformerEncoder"):
      return metadata.get("config") or {}
  return {}


def hidden_act(activation, directory):
  """bert_config's hidden_act of a Model Garden activation's Keras name."""
  if isinstance(activation, dict):  # a serialized function: {"class_name": ..., "config": name}
    activation = activation.get("config") if isinstance(activation.get("config"), str) else (
        activation.get("class_name"))
  if activation is None:
    return "gelu"  # every BERT module Model Garden published uses the original's
  name = str(activation).lower()
  if name not in ACTIVATIONS:
    raise BertTfError(f"{directory}: the encoder's activation {activation!r} is not one bert_tf "
                      f"has (one of {', '.join(sorted(ACTIVATIONS))})")
  return ACTIVATIONS[name]


def _config(directory, shapes, raw, keras, variables):
  """The BertConfig of the module's weights' shapes and its encoder's Keras config."""
  if keras.get("norm_first") or keras.get("embedding_width") not in (
      None, keras.get("hidden_size")):
    raise BertTfError(f"{directory}: an encoder with "
                      f"{'pre-layer norm' if keras.get('norm_first') else 'factorized embeddings'}"
                      f", not BERT's: bert_tf reads BERT modules")
  layers = sorted({int(m.group(1)) for m in map(re.compile(r"bert/encoder/layer_(\d+)/").match,
                                                shapes) if m})
  needed = [WORD_EMBEDDINGS, "bert/embeddings/position_embeddings",
            "bert/embeddings/token_type_embeddings"]
  needed += [f"bert/encoder/layer_{i}/{part}/kernel" for i in range(len(layers))
             for part in ("attention/self/query", "intermediate/dense")]
  missing = [name for name in needed if name not in shapes]
  if missing or layers != list(range(len(layers))) or not layers:
    example = next((n for n in variables if tf1_name(n) is None), None)
    raise BertTfError(f"{directory}: a module with BERT's signature but not Model Garden's BERT "
                      f"encoder weights (no {missing[0] if missing else 'transformer/layer_0'}"
                      f"{f'; it has e.g. {example}' if example else ''})")
  vocab_size, hidden_size = shapes[WORD_EMBEDDINGS]
  query = raw["bert/encoder/layer_0/attention/self/query/kernel"]
  heads = keras.get("num_attention_heads") or (query[1] if len(query) == 3 else None)
  if heads is None:
    raise BertTfError(f"{directory}: says neither its num_attention_heads nor its attention "
                      f"kernels' [H, N, D] shape")
  initializer = keras.get("initializer")
  stddev = (initializer.get("config", {}).get("stddev") if isinstance(initializer, dict) else None)
  return BertConfig(
      vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=len(layers),
      num_attention_heads=int(heads),
      intermediate_size=shapes["bert/encoder/layer_0/intermediate/dense/kernel"][1],
      hidden_act=hidden_act(keras.get("inner_activation", keras.get("activation")), directory),
      hidden_dropout_prob=float(keras.get("output_dropout", keras.get("dropout_rate", 0.1))),
      attention_probs_dropout_prob=float(keras.get("attention_dropout",
                                                   keras.get("attention_dropout_rate", 0.1))),
      max_position_embeddings=shapes["bert/embeddings/position_embeddings"][0],
      type_vocab_size=shapes["bert/embeddings/token_type_embeddings"][0],
      initializer_range=float(stddev) if stddev else 0.02, source=directory)
