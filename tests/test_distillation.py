"""Distillation (bert_tf.drivers.distillation, bert_tf.model.student): the loss of Hinton et al. on
the teacher's soft targets, a student from its teacher's own layers, and run_classifier.py /
run_ner.py distilling end to end on tiny configs (packed, evaluated during training, resumed
exactly, exported), with a bad --teacher_dir in one line."""
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.drivers import distillation
from bert_tf.drivers import finetune_options
from bert_tf.drivers.finetune_options import FinetuneOptions
from bert_tf.model import checkpoints
from bert_tf.model import modeling
from bert_tf.model import student
from bert_tf.model.config import BertConfig
from bert_tf.serving import predictor
from bert_tf.tasks import glue
from support.script_runner import run_script
from support.models import randomize
from support.task_data import synthetic_sst2, with_layers
from support.tiny import WORDS, common_args, read_results, write_config, write_vocab


def _softmax(x):
  e = np.exp(x - x.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def _features(teacher, labels, hard):
  features = {distillation.teacher_feature(j): tf.constant(teacher[..., j], tf.float32)
              for j in range(teacher.shape[-1])}
  features["label_ids"] = tf.constant(labels, tf.int32)
  features[distillation.HARD_WEIGHTS] = tf.constant(hard, tf.float32)
  features[distillation.SOFT_WEIGHTS] = tf.ones_like(features[distillation.HARD_WEIGHTS])
  return features


# ---------------------------------------------------------------------------- the loss


def test_soft_targets_reach_the_loss_scaled_by_t_squared():
  rng = np.random.default_rng(0)
  teacher, logits = rng.normal(size=(4, 3)) * 3, rng.normal(size=(4, 3))
  features = _features(teacher, [0, 1, 2, 0], [1.0, 1.0, 0.0, 1.0])
  for t in (1.0, 2.0, 4.0):
    student_logits = tf.Variable(logits, dtype=tf.float32)
    with tf.GradientTape() as tape:
      loss = distillation.distillation_loss(features, {"logits": student_logits}, 3, t, 1.0)
    # alpha=1: T^2 times the soft cross-entropy at temperature T, a mean over the examples ...
    p, q = _softmax(teacher / t), _softmax(logits / t)
    expected = np.mean(-np.sum(p * np.log(q), axis=-1)) * t * t
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    # ... whose gradient is T (q - p) / N: T^2 keeps the soft term's pull as T grows.
    np.testing.assert_allclose(tape.gradient(loss, student_logits).numpy(), t * (q - p) / 4,
                               rtol=1e-4, atol=1e-6)
  # Other soft targets, another loss: the teacher's logits are what the loss reads.
  other = _features(teacher[::-1].copy(), [0, 1, 2, 0], [1.0, 1.0, 0.0, 1.0])
  assert float(distillation.distillation_loss(other, {"logits": tf.constant(logits, tf.float32)},
                                              3, 2.0, 1.0)) != pytest.approx(float(loss))


def test_hard_term_is_the_task_loss_and_the_transfer_set_has_none(tmp_path):
  rng = np.random.default_rng(1)
  teacher, logits = rng.normal(size=(4, 2)), tf.constant(rng.normal(size=(4, 2)), tf.float32)
  labels = [0, 1, 1, 0]
  options = FinetuneOptions(output_dir=str(tmp_path), bert_config_file="c", vocab_file="v",
                            do_train=True, task=glue.GlueOptions(str(tmp_path), "SST-2"))
  task = glue.GlueTask(options, None)
  features = _features(teacher, labels, [1.0] * 4)
  hard_only = distillation.distillation_loss(features, {"logits": logits}, 2, 3.0, 0.0)
  assert float(hard_only) == pytest.approx(float(task.loss_fn(features, {"logits": logits})))
  # The last two are transfer examples: their hard term is 0, their soft term counts.
  mixed = _features(teacher, labels, [1.0, 1.0, 0.0, 0.0])
  losses = distillation.element_losses(mixed, logits, 2, 1.0, 0.5).numpy()
  soft = -np.sum(_softmax(teacher) * np.log(_softmax(logits.numpy())), axis=-1)
  np.testing.assert_allclose(losses[2:], 0.5 * soft[2:], rtol=1e-5)
  assert np.all(losses[:2] > 0.5 * soft[:2])


def test_options_rules():
  with pytest.raises(BertTfError, match="--distill_alpha"):
    finetune_options.DistillOptions(teacher_dir="t", distill_alpha=1.5)
  with pytest.raises(BertTfError, match="--distill_temperature"):
    finetune_options.DistillOptions(teacher_dir="t", distill_temperature=0)
  with pytest.raises(BertTfError, match="--transfer_file: only with --teacher_dir"):
    finetune_options.DistillOptions(transfer_file="x")


# ---------------------------------------------------------------------------- student from teacher


CONFIG = BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=4,
                    num_attention_heads=2, intermediate_size=20, max_position_embeddings=32)


