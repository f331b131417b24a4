"""Reduced-precision exports: a bfloat16 SavedModel (--dtype=bfloat16) and int8 models
(--tflite --quantize=dynamic|int8), each checked against float32 before it is written.

An export asked for a reduced precision builds the task's float32 server beside the one it
exports, and every reduced-precision path it can serve from the version (guard.path_key):

  savedmodel/bfloat16   the SavedModel itself, with --dtype=bfloat16 (its matmul weights stored in
                        bfloat16: export.build_server)
  tflite/int8           TensorFlow Lite's quantized model (--quantize: tflite.convert's dynamic or
                        calibrated int8), export.TFLITE_INT8_FILE
  openvino/bfloat16     OpenVINO on model.tflite in bfloat16, where openvino is installed and the
                        CPU has bfloat16 instructions (nothing more is written: a compile option)
  openvino/int8         NNCF's int8 model of model.tflite, with --quantize=int8 where nncf is
                        installed too, export.OPENVINO_INT8_FILES

Each is scored against float32 on the task's check rows (bert_tf.serving.guard) and recorded in
guard.QUANTIZATION_FILE, which the predictor reads at load. int8 is calibrated on
--calibration_examples training examples drawn with --calibration_seed, tokenized by the server.
A path losing more than --max_quantization_loss is not written. When that path is the one the flags
asked for (the SavedModel's bfloat16, the --quantize model), the version is still written, in
float32 (its SavedModel, and model.tflite with --tflite), and the export ends with the one-line
refusal (a BertTfError naming both figures and that version); a refused OpenVINO path is only
recorded. TF Serving's layout is unchanged: the SavedModel and variables/ as every export's, the
rest in assets.extra/.
"""
import contextlib
import json
import logging as logging_lib
import os
import tempfile

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.serving import export
from bert_tf.serving import guard
from bert_tf.serving import openvino_runner
from bert_tf.serving import predictor
from bert_tf.serving import tflite
from bert_tf.training import precision


def write(task, options, config, checkpoint, server_options):
  """bert_tf.drivers.exporting.export_from_options for a reduced precision (see the module docstring); returns the
  version directory. task: the registered Task class; options: ExportOptions or a run's
  FinetuneOptions; checkpoint: the weights to export."""
  dtype = precision.resolve(options.dtype, warn=False, config=config,
                            seq_length=options.max_seq_length)
  if dtype == "float32" and options.quantize == "none":  # --dtype=auto's float32: nothing to check
    return export.export(task, config, options.vocab_file, options.do_lower_case, checkpoint,
                         options.export_dir, options.max_seq_length, tflite=options.tflite,
                         **server_options)
  check = guard.check_set(task, options.task, options.quantization_check_file)
  build = lambda d: export.build_server(  # noqa: E731
      task, config, options.vocab_file, options.do_lower_case, checkpoint,
      options.max_seq_length, dtype=d, **server_options)
  reference = build("float32")
  server = build(dtype) if dtype != "float32" else reference
  extra = (export.tflite_files(task, reference.model, options.vocab_file, options.do_lower_case,
                               options.max_seq_length, **server_options)
           if options.tflite else {})
  with tempfile.TemporaryDirectory(prefix="bert_tf_reduced_") as tmp, _quiet_retracing():
    candidates, calibration = _candidates(task, options, dtype, server, reference, extra, tmp,
                                          server_options)
    doc = _check(check, reference, candidates, options.max_quantization_loss)
  doc.update(calibration=calibration, quantize=options.quantize, savedmodel_dtype=dtype)
  refused = [key for key in candidates if not doc["paths"][key]["accepted"]]
  for key, (_, files) in candidates.items():
    if key not in refused:
      extra.update(files)
  asked = [key for key in refused if not key.startswith("openvino/")]
  if guard.path_key("savedmodel", dtype) in asked:
    server, doc["savedmodel_dtype"] = reference, "float32"  # the float32 version stays
  extra[guard.QUANTIZATION_FILE] = json.dumps(doc, indent=2).encode()
  version = export.save(server, options.export_dir, extra)
  for key in refused:
    logging.warning("%s: not exported", guard.refusal(key, doc))
  if asked:
    raise BertTfError(f"--max_quantization_loss: {guard.refusal(asked[0], doc)}: not exported; "
                      f"{version} holds the float32 model")
  return version


