"""SavedModels that take raw text: tokenization, the model and the post-processing in one graph.

Users of the original asked for TF Serving export: its Estimator predict path rebuilt the graph on
every call. An export here is one tf.Module (a task's server, bert_tf.tasks.text_server: its
signatures and what they give; each task's in its own module) whose signatures take tf.string
tensors [B], so a client needs nothing of bert_tf. Which server, model and labels: those of the
registered task (bert_tf.tasks.base) the export names; `task` below is its registered name (or
an older name, an alias), or the Task class.

Export with export_savedmodel.py (or --export_dir on run_classifier.py / run_squad.py /
run_ner.py), or export() here (build_server() makes the same server in memory); the checkpoint
must hold the fine-tuned head. A
client runs `import tensorflow_text` (it registers the tokenizer ops; TF Serving needs them linked
in), then `tf.saved_model.load(version_dir).signatures["serving_default"](text_a=..., ...)`; with
TF_ENABLE_ONEDNN_OPTS=1 set before TensorFlow's import where oneDNN wins on the CPU
(bert_tf.training.machine.prefer_onednn, which bert_tf.serving.predictor calls).
Each export is a new version directory, export_dir/<number> (TF Serving's layout: a server
pointed at export_dir serves the newest); nothing already in export_dir is replaced.
"""
import json
import os
import time

from absl import logging
import tensorflow as tf
import tf_keras

from bert_tf import errors
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io import integrity
from bert_tf.model import activations
from bert_tf.model import checkpoints
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model import model_files
from bert_tf.serving import tflite as tflite_lib
from bert_tf.tasks import base
from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization


# export(tflite=True) writes the model, from token ids to its outputs, here in the version, and
# beside it what rebuilds the server around it (tflite_server): its settings and the vocabulary.
TFLITE_FILE = os.path.join("assets.extra", "model.tflite")
TFLITE_SERVER_FILE = os.path.join("assets.extra", "server.json")
TFLITE_VOCAB_FILE = os.path.join("assets.extra", "vocab.txt")
# export(quantize=...) adds the quantized TensorFlow Lite model, and with quantize="int8" where
# nncf is installed OpenVINO's int8 model of model.tflite (an IR: .xml and .bin), beside model.tflite
# (bert_tf.serving.reduced; what its accuracy check found: guard.QUANTIZATION_FILE).
TFLITE_INT8_FILE = os.path.join("assets.extra", "model_int8.tflite")
OPENVINO_INT8_FILES = {"model.xml": os.path.join("assets.extra", "openvino_int8.xml"),
                       "model.bin": os.path.join("assets.extra", "openvino_int8.bin")}


def task_names():
  """The registered tasks that have an export (export_savedmodel.py's --task values)."""
  return base.export_names()


# ---------------------------------------------------------------------------- models


def build_model(task, config, num_labels=None, bilstm_units=None, causal=False):
  """The task model, with variables, as the run script builds it (with a --bilstm_head BiLSTM of
  bilstm_units per direction; causal: fine-tuned with --left_to_right)."""
  model = base.for_export(task).build_head(config, num_labels, bilstm_units=bilstm_units,
                                           causal=causal)
  zeros = tf.zeros([1, 2], tf.int32)
  model({"input_ids": zeros, "input_mask": zeros + 1, "segment_ids": zeros}, training=False)
  return model


def make_server(task, tokenizer, model, max_seq_length, **options):
  """The task's server (its server_class) around a built model; options: the server's (its
  OPTIONS, e.g. a classifier's label_list, pair, regression)."""
  serving = base.for_export(task)
  return serving.server_class(tokenizer, model, max_seq_length, task=serving.name, **options)


