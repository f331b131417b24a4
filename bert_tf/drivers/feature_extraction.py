"""Frozen BERT features: the original extract_features.py (`A ||| B` lines in, JSON lines of
per-token layer activations out), sentence vectors (--pooling, --normalize: one vector a line,
as JSON lines or a float32 .npy array) and the paper's feature-based NER model (Table 7): chosen
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

import numpy as np
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
from bert_tf.model.formats import sentence_transformers
from bert_tf.options import MODEL
from bert_tf.options import OUTPUT
from bert_tf.options import RUNTIME
from bert_tf.options import TRAINING
from bert_tf.options import check_fields
from bert_tf.options import option
from bert_tf.tasks import sentence_encoder
from bert_tf.training import runtime as runtime_lib

InputExample = collections.namedtuple("InputExample", ["unique_id", "text_a", "text_b"])
InputFeatures = collections.namedtuple("InputFeatures", [
    "unique_id", "tokens", "input_ids", "input_mask", "input_type_ids"])
# --pooling: none writes the original's per-token features; the others one vector a line.
POOLINGS = ("none",) + sentence_encoder.POOLINGS
DEFAULT_LAYERS = "-1,-2,-3,-4"

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
  output_file: Optional[str] = option(
      None, "Where to write one JSON line of features per input line; with --pooling, of its "
      "vector, or all vectors as one float32 [lines, hidden_size] array when the name ends in "
      ".npy.", OUTPUT)
  layers: str = option(DEFAULT_LAYERS, "Comma-separated encoder layers to write (-1 is the last); "
                       "with --pooling, the one layer to pool (default the last).", MODEL)
  pooling: Optional[str] = option(
      None, "One vector a line, of its tokens' vectors: cls (the [CLS] token's), mean, max or "
      "mean_sqrt_len (their sum over the square root of their number), as sentence-transformers "
      "pools; none: every token's, as the original. Default: the model's own (a "
      "sentence-transformers directory's 1_Pooling), else none.", OUTPUT, choices=POOLINGS)
  normalize: Optional[bool] = option(
      None, "With --pooling: unit-length vectors (their dot products are cosines). Default: the "
      "model's own (a sentence-transformers directory's 2_Normalize), else false.", OUTPUT)
  max_seq_length: int = option(
      128, "The maximum total input sequence length after WordPiece tokenization. Sequences "
      "longer than this will be truncated, and sequences shorter than this will be padded. "
      "With --pooling of a sentence-transformers model, default: the model's own.")
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


# ---------------------------------------------------------------------------- sentence vectors


def embedding_settings(options, described):
  """(pooling, normalize) of --pooling and --normalize, the model's own where a flag is left out
  (a sentence-transformers directory's 1_Pooling and 2_Normalize; described: its model_files
  Described, or None); pooling None: per-token features, as the original. A --pooling other than
  the model's own is used, with a warning."""
  extras = described.extras if described else {}
  pooling = options.pooling
  if pooling is None:
    if extras.get("unsupported"):
      raise BertTfError(f"--pooling: {extras['unsupported']}, which bert_tf does not compute: "
                        f"give --pooling ({', '.join(POOLINGS)}; none: per-token features)")
    pooling = extras.get("pooling") or "none"
  elif extras.get("pooling") and pooling not in ("none", extras["pooling"]):
    logging.warning("--pooling=%s: %s pools with %s; its vectors are pooled otherwise here",
                    pooling, options.init_checkpoint, extras["pooling"])
  if pooling == "none":
    if options.normalize:
      raise BertTfError("--normalize: only with --pooling (one vector a line); per-token "
                        "features are written as they are")
    return None, False
  normalize = bool(extras.get("normalize")) if options.normalize is None else options.normalize
  return pooling, normalize


def pooled_layer(options, num_hidden_layers):
  """The encoder layer --pooling reads: the last, or the one --layers names."""
  if options.layers == DEFAULT_LAYERS:
    return -1
  indexes = parse_layers(options.layers, num_hidden_layers)
  if len(indexes) != 1:
    raise BertTfError(f"--layers: with --pooling, the one layer to pool (e.g. -1, the last), "
                      f"got {options.layers}")
  return indexes[0]


