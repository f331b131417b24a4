"""The producers of the TF Hub and keras-hub models the format tests read, each the real thing:

  tf1_hub_module(work_dir)  the original release's BertModel (bert-tensorflow) in a TF1 graph,
                            saved as its hub.Modules were laid out (tensorflow_hub 0.16 no longer
                            has hub.create_module_spec): a `tokens` and a `tokenization_info`
                            signature, vocab.txt as an asset, tfhub_module.pb beside, and the
                            module's outputs on inputs.npz;
  keras_hub_run(...)        keras-hub in a process of its own (Keras 3, so without
                            TF_USE_LEGACY_KERAS): it loads bert_tf's preset as BertBackbone and
                            BertTextClassifier (their outputs, tokens and a fine-tuning's
                            losses), and writes its own preset of a random BertBackbone.
"""
import json
import os
import subprocess
import sys

from support.oracle import ORACLE

# The oracle's set-up (TF 1.15's contrib layer_norm re-created, the original's modeling imported).
_ORIGINAL = ORACLE.split("\ndef pretraining(")[0]

TF1_HUB_MODULE = _ORIGINAL + r'''
import json
work_dir = sys.argv[1]
config = modeling.BertConfig.from_json_file(os.path.join(work_dir, "bert_config.json"))
out = os.path.join(work_dir, "hub_module")
with tf.Graph().as_default():
  names = ("input_ids", "input_mask", "segment_ids")
  inputs = {n: tf1.placeholder(tf.int32, [None, None], name=n) for n in names}
  model = modeling.BertModel(config, is_training=False, input_ids=inputs["input_ids"],
                             input_mask=inputs["input_mask"],
                             token_type_ids=inputs["segment_ids"])
  vocab = tf1.constant(os.path.join(work_dir, "vocab.txt"), name="vocab_file")
  tf1.add_to_collection(tf1.GraphKeys.ASSET_FILEPATHS, vocab)
  info = {"vocab_file": vocab, "do_lower_case": tf1.constant(json.loads(sys.argv[2]))}
  info = {k: tf1.identity(v) for k, v in info.items()}
  tokens = {"pooled_output": model.get_pooled_output(),
            "sequence_output": model.get_sequence_output()}
  build = tf1.saved_model.utils.build_tensor_info
  signatures = {
      "tokens": tf1.saved_model.signature_def_utils.build_signature_def(
          {n: build(t) for n, t in inputs.items()}, {n: build(t) for n, t in tokens.items()}),
      "tokenization_info": tf1.saved_model.signature_def_utils.build_signature_def(
          {}, {n: build(t) for n, t in info.items()})}
  rng = np.random.RandomState(3)
  with tf1.Session() as session:
    session.run(tf1.global_variables_initializer())
    for v in tf1.global_variables():
      v.load(rng.normal(0.0, 0.3, v.shape.as_list()).astype(np.float32) + (
          1.0 if v.op.name.endswith("gamma") else 0.0), session)
    builder = tf1.saved_model.Builder(out)
    builder.add_meta_graph_and_variables(session, [], signature_def_map=signatures,
                                         assets_collection=[vocab])
    builder.save()
    feed = dict(np.load(os.path.join(work_dir, "inputs.npz")))
    np.savez(os.path.join(work_dir, "module_outputs.npz"),
             **session.run(tokens, {inputs[n]: feed[n] for n in names}))
with open(os.path.join(out, "tfhub_module.pb"), "wb") as f:
  f.write(bytes([8, 3]))  # ModuleDef {format: FORMAT_V3}, as hub.Module wrote it
'''


def tf1_hub_module(work_dir, do_lower_case=True):
  """Writes work_dir/hub_module (work_dir holds bert_config.json, vocab.txt, inputs.npz)."""
  run = subprocess.run([sys.executable, "-c", TF1_HUB_MODULE, str(work_dir),
                        "true" if do_lower_case else "false"],
                       capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  return os.path.join(work_dir, "hub_module")


KERAS_HUB = r'''
import json, os, sys
import numpy as np
import keras
import keras_hub

ours, theirs, out = sys.argv[1:4]
sizes, vocab_file, sentences = json.loads(sys.argv[4]), sys.argv[5], sys.argv[6:]
feed = dict(np.load(os.path.join(out, "inputs.npz")))
features = {"token_ids": feed["input_ids"], "segment_ids": feed["segment_ids"],
            "padding_mask": feed["input_mask"]}


def outputs(backbone, name):
  np.savez(os.path.join(out, name), **{k: keras.ops.convert_to_numpy(v)
                                       for k, v in backbone(features).items()})


# bert_tf's preset, as a keras-hub user loads one: the backbone, and a classifier that tokenizes
# and fine-tunes (a few epochs on the sentences bring its loss down).
keras.utils.set_random_seed(7)
outputs(keras_hub.models.BertBackbone.from_preset(ours), "ours.npz")
classifier = keras_hub.models.BertTextClassifier.from_preset(ours, num_classes=3)
classifier.preprocessor.sequence_length = feed["input_ids"].shape[1]
tokens = classifier.preprocessor.tokenizer(sentences)
tokens = tokens.to_list() if hasattr(tokens, "to_list") else [list(map(int, t)) for t in tokens]
width = max(map(len, tokens))
np.save(os.path.join(out, "tokens.npy"), np.array([t + [0] * (width - len(t)) for t in tokens]))
classifier.compile(optimizer=keras.optimizers.Adam(3e-3), run_eagerly=True)
history = classifier.fit(x=sentences, y=np.arange(len(sentences)) % 3, epochs=4, verbose=0)
print("losses", json.dumps(history.history["loss"]))

# keras-hub's own preset of a random BertBackbone (every weight random, LayerNorms and biases
# too) and its BertTokenizer.
keras.utils.set_random_seed(11)
backbone = keras_hub.models.BertBackbone(**sizes)
for v in backbone.weights:
  v.assign(np.random.RandomState(len(v.path)).normal(0, 0.2, v.shape).astype("float32") + (
      1.0 if v.path.endswith("gamma") else 0.0))
backbone.save_to_preset(theirs)
vocab = [line.rstrip("\n") for line in open(vocab_file, encoding="utf-8")]
keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True).save_to_preset(theirs)
outputs(backbone, "theirs.npz")
'''


def keras_hub_run(ours, theirs, out, sizes, vocab_file, sentences):
  """Runs KERAS_HUB in Keras 3 (TF_USE_LEGACY_KERAS unset: the tests' process has it set): `out`
  holds inputs.npz and gets ours.npz, tokens.npy, theirs.npz; returns the fine-tuning's losses."""
  args = [ours, theirs, out, json.dumps(sizes), vocab_file, *sentences]
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "3"
  run = subprocess.run([sys.executable, "-c", KERAS_HUB, *map(str, args)], capture_output=True,
                       text=True, timeout=600, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  return json.loads(run.stdout.split("losses ", 1)[1])
