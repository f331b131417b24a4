"""What run_ner.py does: CoNLL files -> windowed TFRecords -> train / eval / predict, scored with
CoNLL entity-level F1.

Fine-tuning (the paper's Table 3) puts one linear layer over the sequence output, no CRF; the
feature-based mode (Table 7) freezes BERT and trains a two-layer BiLSTM over chosen layers. Only
each word's first sub-token carries a label, a loss and a prediction.

Both models run each batch only as long as its longest sequence: CoNLL sentences are far shorter
than --max_seq_length, and padding changes no result, only the time (~3x here).
"""
import os

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import common_flags
from bert_tf import feature_extraction
from bert_tf import heads
from bert_tf import records
from bert_tf import training
from bert_tf.data import conll
from bert_tf.errors import BertTfError
from bert_tf.fileio import write_text_atomically

SPLIT_FILES = {"train": "train.txt", "dev": "valid.txt", "test": "test.txt"}
LABEL_LIST_FILE = "label_list.txt"


def loss_fn(features, outputs):
  """Cross-entropy averaged over the words (first sub-tokens) of the batch."""
  weights = features["label_weights"]
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label_ids"],
                                                          logits=outputs["logits"])
  return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def train_metric_fn(features, outputs):
  predictions = tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32)
  correct = tf.cast(predictions == features["label_ids"], tf.float32)
  return {"word_accuracy": (tf.reshape(correct, [-1]), tf.reshape(features["label_weights"], [-1]))}


def _weighted_cross_entropy(logits, label_ids, weights):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
  picked = np.take_along_axis(log_probs, label_ids[..., None], axis=-1)[..., 0]
  return float(-(picked * weights).sum() / max(weights.sum(), 1.0))


def read_split(data_dir, split):
  path = os.path.join(data_dir, SPLIT_FILES[split])
  if not tf.io.gfile.exists(path):
    raise BertTfError(f"--data_dir: {path} not found (expected {', '.join(SPLIT_FILES.values())} "
                      f"in CoNLL column format)")
  return path, conll.read_conll(path)


def label_list_for(f):
  """The training file's labels: saved in output_dir by --do_train, read back by eval/predict."""
  saved = os.path.join(f.output_dir, LABEL_LIST_FILE)
  if f.do_train:
    path, sentences = read_split(f.data_dir, "train")
    label_list = conll.get_labels(sentences)
    logging.info("%s: tag scheme %s, labels %s", path, conll.detect_scheme(sentences), label_list)
    write_text_atomically(saved, "".join(label + "\n" for label in label_list))
    return label_list, sentences
  if tf.io.gfile.exists(saved):
    with tf.io.gfile.GFile(saved) as reader:
      return [line.strip() for line in reader if line.strip()], None
  path, sentences = read_split(f.data_dir, "train")
  return conll.get_labels(sentences), None


def model_fn_for(f, config, num_labels):
  trim = common_flags.trim_padding_from_flags()
  if f.feature_based:
    return lambda: feature_extraction.BertFeatureTagger(
        config, num_labels, trim_padding=trim, feature_layers=f.feature_layers, lstm_units=f.lstm_units)
  return lambda: heads.BertTokenClassifier(config, num_labels, trim_padding=trim)


def _predict_ids(strategy, model, input_fn):
  """Argmax label ids [num_windows, T], and the loss over the labelled words."""
  ids, logits_all, labels, weights = [], [], [], []
  for batch in training.predict(strategy, model, input_fn):
    logits = batch["logits"].astype(np.float64)
    ids.append(logits.argmax(axis=-1))
    logits_all.append(logits)
    labels.append(batch["label_ids"])
    weights.append(batch["label_weights"])
  loss = _weighted_cross_entropy(np.concatenate(logits_all), np.concatenate(labels),
                                 np.concatenate(weights))
  return np.concatenate(ids), loss


def run(f):
  """The whole of run_ner.py for parsed FLAGS."""
  if not (f.do_train or f.do_eval or f.do_predict):
    raise BertTfError("--do_train/--do_eval/--do_predict: at least one must be True")
  config, tokenizer = common_flags.config_and_tokenizer_from_flags(f)
  if f.feature_based and f.feature_layers not in feature_extraction.FEATURE_LAYERS:
    raise BertTfError(f"--feature_layers: {f.feature_layers!r} is not one of "
                      f"{feature_extraction.FEATURE_LAYERS}")
  strategy = common_flags.runtime_from_flags()
  tf.io.gfile.makedirs(f.output_dir)
  label_list, train_sentences = label_list_for(f)
  schema = records.tagging_features(f.max_seq_length)
  model_fn = model_fn_for(f, config, len(label_list))
  model = None

  if f.do_train:
    if not f.init_checkpoint:
      logging.warning("No --init_checkpoint: training starts from a randomly initialized "
                      "encoder.")
    train_features = conll.convert_sentences_to_features(
        train_sentences, label_list, f.max_seq_length, tokenizer, source="train.txt")
    num_train_steps, num_warmup_steps = common_flags.finetuning_steps(f, len(train_features),
                                                                      "training windows")
    train_file = os.path.join(f.output_dir, "train.tf_record")
    conll.write_records(train_features, train_file)
    logging.info("***** Running training *****")
    logging.info("  Num sentences = %d (%d windows)", len(train_sentences), len(train_features))
    model = common_flags.finetune(f, strategy, model_fn, loss_fn, train_file, schema,
                                  len(train_features), num_train_steps, num_warmup_steps,
                                  metric_fn=train_metric_fn)

  for split, batch_size, wanted in (("dev", f.eval_batch_size, f.do_eval),
                                    ("test", f.predict_batch_size, f.do_predict)):
    if not wanted:
      continue
    path, sentences = read_split(f.data_dir, split)
    features = conll.convert_sentences_to_features(sentences, label_list, f.max_seq_length,
                                                   tokenizer, source=path)
    record_file = os.path.join(f.output_dir, f"{'eval' if split == 'dev' else 'predict'}"
                               f".tf_record")
    conll.write_records(features, record_file)
    input_fn = training.records_input_fn([record_file], schema, batch_size, is_training=False)
    if model is None:
      model, _ = training.restore_model(strategy, model_fn, input_fn, f.output_dir,
                                        f.init_checkpoint)
    predicted_ids, loss = _predict_ids(strategy, model, input_fn)
    predicted_tags = conll.predictions_to_tags(sentences, features, predicted_ids, label_list)
    scores = conll.entity_scores([s.tags for s in sentences], predicted_tags)
    prefix = "eval" if split == "dev" else "test"
    results = conll.scores_to_results(scores, prefix=prefix)
    results[f"{prefix}_loss"] = loss
    results["global_step"] = training.global_step(model)
    logging.info("***** %s results (%d sentences, %s) *****\n%s", path, len(sentences),
                 conll.detect_scheme(sentences), conll.format_report(scores))
    training.write_eval_results(os.path.join(f.output_dir, f"{prefix}_results.txt"), results)
    if split == "test":
      conll.write_predictions(os.path.join(f.output_dir, "test_predictions.txt"), sentences,
                              predicted_tags)
  return model
