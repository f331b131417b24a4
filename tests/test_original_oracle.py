"""The original release itself as the oracle: bert-tensorflow 1.0.4's modeling.BertModel, the
masked-LM and next-sentence heads of its run_pretraining.py, and its extract_features.py.

The original runs on TF 2.20 in a tf.compat.v1 Graph and Session, in a subprocess of its own (its
scripts define absl flags that clash with one another's and ours), with the one piece of TF 1.15
that TF 2 lacks re-created as TF 1.15 wrote it: tensorflow.contrib.layers.layer_norm (variables
LayerNorm/beta and LayerNorm/gamma, moments over the last axis, epsilon 1e-12). The original
writes a seeded TF1 checkpoint itself (its own random initialisation, then every LayerNorm and
bias value moved away from 1 and 0 so that each weight counts) with tf.compat.v1.train.Saver;
our models load it through bert_tf.model.checkpoints.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.drivers import pretraining
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig
from bert_tf.model import modeling
from support.paths import REPO
from support.script_runner import run_script
from support.oracle import CONFIG, ORACLE, VOCAB, inputs

TOLERANCE = 1e-5


def run_oracle(*args):
  result = subprocess.run([sys.executable, "-c", ORACLE, *args], capture_output=True, text=True,
                          cwd=REPO, timeout=600,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_USE_LEGACY_KERAS="1"))
  assert result.returncode == 0, result.stderr[-4000:]


def max_diff(a, b):
  return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


@pytest.fixture(scope="module")
def original(tmp_path_factory):
  """(work dir with the original's bert_config.json, bert_model.ckpt and outputs; inputs)."""
  work_dir = tmp_path_factory.mktemp("original")
  (work_dir / "bert_config.json").write_text(json.dumps(CONFIG))
  f = inputs()
  np.savez(work_dir / "inputs.npz", **f)
  run_oracle("pretraining", str(work_dir))
  return work_dir, f, dict(np.load(work_dir / "original_outputs.npz"))


def load_ours(work_dir, **changes):
  config = BertConfig.from_dict(dict(CONFIG, **changes))
  model = modeling.BertPretrainer(config)
  result = checkpoints.init_from_checkpoint(model, str(work_dir / "bert_model.ckpt"))
  assert not result.not_found and not result.unused
  return model


def compare(outputs, theirs, what):
  diffs = {f"layer_{i}": max_diff(layer, theirs[f"layer_{i}"])
           for i, layer in enumerate(outputs["encoder_outputs"])}
  diffs["embedding_output"] = max_diff(outputs["embedding_output"], theirs["embedding_output"])
  diffs["pooled_output"] = max_diff(outputs["pooled_output"], theirs["pooled_output"])
  diffs["mlm_logits"] = max_diff(np.reshape(outputs["mlm_logits"], [-1, CONFIG["vocab_size"]]),
                                 theirs["mlm_logits"])
  diffs["nsp_logits"] = max_diff(outputs["nsp_logits"], theirs["nsp_logits"])
  print(f"{what} vs the original: " + ", ".join(f"{k} {v:.2g}" for k, v in diffs.items()))
  return diffs


def test_checkpoint_is_the_originals_layout(original):
  work_dir, _, _ = original
  names = {name for name, _ in tf.train.list_variables(str(work_dir / "bert_model.ckpt"))}
  ours = set(checkpoints.checkpoint_variables(load_ours(work_dir)))
  assert names == ours


@pytest.mark.parametrize("training", [False, True])
def test_every_layer_and_both_heads_match_the_original(original, training):
  work_dir, f, theirs = original
  diffs = compare(load_ours(work_dir)(f, training=training), theirs,
                  "training forward" if training else "inference")
  assert len(diffs) == CONFIG["num_hidden_layers"] + 4
  assert max(diffs.values()) < TOLERANCE, diffs


def test_the_exact_gelu_would_not_match(original):
  """The checkpoint tells the GELU forms apart: the erf form misses the original by far more
  than the tolerance (this is how the erf form went unnoticed against transformers)."""
  work_dir, f, theirs = original
  diffs = compare(load_ours(work_dir, hidden_act="gelu_exact")(f), theirs, "gelu_exact")
  assert diffs["layer_0"] > 20 * TOLERANCE and diffs["mlm_logits"] > 20 * TOLERANCE


def test_loss_and_gradients_match_the_original(original):
  """The training step's loss and every weight's gradient (our GELU's own training form and
  gradient included) against the original's tf.gradients of its total_loss."""
  work_dir, f, theirs = original
  model = load_ours(work_dir)
  with tf.GradientTape() as tape:
    loss = pretraining.loss_fn()(f, model(f, training=True))
  variables = checkpoints.checkpoint_variables(model)
  gradients = tape.gradient(loss, list(variables.values()))
  assert abs(float(loss) - float(theirs["loss"])) < TOLERANCE
  worst = {}
  for name, gradient in zip(variables, gradients):
    expected = theirs["grad/" + name]
    gradient = tf.convert_to_tensor(gradient).numpy()  # IndexedSlices for the embeddings.
    worst[name] = max_diff(gradient, expected) / max(1.0, float(np.abs(expected).max()))
  print("gradients vs the original: largest relative diff "
        f"{max(worst.values()):.2g} ({max(worst, key=worst.get)})")
  assert max(worst.values()) < TOLERANCE, worst


def test_extract_features_json_lines_match_the_originals(original, tmp_path):
  work_dir, _, _ = original
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  lines = ["the dog is hairy .", "is it jacksonville ? ||| no , it is not .",
           "a cat sat on the mat , the dog sat on a cat , the cat is not hairy .",
           "the cat ||| sat on the dog sat on the mat the mat is hairy , is it ?", "Jackson"]
  input_file = tmp_path / "input.txt"
  input_file.write_text("\n".join(lines) + "\n")
  common = [f"--input_file={input_file}", f"--vocab_file={vocab}", "--layers=-1,-2,-3,-4",
            f"--bert_config_file={work_dir / 'bert_config.json'}", "--max_seq_length=12",
            f"--init_checkpoint={work_dir / 'bert_model.ckpt'}", "--batch_size=2"]
  run_oracle("extract_features", f"--output_file={tmp_path / 'original.jsonl'}", *common)
  result = subprocess.run(
      [sys.executable, os.path.join(REPO, "extract_features.py"),
       f"--output_file={tmp_path / 'ours.jsonl'}", *common], capture_output=True, text=True,
      cwd=REPO, timeout=600, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
  assert result.returncode == 0, result.stderr[-4000:]
  originals = (tmp_path / "original.jsonl").read_text().splitlines()
  ours = (tmp_path / "ours.jsonl").read_text().splitlines()
  assert len(ours) == len(originals) == len(lines)
  worst = 0.0
  for our_line, their_line in zip(ours, originals):
    mine, theirs = json.loads(our_line), json.loads(their_line)
    # Everything but the values is the same text; the values are rounded to 6 decimals by both.
    values = lambda line: [[layer.pop("values") for layer in token["layers"]]  # noqa: E731
                           for token in line["features"]]
    our_values, their_values = np.array(values(mine)), np.array(values(theirs))
    assert mine == theirs
    worst = max(worst, max_diff(our_values, their_values))
  print(f"extract_features values vs the original's: max abs diff {worst:.2g}")
  assert worst < TOLERANCE


# --- Checkpoints the original's run_classifier.py and run_squad.py fine-tuned -------------------

@pytest.fixture(scope="module")
def fine_tuned(original):
  """script -> directory holding the original's model.ckpt-7 (and `checkpoint`) for it."""
  work_dir, _, _ = original
  for script in ("run_classifier", "run_squad"):
    run_oracle("fine_tuned", str(work_dir), script)
  return {script: work_dir / script for script in ("run_classifier", "run_squad")}


def mrpc_dir(root):
  """MRPC-format train/dev/test.tsv of sentences in VOCAB; dev and test hold the same rows."""
  rng = np.random.RandomState(3)
  words = VOCAB[5:]
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  rows = "".join(
      f"{i % 2}\t{i}\t{i + 100}\t{' '.join(rng.choice(words, 1 + i % 7))}\t"
      f"{' '.join(rng.choice(words, 2 + i % 9))}\n" for i in range(11))
  root.mkdir()
  for split in ("train", "dev", "test"):
    (root / f"{split}.tsv").write_text(header + rows)
  return root


def run_ours(script, *args):
  return run_script(script, *args, timeout=600)


def test_original_fine_tuned_classifier_predicts_and_evaluates_as_the_original(
    original, fine_tuned, tmp_path):
  work_dir, _, _ = original
  data_dir = mrpc_dir(tmp_path / "mrpc")
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  common = ["--task_name=MRPC", f"--data_dir={data_dir}", f"--vocab_file={tmp_path / 'vocab.txt'}",
            f"--bert_config_file={work_dir / 'bert_config.json'}", "--max_seq_length=16",
            "--predict_batch_size=4", "--eval_batch_size=4"]
  checkpoint = fine_tuned["run_classifier"]
  run_oracle("run_classifier", *common, "--do_predict=true",
             f"--init_checkpoint={checkpoint / 'model.ckpt-7'}",
             f"--output_dir={tmp_path / 'original'}")
  # Ours, given the original's output_dir as the checkpoint, evaluating and predicting only.
  result = run_ours("run_classifier.py", *common, "--do_eval=true", "--do_predict=true",
                    f"--init_checkpoint={checkpoint}", f"--output_dir={tmp_path / 'ours'}")
  assert result.returncode == 0, result.stderr[-4000:]
  theirs = np.loadtxt(tmp_path / "original" / "test_results.tsv")
  ours = np.loadtxt(tmp_path / "ours" / "test_results.tsv")
  assert ours.shape == theirs.shape == (11, 2)
  print(f"test_results.tsv vs the original's: max abs diff {max_diff(ours, theirs):.2g}")
  assert max_diff(ours, theirs) < TOLERANCE
  # A head left random would give probabilities near 0.5; the original's head does not.
  assert np.abs(theirs - 0.5).max() > 0.05
  labels = np.arange(11) % 2
  results = dict(line.split(" = ") for line in
                 (tmp_path / "ours" / "eval_results.txt").read_text().splitlines())
  assert float(results["eval_accuracy"]) == pytest.approx(
      np.mean(theirs.argmax(-1) == labels), abs=1e-6)
  assert float(results["eval_loss"]) == pytest.approx(
      -np.mean(np.log(theirs[np.arange(11), labels])), abs=TOLERANCE)


def test_original_fine_tuned_squad_head_gives_the_originals_logits(original, fine_tuned):
  from bert_tf.model import heads
  _, f, _ = original
  model = heads.BertSpanLabeler(BertConfig.from_dict(CONFIG))
  model(f)
  result = checkpoints.init_from_checkpoint(model, str(fine_tuned["run_squad"]), complete=True)
  assert sorted(result.head) == ["cls/squad/output_bias", "cls/squad/output_weights"]
  theirs = np.load(fine_tuned["run_squad"] / "original_outputs.npz")
  outputs = model(f)
  for name in ("start_logits", "end_logits"):
    print(f"{name} vs the original: max abs diff {max_diff(outputs[name], theirs[name]):.2g}")
    assert max_diff(outputs[name], theirs[name]) < TOLERANCE


def test_a_head_that_does_not_fit_is_an_error_never_a_random_head(original, fine_tuned,
                                                                  tmp_path):
  from bert_tf.errors import BertTfError
  from bert_tf.model import heads
  work_dir, f, _ = original
  config = BertConfig.from_dict(CONFIG)
  three_labels = heads.BertClassifier(config, num_labels=3)
  three_labels(f)
  with pytest.raises(BertTfError, match="output_weights has shape \\[2, 16\\] in the checkpoint "
                                        "but \\[3, 16\\].*another task or number of labels"):
    checkpoints.init_from_checkpoint(three_labels, str(fine_tuned["run_classifier"]))
  # A SQuAD model cannot predict from the classifier's checkpoint, nor from a pre-trained one.
  span = heads.BertSpanLabeler(config)
  span(f)
  for source in (fine_tuned["run_classifier"], work_dir / "bert_model.ckpt"):
    with pytest.raises(BertTfError, match="lacks 2 of the variables this model predicts with"):
      checkpoints.init_from_checkpoint(span, str(source), complete=True)
  # Fine-tuning may start a new head from either.
  assert not checkpoints.init_from_checkpoint(span, str(work_dir / "bert_model.ckpt")).head
  # Through the script: predicting from a pre-trained checkpoint is one line and exit 1.
  data_dir = mrpc_dir(tmp_path / "mrpc")
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  result = run_ours("run_classifier.py", "--task_name=MRPC", f"--data_dir={data_dir}",
                    f"--vocab_file={tmp_path / 'vocab.txt'}", "--do_predict=true",
                    f"--bert_config_file={work_dir / 'bert_config.json'}",
                    f"--init_checkpoint={work_dir / 'bert_model.ckpt'}", "--max_seq_length=16",
                    f"--output_dir={tmp_path / 'out'}")
  assert result.returncode == 1
  assert "lacks 2 of the variables this model predicts with (e.g. output_weights" in result.stderr
  assert not (tmp_path / "out" / "test_results.tsv").exists()
