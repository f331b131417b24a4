"""Weights in and out of our models: original TF1 checkpoints, our TF2 checkpoints, Hugging Face.

Our variables carry the original TF1 names (see modeling.py), so every format is mapped through
those names:
  * TF1 (the original release): a name-based checkpoint keyed by exactly those names.
  * TF2 (ours, written by training.py as `tf.train.Checkpoint(model=task_model, ...)`): object
    based; its object graph records each variable's name, which is how we find them.
  * Hugging Face: `model.safetensors` (+ `config.json`) with `bert.encoder.layer.0...` names and
    transposed kernels; the `bert.` prefix may be absent (sentence-transformers) and LayerNorm
    may be `weight|bias` or `gamma|beta`.

`init_from_checkpoint` loads the encoder, the `cls/` pretraining heads when the model has them,
and a task model's head when the checkpoint holds it under the original's names (`output_weights`
and `output_bias` of run_classifier.py, `cls/squad/...` of run_squad.py): a model fine-tuned by
the original predicts with its own head. A pre-trained checkpoint leaves the head to training.
"""
import collections
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from bert_tf.errors import BertTfError
from bert_tf.io.fileio import temporary_name
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model.formats import hugging_face
from bert_tf.model.formats import registry
from bert_tf.model.formats.base import Source
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model import model_files
from bert_tf.model.model_options import ModelOptions
from bert_tf.model.model_options import FORMATS
from bert_tf.model import modeling
from bert_tf.model.safetensors_io import read_safetensors, write_safetensors

WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"
HF_WEIGHTS_NAME = hugging_face.WEIGHTS_NAME
HF_CONFIG_NAME = hugging_face.CONFIG_NAME
_TF2_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

LoadResult = collections.namedtuple("LoadResult", ["loaded", "not_found", "unused", "head"])
LoadResult.__doc__ = """Names (TF1 style) loaded, wanted by the model but absent, present in the
checkpoint but not used by the model, and of the task head's variables loaded (empty when the
checkpoint holds no head for this model)."""
_PRETRAINING_HEADS = ("cls/predictions/", "cls/seq_relationship/")


def variable_name(variable):
  """TF1 name of a variable: `bert/encoder/layer_0/.../kernel` (no `:0`)."""
  name = variable.name
  return name[:-2] if name.endswith(":0") else name


def checkpoint_variables(model):
  """OrderedDict TF1 name -> variable of what a checkpoint initialises in `model`.

  That is the encoder (`model.encoder`, or `model` itself when it is a BertModel) plus the
  model's `cls/` pretraining heads when it has them; a task head is task_head_variables(model).
  """
  encoder = getattr(model, "encoder", model)
  variables = list(encoder.variables)
  if encoder is not model:
    variables += [v for v in model.variables if variable_name(v).startswith(_PRETRAINING_HEADS)]
  named = collections.OrderedDict()
  for variable in variables:
    named.setdefault(variable_name(variable), variable)
  return named


def task_head_variables(model):
  """OrderedDict TF1 name -> variable of a task model's head: its weights that are neither the
  encoder's nor a pretraining head's (e.g. `output_weights`, `cls/squad/output_bias`)."""
  taken = set(checkpoint_variables(model))
  head = collections.OrderedDict()
  for variable in model.trainable_variables:
    name = variable_name(variable)
    if name not in taken:
      head.setdefault(name, variable)
  return head


# --- Format detection -------------------------------------------------------------------------

