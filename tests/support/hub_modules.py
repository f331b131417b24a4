"""The producers of the TF Hub and keras-hub models the format tests read, each the real thing:

  tf1_hub_module(work_dir)  the original release's BertModel (bert-tensorflow) in a TF1 graph,
                            saved as its hub.Modules were laid out (tensorflow_hub 0.16 no longer
                            has hub.create_module_spec): a `tokens` and a `tokenization_info`
                            signature, vocab.txt as an asset, tfhub_module.pb beside, and the
                            module's outputs on inputs.npz;
  KERAS_HUB                 a script that keras-hub runs in a process of its own (Keras 3, so
                            without TF_USE_LEGACY_KERAS): `save` writes a random BertBackbone's
                            preset and its outputs, `load` loads a preset as BertBackbone and
                            BertTextClassifier and writes their outputs.
"""
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

command, preset, outputs = sys.argv[1:4]
feed = dict(np.load(os.path.join(os.path.dirname(outputs), "inputs.npz")))
features = {"token_ids": feed["input_ids"], "segment_ids": feed["segment_ids"],
            "padding_mask": feed["input_mask"]}
if command == "save":
  keras.utils.set_random_seed(11)
  sizes = json.loads(sys.argv[4])
  backbone = keras_hub.models.BertBackbone(**sizes)
  for v in backbone.weights:  # every weight random, LayerNorms and biases too
    v.assign(np.random.RandomState(len(v.path)).normal(0, 0.2, v.shape).astype("float32") + (
        1.0 if v.path.endswith("gamma") else 0.0))
  backbone.save_to_preset(preset)
  vocab = [line.rstrip("\n") for line in open(sys.argv[5], encoding="utf-8")]
  keras_hub.models.BertTokenizer(vocabulary=vocab, lowercase=True).save_to_preset(preset)
else:
  backbone = keras_hub.models.BertBackbone.from_preset(preset)
  classifier = keras_hub.models.BertTextClassifier.from_preset(preset, num_classes=3)
  classifier.preprocessor.sequence_length = feed["input_ids"].shape[1]
  tokens = classifier.preprocessor.tokenizer(list(sys.argv[4:]))
  tokens = tokens.to_list() if hasattr(tokens, "to_list") else [list(map(int, t)) for t in tokens]
  width = max(map(len, tokens))
  np.save(outputs + ".tokens.npy", np.array([t + [0] * (width - len(t)) for t in tokens]))
  # fine-tunes: one step on two sentences moves its loss
  classifier.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
  history = classifier.fit(x=list(sys.argv[4:6]), y=np.array([0, 1]), epochs=2, verbose=0)
  print("losses", json.dumps(history.history["loss"]))
out = backbone(features)
np.savez(outputs, **{k: keras.ops.convert_to_numpy(v) for k, v in out.items()})
'''


def keras_hub_run(*args):
  """Runs KERAS_HUB in Keras 3 (TF_USE_LEGACY_KERAS unset: the tests' process has it set)."""
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env["TF_CPP_MIN_LOG_LEVEL"] = "3"
  run = subprocess.run([sys.executable, "-c", KERAS_HUB, *map(str, args)], capture_output=True,
                       text=True, timeout=600, env=env)
  assert run.returncode == 0, run.stderr[-3000:]
  return run.stdout
