"""Frozen BERT features: the original extract_features.py (`A ||| B` lines in, JSON lines of
per-token layer activations out) and the paper's feature-based NER model (Table 7): chosen
layers of a frozen encoder into a two-layer BiLSTM and a linear classifier."""
import collections
import dataclasses
import io
import json
import re
import time
from glob import escape as glob_escape
import weakref
from typing import Optional

import tensorflow as tf
import tf_keras
from absl import logging

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io.fileio import atomic_output
from bert_tf.io import progress
from bert_tf.model import checkpoints
from bert_tf.model import heads
from bert_tf.model import model_files
from bert_tf.model.model_options import ModelOptions
from bert_tf.model import modeling
from bert_tf.options import MODEL
from bert_tf.options import OUTPUT
from bert_tf.options import RUNTIME
from bert_tf.options import TRAINING
from bert_tf.options import check_fields
from bert_tf.options import option
from bert_tf.training import runtime as runtime_lib

InputExample = collections.namedtuple("InputExample", ["unique_id", "text_a", "text_b"])
InputFeatures = collections.namedtuple("InputFeatures", [
    "unique_id", "tokens", "input_ids", "input_mask", "input_type_ids"])



def read_examples(input_file):
  """One example per line, `text_a` or `text_a ||| text_b`; unique_id is the line index. The file
  is UTF-8 (a one-line error names the line and byte otherwise), or gzip/bzip2/xz of it."""
  examples = []
  text = fileio.read_text(input_file, "--input_file")
  for unique_id, line in enumerate(io.StringIO(text.replace("\r", ""), newline="\n")):
    line = line.strip()
    match = re.match(r"^(.*) \|\|\| (.*)$", line)
    text_a, text_b = (line, None) if match is None else (match.group(1), match.group(2))
    examples.append(InputExample(unique_id, text_a, text_b))
  if not examples:
    raise BertTfError(f"{input_file}: --input_file is empty (expected one sentence a line, or "
                      f"`sentence A ||| sentence B`)")
  return examples


@dataclasses.dataclass(frozen=True)
class ExtractOptions(ModelOptions):
  """extract_features.py's own flags (the runtime's come as a RuntimeOptions)."""
  input_file: Optional[str] = option(None, "Text to read: one sentence a line, or `sentence A "
                                     "||| sentence B`.")
  output_file: Optional[str] = option(None, "Where to write one JSON line of features per input "
                                      "line.", OUTPUT)
  layers: str = option("-1,-2,-3,-4", "Comma-separated encoder layers to write (-1 is the last).",
                       MODEL)
  max_seq_length: int = option(
      128, "The maximum total input sequence length after WordPiece tokenization. Sequences "
      "longer than this will be truncated, and sequences shorter than this will be padded.")
  batch_size: int = option(32, "Batch size for predictions.", TRAINING, at_least=1)
  use_one_hot_embeddings: bool = option(
      False, "If True, tf.one_hot will be used for embedding lookups, otherwise "
      "tf.nn.embedding_lookup will be used. On TPUs, this should be True since it is much "
      "faster.", RUNTIME)

  def __post_init__(self):
    check_fields(self)


def check_outputs(options):
  """--output_file must not be (or link to) one of the run's input files; options: an
  ExtractOptions."""
  inputs = [("--input_file", options.input_file), ("--vocab_file", options.vocab_file),
            ("--bert_config_file", options.bert_config_file)]
  if options.init_checkpoint and "," not in options.init_checkpoint:
    inputs.append(("--init_checkpoint", glob_escape(options.init_checkpoint) + ".*"))
  fileio.check_not_input(options.output_file, inputs, "--output_file")
  fileio.check_output_file(options.output_file, "--output_file")


