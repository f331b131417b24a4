"""The original release's training as the oracle: N optimizer steps of bert-tensorflow 1.0.4's own
optimization.create_optimizer (warmup, linear decay to 0, AdamWeightDecay with its LayerNorm/bias
exclusion, clip_by_global_norm(1.0) over TF1's gradients) on the models of its run_classifier.py,
run_squad.py and run_pretraining.py, against our scripts run with the original's flags.

Both start from checkpoints the original wrote (LayerNorm and bias values moved away from 1 and 0,
the task heads included) and see the same batches: our script's own (its records through the same
seeded input pipeline, replayed here), fed to the original's graph in a tf.compat.v1 Session
(test_original_oracle.py's harness: TF 2.20 with tf.contrib.layers.layer_norm re-created).
Dropout is 0. The original's classifier drops 0.1 of the pooled output whatever the config says
(a README "Different on purpose" item), so its model runs with is_training=False here, which
leaves the rest of its graph unchanged at dropout 0.

Every weight must agree within 1e-5 in float32 (but those whose gradient is 0 in exact
arithmetic, NOISE_ONLY: held to what the optimizer can make of rounding noise), and the per-step losses and learning rates (our TensorBoard scalars,
--log_steps=1) with the original's; run_squad.py also mirrored over 2 logical CPUs with
--gradient_accumulation_steps=2 (each replica's half of a step in 2 micro-batches), against the
same original run on the whole batch. The global norm is > 1 at every step (the clip engages),
and the original counts the word-embedding gradient per position (it is an IndexedSlices) but
in run_pretraining.py (the masked LM's tied output weights make it dense) and with one-hot
lookups (--use_tpu), which --clip_norm_rule=dense matches.
"""
import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import records
from bert_tf.drivers import pretraining
from bert_tf.tasks import glue
from bert_tf.tasks import squad
from bert_tf.training import scalars
from support.paths import REPO
from support.script_runner import run_script
from support import oracle

TOLERANCE = 1e-5
STEPS, WARMUP = 8, 2
CONFIG = {"vocab_size": len(oracle.VOCAB), "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 48, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
          "max_position_embeddings": 32, "type_vocab_size": 2, "initializer_range": 0.2}
SEQ, PREDICTIONS, BATCH = 16, 5, 8
SEED = 7
LEARNING_RATE = 2e-3
CLASSIFIER_EXAMPLES = 16  # 2 epochs of batches of 8 make 4 steps an epoch: 8 steps, 2 of warmup