def save(server, export_dir, extra_files=None):
  """Writes the SavedModel into a new numbered version directory under export_dir, as TF Serving
  lays models out (export_dir/<version>/saved_model.pb; the version is the Unix time, above every
  version already there); returns that directory.

  Nothing export_dir holds is replaced or deleted: the version is written under a temporary
  hidden name (which a model server ignores) and renamed when complete; the temporary folders of
  exports that were killed (.tmp-<version>-<pid> of a process no longer running) are removed.
  extra_files: {path inside the version: bytes}, written before the rename (TF Serving keeps such
  files in assets.extra/).
  """
  fileio.check_output_directory(export_dir, "--export_dir")
  try:
    tf.io.gfile.makedirs(export_dir)
  except tf.errors.OpError as e:
    raise BertTfError(f"--export_dir: cannot create {export_dir}: {e.message}") from None
  for stale in fileio.remove_dead_temporaries(export_dir, r"\.tmp-\d+-(\d+)"):
    logging.info("Removed %s, left by an export that was killed", stale)
  existing = versions(export_dir)
  version = max([int(time.time())] + [v + 1 for v in existing])
  tmp = os.path.join(export_dir, f".tmp-{version}-{os.getpid()}")
  try:
    with activations.unfused_inference_gelu():  # no XLA in the SavedModel (activations.py)
      tf.saved_model.save(server, tmp, signatures={"serving_default": server.serve,
                                                    "tokenize": server.tokenize})
    for name, data in (extra_files or {}).items():
      tf.io.gfile.makedirs(os.path.dirname(os.path.join(tmp, name)))
      with tf.io.gfile.GFile(os.path.join(tmp, name), "wb") as f:
        f.write(data)
    integrity.write_checksums(tmp)  # what predictor.load checks the files by
    # Another export may take `version` meanwhile (the same second): this one takes the next.
    final = fileio.rename_to_free_number(tmp, export_dir, version)
  finally:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.rmtree(tmp)  # this run's own temporary directory only
  logging.info("Exported %s", final)
  return final


def versions(export_dir):
  """The version numbers of the SavedModels under export_dir, ascending."""
  if not tf.io.gfile.isdir(export_dir):
    return []
  return sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(export_dir)
                if name.rstrip("/").isdigit() and
                tf.io.gfile.exists(os.path.join(export_dir, name.rstrip("/"), "saved_model.pb")))


def damage(version):
  """What a SavedModel directory lacks (a phrase), or None when it is whole: a saved_model.pb
  with content, and its variables (an export of ours always has some) with every file."""
  graph = os.path.join(version, "saved_model.pb")
  if not tf.io.gfile.exists(graph) or tf.io.gfile.stat(graph).length == 0:
    return "no saved_model.pb, or an empty one"
  if not tf.io.gfile.isdir(os.path.join(version, "variables")):
    return "no variables/ directory"
  missing = tf_checkpoint.missing_checkpoint_files(os.path.join(version, "variables", "variables"))
  if missing:
    return f"variables/variables: {missing}"
  return savedmodel_damage(version)


def savedmodel_damage(version):
  """What is wrong with the files of a version's SavedModel (not its --tflite ones), as a phrase,
  or None: their checksums (integrity.checksum_damage; exports from before them: the size and
  first bytes of saved_model.pb, the variables' index and data lengths)."""
  damaged = integrity.checksum_damage(version, lambda name: not name.startswith("assets.extra"))
  bundle = integrity.bundle_damage(os.path.join(version, "variables", "variables"))
  return (damaged or integrity.savedmodel_pb_damage(os.path.join(version, "saved_model.pb")) or
          (bundle and f"variables/variables: {bundle}"))


def tflite_damage(version):
  """What is wrong with the --tflite files of an export version (their checksums, then the
  model's own tables), or None."""
  damaged = integrity.checksum_damage(version, lambda name: name.startswith("assets.extra"))
  model = integrity.tflite_file_damage(os.path.join(version, TFLITE_FILE))
  return damaged or (model and f"{TFLITE_FILE}: {model}")


