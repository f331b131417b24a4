"""The matmuls of one encoder forward pass and nothing else, in each framework: the ceiling.

A BERT forward pass at inference is ~95% matrix products (bench_cpu_inference's --profile: MatMul+BiasAdd 78%
of the time even before the GELU was fused). This bench times exactly those products, per layer
the fused QKV [T, H] x [H, 3H], the attention output [T, H] x [H, H] and the feed-forward
[T, H] x [H, I], [T, I] x [I, H] (T = batch x seq tokens), with distinct weights for each of
the L layers, as one call per forward pass, in every framework the CPU-inference bench compares
(TensorFlow with oneDNN on and off, TensorFlow's XLA, PyTorch, ONNX Runtime, numpy's BLAS). It
says how many GFLOP/s each framework's matrix kernel reaches on this CPU at the encoder's shapes,
and so how far any encoder built on that kernel can go: a ratio between two encoders cannot
exceed the ratio between their matmul kernels by much, when matmuls are nearly all the work.

The reduced-precision floors, the same products in the precision a reduced-precision path computes
them in: tf_bf16 (TensorFlow, oneDNN on, bfloat16 operands: what a --dtype=bfloat16 SavedModel's
matmuls cost), tflite_int8 (the products as a TensorFlow Lite model quantized as --quantize=int8
quantizes: int8 weights and inputs calibrated, each product's input quantized and its output
dequantized), ov_int8 (that float32 model quantized by NNCF and run by OpenVINO, as the openvino
backend's int8) and ort_int8 (ONNX Runtime's quantize_dynamic of the ort graph: MatMulInteger).

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_gemm.py --model=base --tokens=1024

prints a Markdown table (CPU and wall ms per forward pass's matmuls, GFLOP/s) and appends it to
benchmarks/<date>.md (--noappend: only prints). --peak (needs a C compiler, `cc`) also measures
the CPU's float32 FMA peak per core (bench/fma_peak.c: AVX2 fused multiply-adds and nothing else)
and gives each peer's rate as a share of it: how close the kernels already are to the hardware.
"""
import os
import subprocess
import sys
import tempfile

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags

from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_string("model", "base", "A bench_configs config: base (BERT-Base) or minilm sizes.",
                    flag_values=FLAGS)
flags.DEFINE_list("tokens", "1024", "Rows T of each product (batch x seq), one table each.",
                  flag_values=FLAGS)
flags.DEFINE_list("peers", "tf,tf_nodnn,tf_xla,torch,ort,numpy", "Frameworks (see the docstring).",
                  flag_values=FLAGS)