def test_student_from_teacher_layers_maps_the_right_variables(tmp_path):
  teacher = randomize(modeling.BertPretrainer(CONFIG))
  prefix = checkpoints.save_tf1_checkpoint(teacher, str(tmp_path / "t" / "bert_model.ckpt"))
  CONFIG.to_json_file(str(tmp_path / "t" / "bert_config.json"))
  write_vocab(tmp_path / "t")
  source = checkpoints.open_checkpoint(prefix)
  for layers, flags in (([0, 2], {"student_layers": 2}), ([3, 1], {"teacher_layers": "3,1"})):
    out = str(tmp_path / ("s" + "_".join(map(str, layers))) / "bert_model.ckpt")
    written, taken = student.write_student(prefix, out, **flags)
    assert taken == layers
    got = checkpoints.open_checkpoint(written)
    for name in source.shapes:
      if "/layer_" not in name:  # embeddings, pooler, pretraining heads: copied as they are
        np.testing.assert_array_equal(got.read(name), source.read(name))
    for i, layer in enumerate(layers):
      names = [n for n in source.shapes if n.startswith(f"bert/encoder/layer_{layer}/")]
      assert len(names) == 16
      for name in names:
        mine = name.replace(f"layer_{layer}/", f"layer_{i}/")
        np.testing.assert_array_equal(got.read(mine), source.read(name))
    assert not [n for n in got.shapes if n.startswith("bert/encoder/layer_2/")]
    config = BertConfig.from_json_file(os.path.join(os.path.dirname(out), "bert_config.json"))
    assert config.num_hidden_layers == 2 and config.hidden_size == CONFIG.hidden_size
    assert os.path.exists(os.path.join(os.path.dirname(out), "vocab.txt"))
  assert student.every_kth_layer(6, 3) == [0, 2, 4] and student.every_kth_layer(6, 2) == [0, 3]
  for flags, message in (({"teacher_layers": "0,9"}, "--teacher_layers"),
                         ({"teacher_layers": "1,1"}, "--teacher_layers"),
                         ({"student_layers": 5}, "--student_layers"),
                         ({}, "give one of them")):
    with pytest.raises(BertTfError, match=message):
      student.write_student(prefix, str(tmp_path / "bad" / "ckpt"), **flags)


# ---------------------------------------------------------------------------- the scripts


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  """A tiny SST-2 teacher (2 layers) fine-tuned, its student's first weights (its layer 1),
  and an unlabelled transfer file."""
  root = tmp_path_factory.mktemp("distill")
  vocab = write_vocab(root)
  config = write_config(root / "bert_config.json", len(WORDS))
  synthetic_sst2(root / "data", seed=3, n=128)
  teacher = root / "teacher"
  run = run_script("run_classifier.py", *common_args(root / "data", vocab, config, teacher),
                   "--task_name=SST-2", "--do_train", "--train_batch_size=16",
                   "--num_train_epochs=3", "--learning_rate=2e-3")
  assert run.returncode == 0, run.stderr[-3000:]
  init = root / "student" / "bert_model.ckpt"
  run = run_script("convert_checkpoint.py", f"--input={teacher}", f"--output={init}",
                   "--teacher_layers=1")
  assert run.returncode == 0, run.stderr[-3000:]
  rows = (root / "data" / "test.tsv").read_text().splitlines()[1:]
  (root / "transfer.tsv").write_text("".join(r.split("\t")[1] + "\n" for r in rows))
  return root


def _student_args(world, output_dir, *extra):
  return [*common_args(world / "data", world / "student" / "vocab.txt",
                       world / "student" / "bert_config.json", output_dir),
          "--task_name=SST-2", "--do_train", f"--init_checkpoint={world / 'student'}/bert_model.ckpt",
          f"--teacher_dir={world / 'teacher'}", "--distill_temperature=2", "--distill_alpha=0.7",
          "--train_batch_size=8", "--learning_rate=1e-3", "--num_train_epochs=2", *extra]


def _records(path):
  return [tf.train.Example.FromString(r.numpy()).features.feature
          for r in tf.data.TFRecordDataset(str(path))]


def test_classifier_distils_packed_evaluated_kept_and_exported(world, tmp_path):
  output_dir = tmp_path / "out"
  run = run_script("run_classifier.py", *_student_args(
      world, output_dir, "--pack_sequences", "--do_eval", "--eval_every_n_steps=10",
      "--keep_best_metric=eval_accuracy", f"--transfer_file={world / 'transfer.tsv'}",
      f"--export_dir={tmp_path / 'export'}"))
  assert run.returncode == 0, run.stderr[-3000:]
  assert "Transfer set: 16 records" in run.stderr
  records = _records(output_dir / "train.tf_record")
  assert len(records) == 128 + 16
  logits = np.load(output_dir / "teacher_logits.npz")["logits"]
  assert logits.shape == (144, 2)
  for i in (0, 127, 128, 143):  # the teacher's logits beside each record's features
    assert list(records[i]["teacher_logit_1"].float_list.value) == [pytest.approx(logits[i, 1])]
    assert records[i]["hard_weights"].float_list.value[0] == (1.0 if i < 128 else 0.0)
  assert read_results(output_dir)["eval_accuracy"] > 0.5
  assert (output_dir / "best" / "best.json").exists()
  versions = os.listdir(tmp_path / "export")
  assert len(versions) == 1 and (tmp_path / "export" / versions[0] / "saved_model.pb").exists()
  # The student serves as any model: its export, called on raw text.
  classify = predictor.load(str(tmp_path / "export"))
  served = classify(["the film was good", "the plot was awful"])
  assert [sorted(r["scores"]) for r in served] == [["0", "1"]] * 2
  assert all(r["score"] == max(r["scores"].values()) for r in served)