def resolve(path):
  """A SavedModel directory: `path` itself (a BertTfError if it is damaged), or the newest whole
  version under it; a newer damaged version is named in a warning and skipped, as TF Serving
  skips a version that fails to load."""
  if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
    damaged = damage(path)
    if damaged:
      raise BertTfError(f"{path}: a damaged export ({damaged}): export it again")
    return path
  found = versions(path)
  if not found:
    raise BertTfError(f"--export_dir: {path} holds no SavedModel (expected saved_model.pb in it "
                      f"or in a numbered version directory under it)")
  damaged = []
  for version in reversed(found):
    version = os.path.join(path, str(version))
    what = damage(version)
    if what is None:
      for skipped, skipped_what in damaged:
        logging.warning("%s: a damaged export version (%s): skipped; serving %s, the newest "
                        "whole one", skipped, skipped_what, version)
      return version
    damaged.append((version, what))
  raise BertTfError(f"{damaged[0][0]}: a damaged export version ({damaged[0][1]}), and no whole "
                    f"version before it in {path}: export again")


def build_server(task, config, vocab_file, do_lower_case, init_checkpoint, max_seq_length,
                 dtype="float32", tflite=False, **options):
  """The task model in `dtype` with the fine-tuned checkpoint loaded, in its server (in memory:
  export() saves it, bert_tf.serving.predictor calls it). A checkpoint with a --bilstm_head BiLSTM gives a
  model with that BiLSTM.

  dtype float32, bfloat16 or float16: bfloat16 gives the outputs of a mixed_bfloat16 model;
  auto: bert_tf.training.precision's choice for this machine.
  tflite: the model converted in memory and run by TensorFlow Lite (tflite.ServingModel;
  float32 only), for serving in this process (bert_tf.serving.predictor); such a server is not saved.
  options: the server's options (its OPTIONS; the task's serving_options give them).
  """
  from bert_tf.training import precision  # pylint: disable=g-import-not-at-top
  serving = base.for_export(task)
  if not tf.io.gfile.exists(vocab_file):
    raise BertTfError(f"--vocab_file: {vocab_file} not found")
  num_labels = serving.num_labels(options)
  tokenizer = fast_tokenization.FastTokenizer(vocab_file, do_lower_case=do_lower_case)
  config.check_vocab_size(tokenization.vocab_size(tokenizer.vocab), vocab_file, exact=True)
  # auto: what this machine would train in
  dtype = precision.resolve(dtype, warn=False, config=config, seq_length=max_seq_length)
  previous = tf_keras.mixed_precision.global_policy()
  # The plain policy, not the mixed one training uses: the matmul weights are then stored in
  # bfloat16 (float16), the very numbers the mixed policy casts them to at every call, without
  # that cast (~20% of a batch-1 call). LayerNorm, embeddings and heads keep float32 either way.
  # The model the checkpoint holds: with a --bilstm_head BiLSTM when it has one, left to right
  # when it was fine-tuned so.
  prefix = _weights(init_checkpoint)
  tf_keras.mixed_precision.set_global_policy(dtype)
  try:
    model = build_model(serving, config, num_labels=num_labels,
                        bilstm_units=checkpoints.bilstm_units(prefix),
                        causal=checkpoints.left_to_right(prefix))
  finally:
    tf_keras.mixed_precision.set_global_policy(previous)
  if checkpoints.task_head_variables(model):
    checkpoints.load_task_model(model, init_checkpoint, serving.name)
  else:  # the encoder alone (sentence embeddings): a pretrained model holds all of it
    checkpoints.init_from_checkpoint(model, prefix)
  if tflite:
    model = tflite_lib.ServingModel(tflite_lib.Runner(tflite_lib.convert(model)))
  return make_server(serving, tokenizer, model, max_seq_length, **options)


def _weights(init_checkpoint):
  """What a server loads: a fine-tuned checkpoint's prefix (of a run's output_dir: its latest), or
  the weights of a model in a format of its own (a Hugging Face or sentence-transformers
  directory), which serve a task whose model is the encoder alone."""
  described = model_files.describe(init_checkpoint)
  if described is not None and described.format != tf_checkpoint.NAME:
    return described.weights
  return checkpoints.fine_tuned_prefix(init_checkpoint)


