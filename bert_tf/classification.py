"""What run_classifier.py and run_swag.py do: examples -> TFRecords -> train / eval / predict.

Both scripts fine-tune one label per example (GLUE/XNLI: one sequence; SWAG: one sequence per
choice), so they share this driver and differ only in a Task: how examples are read and written as
records, which model and loss, which metrics, and which prediction files.

Training with no --init_checkpoint is allowed (a tiny model on synthetic data needs nothing else)
but logs a warning: fine-tuning an untrained encoder is rarely what was meant.
"""
import os

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import common_flags
from bert_tf import heads
from bert_tf import metrics
from bert_tf import records
from bert_tf import training
from bert_tf.data import glue
from bert_tf.data import swag
from bert_tf.errors import BertTfError
from bert_tf.fileio import write_text_atomically


def _softmax(logits):
  z = logits - logits.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def _cross_entropy(logits, labels):
  """Mean softmax cross-entropy of integer labels, in float64."""
  shifted = logits - logits.max(axis=-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
  return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


def _sparse_cross_entropy(features, outputs):
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=features["label_ids"], logits=outputs["logits"]))


class GlueTask:
  """One GLUE / XNLI task: a processor, BertClassifier, its loss and metrics."""

  def __init__(self, task_name, max_seq_length, tokenizer):
    self.name = task_name.lower()
    self.processor = glue.get_processor(task_name)
    self.label_list = self.processor.get_labels()
    self.regression = self.processor.regression
    self.max_seq_length = max_seq_length
    self.tokenizer = tokenizer
    self.schema = records.classifier_features(max_seq_length, regression=self.regression)

  def examples(self, split, data_dir):
    return getattr(self.processor, f"get_{split}_examples")(data_dir)

  def write_records(self, examples, path):
    glue.file_based_convert_examples_to_features(examples, self.label_list, self.max_seq_length,
                                                 self.tokenizer, path)

  def model_fn(self, config, trim_padding=False):
    return lambda: heads.BertClassifier(config, num_labels=len(self.label_list), trim_padding=trim_padding)

  def loss_fn(self, features, outputs):
    logits = outputs["logits"]
    if self.regression:
      labels = tf.cast(features["label_ids"], tf.float32)
      return tf.reduce_mean(tf.square(logits[:, 0] - labels))
    return _sparse_cross_entropy(features, outputs)

  def train_metric_fn(self, features, outputs):
    if self.regression:
      return {}
    predictions = tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32)
    return {"accuracy": (tf.cast(predictions == features["label_ids"], tf.float32), None)}

  def eval_metrics(self, logits, labels):
    """eval_results.txt entries, from all of the dev set's logits and labels at once."""
    if self.regression:
      scores = logits[:, 0]
      return {"eval_loss": float(np.mean((scores - labels) ** 2)),
              "eval_pearson": metrics.pearson(labels, scores),
              "eval_spearman": metrics.spearman(labels, scores),
              # Rounded scores against rounded labels: the accuracy line every task has.
              "eval_accuracy": metrics.accuracy(np.round(labels), np.round(scores))}
    labels = labels.astype(np.int64)
    predictions = logits.argmax(axis=-1)
    results = {"eval_loss": _cross_entropy(logits, labels),
               "eval_accuracy": metrics.accuracy(labels, predictions)}
    if self.name in ("mrpc", "qqp"):
      results["eval_f1"] = metrics.f1(labels, predictions)
    if self.name == "cola":
      results["eval_mcc"] = metrics.matthews_corrcoef(labels, predictions)
    return results

  def write_predictions(self, examples, logits, output_dir):
    """test_results.tsv (class probabilities, as the original; the score for regression) and the
    GLUE submission file (index<TAB>prediction, label names)."""
    if self.regression:
      values = logits[:, :1]
      predictions = [f"{v:.3f}" for v in logits[:, 0]]
    else:
      values = _softmax(logits)
      predictions = [self.label_list[i] for i in logits.argmax(axis=-1)]
    write_text_atomically(os.path.join(output_dir, "test_results.tsv"), "".join(
        "\t".join(str(p) for p in row) + "\n" for row in values))
    name = self.processor.submission_name
    if name:
      write_text_atomically(os.path.join(output_dir, f"{name}.tsv"), "index\tprediction\n" + "".join(
          f"{i}\t{p}\n" for i, p in enumerate(predictions)))