class _NoRetracingWarning(logging_lib.Filter):
  def filter(self, record):
    return "triggered tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def _quiet_retracing():
  """Without TensorFlow's warning that a server's functions were traced again: each candidate is
  a server of its own, traced once, which TensorFlow counts as retracing one function."""
  quiet = _NoRetracingWarning()
  tf.get_logger().addFilter(quiet)
  try:
    yield
  finally:
    tf.get_logger().removeFilter(quiet)


def check_inputs(task, options):
  """What a reduced-precision export will read (its check rows; int8's calibration examples)
  is there: a run script's check before it trains. An explicit --dtype=bfloat16 or --quantize
  only (auto is resolved when the run starts)."""
  if options.dtype not in ("bfloat16", "float16") and options.quantize == "none":
    return
  guard.check_set(task, options.task, options.quantization_check_file)
  if options.quantize == "int8":
    guard.calibration_inputs(task, options.task, 1, options.calibration_seed)


def _candidates(task, options, dtype, server, reference, extra, tmp, server_options):
  """({path key: (its server, {export file: bytes} it adds)}, what calibrated int8 or None)."""
  candidates, calibration, rows = {}, None, None

  def _server_of(runner):  # the task's server around TensorFlow Lite's or OpenVINO's runner
    return export.make_server(task, reference.tokenizer, tflite.ServingModel(runner),
                              reference.max_seq_length, **server_options)

  if dtype != "float32":
    candidates[guard.path_key("savedmodel", dtype)] = (server, {})
  if options.quantize == "int8":
    source, inputs = guard.calibration_inputs(task, options.task, options.calibration_examples,
                                              options.calibration_seed)
    rows = guard.model_inputs(predictor.for_server(reference), inputs)
    calibration = {"source": source, "examples": len(next(iter(inputs.values()))),
                   "rows": len(rows), "seed": options.calibration_seed}
  if options.quantize != "none":
    blob = tflite.convert(reference.model, quantize=options.quantize, calibration=rows)
    candidates[guard.path_key("tflite", "int8")] = (
        _server_of(tflite.Runner(blob)), {export.TFLITE_INT8_FILE: blob})
  if options.tflite and openvino_runner.available():
    tflite_path = os.path.join(tmp, "model.tflite")
    with open(tflite_path, "wb") as f:
      f.write(extra[export.TFLITE_FILE])
    if openvino_runner.cpu_has_bf16():
      candidates[guard.path_key("openvino", "bfloat16")] = (
          _server_of(openvino_runner.Runner(tflite_path, "bfloat16")), {})
    if options.quantize == "int8" and openvino_runner.nncf_available():
      files = openvino_runner.quantize_int8(tflite_path, rows)
      for name, data in files.items():
        with open(os.path.join(tmp, name), "wb") as f:
          f.write(data)
      runner = openvino_runner.Runner(tflite_path, ir_path=os.path.join(tmp, "model.xml"))
      candidates[guard.path_key("openvino", "int8")] = (
          _server_of(runner),
          {export.OPENVINO_INT8_FILES[name]: data for name, data in files.items()})
  return candidates, calibration


def _check(check, reference, candidates, max_loss):
  """The quantization.json document of the candidates scored against the reference."""
  logging.info("Checking %s against float32 on %d %s of %s", ", ".join(
      guard.describe_path(key) for key in candidates), check.count, check.what, check.source)
  base = guard.reference(check, predictor.for_server(reference))
  records = {}
  for key, (server, files) in candidates.items():
    backend, dtype = key.split("/")
    results = predictor.for_server(server, backend=backend)(**check.inputs)
    record = guard.score(check, base, results, max_loss)
    records[key] = dict(record, backend=backend, dtype=dtype, files=sorted(files))
  return guard.document(check, base["scores"], records, max_loss)