TRAIN = r'''

def train(work_dir, job_file):
  """The original's graph for one job, trained on the batches of job["batches"], step by step."""
  import json
  import importlib
  from bert import optimization
  job = json.load(open(job_file))
  module = importlib.import_module("bert." + job["script"])
  flags.FLAGS.mark_as_parsed()
  config = modeling.BertConfig.from_json_file(os.path.join(work_dir, "bert_config.json"))
  batches = dict(np.load(job["batches"]))
  names = sorted({key.split("/", 1)[1] for key in batches})
  with tf.Graph().as_default():
    f = {name: tf1.placeholder(batches["0/" + name].dtype, batches["0/" + name].shape, name=name)
         for name in names}
    one_hot = job["one_hot"]
    if job["script"] == "run_classifier":
      # is_training=False: no dropout of the pooled output (0.1 in the original's training graph).
      loss = module.create_model(config, False, f["input_ids"], f["input_mask"],
                                 f["segment_ids"], f["label_ids"], 2, one_hot)[0]
    elif job["script"] == "run_squad":
      start, end = module.create_model(config, True, f["input_ids"], f["input_mask"],
                                       f["segment_ids"], one_hot)
      seq_length = modeling.get_shape_list(f["input_ids"])[1]

      def compute_loss(logits, positions):  # run_squad.py's model_fn
        one_hot_positions = tf1.one_hot(positions, depth=seq_length, dtype=tf1.float32)
        log_probs = tf1.nn.log_softmax(logits, axis=-1)
        return -tf1.reduce_mean(tf1.reduce_sum(one_hot_positions * log_probs, axis=-1))

      loss = (compute_loss(start, f["start_positions"]) + compute_loss(end, f["end_positions"])) / 2
    else:
      model = modeling.BertModel(config, is_training=True, input_ids=f["input_ids"],
                                 input_mask=f["input_mask"], token_type_ids=f["segment_ids"],
                                 use_one_hot_embeddings=one_hot)
      loss = module.get_masked_lm_output(
          config, model.get_sequence_output(), model.get_embedding_table(),
          f["masked_lm_positions"], f["masked_lm_ids"], f["masked_lm_weights"])[0]
      loss += module.get_next_sentence_output(config, model.get_pooled_output(),
                                              f["next_sentence_labels"])[0]
    tvars = tf1.trainable_variables()
    # run_squad.py's graph leaves the pooler out: no gradient, and the original skips it.
    grads = [g for g in tf1.gradients(loss, tvars) if g is not None]
    # The norm clip_by_global_norm sees (IndexedSlices rows as they are), and the dense one.
    norms = [tf1.global_norm(grads),
             tf1.global_norm([tf1.convert_to_tensor(g) for g in grads])]
    learning_rates = []
    init = optimization.AdamWeightDecayOptimizer.__init__

    def capture(self, learning_rate, **kwargs):
      learning_rates.append(learning_rate)
      init(self, learning_rate, **kwargs)

    optimization.AdamWeightDecayOptimizer.__init__ = capture
    train_op = optimization.create_optimizer(loss, job["learning_rate"], job["num_train_steps"],
                                             job["num_warmup_steps"], False)
    out = {"loss": [], "learning_rate": [], "norm": [], "dense_norm": []}
    with tf1.Session() as session:
      session.run(tf1.global_variables_initializer())
      tf1.train.Saver(var_list=tvars).restore(session, job["init_checkpoint"])
      for step in range(job["steps"]):
        feed = {f[name]: batches["%d/%s" % (step, name)] for name in names}
        loss_value, lr, norm, dense, _ = session.run(
            [loss, learning_rates[0], norms[0], norms[1], train_op], feed)
        for key, value in zip(("loss", "learning_rate", "norm", "dense_norm"),
                              (loss_value, lr, norm, dense)):
          out[key].append(value)
      out["learning_rate"].append(session.run(learning_rates[0]))  # after the last step
      weights = {"weight/" + v.op.name: value for v, value in zip(tvars, session.run(tvars))}
    np.savez(job["output"], **weights, **{k: np.array(v) for k, v in out.items()})


BEFORE_SCRIPTS = set(flags.FLAGS)


def forget_script_flags():
  """Deletes the flags of the original's scripts imported so far, so that the next one can define
  its own (they share names): one process runs them all."""
  for name in set(flags.FLAGS) - BEFORE_SCRIPTS:
    delattr(flags.FLAGS, name)


if sys.argv[1] == "checkpoints":
  forget_script_flags()
  pretraining(sys.argv[2])
  for script in ("run_classifier", "run_squad"):
    forget_script_flags()
    fine_tuned(sys.argv[2], script)
  # Then, in the same process (TensorFlow and the original imported once), the jobs whose files
  # the test writes once our runs are done: their names on one line of stdin.
  print("ready", flush=True)
  for job_file in sys.stdin.readline().split():
    forget_script_flags()
    train(sys.argv[2], job_file)
'''
# The harness of test_original_oracle.py (its layer_norm, checkpoint writers), with train() added.
ORACLE = oracle.ORACLE[:oracle.ORACLE.index("\nif sys.argv[1] ==")] + TRAIN


