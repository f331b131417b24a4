"""The task seam: a task that bert_tf does not ship, defined and registered in this file alone (a
sentence-pair classifier whose labels come from a label file of its own), trained, evaluated and
predicted by bert_tf.jobs.finetuning.run from its typed options (as a run script builds them),
exported by bert_tf.serving.export.run (export_savedmodel.py's path), and served by
bert_tf.serving.predictor from the export and from the run's output_dir: the same probabilities
as the run's own predictions of the test split."""
import dataclasses
import os
import types
from typing import Optional

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.cli import flags as bert_flags
from bert_tf.errors import BertTfError
from bert_tf.io.fileio import read_lines
from bert_tf.io.fileio import write_text_atomically
from bert_tf.jobs import finetune_options
from bert_tf.jobs import finetuning
from bert_tf.model import heads
from bert_tf.serving import export
from bert_tf.serving import predictor
from bert_tf.tasks import base
from bert_tf.tasks import glue
from bert_tf.tasks import glue_server
from bert_tf.tasks import metrics
from support import tiny

SEQ = 16
LABELS = ["same", "other"]


@dataclasses.dataclass(frozen=True)
class PairOptions:
  """The task's flags: where its data are (the run script's), its label file (also the
  export's), and their rule."""
  pairs_dir: Optional[str] = base.flag(None, "Where train.tsv, dev.tsv and test.tsv are: "
                                       "label<TAB>text_a<TAB>text_b a line.")
  pair_labels: Optional[str] = base.flag(None, "The labels, one a line.", export=True)

  def __post_init__(self):
    if self.pair_labels is not None and not self.pair_labels.endswith(".txt"):
      raise BertTfError(f"--pair_labels: expected a .txt file, got {self.pair_labels}")


def read_labels(path):
  return [line.strip() for line in read_lines(path) if line.strip()]


class PairTask(base.Task):
  """Pairs of sentences, each labelled with one of its label file's labels."""

  script = "run_pairs.py"
  options_class = PairOptions
  server_class = glue_server.ClassifierServer
  run_keys = ("label_list",)
  primary_metric = "eval_accuracy"

  def __init__(self, options, tokenizer):
    super().__init__(options, tokenizer)
    self.label_list = read_labels(options.task.pair_labels)

  def schema(self, is_training):
    return glue.classifier_features(self.options.max_seq_length)

  def write_train_records(self, path):
    examples = self.write_split_records("train", path)
    return len(examples), len(examples), "training pairs"

  def write_split_records(self, split, path):
    rows = [line.rstrip("\n").split("\t") for line in
            read_lines(os.path.join(self.options.task.pairs_dir, f"{split}.tsv"))]
    examples = [glue.InputExample(f"{split}-{i}", a, b, label) for i, (label, a, b) in
                enumerate(rows)]
    glue.file_based_convert_examples_to_features(examples, self.label_list,
                                                 self.options.max_seq_length, self.tokenizer, path)
    return examples

  def loss_fn(self, features, outputs):
    return heads.sparse_cross_entropy(features["label_ids"], outputs["logits"])

  def eval_metric_names(self):
    return ["eval_accuracy"]

  def finish_split(self, split, examples, batches, global_step, output_dir=None):
    logits, labels = glue.logits_and_labels(batches)
    probabilities = metrics.softmax(logits)
    write_text_atomically(os.path.join(output_dir or self.options.output_dir, f"{split}.tsv"),
                          "".join("\t".join(map(str, row)) + "\n" for row in probabilities))
    return {"eval_accuracy": metrics.accuracy(labels, logits.argmax(axis=-1)),
            "global_step": global_step}

  @classmethod
  def serving_options(cls, task_options, init_checkpoint=None):
    return {"label_list": read_labels(task_options.pair_labels), "pair": True,
            "regression": False}

  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None,
                 causal=False):
    return heads.BertClassifier(config, num_labels, trim_padding=trim_padding,
                                bilstm_units=bilstm_units, causal=causal)


@pytest.fixture
def registered(monkeypatch):
  """PairTask registered as "pairs" for the test only (the registry as found afterwards)."""
  base.names()  # every shipped task registered first
  monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # pylint: disable=protected-access
  return base.register("pairs")(PairTask)


def _pairs(rng, n):
  sentence = lambda: " ".join(rng.choice(tiny.WORDS[5:], 4))  # noqa: E731
  rows = []
  for _ in range(n):
    a, same = sentence(), rng.rand() < 0.5
    rows.append((LABELS[0], a, a) if same else (LABELS[1], a, sentence()))
  return rows


