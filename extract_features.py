"""Extract pre-computed feature vectors from BERT (the original's extract_features.py).

Reads one sentence a line (or `sentence A ||| sentence B`) and writes one JSON line per input line:
{"linex_index": i, "features": [{"token": ..., "layers": [{"index": -1, "values": [...]}, ...]}]}.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

from bert_tf import checkpoints  # noqa: E402
from bert_tf import cli  # noqa: E402
from bert_tf import common_flags  # noqa: E402
from bert_tf import feature_extraction  # noqa: E402
from bert_tf import tokenization  # noqa: E402
from bert_tf.config import BertConfig  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "")
flags.DEFINE_string("output_file", None, "")
flags.DEFINE_string("layers", "-1,-2,-3,-4", "")
flags.DEFINE_string(
    "bert_config_file", None,
    "The config json file corresponding to the pre-trained BERT model. "
    "This specifies the model architecture.")
flags.DEFINE_integer(
    "max_seq_length", 128,
    "The maximum total input sequence length after WordPiece tokenization. "
    "Sequences longer than this will be truncated, and sequences shorter "
    "than this will be padded.")
flags.DEFINE_string("init_checkpoint", None,
                    "Initial checkpoint (usually from a pre-trained BERT model).")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool(
    "do_lower_case", True,
    "Whether to lower case the input text. Should be True for uncased "
    "models and False for cased models.")
flags.DEFINE_integer("batch_size", 32, "Batch size for predictions.")
flags.DEFINE_bool("use_one_hot_embeddings", False, "Accepted for compatibility; has no effect.")
common_flags.define_runtime_flags()


def main(_):
  logging.set_verbosity(logging.INFO)
  if FLAGS.max_seq_length < 3:
    raise BertTfError(f"--max_seq_length: must be at least 3, got {FLAGS.max_seq_length}")
  strategy = common_flags.runtime_from_flags()
  bert_config = BertConfig.from_json_file(FLAGS.bert_config_file)
  layer_indexes = feature_extraction.parse_layers(FLAGS.layers, bert_config.num_hidden_layers)
  tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  tokenizer = tokenization.FullTokenizer(vocab_file=FLAGS.vocab_file,
                                         do_lower_case=FLAGS.do_lower_case)
  examples = feature_extraction.read_examples(FLAGS.input_file)
  features = feature_extraction.convert_examples_to_features(examples, FLAGS.max_seq_length,
                                                             tokenizer)
  with strategy.scope():
    extractor = feature_extraction.FeatureExtractor(bert_config, layer_indexes)
    checkpoints.init_from_checkpoint(extractor, FLAGS.init_checkpoint)
  feature_extraction.write_features(FLAGS.output_file, extractor, features, FLAGS.batch_size)
  logging.info("Wrote features of %d lines to %s", len(features), FLAGS.output_file)


if __name__ == "__main__":
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("vocab_file")
  flags.mark_flag_as_required("bert_config_file")
  flags.mark_flag_as_required("init_checkpoint")
  flags.mark_flag_as_required("output_file")
  cli.run(main)
