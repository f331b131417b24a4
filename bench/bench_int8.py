"""A fine-tuned classifier in TensorFlow Lite, float32 and dynamic-range int8, against TensorFlow.

Takes a run_classifier output_dir (its bert_config.json, vocab.txt, task_config.json and latest
checkpoint), converts the classifier with bert_tf.serving.tflite (float32 and
quantize=dynamic_int8), and reports for each of TensorFlow (the model in a tf.function, oneDNN as
the environment sets it), TensorFlow Lite float32 and TensorFlow Lite int8:
  - the task's dev accuracy (and F1 for MRPC), every dev example at max_seq_length;
  - how many dev predictions differ from TensorFlow's, and the largest logit difference;
  - batch-1 latency on full max_seq_length pairs (wall, p50 / p90, the three taking turns in
    this one process) and the file size.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_int8.py \
      --model_dir=<run_classifier output_dir> --data_dir=../shared/data/glue/MRPC

The MRPC model of BENCHMARKS.md is the README's MRPC command's (bench/bench_mrpc_dtype.py
--dtypes=float32 --seeds=12345 writes it to <work_dir>/float32_seed12345).
"""
import json
import os
import sys

import bench_env  # noqa: F401  (first: the environment every bench runs in)
from bench_env import DATA

import harness

FLAGS = harness.Flags()
FLAGS.string("model_dir", None, "A run_classifier output_dir (fine-tuned classifier).")
FLAGS.string("data_dir", os.path.join(DATA, "glue", "MRPC"), "The task's GLUE directory.")
FLAGS.integer("latency_rounds", 40, "Batch-1 calls per peer for the latency figures.")
FLAGS.integer("threads", 2, "TensorFlow Lite's threads (TensorFlow uses every core).")
FLAGS.boolean("append", True, "Append the results to benchmarks/<date>.md.")


def load_classifier(model_dir):
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import export  # pylint: disable=g-import-not-at-top
  with open(os.path.join(model_dir, "task_config.json"), encoding="utf-8") as f:
    task = json.load(f)
  config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  model = export.build_model("classifier", config, num_labels=len(task["label_list"]))
  checkpoints.init_from_checkpoint(model, model_dir)  # its newest whole checkpoint
  return model, task


def dev_features(model_dir, task):
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import glue  # pylint: disable=g-import-not-at-top
  from bert_tf.text import tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.FullTokenizer(os.path.join(model_dir, "vocab.txt"),
                                         do_lower_case=task["do_lower_case"])
  examples = glue.get_processor(task["task_name"]).get_dev_examples(FLAGS.data_dir)
  features = [glue.convert_single_example(i, e, task["label_list"], task["max_seq_length"],
                                          tokenizer) for i, e in enumerate(examples)]
  arrays = [np.array([getattr(f, k) for f in features], np.int32)
            for k in ("input_ids", "input_mask", "segment_ids")]
  return arrays, np.array([f.label_id for f in features])


def scores(predictions, labels):
  from bert_tf.tasks import metrics  # pylint: disable=g-import-not-at-top
  return metrics.accuracy(labels, predictions), metrics.f1(labels, predictions)


def main(argv):
  del argv
  if not FLAGS.model_dir:
    raise SystemExit("--model_dir: give a run_classifier output_dir")
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  model, task = load_classifier(FLAGS.model_dir)
  (ids, mask, segments), labels = dev_features(FLAGS.model_dir, task)
  forward = tf.function(lambda i, m, s: model(
      {"input_ids": i, "input_mask": m, "segment_ids": s}, training=False)["logits"])
  peers = {"tensorflow": lambda i, m, s: forward(i, m, s).numpy()}
  sizes = {}
  for quantize in ("none", "dynamic_int8"):
    blob = tflite.convert(model, ["logits"], quantize)
    sizes[quantize] = len(blob)
    runner = tflite.Runner(blob, num_threads=FLAGS.threads)
    peers[f"tflite_{quantize}"] = lambda i, m, s, r=runner: r(i, m, s)["logits"]
  logits = {}
  for name, run in peers.items():
    logits[name] = np.concatenate([run(ids[k:k + 8], mask[k:k + 8], segments[k:k + 8])
                                   for k in range(0, len(ids), 8)])
  one = (ids[:1], mask[:1] * 0 + 1, segments[:1])  # a full max_seq_length pair
  samples = harness.interleave({name: (lambda run=run: run(*one)) for name, run in peers.items()},
                               FLAGS.latency_rounds, warmup=3)
  lines = [f"\n## A fine-tuned classifier in TensorFlow Lite, float32 and int8 "
           f"(bench/bench_int8.py), {harness.utc_now()}\n",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_int8.py" +
           "".join(f" {a}" for a in sys.argv[1:]) + "`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  ",
           f"{task['task_name']} dev, {len(labels)} examples at max_seq_length "
           f"{task['max_seq_length']}; latency: batch 1, full-length pairs, wall, the three taking "
           f"turns in one process ({FLAGS.latency_rounds} calls each).\n",
           "| peer | accuracy | F1 | predictions unlike TensorFlow's | max logit diff | "
           "batch-1 p50 ms (min-max) | file MB |", "|---|---:|---:|---:|---:|---:|---:|"]
  base = logits["tensorflow"]
  for name, values in logits.items():
    accuracy, f1 = scores(values.argmax(-1), labels)
    median, low, high = (1000 * x for x in harness.summary(samples[name]))
    size = sizes.get(name[len("tflite_"):])
    lines.append(f"| {name} | {accuracy:.4f} | {f1:.4f} | "
                 f"{int((values.argmax(-1) != base.argmax(-1)).sum())} | "
                 f"{float(np.abs(values - base).max()):.2e} | {median:.1f} ({low:.1f}-{high:.1f}) "
                 f"| {'' if size is None else f'{size / 1e6:.1f}'} |")
  p50 = {name: harness.summary(s)[0] for name, s in samples.items()}
  lines += ["", f"- int8 / float32 TensorFlow Lite batch-1 speed: "
            f"**{p50['tflite_none'] / p50['tflite_dynamic_int8']:.2f}x**; "
            f"TensorFlow Lite float32 / TensorFlow: "
            f"**{p50['tensorflow'] / p50['tflite_none']:.2f}x**; int8 / TensorFlow: "
            f"{p50['tensorflow'] / p50['tflite_dynamic_int8']:.2f}x"]
  harness.publish(lines, FLAGS.append)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
