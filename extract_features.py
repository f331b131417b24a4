"""Extract pre-computed feature vectors from BERT (the original's extract_features.py).

Reads one sentence a line (or `sentence A ||| sentence B`) and writes one JSON line per input line:
{"linex_index": i, "features": [{"token": ..., "layers": [{"index": -1, "values": [...]}, ...]}]};
with --pooling, one vector a line: {"linex_index": i, "embedding": [...]}, or a float32 .npy array
when --output_file ends in .npy.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.io import machine  # noqa: E402

# oneDNN's fused kernels where they win on this CPU (TensorFlow leaves them off without AVX-512),
# before TensorFlow reads the setting, at its import; a user's own setting stands. The encoder
# stays in TensorFlow: writing the JSON lines takes 3-6x its time, so TensorFlow Lite's gain at
# batch 32 could not repay converting the model (BENCHMARKS.md).
machine.prefer_onednn()

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.jobs import feature_extraction  # noqa: E402


def define_flags():
  flags.DEFINE_string("input_file", None, "Text to read: one sentence a line, or `sentence A ||| "
                      "sentence B`.")
  flags.DEFINE_string("output_file", None, "Where to write one JSON line of features per input "
                      "line; with --pooling, of its vector, or all vectors as one float32 "
                      "[lines, hidden_size] array when the name ends in .npy.")
  flags.DEFINE_string("layers", feature_extraction.DEFAULT_LAYERS, "Comma-separated encoder "
                      "layers to write (-1 is the last); with --pooling, the one layer to pool "
                      "(default the last).")
  flags.DEFINE_enum("pooling", None, list(feature_extraction.POOLINGS), "One vector a line, of "
                    "its tokens' vectors: cls (the [CLS] token's), mean, max or mean_sqrt_len "
                    "(their sum over the square root of their number), as sentence-transformers "
                    "pools; none: every token's, as the original. Default: the model's own (a "
                    "sentence-transformers directory's 1_Pooling), else none.")
  flags.DEFINE_bool("normalize", None, "With --pooling: unit-length vectors (their dot products "
                    "are cosines). Default: the model's own (a sentence-transformers directory's "
                    "2_Normalize), else false.")
  bert_flags.define_model_flags()
  bert_flags.define_max_seq_length_flag()
  flags.DEFINE_integer("batch_size", 32, "Batch size for predictions.")
  flags.DEFINE_bool("use_one_hot_embeddings", False, "If True, tf.one_hot will be used for "
                    "embedding lookups, otherwise tf.nn.embedding_lookup will be used. On TPUs, "
                    "this should be True since it is much faster.")
  bert_flags.define_runtime_flags(training=False)
  flags.adopt_module_key_flags(bert_flags)


def main(_):
  values = bert_flags.values()
  feature_extraction.run(bert_flags.options_of(feature_extraction.ExtractOptions, values),
                         bert_flags.runtime_options(values))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input_file", "init_checkpoint", "output_file")
  app.run(main)
