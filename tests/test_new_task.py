"""The task seam, as docs/adding-a-task.md says to add a task: a task that bert_tf does not ship
(a sentence-pair classifier whose labels come from a label file of its own) written as a module
of its own and a run script, into a directory outside the repository, and nothing else. The
script trains, evaluates, predicts and exports it as a user runs it (a subprocess: the module
registers its task on import); a second process that imports the module serves the export and
the run's output_dir with bert_tf.serving.predictor: the same probabilities as the run's own
predictions of the test split."""
import importlib.util
import json
import sys
import textwrap

import numpy as np
import pytest

from bert_tf.errors import BertTfError
from bert_tf.drivers import finetune_options
from bert_tf.tasks import base
from bert_tf.training import run_dir
from support import tiny
from support.script_runner import run_script

SEQ = 16
LABELS = ["same", "other"]

# The task's module: its flags, its records, head, loss, metric and result files, its server.
TASK_MODULE = '''
"""Pairs of sentences, each labelled with one of a label file's labels."""
import dataclasses
import os
from typing import Optional

from bert_tf.errors import BertTfError
from bert_tf.io.fileio import read_lines
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model import heads
from bert_tf.options import option
from bert_tf.tasks import base
from bert_tf.training import run_dir
from bert_tf.tasks import glue
from bert_tf.tasks import glue_server
from bert_tf.tasks import metrics


@dataclasses.dataclass(frozen=True)
class PairOptions:
  """The task's flags: where its data are (the run script's), its label file (also the
  export's), and their rule."""
  pairs_dir: Optional[str] = option(None, "Where train.tsv, dev.tsv and test.tsv are: "
                                    "label<TAB>text_a<TAB>text_b a line.")
  pair_labels: Optional[str] = option(None, "The labels, one a line.", export=True)

  def __post_init__(self):
    if self.pair_labels is not None and not self.pair_labels.endswith(".txt"):
      raise BertTfError(f"--pair_labels: expected a .txt file, got {self.pair_labels}")


def read_labels(path):
  return [line.strip() for line in read_lines(path) if line.strip()]


@base.register("pairs")
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
    rows = [line.rstrip("\\n").split("\\t") for line in
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
                          "".join("\\t".join(map(str, row)) + "\\n" for row in probabilities))
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
'''

# Its run script, as run_swag.py is.
RUN_SCRIPT = '''
"""Fine-tune a sentence-pair classifier whose labels come from a label file."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.drivers import finetuning  # noqa: E402
import pairs_task  # noqa: E402


def define_flags():
  bert_flags.define_finetuning_flags(pairs_task.PairTask)
  flags.adopt_module_key_flags(bert_flags)


def main(_):
  options = bert_flags.finetune_options(pairs_task.PairTask, bert_flags.values())
  finetuning.run(pairs_task.PairTask, options)


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("pairs_dir", "pair_labels", "output_dir")
  app.run(main)
'''

# A user's serving process: imports the task's module, then loads the export and the run.
SERVE_SCRIPT = '''
import json
import sys

import pairs_task  # noqa: F401  (registers the task)
from bert_tf.serving import predictor

request = json.load(open(sys.argv[1]))
answers = {}
for name in ("export_dir", "output_dir"):
  loaded = predictor.load(request[name], batch_size=4)
  answers[name] = {"task": loaded.task, "labels": loaded.label_list,
                   "served": loaded(request["pairs"])}
print(json.dumps(answers))
'''


def _pairs(rng, n):
  sentence = lambda: " ".join(rng.choice(tiny.WORDS[5:], 4))  # noqa: E731
  rows = []
  for _ in range(n):
    a, same = sentence(), rng.rand() < 0.5
    rows.append((LABELS[0], a, a) if same else (LABELS[1], a, sentence()))
  return rows


@pytest.fixture(scope="module")
def work(tmp_path_factory):
  """The task's module and scripts in a directory of their own, and its data."""
  root = tmp_path_factory.mktemp("new_task")
  (root / "pairs_task.py").write_text(textwrap.dedent(TASK_MODULE))
  (root / "run_pairs.py").write_text(textwrap.dedent(RUN_SCRIPT))
  (root / "serve_pairs.py").write_text(textwrap.dedent(SERVE_SCRIPT))
  rng = np.random.RandomState(0)
  data = root / "pairs"
  data.mkdir()
  for split, n in (("train", 16), ("dev", 4), ("test", 6)):
    (data / f"{split}.tsv").write_text("".join(f"{l}\t{a}\t{b}\n" for l, a, b in _pairs(rng, n)))
  (root / "labels.txt").write_text("\n".join(LABELS) + "\n")
  config = tiny.write_config(root / "bert_config.json", len(tiny.WORDS))
  return root, data, config, tiny.write_vocab(root)