def export(task, config, vocab_file, do_lower_case, init_checkpoint, export_dir, max_seq_length,
           tflite=False, dtype="float32", **options):
  """Builds the task's server (build_server: the same arguments and options) and saves it as a
  new version under export_dir; returns that version's directory. tflite: the server's model in
  TensorFlow Lite too, with what rebuilds the server around it (tflite_files; a float32 model
  only: convert's rule)."""
  server = build_server(task, config, vocab_file, do_lower_case, init_checkpoint, max_seq_length,
                        dtype=dtype, **options)
  extra = (tflite_files(task, server.model, vocab_file, do_lower_case, max_seq_length, **options)
           if tflite else None)
  return save(server, export_dir, extra)


def tflite_files(task, model, vocab_file, do_lower_case, max_seq_length, **options):
  """{path in the version: bytes} that --tflite adds to an export: the task model in TensorFlow
  Lite (TFLITE_FILE) and what rebuilds its server around it (tflite_server): the server's
  settings (options: make_server's) and the vocabulary."""
  settings = {"task": base.for_export(task).name, "do_lower_case": do_lower_case,
              "max_seq_length": max_seq_length, "options": options}
  with tf.io.gfile.GFile(vocab_file, "rb") as f:
    vocab = f.read()
  return {TFLITE_FILE: tflite_lib.convert(model), TFLITE_VOCAB_FILE: vocab,
          TFLITE_SERVER_FILE: json.dumps(settings, indent=2).encode()}


def has_tflite(export_dir):
  """Whether the export (a version directory, or the newest under it) was made with --tflite."""
  version = resolve(export_dir)
  return all(tf.io.gfile.exists(os.path.join(version, name))
             for name in (TFLITE_FILE, TFLITE_SERVER_FILE, TFLITE_VOCAB_FILE))


def tflite_server(export_dir, backend="tflite", dtype="float32"):
  """The server of an export made with --tflite, built in memory around its TensorFlow Lite model
  (tflite.ServingModel): the SavedModel's tokenization and post-processing, from the
  settings and vocabulary the export keeps beside the file. dtype int8: around the --quantize
  model; backend openvino: the model run by OpenVINO (openvino_runner: model.tflite in float32
  or bfloat16, its int8 model for int8)."""
  version = resolve(export_dir)
  if not has_tflite(version):
    raise BertTfError(f"{version}: no {TFLITE_FILE} with its {TFLITE_SERVER_FILE} and "
                      f"{TFLITE_VOCAB_FILE}; export with --tflite to write them")
  damaged = tflite_damage(version)
  if damaged:
    raise BertTfError(f"{version}: {damaged}: export again with --tflite, or load it with "
                      f"backend='savedmodel'")
  settings = json.loads(fileio.read_text(os.path.join(version, TFLITE_SERVER_FILE)))
  tokenizer = fast_tokenization.FastTokenizer(os.path.join(version, TFLITE_VOCAB_FILE),
                                              do_lower_case=settings["do_lower_case"])
  if backend == "openvino":
    from bert_tf.serving import openvino_runner  # pylint: disable=g-import-not-at-top
    ir = os.path.join(version, OPENVINO_INT8_FILES["model.xml"]) if dtype == "int8" else None
    runner = openvino_runner.Runner(os.path.join(version, TFLITE_FILE), precision=dtype,
                                    ir_path=ir)
  else:
    runner = tflite_lib.Runner(path=os.path.join(
        version, TFLITE_INT8_FILE if dtype == "int8" else TFLITE_FILE))
  return make_server(settings["task"], tokenizer, tflite_lib.ServingModel(runner),
                     settings["max_seq_length"], **settings["options"])


def load(export_dir):
  """tf.saved_model.load of export_dir (a version directory, or the newest version under it),
  after registering the tensorflow-text ops the graph uses (a client of the SavedModel needs
  `import tensorflow_text` likewise; TF Serving needs them linked in)."""
  fast_tokenization.tf_text_module()
  version = resolve(export_dir)
  try:
    return tf.saved_model.load(version)
  except (tf.errors.OpError, OSError, ValueError) as e:
    message = errors.op_message(getattr(e, "message", None) or str(e))
    raise BertTfError(f"{version}: cannot be loaded ({message[:200]}): a damaged export version; "
                      f"export again, or move it aside to serve the one before") from None