def start_oracle(work_dir):
  """The original's process: writes its checkpoints in work_dir, then waits for train_oracle."""
  import subprocess
  log = work_dir / "oracle.log"  # a file: a pipe could fill while the process waits
  with open(log, "w") as stderr:
    process = subprocess.Popen([sys.executable, "-c", ORACLE, "checkpoints", str(work_dir)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                               text=True, cwd=REPO,
                               env=dict(os.environ, CUDA_VISIBLE_DEVICES="",
                                        TF_USE_LEGACY_KERAS="1"))
  if process.stdout.readline().strip() != "ready":
    process.kill()
    process.wait()
    raise AssertionError(log.read_text()[-4000:])
  return process


def train_oracle(process, job_files, log):
  """The original's training of each job, in the process start_oracle began."""
  process.communicate(" ".join(map(str, job_files)) + "\n", timeout=600)
  assert process.returncode == 0, log.read_text()[-4000:]


def classifier_data(root):
  """MRPC-format train.tsv: CLASSIFIER_EXAMPLES pairs of VOCAB's words, repeats included."""
  rng = np.random.RandomState(3)
  words = oracle.VOCAB[5:]
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  rows = "".join(
      f"{i % 2}\t{i}\t{i + 100}\t{' '.join(rng.choice(words, 2 + i % 5))}\t"
      f"{' '.join(rng.choice(words, 2 + i % 4))}\n" for i in range(CLASSIFIER_EXAMPLES))
  root.mkdir()
  (root / "train.tsv").write_text(header + rows)
  return root


def squad_data(path):
  """A SQuAD 1.1 train file of 8 questions over two contexts of VOCAB's words."""
  contexts = ["the dog is hairy . a cat sat on the mat , the cat is not hairy .",
              "is it jacksonville ? no , it is not . the dog sat on a mat ."]
  questions = [("is the dog hairy ?", "hairy"), ("a cat sat on the ?", "mat"),
               ("the cat is not ?", "not hairy"), ("is the cat hairy ?", "not"),
               ("is it jacksonville ?", "no"), ("the dog sat on a ?", "mat"),
               ("it is not ?", "jacksonville"), ("sat on a mat ?", "the dog")]
  paragraphs = []
  for c, context in enumerate(contexts):
    qas = [{"id": f"q{c}{i}", "question": q,
            "answers": [{"text": a, "answer_start": context.index(a)}]}
           for i, (q, a) in enumerate(questions[4 * c:4 * c + 4])]
    paragraphs.append({"context": context, "qas": qas})
  path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                           "paragraphs": paragraphs}]}))
  return path


def pretraining_records(path):
  """2 batches of masked-LM + next-sentence records over VOCAB's ids, with 1 to 6 padding
  positions each and a few masked-LM weights of 0."""
  rng = np.random.RandomState(2)
  rows = []
  for i in range(2 * BATCH):
    mask = (np.arange(SEQ) < SEQ - 1 - i % 6).astype(np.int64)
    weights = np.ones(PREDICTIONS, np.float32)
    weights[PREDICTIONS - i % 3:] = 0.0
    rows.append({
        "input_ids": (rng.randint(0, CONFIG["vocab_size"], SEQ) * mask).tolist(),
        "input_mask": mask.tolist(), "segment_ids": ((np.arange(SEQ) >= 6) * mask).tolist(),
        "masked_lm_positions": rng.choice(SEQ - 6, PREDICTIONS, replace=False).tolist(),
        "masked_lm_ids": rng.randint(0, CONFIG["vocab_size"], PREDICTIONS).tolist(),
        "masked_lm_weights": weights.tolist(), "next_sentence_labels": [i % 2]})
  records.write_records(str(path), rows)
  return path


def mirrored_wrapper(path):
  """A script runner: splits the CPU into 2 logical devices, then runs the script it is given."""
  path.write_text(
      "import os, runpy, sys\nimport tensorflow as tf\n"
      "cpu = tf.config.list_physical_devices('CPU')[0]\n"
      "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] "
      "* 2)\nsys.argv = sys.argv[1:]\n"
      "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python script` would\n"
      "runpy.run_path(sys.argv[0], run_name='__main__')\n")
  return path