def test_a_task_of_its_own_module_and_script_trains_exports_and_serves(work):
  root, data, config, vocab = work
  output_dir, export_dir = root / "out", root / "export"
  run = run_script(str(root / "run_pairs.py"), f"--pairs_dir={data}",
                   f"--pair_labels={root / 'labels.txt'}", f"--output_dir={output_dir}",
                   f"--bert_config_file={config}", f"--vocab_file={vocab}",
                   f"--max_seq_length={SEQ}", "--do_train", "--do_eval", "--do_predict",
                   "--train_batch_size=4", "--eval_batch_size=4", "--predict_batch_size=4",
                   "--num_train_epochs=1", "--learning_rate=1e-3", "--seed=1",
                   f"--export_dir={export_dir}", cwd=str(root), timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  assert "eval_accuracy" in run.stdout + run.stderr
  recorded = json.loads((output_dir / "task_config.json").read_text())
  assert recorded["task"] == "pairs" and recorded["label_list"] == LABELS
  predicted = np.loadtxt(output_dir / "test.tsv")
  test = [line.split("\t")[1:] for line in (data / "test.tsv").read_text().splitlines()]
  assert predicted.shape == (len(test), len(LABELS))

  request = root / "request.json"
  request.write_text(json.dumps({"export_dir": str(export_dir), "output_dir": str(output_dir),
                                 "pairs": test}))
  served = run_script(str(root / "serve_pairs.py"), str(request), cwd=str(root), timeout=600)
  assert served.returncode == 0, served.stderr[-3000:]
  answers = json.loads(served.stdout.strip().splitlines()[-1])
  for name, answer in answers.items():
    assert (answer["task"], answer["labels"]) == ("pairs", LABELS), name
    np.testing.assert_allclose([[r["scores"][label] for label in LABELS]
                                for r in answer["served"]], predicted, atol=1e-5, err_msg=name)
    assert [r["label"] for r in answer["served"]] == [
        LABELS[i] for i in predicted.argmax(axis=1)], name


@pytest.fixture
def pairs_task(work, monkeypatch):
  """The task's module imported here, its registration undone afterwards."""
  base.names()  # every shipped task registered first
  monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # pylint: disable=protected-access
  spec = importlib.util.spec_from_file_location("pairs_task", work[0] / "pairs_task.py")
  module = importlib.util.module_from_spec(spec)
  monkeypatch.setitem(sys.modules, "pairs_task", module)
  spec.loader.exec_module(module)
  return module


def test_its_flags_rules_and_run_kind(pairs_task, work, tmp_path):
  from absl import flags  # pylint: disable=g-import-not-at-top
  from bert_tf.cli import flags as bert_flags  # pylint: disable=g-import-not-at-top
  own, exported = flags.FlagValues(), flags.FlagValues()
  bert_flags.define_flags(pairs_task.PairOptions, flag_values=own)
  bert_flags.define_flags(pairs_task.PairOptions, export=True, flag_values=exported)
  assert sorted(own) == ["pair_labels", "pairs_dir"] and sorted(exported) == ["pair_labels"]
  with pytest.raises(BertTfError, match="^--pair_labels: expected a .txt file, got x.csv$"):
    pairs_task.PairOptions(pair_labels="x.csv")
  root, data, config, vocab = work
  options = finetune_options.FinetuneOptions(
      output_dir=str(tmp_path / "out"), bert_config_file=str(config), vocab_file=str(vocab),
      do_train=True, max_seq_length=SEQ,
      task=pairs_task.PairOptions(str(data), str(root / "labels.txt")))
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "task_config.json").write_text(
      '{"task": "pairs", "do_lower_case": true, "max_seq_length": 16, "label_list": ["yes", '
      '"no"], "pair": true, "regression": false}')
  with pytest.raises(BertTfError, match=r"holds a pairs fine-tuning run with label_list=\['yes', "
                     r"'no'\] \(task_config.json\), not this run's label_list=\['same', 'other'\]"):
    run_dir.RunDir(options.output_dir).check(run_dir.Run(
        training=True, config=None, run_shape={}, task=pairs_task.PairTask(options, None)))
