"""The reduced-precision peers of bench_cpu_inference.py (bfloat16 and int8), each a worker there:
our encoder (sequence + pooled output) in each path bert_tf serves, and the peers' own.

  ours_bf16        our encoder built under the plain bfloat16 policy, oneDNN on, fused QKV as
                   ours: what a --dtype=bfloat16 export's SavedModel computes (matmul weights
                   stored in bfloat16, LayerNorm, softmax and embeddings in float32);
                   ours_bf16_sep with the three QKV matmuls (a config's default)
  ours_bf16_mixed  the same under mixed_bfloat16 (float32 weights cast at every call: training's)
  ours_amp         the float32 encoder with grappler's auto_mixed_precision_onednn_bfloat16
                   rewrite (TensorFlow's own bfloat16 conversion of a float32 graph)
  tflite_dynamic   TensorFlow Lite, --quantize=dynamic (dynamic-range int8)
  tflite_int8      TensorFlow Lite, --quantize=int8 (calibrated int8 matmuls, float32 elsewhere)
  ov, ov_bf16      OpenVINO on the float32 encoder's .tflite (openvino_runner), f32 / bf16 hint
  ov_int8          NNCF's int8 model of that file, as the openvino backend's int8 (bfloat16
                   elsewhere where the CPU has it); ov_int8_f32: float32 elsewhere
  ort_int8         ONNX Runtime on onnxruntime.quantization.quantize_dynamic of model_opt.onnx
  torch_int8       torch.ao.quantization.quantize_dynamic of transformers' BertModel (nn.Linear
                   in qint8; fbgemm / oneDNN's int8 kernels)
  predictor_bf16, predictor_int8, predictor_dynamic, predictor_ov_bf16, predictor_ov_int8:
                   bert_tf.serving.predictor on the classifier export's reduced precisions
                   (bfloat16 SavedModel; TensorFlow Lite int8, calibrated and dynamic; OpenVINO),
                   prepare_exports' files, unchecked (random weights)

The int8 files are calibrated on CALIBRATION random-id rows of the bench's own inputs.
"""
import json
import os

from lib.bench_env import REPO  # noqa: F401  (bench_env first: the environment)

CALIBRATION = 16  # rows [1, seq] of random ids each int8 model is calibrated on


def _encoder(model_dir, policy="float32", attention=None):
  import tf_keras  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  if attention:
    config.attention_implementation = attention
  previous = tf_keras.mixed_precision.global_policy()
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    model = modeling.BertModel(config)
    checkpoints.init_from_checkpoint(model, os.path.join(model_dir, "bert_model.ckpt"))
  finally:
    tf_keras.mixed_precision.set_global_policy(previous)
  return model


def calibration_rows(bench, model_dir, seq_length):
  ids = bench.ids_batch(model_dir, CALIBRATION, seq_length, seed=7)
  return [{name: a[i:i + 1].astype("int32") for name, a in
           zip(("input_ids", "input_mask", "segment_ids"), ids)} for i in range(CALIBRATION)]


def ours_bf16_worker(bench, model_dir, batch_size, policy, attention="fused_qkv"):
  """Our encoder under a bfloat16 policy (or float32 with grappler's rewrite: policy "amp"), its
  attention as ours' (fused_qkv) unless told."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if policy == "amp":
    tf.config.optimizer.set_experimental_options({"auto_mixed_precision_onednn_bfloat16": True})
  model = _encoder(model_dir, "float32" if policy == "amp" else policy, attention)
  ids, mask, segments = bench.ids_batch(model_dir, batch_size, bench.FLAGS.seq_length)
  features = {"input_ids": tf.constant(ids, tf.int32), "input_mask": tf.constant(mask, tf.int32),
              "segment_ids": tf.constant(segments, tf.int32)}
  forward = tf.function(lambda f: [tf.cast(t, tf.float32)
                                   for t in bench._outputs(model(f, training=False))])  # pylint: disable=protected-access
  return lambda: [t.numpy() for t in forward(features)]


def encoder_file(bench, model_dir, quantize):
  """model_dir/encoder_<quantize>.tflite (float32 "none", "dynamic" or "int8"), made once."""
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  path = os.path.join(model_dir, f"encoder_{quantize}.tflite")
  if not os.path.exists(path):
    calibration = (calibration_rows(bench, model_dir, bench.FLAGS.seq_length)
                   if quantize == "int8" else None)
    blob = tflite.convert(_encoder(model_dir), ["sequence_output", "pooled_output"], quantize,
                          calibration=calibration)
    _write(path, blob)
  return path


def _write(path, data):
  """path's bytes written whole (a name of this process's first: workers start together)."""
  tmp = f"{path}.{os.getpid()}.tmp"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)


def encoder_ir(bench, model_dir):
  """model_dir/encoder_ov_int8.xml: NNCF's int8 model of the float32 encoder file, made once."""
  from bert_tf.serving import openvino_runner  # pylint: disable=g-import-not-at-top
  path = os.path.join(model_dir, "encoder_ov_int8.xml")
  if not os.path.exists(path):
    files = openvino_runner.quantize_int8(encoder_file(bench, model_dir, "none"),
                                          calibration_rows(bench, model_dir,
                                                           bench.FLAGS.seq_length))
    _write(path[:-len(".xml")] + ".bin", files["model.bin"])
    _write(path, files["model.xml"])  # last: its presence says both are whole
  return path