class SwagTask:
  """SWAG multiple choice: four sequences per example, softmax over the choices."""

  regression = False

  def __init__(self, max_seq_length, tokenizer, seed):
    self.max_seq_length = max_seq_length
    self.tokenizer = tokenizer
    self.seed = seed
    self.schema = records.multiple_choice_features(max_seq_length, swag.NUM_CHOICES)

  def examples(self, split, data_dir):
    files = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}
    return swag.read_swag_examples(os.path.join(data_dir, files[split]), seed=self.seed)

  def write_records(self, examples, path):
    swag.file_based_convert_examples_to_features(examples, self.max_seq_length, self.tokenizer,
                                                 path)

  def model_fn(self, config, trim_padding=False):
    return lambda: heads.BertMultipleChoice(config, num_choices=swag.NUM_CHOICES, trim_padding=trim_padding)

  def loss_fn(self, features, outputs):
    return _sparse_cross_entropy(features, outputs)

  def train_metric_fn(self, features, outputs):
    predictions = tf.argmax(outputs["logits"], axis=-1, output_type=tf.int32)
    return {"accuracy": (tf.cast(predictions == features["label_ids"], tf.float32), None)}

  def eval_metrics(self, logits, labels):
    labels = labels.astype(np.int64)
    return {"eval_loss": _cross_entropy(logits, labels),
            "eval_accuracy": metrics.accuracy(labels, logits.argmax(axis=-1))}

  def write_predictions(self, examples, logits, output_dir):
    """test_results.tsv: guid, the four choice probabilities and the predicted choice."""
    probabilities = _softmax(logits)
    lines = ["guid\tprob0\tprob1\tprob2\tprob3\tprediction\n"]
    for example, row in zip(examples, probabilities):
      lines.append("\t".join([example.guid] + [f"{p:.6f}" for p in row]
                             + [str(int(row.argmax()))]) + "\n")
    write_text_atomically(os.path.join(output_dir, "test_results.tsv"), "".join(lines))


def run(flags_values, task_kind="glue"):
  """The whole of run_classifier.py (task_kind "glue") or run_swag.py ("swag") for parsed FLAGS."""
  f = flags_values
  if not (f.do_train or f.do_eval or f.do_predict):
    raise BertTfError("--do_train/--do_eval/--do_predict: at least one must be True")
  config, tokenizer = common_flags.config_and_tokenizer_from_flags(f)
  if task_kind == "swag":
    task = SwagTask(f.max_seq_length, tokenizer, f.seed)
  else:
    task = GlueTask(f.task_name, f.max_seq_length, tokenizer)
  # Python-only work above; the strategy must come before the first TensorFlow op.
  strategy = common_flags.runtime_from_flags()
  tf.io.gfile.makedirs(f.output_dir)
  model_fn = task.model_fn(config, common_flags.trim_padding_from_flags())
  model = None

  if f.do_train:
    if not f.init_checkpoint:
      logging.warning("No --init_checkpoint: fine-tuning starts from a randomly initialized "
                      "encoder.")
    train_examples = task.examples("train", f.data_dir)
    num_train_steps, num_warmup_steps = common_flags.finetuning_steps(f, len(train_examples),
                                                                      "training examples")
    train_file = os.path.join(f.output_dir, "train.tf_record")
    task.write_records(train_examples, train_file)
    logging.info("***** Running training *****")
    logging.info("  Num examples = %d", len(train_examples))
    model = common_flags.finetune(f, strategy, model_fn, task.loss_fn, train_file, task.schema,
                                  len(train_examples), num_train_steps, num_warmup_steps,
                                  metric_fn=task.train_metric_fn)

  for split, batch_size, flag in (("dev", f.eval_batch_size, f.do_eval),
                                  ("test", f.predict_batch_size, f.do_predict)):
    if not flag:
      continue
    examples = task.examples(split, f.data_dir)
    path = os.path.join(f.output_dir, "eval.tf_record" if split == "dev" else "predict.tf_record")
    task.write_records(examples, path)
    input_fn = training.records_input_fn([path], task.schema, batch_size, is_training=False)
    if model is None:
      model, _ = training.restore_model(strategy, model_fn, input_fn, f.output_dir,
                                        f.init_checkpoint)
    logits, labels = _predict(strategy, model, input_fn)
    if split == "dev":
      logging.info("***** Eval results (%d examples) *****", len(examples))
      results = task.eval_metrics(logits, labels)
      results["global_step"] = training.global_step(model)
      training.write_eval_results(os.path.join(f.output_dir, "eval_results.txt"), results)
    else:
      task.write_predictions(examples, logits, f.output_dir)
  return model


def _predict(strategy, model, input_fn):
  """All logits (float64) and labels of input_fn's examples, in order."""
  logits, labels = [], []
  for batch in training.predict(strategy, model, input_fn):
    logits.append(batch["logits"].astype(np.float64))
    labels.append(batch["label_ids"])
  return np.concatenate(logits), np.concatenate(labels).astype(np.float64)