def replay(input_fn, steps, path):
  """The first `steps` global batches of one of our training input_fns, as step/name arrays."""
  out = {}
  tf.random.set_seed(SEED)  # the scripts' --seed is TensorFlow's global seed too
  try:
    for step, batch in zip(range(steps), input_fn(tf.distribute.InputContext())):
      for name, value in batch.items():
        out[f"{step}/{name}"] = value.numpy()
  finally:
    tf.random.set_seed(None)
  np.savez(path, **out)
  return str(path)


def run_ours(script, output_dir, *args):
  result = run_script(script, *args, f"--output_dir={output_dir}", "--do_train=true",
                      "--log_steps=1", "--save_checkpoints_steps=1000", "--export_tf1_checkpoint",
                      f"--seed={SEED}", timeout=600)
  assert result.returncode == 0, result.stderr[-4000:]
  train = scalars.read_scalars(str(output_dir / "train"))
  reader = tf.train.load_checkpoint(str(output_dir / "bert_model.ckpt"))
  weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
  return {"loss": [v for _, v in train["loss"]],
          "learning_rate": [v for _, v in train["learning_rate"]], "weights": weights}


def our_runs(root):
  """{case: our run's losses, learning rates and weights}, from the original's checkpoints."""
  common = [f"--bert_config_file={root / 'bert_config.json'}",
            f"--vocab_file={root / 'vocab.txt'}", f"--learning_rate={LEARNING_RATE}"]
  classifier = [*common, "--task_name=MRPC", f"--data_dir={classifier_data(root / 'mrpc')}",
                f"--max_seq_length={SEQ}", f"--train_batch_size={BATCH}", "--num_train_epochs=4",
                "--warmup_proportion=0.25",
                f"--init_checkpoint={root / 'run_classifier' / 'model.ckpt-7'}"]
  squad_flags = [*common, f"--train_file={squad_data(root / 'squad.json')}",
                 "--max_seq_length=24", "--doc_stride=8", "--max_query_length=8",
                 f"--train_batch_size={BATCH // 2}", "--num_train_epochs=4",
                 "--warmup_proportion=0.25",
                 f"--init_checkpoint={root / 'run_squad' / 'model.ckpt-7'}"]
  pretraining_args = [
      f"--bert_config_file={root / 'bert_config.json'}", f"--learning_rate={LEARNING_RATE}",
      f"--input_file={pretraining_records(root / 'pretraining.tf_record')}",
      f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDICTIONS}",
      f"--train_batch_size={BATCH}", f"--num_train_steps={STEPS}",
      f"--num_warmup_steps={WARMUP}", f"--init_checkpoint={root / 'bert_model.ckpt'}"]
  wrapper = str(mirrored_wrapper(root / "mirrored.py"))
  return {
      "classifier": run_ours("run_classifier.py", root / "classifier", *classifier),
      "squad": run_ours("run_squad.py", root / "squad", *squad_flags),
      "squad_dense": run_ours("run_squad.py", root / "squad_dense", *squad_flags,
                              "--clip_norm_rule=dense"),
      # 2 replicas, each its half of a step in 2 micro-batches: one example each.
      "squad_mirrored_accumulated": run_ours(wrapper, root / "squad_mirrored_accumulated",
                                             os.path.join(REPO, "run_squad.py"), *squad_flags,
                                             "--distribution_strategy=mirrored",
                                             "--gradient_accumulation_steps=2"),
      "pretraining": run_ours("run_pretraining.py", root / "pretraining", *pretraining_args),
  }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """{case: (ours, the original's)} after STEPS steps from the original's checkpoints."""
  root = tmp_path_factory.mktemp("training_oracle")
  (root / "bert_config.json").write_text(json.dumps(CONFIG))
  (root / "vocab.txt").write_text("\n".join(oracle.VOCAB) + "\n")
  np.savez(root / "inputs.npz", **oracle.inputs(seq=SEQ, predictions=PREDICTIONS))
  # root/bert_model.ckpt (pre-trained), root/{run_classifier,run_squad}/model.ckpt-7 (fine-tuned)
  oracle_process = start_oracle(root)
  try:
    ours = our_runs(root)
  except BaseException:
    oracle_process.kill()
    raise
  # The batches our runs trained on (the same global batches mirrored and accumulated).
  classifier_input = records.records_input_fn(
      [str(root / "classifier" / "train.tf_record")], glue.classifier_features(SEQ), BATCH,
      is_training=True, seed=SEED, shuffle_buffer_size=CLASSIFIER_EXAMPLES)
  num_squad = sum(1 for _ in tf.data.TFRecordDataset(str(root / "squad" / "train.tf_record")))
  squad_input = records.records_input_fn(
      [str(root / "squad" / "train.tf_record")], squad.squad_features(24, True), BATCH // 2,
      is_training=True, seed=SEED, shuffle_buffer_size=num_squad)
  pretraining_input = pretraining.input_fn([str(root / "pretraining.tf_record")], SEQ,
                                           PREDICTIONS, BATCH, True, seed=SEED)
  jobs = {
      "classifier": ("run_classifier", classifier_input, False, root / "run_classifier"),
      "squad": ("run_squad", squad_input, False, root / "run_squad"),
      "squad_dense": ("run_squad", squad_input, True, root / "run_squad"),
      "pretraining": ("run_pretraining", pretraining_input, False, root),
  }
  job_files = []
  for name, (script, input_fn, one_hot, checkpoint_dir) in jobs.items():
    checkpoint = tf.train.latest_checkpoint(str(checkpoint_dir)) or str(root / "bert_model.ckpt")
    job = {"script": script, "batches": replay(input_fn, STEPS, root / f"{name}_batches.npz"),
           "one_hot": one_hot, "learning_rate": LEARNING_RATE, "num_train_steps": STEPS,
           "num_warmup_steps": WARMUP, "steps": STEPS, "init_checkpoint": checkpoint,
           "output": str(root / f"{name}_original.npz")}
    job_files.append(root / f"{name}_job.json")
    job_files[-1].write_text(json.dumps(job))
  train_oracle(oracle_process, job_files, root / "oracle.log")
  theirs = {name: dict(np.load(root / f"{name}_original.npz")) for name in jobs}
  for name, job_file in zip(jobs, job_files):  # the weights both sides started from
    reader = tf.train.load_checkpoint(json.loads(job_file.read_text())["init_checkpoint"])
    theirs[name].update({"initial/" + key[len("weight/"):]: reader.get_tensor(key[len("weight/"):])
                         for key in theirs[name] if key.startswith("weight/")})
  theirs["squad_mirrored_accumulated"] = theirs["squad"]
  return {case: (ours[case], theirs[case]) for case in ours}