def test_resume_is_exact_and_reads_the_teacher_back(world, tmp_path):
  whole = tmp_path / "whole"
  args = ("--save_checkpoints_steps=16", "--keep_checkpoint_max=0")
  run = run_script("run_classifier.py", *_student_args(world, whole, *args))
  assert run.returncode == 0, run.stderr[-3000:]
  # The same run killed after its checkpoint at step 16, then run again.
  resumed = tmp_path / "resumed"
  shutil.copytree(whole, resumed)
  for name in os.listdir(resumed):
    if name.startswith("model.ckpt-32"):
      os.remove(resumed / name)
  (resumed / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-16"\n'
                                      'all_model_checkpoint_paths: "model.ckpt-16"\n')
  run = run_script("run_classifier.py", *_student_args(world, resumed, *args))
  assert run.returncode == 0, run.stderr[-3000:]
  assert "Resuming from" in run.stderr and "Teacher's logits read back" in run.stderr
  a, b = (tf.train.load_checkpoint(str(d / "model.ckpt-32")) for d in (whole, resumed))
  names = [n for n in a.get_variable_to_shape_map() if n.startswith("model/")]
  assert names
  for name in names:
    np.testing.assert_array_equal(a.get_tensor(name), b.get_tensor(name), err_msg=name)
  # Going on with another temperature, or with no teacher, is one line.
  for flag, error in (("--distill_temperature=3", "--distill_temperature: "),
                      ("--teacher_dir=", "--teacher_dir: ")):
    run = run_script("run_classifier.py", *_student_args(world, resumed, *args, flag,
                                                         "--num_train_epochs=3"))
    assert run.returncode == 1 and run.stderr.strip().splitlines()[-1].startswith(
        f"error: {error}"), run.stderr[-2000:]


def test_a_bad_or_other_teacher_is_one_line(world, tmp_path):
  cases = [(str(tmp_path / "nowhere"), "is not the output_dir of a fine-tuning run"),
           (str(world / "data"), "is not the output_dir of a fine-tuning run")]
  for teacher, message in cases:
    run = run_script("run_classifier.py", *_student_args(world, tmp_path / "out",
                                                         f"--teacher_dir={teacher}"))
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1 and last.startswith("error: --teacher_dir: ") and message in last
  assert not (tmp_path / "out").exists()
  # Soft targets of one teacher in output_dir: another teacher there is refused.
  out = tmp_path / "mine"
  out.mkdir()
  (out / distillation.DISTILLATION_FILE).write_text(
      '{"teacher": {"teacher_dir": "/elsewhere", "checkpoint": "model.ckpt-9"}}')
  run = run_script("run_classifier.py", *_student_args(world, out))
  last = run.stderr.strip().splitlines()[-1]
  assert run.returncode == 1 and "holds soft targets of the teacher /elsewhere" in last


def test_tagger_distils_with_a_transfer_set(conll_data, tmp_path):
  d = conll_data
  # One layer: the records, the soft targets and the student's evaluation are the same checks at
  # any depth.
  common = with_layers(d.common, tmp_path, 1)
  teacher = tmp_path / "teacher"
  run = run_script("run_ner.py", *common, f"--output_dir={teacher}", "--do_train",
                   "--num_train_epochs=2")
  assert run.returncode == 0, run.stderr[-3000:]
  words = [line.split()[0] for line in (d.data_dir / "test.txt").read_text().splitlines()
           if line.strip()]
  (tmp_path / "words.txt").write_text("\n".join(w if i % 6 else "\n" + w
                                                for i, w in enumerate(words)) + "\n")
  out = tmp_path / "student"
  run = run_script("run_ner.py", *common, f"--output_dir={out}", "--do_train", "--do_eval",
                   f"--teacher_dir={teacher}", f"--transfer_file={tmp_path / 'words.txt'}",
                   "--pack_sequences", "--num_train_epochs=1", f"--init_checkpoint={teacher}")
  assert run.returncode == 0, run.stderr[-3000:]
  records = _records(out / "train.tf_record")
  logits = np.load(out / "teacher_logits.npz")["logits"]
  assert logits.shape[:2] == (len(records), 16)
  labelled = [r for r in records if sum(r["hard_weights"].float_list.value)]
  transfer = [r for r in records if not sum(r["hard_weights"].float_list.value)]
  assert len(labelled) == 160 and transfer
  # The soft term counts each word's first piece, in the transfer set too.
  assert all(sum(r["soft_weights"].float_list.value) > 0 for r in transfer)
  assert list(labelled[0]["soft_weights"].float_list.value) == list(
      labelled[0]["label_weights"].float_list.value)
  assert "eval_f1" in (out / "eval_results.txt").read_text()