def detect_format(path):
  """(format, resolved path) for a checkpoint prefix, directory or safetensors: "tf1", "tf2",
  "hf", or the NAME of another format of bert_tf.model.formats.registry (whose Described says
  where its weights are)."""
  described = registry.describe(path)
  if described is not None and described.format not in (hugging_face.NAME, tf_checkpoint.NAME):
    return described.format, described.weights
  hf_file = hugging_face.weights_file(path)
  if hf_file:
    return "hf", hf_file
  prefix = tf_checkpoint.checkpoint_prefix(path)
  if prefix is None:
    if not tf.io.gfile.exists(path) and not tf.io.gfile.glob(path + "*"):
      raise BertTfError(f"{path}: checkpoint not found")
    if tf.io.gfile.isdir(path) and tf.io.gfile.glob(os.path.join(path, "*.index")):
      raise BertTfError(f"{path}: several checkpoints and no `checkpoint` file; name one prefix")
    raise BertTfError(f"{path}: not a TensorFlow checkpoint (no .index file) nor a Hugging "
                      f"Face {HF_WEIGHTS_NAME}")
  try:
    names = [name for name, _ in tf.train.list_variables(prefix)]
  except (tf.errors.OpError, ValueError) as e:
    raise BertTfError(f"{prefix}: unreadable checkpoint ({e.__class__.__name__})") from None
  is_tf2 = _OBJECT_GRAPH_KEY in names or any(n.endswith(_TF2_VALUE_SUFFIX) for n in names)
  return ("tf2" if is_tf2 else "tf1"), prefix


# --- Sources: name -> shape and a way to read each tensor --------------------------------------

def _tf1_source(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return Source(prefix, reader.get_variable_to_shape_map(), reader.get_tensor)


def _tf2_source(prefix):
  """Our object-based checkpoints, keyed by the variable names their object graph records.

  Only objects under the root's `model` child (or the whole graph when there is none) count, so
  optimizer slots are never mistaken for weights.
  """
  reader = tf.train.load_checkpoint(prefix)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH_KEY))
  roots = [c.node_id for c in graph.nodes[0].children if c.local_name == "model"] or [0]
  shapes_by_key = reader.get_variable_to_shape_map()
  name_to_key = {}
  seen = set()
  pending = list(roots)
  while pending:
    node_id = pending.pop()
    if node_id in seen:
      continue
    seen.add(node_id)
    node = graph.nodes[node_id]
    for attribute in node.attributes:
      if attribute.name == "VARIABLE_VALUE" and attribute.full_name:
        name_to_key.setdefault(attribute.full_name, attribute.checkpoint_key)
    pending.extend(c.node_id for c in node.children)
  shapes = {name: shapes_by_key[key] for name, key in name_to_key.items()}
  return Source(prefix, shapes, lambda name: reader.get_tensor(name_to_key[name]))


def _hf_source(weights_file):
  tensors = load_hf_safetensors(weights_file)
  return Source(weights_file, {k: list(v.shape) for k, v in tensors.items()}, tensors.__getitem__)


def open_checkpoint(path, input_format=None):
  """A Source for `path`; the format is detected unless given (one of FORMATS)."""
  detected, resolved = detect_format(path)
  if input_format and input_format != detected:
    raise BertTfError(f"{path}: looks like a {detected} checkpoint, not {input_format}")
  if detected == "hf":
    return _hf_source(resolved)
  if detected not in ("tf1", "tf2"):
    return registry.module(detected).source(registry.describe(path))
  return _tf2_source(resolved) if detected == "tf2" else _tf1_source(resolved)


# --- Loading --------------------------------------------------------------------------------------

def _check_shape(source, name, variable, head=()):
  expected = list(variable.shape)
  found = list(source.shapes[name])
  if expected == found:
    return
  if name in (WORD_EMBEDDINGS, "cls/predictions/output_bias") and expected[1:] == found[1:]:
    raise BertTfError(
        f"{source.path}: vocab_size mismatch: {name} has shape {found} in the checkpoint "
        f"({found[0]} tokens) but {expected} in the model (bert_config vocab_size "
        f"{expected[0]}); use the bert_config.json and vocab.txt that came with the checkpoint")
  if name in head:
    raise BertTfError(
        f"{source.path}: the task head's {name} has shape {found} in the checkpoint but "
        f"{expected} in this task's model: the checkpoint was fine-tuned for another task or "
        f"number of labels (convert_checkpoint.py writes its encoder alone, to start a new head "
        f"from)")
  raise BertTfError(f"{source.path}: variable {name} has shape {found} in the checkpoint but "
                    f"{expected} in the model (check --bert_config_file)")