def embed(encoder, features, batch_size, shown=None):
  """float32 [len(features), H]: each feature's vector (encoder: a SentenceEncoder), in order.
  The features go to the encoder in order of their length, so that each batch, which runs on its
  longest sequence, holds sequences of about the same length."""
  predict = _PREDICT.get(encoder)
  if predict is None:
    predict = _PREDICT[encoder] = tf.function(encoder, reduce_retracing=True)
  order = sorted(range(len(features)), key=lambda i: sum(features[i].input_mask))
  vectors = np.zeros([len(features), encoder.config.hidden_size], np.float32)
  for begin in range(0, len(order), batch_size):
    batch = [features[i] for i in order[begin:begin + batch_size]]
    inputs = {
        "input_ids": tf.constant([f.input_ids for f in batch], tf.int32),
        "input_mask": tf.constant([f.input_mask for f in batch], tf.int32),
        "segment_ids": tf.constant([f.input_type_ids for f in batch], tf.int32),
    }
    vectors[order[begin:begin + batch_size]] = predict(inputs)["embeddings"].numpy()
    if shown is not None:
      shown.update(begin + len(batch))
  return vectors


def write_embeddings(output_file, encoder, features, batch_size):
  """One vector a line: a float32 [lines, H] .npy array when output_file ends in .npy, else JSON
  lines {"linex_index": i, "embedding": [...]} (values rounded to 6 decimals, as the original's
  features)."""
  with atomic_output(output_file) as tmp, progress.Progress(
      "embedding", total=len(features), unit="lines") as shown:
    vectors = embed(encoder, features, batch_size, shown)
    array = output_file.endswith(".npy")
    with tf.io.gfile.GFile(tmp, "wb" if array else "w") as writer:
      if array:
        np.save(writer, vectors)
      for feature, vector in zip(features, [] if array else vectors):
        writer.write(json.dumps(collections.OrderedDict([
            ("linex_index", feature.unique_id),
            ("embedding", [round(float(x), 6) for x in vector])])) + "\n")


def run(options, runtime):
  """The whole of extract_features.py: options, an ExtractOptions; runtime, a RuntimeOptions.
  --max_seq_length is checked against the model's config before TensorFlow starts."""
  start = time.time()
  check_outputs(options)
  files = model_files.open_model(options, max_seq_length=options.max_seq_length)
  bert_config, tokenizer = files.config, files.tokenizer
  pooling, normalize = embedding_settings(options, files.described)
  if pooling is None:
    layer_indexes = parse_layers(options.layers, bert_config.num_hidden_layers)
    if options.output_file.endswith(".npy"):
      raise BertTfError(f"--output_file: {options.output_file}: a .npy file holds one vector a "
                        f"line: pass --pooling (per-token features are JSON lines)")
    seq_length = options.max_seq_length
  else:
    layer = pooled_layer(options, bert_config.num_hidden_layers)
    seq_length = sentence_transformers.sequence_length(files.described, options.max_seq_length,
                                                       options.given, bert_config)
  examples = read_examples(options.input_file)
  features = convert_examples_to_features(examples, seq_length, tokenizer)
  strategy = runtime_lib.setup_runtime(runtime, bert_config, seq_length, seeded=False)
  with strategy.scope():
    if pooling is None:
      model = FeatureExtractor(bert_config, layer_indexes, options.use_one_hot_embeddings)
    else:
      model = sentence_encoder.SentenceEncoder(
          bert_config, pooling=pooling, normalize=normalize, layer=layer, trim_padding=True,
          use_one_hot_embeddings=options.use_one_hot_embeddings)
    checkpoints.init_from_checkpoint(model, options.init_checkpoint)
  if pooling is None:
    write_features(options.output_file, model, features, options.batch_size)
    written, figures = "features", {"lines": len(features), "layers": options.layers}
  else:
    write_embeddings(options.output_file, model, features, options.batch_size)
    written, figures = "embeddings", {"lines": len(features), "pooling": pooling,
                                      "normalized": normalize, "max_seq_length": seq_length}
  progress.summary(f"Finished in {progress.format_duration(time.time() - start)}",
                   [(written, options.output_file)], figures)