def _truncate_pair(tokens_a, tokens_b, max_length):
  """Drops tokens from the end of the longer sequence until the pair fits (the original's rule)."""
  while len(tokens_a) + len(tokens_b) > max_length:
    (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def convert_examples_to_features(examples, seq_length, tokenizer):
  """[CLS] A [SEP] (B [SEP]), truncated to seq_length as the original does, zero-padded."""
  features, truncated = [], 0
  for example in examples:
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
    length = len(tokens_a) + len(tokens_b)
    if tokens_b:
      _truncate_pair(tokens_a, tokens_b, seq_length - 3)
    else:
      tokens_a = tokens_a[:seq_length - 2]
    truncated += len(tokens_a) + len(tokens_b) < length
    tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
    input_type_ids = [0] * len(tokens)
    if tokens_b:
      tokens += tokens_b + ["[SEP]"]
      input_type_ids += [1] * (len(tokens_b) + 1)
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    padding = seq_length - len(input_ids)
    features.append(InputFeatures(example.unique_id, tokens, input_ids + [0] * padding,
                                  [1] * len(input_ids) + [0] * padding,
                                  input_type_ids + [0] * padding))
  if truncated:
    logging.warning("%d of %d lines truncated to --max_seq_length=%d word pieces", truncated,
                    len(features), seq_length)
  return features


def parse_layers(layers, num_hidden_layers):
  """`--layers` "-1,-2,-3,-4" -> [-1, -2, -3, -4], indexes into the encoder layers as the
  original's get_all_encoder_layers() (-1 is the last layer)."""
  try:
    indexes = [int(x) for x in layers.split(",") if x.strip()]
  except ValueError:
    raise BertTfError(f"--layers: expected comma-separated integers, got {layers!r}") from None
  if not indexes:
    raise BertTfError("--layers: no layer given")
  for index in indexes:
    if not -num_hidden_layers <= index < num_hidden_layers:
      raise BertTfError(f"--layers: {index} is out of range for a {num_hidden_layers}-layer "
                        f"model (use -{num_hidden_layers}..{num_hidden_layers - 1})")
  return indexes


class FeatureExtractor(tf_keras.Model):
  """The encoder's layers `layer_indexes`, as a [num_layers, B, T, H] float32 tensor."""

  def __init__(self, config, layer_indexes, use_one_hot_embeddings=False,
               name="feature_extractor", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    self.layer_indexes = list(layer_indexes)
    self.encoder = modeling.BertModel(config, use_one_hot_embeddings=use_one_hot_embeddings,
                                      name="bert")

  def call(self, inputs, training=False):
    layers = self.encoder(heads.encoder_inputs(inputs), training=False)["encoder_outputs"]
    return tf.cast(tf.stack([layers[i] for i in self.layer_indexes]), tf.float32)


_PREDICT = weakref.WeakKeyDictionary()


def extract(extractor, features, batch_size):
  """Yields (feature, [num_layers, len(tokens), H] numpy array) for each feature, in order."""
  # One tf.function per extractor, so that calling extract() again does not trace it again.
  predict = _PREDICT.get(extractor)
  if predict is None:
    predict = _PREDICT[extractor] = tf.function(extractor, reduce_retracing=True)
  for begin in range(0, len(features), batch_size):
    batch = features[begin:begin + batch_size]
    inputs = {
        "input_ids": tf.constant([f.input_ids for f in batch], tf.int32),
        "input_mask": tf.constant([f.input_mask for f in batch], tf.int32),
        "segment_ids": tf.constant([f.input_type_ids for f in batch], tf.int32),
    }
    layers = predict(inputs).numpy()
    for k, feature in enumerate(batch):
      yield feature, layers[:, k, :len(feature.tokens)]


def feature_json(feature, layer_values, layer_indexes):
  """One output line as the original writes it: linex_index, then per token its layers' values
  rounded to 6 decimals."""
  all_features = []
  for i, token in enumerate(feature.tokens):
    all_layers = []
    for j, layer_index in enumerate(layer_indexes):
      all_layers.append(collections.OrderedDict([
          ("index", layer_index),
          ("values", [round(float(x), 6) for x in layer_values[j, i]])]))
    all_features.append(collections.OrderedDict([("token", token), ("layers", all_layers)]))
  return json.dumps(collections.OrderedDict([("linex_index", feature.unique_id),
                                             ("features", all_features)]))


def write_features(output_file, extractor, features, batch_size):
  with atomic_output(output_file) as tmp, progress.Progress(
      "extracting features", total=len(features), unit="lines") as shown:
    with tf.io.gfile.GFile(tmp, "w") as writer:
      for i, (feature, layer_values) in enumerate(extract(extractor, features, batch_size)):
        writer.write(feature_json(feature, layer_values, extractor.layer_indexes) + "\n")
        shown.update(i + 1)


def run(options, runtime):
  """The whole of extract_features.py: options, an ExtractOptions; runtime, a RuntimeOptions.
  --max_seq_length is checked against the model's config before TensorFlow starts."""
  start = time.time()
  check_outputs(options)
  files = model_files.open_model(options, max_seq_length=options.max_seq_length)
  bert_config, tokenizer = files.config, files.tokenizer
  layer_indexes = parse_layers(options.layers, bert_config.num_hidden_layers)
  examples = read_examples(options.input_file)
  features = convert_examples_to_features(examples, options.max_seq_length, tokenizer)
  strategy = runtime_lib.setup_runtime(runtime, bert_config, options.max_seq_length,
                                       seeded=False)
  with strategy.scope():
    extractor = FeatureExtractor(bert_config, layer_indexes, options.use_one_hot_embeddings)
    checkpoints.init_from_checkpoint(extractor, options.init_checkpoint)
  write_features(options.output_file, extractor, features, options.batch_size)
  progress.summary(f"Finished in {progress.format_duration(time.time() - start)}",
                   [("features", options.output_file)],
                   {"lines": len(features), "layers": options.layers})