@pytest.fixture
def files(tmp_path):
  rng = np.random.RandomState(0)
  data = tmp_path / "data"
  data.mkdir()
  for split, n in (("train", 16), ("dev", 4), ("test", 6)):
    (data / f"{split}.tsv").write_text("".join(f"{l}\t{a}\t{b}\n" for l, a, b in _pairs(rng, n)))
  (tmp_path / "labels.txt").write_text("\n".join(LABELS) + "\n")
  return types.SimpleNamespace(
      data=str(data), labels=str(tmp_path / "labels.txt"), vocab=tiny.write_vocab(tmp_path),
      config=tiny.write_config(tmp_path / "bert_config.json", len(tiny.WORDS)),
      test=[tuple(line.split("\t")[1:]) for line in
            (data / "test.tsv").read_text().splitlines()])


def test_its_flags_come_from_its_options():
  own = flags.FlagValues()
  bert_flags.define_options_flags(PairOptions, flag_values=own)
  assert sorted(own) == ["pair_labels", "pairs_dir"]
  assert own["pairs_dir"].help == PairOptions.__dataclass_fields__["pairs_dir"].metadata["help"]
  exported = flags.FlagValues()
  bert_flags.define_options_flags(PairOptions, export=True, flag_values=exported)
  assert sorted(exported) == ["pair_labels"]


def test_a_task_defined_here_trains_exports_serves_and_predicts(registered, files, tmp_path):
  assert base.names() == ["embeddings", "glue", "ner", "pairs", "squad", "swag"]
  assert base.export_names() == ["embeddings", "glue", "ner", "pairs", "squad"]
  output_dir, export_dir = str(tmp_path / "out"), str(tmp_path / "export")
  values = types.SimpleNamespace(  # what the run script's flags would hold
      pairs_dir=files.data, pair_labels=files.labels, output_dir=output_dir,
      bert_config_file=files.config, vocab_file=files.vocab, max_seq_length=SEQ, do_train=True,
      do_eval=True, do_predict=True, train_batch_size=4, eval_batch_size=4, predict_batch_size=4,
      num_train_epochs=1.0, learning_rate=1e-3, seed=1)
  options = bert_flags.finetune_options(registered, values)
  assert options.task == PairOptions(files.data, files.labels)
  results = finetuning.run(registered, options)
  assert results["dev"]["global_step"] == 4 and 0 <= results["dev"]["eval_accuracy"] <= 1
  predicted = np.loadtxt(os.path.join(output_dir, "test.tsv"))
  assert predicted.shape == (len(files.test), len(LABELS))

  # export_savedmodel.py's path: --task=pairs and its own --pair_labels.
  export_options = finetune_options.ExportOptions(
      bert_config_file=files.config, vocab_file=files.vocab, init_checkpoint=output_dir,
      export_dir=export_dir, max_seq_length=SEQ, task=PairOptions(pair_labels=files.labels))
  assert export.run(base.for_export("pairs"), export_options).startswith(export_dir)
  with pytest.raises(BertTfError, match="--task: .* holds a fine-tuned pairs model, not glue: "
                     "pass --task=pairs$"):
    export.check_task_config("glue", glue.GlueOptions(task_name="mrpc"), output_dir)

  # The SavedModel, and the run's output_dir (its task_config.json names the task).
  from_export = predictor.load(export_dir, task="pairs", batch_size=4)
  from_run = predictor.load(output_dir, task="pairs", batch_size=4)
  for loaded in (from_export, from_run):
    assert (loaded.task, loaded.label_list, loaded.pair) == ("pairs", LABELS, True)
    served = loaded(files.test)
    np.testing.assert_allclose([[r["scores"][label] for label in LABELS] for r in served],
                               predicted, atol=1e-5)
    assert [r["label"] for r in served] == [LABELS[i] for i in predicted.argmax(axis=1)]
  direct = from_export.module.signatures["serving_default"](
      text_a=tf.constant([a for a, _ in files.test]),
      text_b=tf.constant([b for _, b in files.test]))
  np.testing.assert_allclose(direct["probabilities"], predicted, atol=1e-5)


def test_its_rules_and_its_run_kind(registered, files, tmp_path):
  with pytest.raises(BertTfError, match="^--pair_labels: expected a .txt file, got x.csv$"):
    PairOptions(pair_labels="x.csv")
  options = finetune_options.FinetuneOptions(
      output_dir=str(tmp_path / "out"), bert_config_file=files.config, vocab_file=files.vocab,
      do_train=True, max_seq_length=SEQ, task=PairOptions(files.data, files.labels))
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "task_config.json").write_text(
      '{"task": "pairs", "do_lower_case": true, "max_seq_length": 16, "label_list": ["yes", '
      '"no"], "pair": true, "regression": false}')
  with pytest.raises(BertTfError, match=r"holds a pairs fine-tuning run with label_list=\['yes', "
                     r"'no'\] \(task_config.json\), not this run's label_list=\['same', 'other'\]"):
    base.check_recorded_task(registered(options, None), options.output_dir)