# Weights whose gradient is 0 in exact arithmetic, so that both sides step on float32 rounding
# noise: a key bias adds the same to every attention logit of a query, and under the SQuAD head,
# its output bias and the last LayerNorm's beta add the same to every position's logit.
NOISE_ONLY = ("attention/self/key/bias",)
NOISE_ONLY_SQUAD = ("cls/squad/output_bias",
                    f"layer_{CONFIG['num_hidden_layers'] - 1}/output/LayerNorm/beta")
# Such a gradient is what is left of a sum that cancels: of the order of float32's unit roundoff
# times the terms' size (here softmax-minus-one-hot terms, about 1), and its summation order, and
# so its value, is the CPU's. AdamWeightDecay (no bias correction; these weights are not decayed)
# moves a weight by lr * m / (sqrt(v) + epsilon) a step, at most lr * max|g| / epsilon: noise of
# size u moves it by at most u / epsilon of the learning rate summed over the steps, on each side.
# A real gradient makes m / sqrt(v) about 1 or more: the weights with one move 20x and more.
UNIT_ROUNDOFF = 2.0 ** -24
ADAM_EPSILON = 1e-6  # the original's create_optimizer


def noise_budget(learning_rates):
  """How far rounding noise can move a NOISE_ONLY weight on one side over the steps taken at
  `learning_rates` (what AdamWeightDecay makes of a gradient of size UNIT_ROUNDOFF)."""
  return float(np.sum(learning_rates)) * UNIT_ROUNDOFF / ADAM_EPSILON