def tflite_worker(bench, model_dir, batch_size, quantize):
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  runner = tflite.Runner(path=encoder_file(bench, model_dir, quantize), num_threads=bench.THREADS)
  ids, mask, segments = bench.ids_batch(model_dir, batch_size, bench.FLAGS.seq_length)
  return lambda: runner(ids, mask, segments)


def ov_worker(bench, model_dir, batch_size, precision, int8_hint=None):
  from bert_tf.serving import openvino_runner  # pylint: disable=g-import-not-at-top
  if int8_hint:
    openvino_runner.INT8_HINT = int8_hint
  runner = openvino_runner.Runner(
      encoder_file(bench, model_dir, "none"), precision=precision,
      ir_path=encoder_ir(bench, model_dir) if precision == "int8" else None,
      num_threads=bench.THREADS)
  ids, mask, segments = bench.ids_batch(model_dir, batch_size, bench.FLAGS.seq_length)
  return lambda: runner(ids, mask, segments)


def ort_int8_worker(bench, model_dir, batch_size):
  path = os.path.join(model_dir, "model_opt_int8.onnx")
  if not os.path.exists(path):
    import onnx  # pylint: disable=g-import-not-at-top
    from onnxruntime.quantization import quantize_dynamic  # pylint: disable=g-import-not-at-top
    # The optimized graph's fused ops (Attention, SkipLayerNormalization: com.microsoft) have no
    # shape inference: their outputs' type is float32.
    quantize_dynamic(os.path.join(model_dir, "model_opt.onnx"), path + ".tmp.onnx",
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    os.replace(path + ".tmp.onnx", path)
  return bench.ort_worker(model_dir, batch_size, "model_opt_int8.onnx")


def torch_int8_worker(bench, model_dir, batch_size):
  import torch  # pylint: disable=g-import-not-at-top
  from torch.ao import quantization  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(bench.THREADS)
  model = quantization.quantize_dynamic(bench.torch_model(model_dir), {torch.nn.Linear},
                                        dtype=torch.qint8)
  ids, mask, segments = (torch.tensor(a) for a in bench.ids_batch(model_dir, batch_size,
                                                                  bench.FLAGS.seq_length))

  def run():
    with torch.inference_mode():
      out = model(input_ids=ids, attention_mask=mask, token_type_ids=segments)
      return out.last_hidden_state.numpy(), out.pooler_output.numpy()
  return run


# --------------------------------------------------------------------------- the predictor's


def prepare_exports(bench, model_dir):
  """The classifier's reduced-precision exports beside bench.prepare's: export_bf16 (its
  SavedModel in bfloat16), export_int8 (float32 SavedModel, model.tflite, the --quantize=int8
  file and, with nncf, OpenVINO's int8 model) and export_dynamic (the same with the
  --quantize=dynamic file, no OpenVINO), as export_savedmodel.py writes them, their accuracy
  check left out (random weights; the predictor peers load them unchecked)."""
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import export  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import guard  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import openvino_runner  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  vocab, checkpoint = os.path.join(model_dir, "vocab.txt"), os.path.join(model_dir, "classifier")
  options = bench.PREDICTOR_TASKS["classifier"]
  seq = bench.FLAGS.seq_length
  build = lambda dtype: export.build_server("classifier", config, vocab, True, checkpoint, seq,  # noqa: E731
                                            dtype=dtype, **options)
  no_check = {"paths": {}, "savedmodel_dtype": "bfloat16"}
  export.save(build("bfloat16"), os.path.join(model_dir, "export_bf16"),
              {guard.QUANTIZATION_FILE: json.dumps(no_check).encode()})
  server = build("float32")
  files = export.tflite_files("classifier", server.model, vocab, True, seq, **options)
  texts = bench.texts_batch(model_dir, CALIBRATION, seq, seed=7)
  rows = guard.model_inputs(predictor.for_server(server), {"texts": texts})
  files[export.TFLITE_INT8_FILE] = tflite.convert(server.model, quantize="int8", calibration=rows)
  if openvino_runner.nncf_available():
    tflite_path = os.path.join(model_dir, "classifier.tflite")
    with open(tflite_path, "wb") as f:
      f.write(files[export.TFLITE_FILE])
    for name, data in openvino_runner.quantize_int8(tflite_path, rows).items():
      files[export.OPENVINO_INT8_FILES[name]] = data
  export.save(server, os.path.join(model_dir, "export_int8"), files)
  dynamic = {name: data for name, data in files.items()
             if name not in export.OPENVINO_INT8_FILES.values()}
  dynamic[export.TFLITE_INT8_FILE] = tflite.convert(server.model, quantize="dynamic")
  export.save(server, os.path.join(model_dir, "export_dynamic"), dynamic)
  for quantize in tflite.QUANTIZE:  # the encoder's files, before the workers that read them start
    encoder_file(bench, model_dir, quantize)
  if openvino_runner.nncf_available():
    encoder_ir(bench, model_dir)


# peer -> (export, backend, dtype)
PREDICTOR_PEERS = {"predictor_bf16": ("export_bf16", "savedmodel", "bfloat16"),
                   "predictor_int8": ("export_int8", "tflite", "int8"),
                   "predictor_dynamic": ("export_dynamic", "tflite", "int8"),
                   "predictor_ov": ("export_int8", "openvino", "float32"),
                   "predictor_ov_bf16": ("export_int8", "openvino", "bfloat16"),
                   "predictor_ov_int8": ("export_int8", "openvino", "int8")}


def predictor_worker(bench, model_dir, batch_size, peer):
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  name, backend, dtype = PREDICTOR_PEERS[peer]
  loaded = predictor.load(os.path.join(model_dir, name), backend=backend, dtype=dtype,
                          batch_size=batch_size, max_quantization_loss=None)
  texts = bench.texts_batch(model_dir, batch_size, bench.FLAGS.seq_length)
  return lambda: loaded(texts)


def builders(bench):
  """{peer: (model_dir, batch_size) -> the callable running one batch}."""
  workers = {
      "ours_bf16": lambda d, b: ours_bf16_worker(bench, d, b, "bfloat16"),
      "ours_bf16_sep": lambda d, b: ours_bf16_worker(bench, d, b, "bfloat16", "separate_qkv"),
      "ours_bf16_mixed": lambda d, b: ours_bf16_worker(bench, d, b, "mixed_bfloat16"),
      "ours_amp": lambda d, b: ours_bf16_worker(bench, d, b, "amp"),
      "tflite_dynamic": lambda d, b: tflite_worker(bench, d, b, "dynamic"),
      "tflite_int8": lambda d, b: tflite_worker(bench, d, b, "int8"),
      "ov": lambda d, b: ov_worker(bench, d, b, "float32"),
      "ov_bf16": lambda d, b: ov_worker(bench, d, b, "bfloat16"),
      "ov_int8": lambda d, b: ov_worker(bench, d, b, "int8"),
      "ov_int8_f32": lambda d, b: ov_worker(bench, d, b, "int8", int8_hint="float32"),
      "ort_int8": lambda d, b: ort_int8_worker(bench, d, b),
      "torch_int8": lambda d, b: torch_int8_worker(bench, d, b)}
  workers.update({peer: (lambda d, b, p=peer: predictor_worker(bench, d, b, p))
                  for peer in PREDICTOR_PEERS})
  return workers