flags.DEFINE_integer("rounds", 5, "Timed rounds, peers taking turns.", flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the table to benchmarks/<date>.md.", flag_values=FLAGS)
flags.DEFINE_boolean("peak", False, "Also measure the CPU's FMA peak (bench/fma_peak.c; needs cc).",
                     flag_values=FLAGS)
flags.DEFINE_string("worker", None, "Internal: run this peer as a harness worker.",
                    flag_values=FLAGS)
flags.DEFINE_integer("rows", 1024, "Internal: the worker's T.", flag_values=FLAGS)

THREADS = 2
SIZES = {"base": (12, 768, 3072), "minilm": (6, 384, 1536)}


def shapes(model):
  """[(K, N)] of one forward pass's weights, layer by layer."""
  layers, hidden, inner = SIZES[model]
  return [(hidden, 3 * hidden), (hidden, hidden), (hidden, inner), (inner, hidden)] * layers


def flops(model, rows):
  return sum(2 * rows * k * n for k, n in shapes(model))


def operands(model, rows, seed=0):
  """The input [T, H] and the weights in order (std 1/sqrt(K): activations stay near 1)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(seed)
  x = rng.standard_normal((rows, SIZES[model][1])).astype(np.float32)
  weights = [(rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
             for k, n in shapes(model)]
  return x, weights


# Each worker chains the products as the encoder does, so that every one is needed and only the
# last result leaves the call: per layer qkv = x W_qkv [T, 3H]; a = qkv[:, :H] W_o [T, H];
# h = a W_1 [T, I]; x = h W_2 [T, H] (the slice stands for the heads' split).


def tf_worker(model, rows, jit):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x0, weights = operands(model, rows)
  hidden = SIZES[model][1]
  x0 = tf.constant(x0)
  w = [tf.Variable(v) for v in weights]

  @tf.function(jit_compile=jit or None)
  def forward():
    x = x0
    for i in range(0, len(w), 4):
      qkv = tf.matmul(x, w[i])  # [T, 3H]
      x = tf.matmul(tf.matmul(tf.matmul(qkv[:, :hidden], w[i + 1]), w[i + 2]), w[i + 3])
    return x  # [T, H]
  return lambda: forward().numpy()


def tf_bf16_worker(model, rows):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x0, weights = operands(model, rows)
  hidden = SIZES[model][1]
  x0 = tf.constant(x0, tf.bfloat16)
  w = [tf.Variable(tf.cast(v, tf.bfloat16)) for v in weights]

  @tf.function
  def forward():
    x = x0
    for i in range(0, len(w), 4):
      qkv = tf.matmul(x, w[i])  # [T, 3H] bfloat16
      x = tf.matmul(tf.matmul(tf.matmul(qkv[:, :hidden], w[i + 1]), w[i + 2]), w[i + 3])
    return tf.cast(x, tf.float32)  # [T, H]
  return lambda: forward().numpy()


def _products_converter(model, rows):
  """A TensorFlow Lite converter of the chained products (input "x" [T, H], output "y")."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  _, weights = operands(model, rows)
  hidden = SIZES[model][1]
  w = [tf.constant(v) for v in weights]

  @tf.function(input_signature=[tf.TensorSpec([None, hidden], tf.float32, "x")])
  def forward(x):
    for i in range(0, len(w), 4):
      qkv = tf.matmul(x, w[i])  # [T, 3H]
      x = tf.matmul(tf.matmul(tf.matmul(qkv[:, :hidden], w[i + 1]), w[i + 2]), w[i + 3])
    return {"y": x}  # [T, H]
  holder = tf.Module()
  holder.forward = forward
  return tf.lite.TFLiteConverter.from_concrete_functions([forward.get_concrete_function()],
                                                         holder)


def _calibration(model, rows, count=4):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(1)
  return [{"x": rng.standard_normal((rows, SIZES[model][1])).astype(np.float32)}
          for _ in range(count)]


def products_file(model, rows, quantize, work_dir):
  """The chained products as a .tflite file in work_dir (made once): float32, or quantize="int8"
  as tflite.convert(quantize="int8") quantizes (its INT8_OPS only, calibrated)."""
  from bert_tf.serving import tflite  # pylint: disable=g-import-not-at-top
  path = os.path.join(work_dir, f"gemm_{model}_{rows}_{quantize}.tflite")
  if not os.path.exists(path):
    converter = _products_converter(model, rows)
    blob = (tflite.calibrated(converter, lambda: iter(_calibration(model, rows)))
            if quantize == "int8" else converter.convert())
    os.makedirs(work_dir, exist_ok=True)
    with open(path + ".tmp", "wb") as f:
      f.write(blob)
    os.replace(path + ".tmp", path)
  return path


def tflite_int8_worker(model, rows, work_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  interpreter = tf.lite.Interpreter(model_path=products_file(model, rows, "int8", work_dir),
                                    num_threads=THREADS)
  run = interpreter.get_signature_runner()
  x0 = operands(model, rows)[0]
  return lambda: run(x=x0)["y"]


def ov_int8_worker(model, rows, work_dir):
  """NNCF's int8 model of the float32 products file, in OpenVINO (bfloat16 elsewhere where the
  CPU has it, as the openvino backend's int8)."""
  import nncf  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import openvino_runner  # pylint: disable=g-import-not-at-top
  core = openvino_runner.core()
  float_model = core.read_model(products_file(model, rows, "none", work_dir))
  name = float_model.inputs[0].get_any_name()
  quantized = nncf.quantize(float_model, nncf.Dataset([{name: c["x"]}
                                                       for c in _calibration(model, rows)]),
                            model_type=nncf.ModelType.TRANSFORMER)
  hint = openvino_runner.HINTS[openvino_runner.INT8_HINT if openvino_runner.cpu_has_bf16()
                               else "float32"]
  request = core.compile_model(quantized, "CPU", {
      "INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": THREADS,
      "PERFORMANCE_HINT": "LATENCY"}).create_infer_request()
  x0 = operands(model, rows)[0]
  return lambda: request.infer({name: x0})[0]


def torch_worker(model, rows):
  import torch  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(THREADS)
  x0, weights = operands(model, rows)
  hidden = SIZES[model][1]
  x0 = torch.from_numpy(x0)
  w = [torch.from_numpy(v) for v in weights]

  def run():
    with torch.inference_mode():
      x = x0
      for i in range(0, len(w), 4):
        x = x @ w[i]
        x = x[:, :hidden].contiguous() @ w[i + 1] @ w[i + 2] @ w[i + 3]
      return x.numpy()
  return run


def ort_worker(model, rows, int8=False):
  """ONNX Runtime on the products as an ONNX graph; int8: its quantize_dynamic (MatMulInteger
  with int8 weights, each input quantized on the fly)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from onnx import helper, numpy_helper, TensorProto  # pylint: disable=g-import-not-at-top
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  x0, weights = operands(model, rows)
  hidden = SIZES[model][1]
  initializers = [numpy_helper.from_array(v, f"w{i}") for i, v in enumerate(weights)]
  initializers += [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in
                   (("start", [0]), ("end", [hidden]), ("axis", [1]))]
  nodes, x = [], "x"
  for i in range(0, len(weights), 4):
    nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"qkv{i}"]),
              helper.make_node("Slice", [f"qkv{i}", "start", "end", "axis"], [f"q{i}"]),
              helper.make_node("MatMul", [f"q{i}", f"w{i + 1}"], [f"a{i}"]),
              helper.make_node("MatMul", [f"a{i}", f"w{i + 2}"], [f"h{i}"]),
              helper.make_node("MatMul", [f"h{i}", f"w{i + 3}"], [f"x{i}"])]
    x = f"x{i}"
  graph = helper.make_graph(
      nodes, "gemms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, hidden])],
      [helper.make_tensor_value_info(x, TensorProto.FLOAT, [rows, hidden])], initializers)
  onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  data = onnx_model.SerializeToString()
  if int8:
    from onnxruntime.quantization import quantize_dynamic  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory() as tmp:
      with open(os.path.join(tmp, "f32.onnx"), "wb") as f:
        f.write(data)
      quantize_dynamic(os.path.join(tmp, "f32.onnx"), os.path.join(tmp, "int8.onnx"))
      with open(os.path.join(tmp, "int8.onnx"), "rb") as f:
        data = f.read()
  options = ort.SessionOptions()
  options.intra_op_num_threads = THREADS
  options.add_session_config_entry("session.intra_op.allow_spinning", "0")
  session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
  return lambda: session.run(None, {"x": x0})[0]


def numpy_worker(model, rows):
  x0, weights = operands(model, rows)
  hidden = SIZES[model][1]

  def run():
    x = x0
    for i in range(0, len(weights), 4):
      x = (x @ weights[i])[:, :hidden] @ weights[i + 1] @ weights[i + 2] @ weights[i + 3]
    return x
  return run


WORK_DIR = os.path.join(tempfile.gettempdir(), "bert_tf_gemm")  # the products' .tflite files


def build_worker(peer, model, rows, work_dir=WORK_DIR):
  builders = {"tf": lambda: tf_worker(model, rows, False),
              "tf_bf16": lambda: tf_bf16_worker(model, rows),
              "tflite_int8": lambda: tflite_int8_worker(model, rows, work_dir),
              "ov_int8": lambda: ov_int8_worker(model, rows, work_dir),
              "ort_int8": lambda: ort_worker(model, rows, int8=True),
              "tf_nodnn": lambda: tf_worker(model, rows, False),
              "tf_xla": lambda: tf_worker(model, rows, True),
              "torch": lambda: torch_worker(model, rows),
              "ort": lambda: ort_worker(model, rows),
              "numpy": lambda: numpy_worker(model, rows)}
  if peer not in builders:
    raise ValueError(f"--peers: unknown peer {peer!r}; expected one of {sorted(builders)}")
  return builders[peer]()


def worker_env(peer):
  return {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
          "OMP_NUM_THREADS": str(THREADS), "OPENBLAS_NUM_THREADS": str(THREADS),
          "MKL_NUM_THREADS": str(THREADS), "OMP_WAIT_POLICY": "PASSIVE",
          "TF_ENABLE_ONEDNN_OPTS": "1" if peer in ("tf", "tf_bf16") else "0"}


def fma_peak(runs=3, iterations=200_000_000):
  """[(threads, best GFLOP/s per core)] for 1 and THREADS threads, from bench/fma_peak.c."""
  source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fma_peak.c")
  with tempfile.TemporaryDirectory() as tmp:
    binary = os.path.join(tmp, "fma_peak")
    subprocess.run(["cc", "-O3", "-mavx2", "-mfma", "-pthread", source, "-o", binary],
                   check=True)
    return [(threads, max(float(subprocess.run([binary, str(threads), str(iterations)],
                                               check=True, capture_output=True,
                                               text=True).stdout) for _ in range(runs)))
            for threads in (1, THREADS)]


def time_rows(rows, peak=None):
  workers = [harness.Worker(peer, [sys.executable, os.path.abspath(__file__),
                                   f"--worker={peer}", f"--model={FLAGS.model}",
                                   f"--rows={rows}"], env=worker_env(peer))
             for peer in FLAGS.peers]
  try:
    load = harness.load_average()
    samples = harness.interleaved(workers, FLAGS.rounds)
  finally:
    for w in workers:
      w.close()
  gflop = flops(FLAGS.model, rows) / 1e9
  lines = [f"\n{FLAGS.model} sizes, T = {rows} rows, {gflop:.1f} GFLOP a pass, {FLAGS.rounds} "
           f"rounds (load average {load} before, {harness.load_average()} after):\n"]
  lines += harness.table(samples, unit="ms / pass")
  share = " | share of the FMA peak (per core)" if peak else ""
  lines += ["", f"| peer | GFLOP per CPU-second (one core's rate) | GFLOP/s by wall time{share} |",
            "|---|---:|---:|" + ("---:|" if peak else "")]
  for name, s in samples.items():
    cpu, wall = harness.summary(s["cpu"])[0], harness.summary(s["wall"])[0]
    share = f" | {100 * gflop / cpu / peak:.0f}%" if peak else ""
    lines.append(f"| {name} | {gflop / cpu:.1f} | {gflop / wall:.1f}{share} |")
  print("\n".join(lines), flush=True)
  return lines


def main(argv):
  del argv
  if FLAGS.worker:
    harness.serve(build_worker(FLAGS.worker, FLAGS.model, FLAGS.rows))
    return
  lines = [f"\n## The encoder's matmuls alone (bench/bench_gemm.py), {harness.utc_now()}\n",
           "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_gemm.py" +
           "".join(f" {a}" for a in sys.argv[1:]) + "`  ",
           f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  ",
           "Each peer a process of its own with 2 threads (spinning off), taking turns; a call "
           "is every matmul of one forward pass (distinct weights per layer, chained as the encoder chains them)."]
  peak = None
  if FLAGS.peak:
    peaks = fma_peak()
    peak = peaks[-1][1]
    lines.append("\nThe CPU's float32 FMA peak (bench/fma_peak.c, best of 3): " + ", ".join(
        f"{gflops:.1f} GFLOP/s per core with {threads} thread{'s' * (threads > 1)}"
        for threads, gflops in peaks) + ".")
    print(lines[-1], flush=True)
  for rows in FLAGS.tokens:
    lines += time_rows(int(rows), peak)
  if FLAGS.append:
    harness.append_history("\n".join(lines) + "\n")


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)