def weight_differences(ours, theirs):
  """{name: max abs difference} over every trained weight (the original's names)."""
  names = {key[len("weight/"):] for key in theirs if key.startswith("weight/")}
  assert names == set(ours["weights"]), (names ^ set(ours["weights"]))
  return {name: float(np.abs(ours["weights"][name].astype(np.float64) -
                             theirs["weight/" + name]).max()) for name in names}


def split_noise(diffs, case):
  """(diffs of the weights with real gradients, diffs of the NOISE_ONLY ones)."""
  noise = NOISE_ONLY + (NOISE_ONLY_SQUAD if case.startswith("squad") else ())
  is_noise = {name: any(n in name for n in noise) for name in diffs}
  return ({n: d for n, d in diffs.items() if not is_noise[n]},
          {n: d for n, d in diffs.items() if is_noise[n]})


@pytest.mark.parametrize("case", ["classifier", "squad", "squad_dense",
                                  "squad_mirrored_accumulated", "pretraining"])
def test_training_steps_match_the_originals(runs, case):
  ours, theirs = runs[case]
  diffs, noise = split_noise(weight_differences(ours, theirs), case)
  worst = max(diffs, key=diffs.get)
  print(f"{case}: after {STEPS} steps, max weight diff vs the original {diffs[worst]:.2g} "
        f"({worst}; {max(noise.values()):.2g} where the gradient is only rounding noise, against "
        f"{2 * noise_budget(theirs['learning_rate'][:-1]):.2g}); "
        f"losses {np.round(theirs['loss'], 4).tolist()}")
  # Every step clipped: the global norm the original clipped by was above 1.
  assert min(theirs["norm"]) > 1.0
  np.testing.assert_allclose(ours["loss"], theirs["loss"], atol=TOLERANCE, rtol=TOLERANCE)
  # Our learning rate scalar at step s is the rate that step applied; theirs has one more (after
  # the last step).
  assert len(ours["learning_rate"]) == STEPS
  np.testing.assert_allclose(ours["learning_rate"], theirs["learning_rate"][:-1], rtol=1e-6,
                             atol=1e-9)
  # Warmup from 0, then the linear decay to 0 at the last step.
  np.testing.assert_allclose(theirs["learning_rate"][:WARMUP + 1], [
      0.0, LEARNING_RATE / WARMUP, LEARNING_RATE * (1 - WARMUP / STEPS)], rtol=1e-6)
  assert theirs["learning_rate"][-1] == 0.0
  assert diffs[worst] < TOLERANCE, diffs
  # Where the gradient is only noise, each side moves its weights by no more than noise can, and
  # the rest of the biases and LayerNorm betas, whose gradients are real, move far more.
  budget = noise_budget(theirs["learning_rate"][:-1])
  moved = {name: max(float(np.abs(ours["weights"][name] - theirs["initial/" + name]).max()),
                     float(np.abs(theirs["weight/" + name] - theirs["initial/" + name]).max()))
           for name in noise}
  assert max(moved.values()) < budget, (budget, moved)
  assert max(noise.values()) < 2 * budget, (budget, noise)
  real = [float(np.abs(theirs["weight/" + name] - theirs["initial/" + name]).max())
          for name in diffs if name.endswith(("/bias", "/beta")) and "pooler" not in name]
  assert np.median(real) > 20 * budget, (budget, real)