def _assign(source, wanted, head=()):
  """Assigns source's tensor to each variable of `wanted` (name -> variable), after checking
  every shape."""
  for name, variable in wanted.items():
    _check_shape(source, name, variable, head)
  for name, variable in wanted.items():
    variable.assign(np.asarray(source.read(name), dtype=variable.dtype.as_numpy_dtype))


def _is_training_state(name):
  # The original's checkpoints also hold optimizer slots and the step counter.
  return name == "global_step" or name.endswith(("/adam_m", "/adam_v")) or name.startswith("_")


def load_source(model, source, complete=False):
  """Assigns every checkpoint variable of `model` (see checkpoint_variables) found in `source`,
  and its task head when `source` holds all of it (part of it is an error).

  The encoder must be whole (its pooler aside: some exports drop it); with `complete` (a model
  about to predict), every variable, heads included, must come from the checkpoint.
  """
  wanted = checkpoint_variables(model)
  head = task_head_variables(model)
  head_found = [name for name in head if name in source.shapes]
  if head_found and len(head_found) < len(head):
    raise BertTfError(f"{source.path}: holds {', '.join(head_found)} but not "
                      f"{', '.join(n for n in head if n not in head_found)}: part of a task head")
  if head_found:
    wanted.update(head)
  found = [name for name in wanted if name in source.shapes]
  if not found:
    raise BertTfError(f"{source.path}: none of the model's {len(wanted)} variables is in this "
                      f"checkpoint (e.g. {next(iter(wanted))})")
  not_found = [name for name in wanted if name not in source.shapes]
  if complete:
    not_found += [name for name in head if name not in wanted]
    if not_found:
      raise BertTfError(
          f"{source.path}: lacks {len(not_found)} of the variables this model predicts with "
          f"(e.g. {', '.join(not_found[:3])}): evaluating or predicting needs a checkpoint of "
          f"this very model, such as the output_dir of its training run or a checkpoint the "
          f"original's script fine-tuned for this task")
  encoder_names = {variable_name(v) for v in getattr(model, "encoder", model).variables}
  missing = [name for name in not_found if name in encoder_names and "/pooler/" not in name]
  if missing:
    raise BertTfError(f"{source.path}: lacks {len(missing)} of the encoder's variables (e.g. "
                      f"{missing[0]}): it was not made with this --bert_config_file (compare "
                      f"num_hidden_layers and the other sizes)")
  _assign(source, collections.OrderedDict((name, wanted[name]) for name in found), head)
  unused = sorted(name for name in source.shapes
                  if name not in wanted and not _is_training_state(name))
  logging.info("%s: loaded %d variables%s", source.path, len(found),
               " (the task head included)" if head_found else "")
  if not_found:
    _warn_not_found(not_found)
  if unused:  # e.g. the pretraining heads under a task model: one line, the names behind -v 1
    logging.info("  %d variables of the checkpoint are not used by this model (%s)", len(unused),
                 ", ".join(_groups(unused)))
    for name in unused:
      logging.vlog(1, "  in checkpoint but unused: %s", name)
  return LoadResult(found, not_found, unused, head_found)


def _groups(names):
  """The scopes of variable names, for one line: `bert`, `cls/predictions`, ..."""
  return sorted({name.split("/")[0] + ("/" + name.split("/")[1] if name.startswith("cls/")
                                       else "") for name in names})


def _warn_not_found(names):
  """One warning line for the model's variables the checkpoint lacks, saying what that means;
  the names behind -v 1."""
  if all(name.startswith("cls/") for name in names):
    logging.warning(
        "%d variables of the pretraining heads (%s) are not in the checkpoint, which holds no "
        "pretraining heads (a model exported for sentence embeddings or for a task has none): "
        "they keep their random initial values. Fine-tuning never uses them; the model's "
        "masked-LM and next-sentence predictions are random until it is pretrained further",
        len(names), ", ".join(_groups(names)))
  else:
    logging.warning("%d variables of the model are not in the checkpoint (%s): they keep their "
                    "random initial values", len(names), ", ".join(_groups(names)))
  for name in names:
    logging.vlog(1, "  not found in checkpoint (left as initialised): %s", name)


