"""The model configs the benchmarks share: the small config (L=4, H=256, A=4) and BERT-Base, as
BertConfig keyword arguments (vocab 30,522, two segment types), and a writer for their
bert_config.json.

Used by bench_packing.py and bench_ablations.py. It imports bert_tf.config only when writing, so a
benchmark's planning code can import it without TensorFlow.
"""
CONFIGS = {
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
}
VOCAB_SIZE = 30522  # bert-base-uncased (../shared/data/vocab)


def write_config(model, path, vocab_size=VOCAB_SIZE):
  """Writes CONFIGS[model] as a bert_config.json at path; returns path."""
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  BertConfig(vocab_size=vocab_size, type_vocab_size=2, **CONFIGS[model]).to_json_file(path)
  return path