def test_the_rules_differ_where_the_original_counts_rows(runs):
  """Per-position rows (CPU/GPU lookups) make the original's norm differ from the dense one, and
  under the SQuAD head the two rules train weights apart by far more than the tolerance; one-hot
  lookups and the pre-training graph (the table is the masked LM's output weights too) give the
  original the dense norm."""
  for case in ("classifier", "squad"):
    theirs = runs[case][1]
    assert np.all(np.abs(theirs["norm"] / theirs["dense_norm"] - 1) > 1e-5)
  squad_run = runs["squad"][1]
  assert np.max(np.abs(squad_run["norm"] / squad_run["dense_norm"] - 1)) > 1e-2
  for case in ("squad_dense", "pretraining"):
    theirs = runs[case][1]
    np.testing.assert_allclose(theirs["norm"], theirs["dense_norm"], rtol=1e-6)
  rows, dense = runs["squad"][0]["weights"], runs["squad_dense"][0]["weights"]
  apart = max(float(np.abs(rows[name] - dense[name]).max()) for name in rows)
  print(f"squad, --clip_norm_rule per_position against dense: weights {apart:.2g} apart")
  assert apart > 20 * TOLERANCE


def test_new_heads_start_as_the_originals_whatever_initializer_range():
  """The original's run_classifier.py and run_squad.py draw a new output_weights with stddev 0.02
  whatever the config says (its run_pretraining.py heads use initializer_range, as ours do)."""
  import bert  # bert-tensorflow 1.0.4, the original's source
  from bert_tf.model.config import BertConfig
  from bert_tf.model import heads
  source = os.path.dirname(bert.__file__)
  for script in ("run_classifier.py", "run_squad.py"):
    with open(os.path.join(source, script)) as f:
      assert re.search(r'"(cls/squad/)?output_weights".{0,100}stddev=0\.02\)', f.read(), re.S)
  config = BertConfig.from_dict(dict(CONFIG, hidden_size=64, initializer_range=1.0))
  for model, weights in ((heads.BertClassifier(config, num_labels=64), "classifier"),
                         (heads.BertSpanLabeler(config), "span_head")):
    head = getattr(model, weights).output_weights.numpy()
    assert 0.015 < head.std() < 0.025 and np.abs(head).max() <= 0.04  # truncated at 2 stddev
    assert model.encoder.pooler.kernel.numpy().std() > 0.5  # the encoder keeps its range


def test_squad_trains_at_full_length_as_its_loss_reads_the_padding():
  """The original's SQuAD loss is a softmax over all max_seq_length logits, the padding's
  included: in training our span labeler computes them even with trim_padding (predictions, which
  read real positions only, still run trimmed)."""
  from bert_tf.model.config import BertConfig
  from bert_tf.model import heads
  config = BertConfig.from_dict(CONFIG)
  rng = np.random.RandomState(0)
  mask = np.zeros((2, 12), np.int32)
  mask[0, :5], mask[1, :7] = 1, 1  # the longest is 7 of 12
  inputs = {"input_ids": tf.constant(rng.randint(0, CONFIG["vocab_size"], (2, 12)) * mask),
            "input_mask": tf.constant(mask), "segment_ids": tf.zeros((2, 12), tf.int32)}
  full, trimmed = heads.BertSpanLabeler(config), heads.BertSpanLabeler(config, trim_padding=True)
  full(inputs)
  trimmed(inputs)
  trimmed.set_weights(full.get_weights())
  want, got = full(inputs, training=True), trimmed(inputs, training=True)
  np.testing.assert_allclose(got["start_logits"], want["start_logits"], atol=1e-5)
  assert np.abs(want["start_logits"].numpy()[:, 7:]).min() > 0  # real logits at the padding
  assert np.all(trimmed(inputs)["start_logits"].numpy()[:, 7:] == 0)  # prediction: trimmed