def init_from_checkpoint(model, path, input_format=None, complete=False):
  """Loads a TF1 original, our TF2 or a Hugging Face checkpoint into `model` (see load_source).
  Returns a LoadResult; raises BertTfError on a shape mismatch or a missing variable."""
  return load_source(model, open_checkpoint(path, input_format), complete)


# --- Fine-tuned task models -----------------------------------------------------------------------

def fine_tuned_prefix(path):
  """The checkpoint prefix of a fine-tuned model: a run's output_dir (its latest checkpoint) or a
  prefix."""
  if not path:
    raise BertTfError("--init_checkpoint: required: the fine-tuned model's checkpoint or "
                      "output_dir")
  prefix = tf_checkpoint.checkpoint_prefix(path)
  if prefix is None:
    if tf.io.gfile.isdir(path):
      raise BertTfError(f"--init_checkpoint: {path} holds no checkpoint (expected the output_dir "
                        f"of a fine-tuning run)")
    raise BertTfError(f"--init_checkpoint: {path}: checkpoint not found")
  return prefix


def load_task_model(model, path, task):
  """Loads every variable of a built task model, head included, from a fine-tuned checkpoint:
  one of ours (a run_*.py output_dir or prefix) or one the original's scripts wrote. A checkpoint
  without the task's head (e.g. a pre-trained one) or with other shapes raises BertTfError."""
  source = open_checkpoint(fine_tuned_prefix(path))
  head = task_head_variables(model)
  missing_head = [name for name in head if name not in source.shapes]
  if missing_head:
    raise BertTfError(f"--init_checkpoint: {source.path} has no {task} head (missing "
                      f"{', '.join(missing_head)}): pass the checkpoint of a fine-tuned "
                      f"{task} model, e.g. the output_dir of its run script")
  load_source(model, source, complete=True)


def bilstm_units(path):
  """Units per direction of the --bilstm_head BiLSTM (heads.bidirectional_lstm, named `bilstm`)
  that a checkpoint (any format open_checkpoint reads) holds, or None."""
  shape = open_checkpoint(path).shapes.get("bilstm/forward_lstm/lstm_cell/recurrent_kernel")
  return int(shape[0]) if shape else None


# What reading a damaged checkpoint raises (a truncated data file reads as IndexError).
READ_ERRORS = (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
               IndexError)


def left_to_right(path):
  """Whether a checkpoint holds a fine-tuned left-to-right (causal) task model (heads._TaskModel
  with causal=True, which carries the modeling.LEFT_TO_RIGHT_MARKER variable)."""
  return modeling.LEFT_TO_RIGHT_MARKER in open_checkpoint(path).shapes


# --- TF1 name-based checkpoints -------------------------------------------------------------------

def save_tf1_checkpoint(model, path, names=None, with_head=False):
  """Writes the model's checkpoint variables (or those in `names`) as an original-layout TF1
  checkpoint at prefix `path` (`path.index`, `path.data-00000-of-00001`); with_head, a task
  model's head too, under the original's names (as its run_classifier/run_squad wrote them).
  Returns `path`."""
  named = checkpoint_variables(model)
  if with_head:
    named.update(task_head_variables(model))
  if names is not None:
    named = collections.OrderedDict((n, v) for n, v in named.items() if n in set(names))
  write_tf1_tensors(path, collections.OrderedDict(
      (name, tf.convert_to_tensor(variable)) for name, variable in named.items()))
  return path


