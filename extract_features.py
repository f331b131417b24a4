"""Extract pre-computed feature vectors from BERT (the original's extract_features.py).

Reads one sentence a line (or `sentence A ||| sentence B`) and writes one JSON line per input line:
{"linex_index": i, "features": [{"token": ..., "layers": [{"index": -1, "values": [...]}, ...]}]}.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.training import machine  # noqa: E402

# oneDNN's fused kernels where they win on this CPU (TensorFlow leaves them off without AVX-512),
# before TensorFlow reads the setting, at its import; a user's own setting stands. The encoder
# stays in TensorFlow: writing the JSON lines takes 3-6x its time, so TensorFlow Lite's gain at
# batch 32 could not repay converting the model (BENCHMARKS.md).
machine.prefer_onednn()

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.drivers import feature_extraction  # noqa: E402
from bert_tf.training.options import RuntimeOptions  # noqa: E402


def define_flags():
  bert_flags.define_flags(feature_extraction.ExtractOptions)
  bert_flags.define_flags(RuntimeOptions, lacks=RuntimeOptions.TRAINING)
  flags.adopt_module_key_flags(bert_flags)


def main(_):
  values = bert_flags.values()
  feature_extraction.run(bert_flags.build(feature_extraction.ExtractOptions, values),
                         bert_flags.build(RuntimeOptions, values))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input_file", "init_checkpoint", "output_file")
  app.run(main)