def write_tf1_tensors(path, tensors):
  """Writes OrderedDict name -> tensor as a name-based checkpoint, atomically."""
  directory = os.path.dirname(path)
  if directory:
    tf.io.gfile.makedirs(directory)
  tmp = temporary_name(path)
  data_suffix = ".data-00000-of-00001"
  try:
    with tf.device("/cpu:0"):
      tf.raw_ops.SaveV2(prefix=tmp, tensor_names=list(tensors),
                        shape_and_slices=[""] * len(tensors), tensors=list(tensors.values()))
  except BaseException:
    for suffix in (".index", data_suffix):
      if tf.io.gfile.exists(tmp + suffix):
        tf.io.gfile.remove(tmp + suffix)
    raise
  # The .index file is what makes a checkpoint visible, so it goes last; an older one goes first
  # (a kill in between leaves no checkpoint there, never an old index over new data).
  if tf.io.gfile.exists(path + ".index"):
    tf.io.gfile.remove(path + ".index")
  tf.io.gfile.rename(tmp + data_suffix, path + data_suffix, overwrite=True)
  tf.io.gfile.rename(tmp + ".index", path + ".index", overwrite=True)


# --- TF2 object-based checkpoints -----------------------------------------------------------------

def save_tf2_checkpoint(model, path, with_heads=True):
  """Writes `tf.train.Checkpoint(model=model)` at prefix `path`, as training.py lays them out
  (with_heads=False: the encoder only, as `model/encoder/...`). Returns the prefix written."""
  if with_heads:
    checkpoint = tf.train.Checkpoint(model=model)
  else:
    checkpoint = tf.train.Checkpoint(model=tf.train.Checkpoint(
        encoder=getattr(model, "encoder", model)))
  directory = os.path.dirname(path)
  if directory:
    tf.io.gfile.makedirs(directory)
  tmp = temporary_name(path)
  written = checkpoint.write(tmp)
  data_files = tf.io.gfile.glob(tmp + ".data-*")
  for data_file in data_files:
    tf.io.gfile.rename(data_file, path + data_file[len(tmp):], overwrite=True)
  tf.io.gfile.rename(written + ".index", path + ".index", overwrite=True)
  return path


# --- Hugging Face safetensors ---------------------------------------------------------------------
# The file format itself: bert_tf.model.safetensors_io (read_safetensors, write_safetensors, here too).


def hf_name(name):
  """TF1 name -> (Hugging Face BertForPreTraining name, whether the tensor is transposed)."""
  parts = name.split("/")
  leaf = parts[-1]
  if name == "cls/predictions/output_bias":
    return "cls.predictions.bias", False
  if name == "cls/seq_relationship/output_weights":  # Already [out, in], like a torch Linear.
    return "cls.seq_relationship.weight", False
  if name == "cls/seq_relationship/output_bias":
    return "cls.seq_relationship.bias", False
  path = ".".join(parts[:-1]).replace("encoder.layer_", "encoder.layer.")
  if leaf.endswith("_embeddings"):
    return f"{path}.{leaf}.weight", False
  leaf = {"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(leaf, leaf)
  return f"{path}.{leaf}", parts[-1] == "kernel"


def _canonical_hf_name(name):
  """Hugging Face names as hf_name writes them: with `bert.`, LayerNorm weight|bias."""
  if name.endswith(".gamma"):
    name = name[:-len(".gamma")] + ".weight"
  elif name.endswith(".beta"):
    name = name[:-len(".beta")] + ".bias"
  if not name.startswith(("bert.", "cls.")):
    name = "bert." + name
  return name


def load_hf_safetensors(path):
  """A Hugging Face BERT safetensors file (or its directory) -> dict TF1 name -> numpy array.

  Tensors with no TF1 counterpart (e.g. `embeddings.position_ids`) keep their own names.
  """
  weights_file = hugging_face.weights_file(path) or path
  if not tf.io.gfile.exists(weights_file):
    raise BertTfError(f"{path}: no {HF_WEIGHTS_NAME} found")
  tensors = read_safetensors(weights_file)
  by_hf_name = {_canonical_hf_name(k): v for k, v in tensors.items()}
  converted = {}
  for hf, array in by_hf_name.items():
    tf1 = _tf1_name_from_hf(hf)
    if tf1 is None:
      converted[hf] = array
    else:
      converted[tf1] = array.T if hf_name(tf1)[1] else array
  return converted


def _tf1_name_from_hf(name):
  """Inverse of hf_name, or None for a tensor that has no TF1 counterpart."""
  special = {"cls.predictions.bias": "cls/predictions/output_bias",
             "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
             "cls.seq_relationship.bias": "cls/seq_relationship/output_bias"}
  if name in special:
    return special[name]
  parts = name.split(".")
  if parts[-1] not in ("weight", "bias") or name.startswith("cls.predictions.decoder"):
    return None
  path = "/".join(parts[:-1]).replace("encoder/layer/", "encoder/layer_")
  if parts[-2].endswith("_embeddings"):
    return path
  if parts[-2] == "LayerNorm":
    return f"{path}/{'gamma' if parts[-1] == 'weight' else 'beta'}"
  return f"{path}/{'kernel' if parts[-1] == 'weight' else 'bias'}"


def hf_config_dict(config, with_heads):
  """config.json for Hugging Face transformers' BertModel / BertForPreTraining."""
  d = config.to_hf_dict()
  d.update(model_type="bert", layer_norm_eps=1e-12, pad_token_id=0,
           position_embedding_type="absolute",
           architectures=["BertForPreTraining" if with_heads else "BertModel"])
  return d


def save_hf_safetensors(model, directory, names=None):
  """Writes `directory/model.safetensors` and `directory/config.json` for transformers.

  Includes the pretraining heads (as BertForPreTraining) when the model has them.
  """
  named = checkpoint_variables(model)
  if names is not None:
    named = collections.OrderedDict((n, v) for n, v in named.items() if n in set(names))
  tensors = {}
  for name, variable in named.items():
    key, transpose = hf_name(name)
    value = variable.numpy()
    tensors[key] = np.ascontiguousarray(value.T if transpose else value)
  tf.io.gfile.makedirs(directory)
  config = getattr(model, "encoder", model).config
  with_heads = any(name.startswith("cls/") for name in named)
  write_safetensors(os.path.join(directory, HF_WEIGHTS_NAME), tensors)
  write_text_atomically(os.path.join(directory, HF_CONFIG_NAME),
                        json.dumps(hf_config_dict(config, with_heads), indent=2, sort_keys=True)
                        + "\n")
  return directory


# --- Conversion (convert_checkpoint.py) -----------------------------------------------------------

def _output_format(output, output_format):
  if output_format:
    return output_format
  if output.endswith(".safetensors") or output.endswith("/") or tf.io.gfile.isdir(output):
    return "hf"
  raise BertTfError(f"--output_format: required (one of {', '.join(FORMATS)}) when --output "
                    f"({output}) is neither a .safetensors file nor a directory")


def convert_checkpoint(input_path, output, bert_config_file=None, input_format=None,
                       output_format=None, vocab_file=None):
  """Reads any supported checkpoint and writes what it held in `output_format`, with
  bert_config.json (tf1, tf2) and vocab.txt beside it: vocab_file, or the vocab.txt beside the
  input (a complete model directory, as Google's releases).

  Only the variables the input had are written (no randomly initialised heads). Returns the path
  written.
  """
  output_format = _output_format(output, output_format)
  source = open_checkpoint(input_path, input_format)
  files = model_files.open_model(ModelOptions(
      init_checkpoint=input_path, bert_config_file=bert_config_file, vocab_file=vocab_file),
      need_vocab=False, checkpoint_flag="--input")
  config, vocab_file = files.config, files.vocab_file
  model = modeling.BertPretrainer(config)
  loaded = load_source(model, source).loaded
  if output_format == "hf":
    directory = (os.path.dirname(output) if output.endswith(".safetensors") else output) or "."
    written = save_hf_safetensors(model, directory, names=loaded)
    model_files.write_model_files(directory, None, vocab_file)  # config.json is the HF config
    return written
  # Google's releases keep bert_config.json beside bert_model.ckpt; scripts then need no HF file.
  model_files.write_model_files(os.path.dirname(output) or ".", config, vocab_file)
  if output_format == "tf1":
    return save_tf1_checkpoint(model, output, names=loaded)
  with_heads = all(name in loaded for name in checkpoint_variables(model))
  return save_tf2_checkpoint(model, output, with_heads=with_heads)
