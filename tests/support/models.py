"""In-memory models: the original release's variable names and shapes, every weight random, and
the task heads' tiny config with inputs padded to any length."""
import numpy as np
import tensorflow as tf

from support.tiny import bert_config

# The task heads' tiny encoder (test_heads, test_bilstm_head, test_left_to_right_finetuning).
HEADS_CONFIG = bert_config(50, max_position_embeddings=64, type_vocab_size=2)


def original_encoder_shapes(c):
  """Name -> shape of the original release's encoder variables."""
  h, i = c.hidden_size, c.intermediate_size
  shapes = {
      "bert/embeddings/word_embeddings": [c.vocab_size, h],
      "bert/embeddings/token_type_embeddings": [c.type_vocab_size, h],
      "bert/embeddings/position_embeddings": [c.max_position_embeddings, h],
      "bert/embeddings/LayerNorm/gamma": [h], "bert/embeddings/LayerNorm/beta": [h],
      "bert/pooler/dense/kernel": [h, h], "bert/pooler/dense/bias": [h],
  }
  for n in range(c.num_hidden_layers):
    layer = f"bert/encoder/layer_{n}/"
    for dense in ("attention/self/query", "attention/self/key", "attention/self/value",
                  "attention/output/dense"):
      shapes[layer + dense + "/kernel"] = [h, h]
      shapes[layer + dense + "/bias"] = [h]
    shapes[layer + "intermediate/dense/kernel"] = [h, i]
    shapes[layer + "intermediate/dense/bias"] = [i]
    shapes[layer + "output/dense/kernel"] = [i, h]
    shapes[layer + "output/dense/bias"] = [h]
    for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
      shapes[layer + norm + "/gamma"] = [h]
      shapes[layer + norm + "/beta"] = [h]
  return shapes


def head_shapes(c):
  h = c.hidden_size
  return {"cls/predictions/transform/dense/kernel": [h, h],
          "cls/predictions/transform/dense/bias": [h],
          "cls/predictions/transform/LayerNorm/gamma": [h],
          "cls/predictions/transform/LayerNorm/beta": [h],
          "cls/predictions/output_bias": [c.vocab_size],
          "cls/seq_relationship/output_weights": [2, h],
          "cls/seq_relationship/output_bias": [2]}


def randomize(model, seed=0):
  """Every weight random (LayerNorm and biases too), so that parity checks each of them."""
  rng = np.random.RandomState(seed)
  for v in model.variables:
    value = rng.normal(0.0, 0.1, v.shape)
    if v.name.endswith("gamma:0"):
      value += 1.0
    v.assign(value.astype(np.float32))
  return model


def random_inputs(lengths, total, seed=0):
  """A batch of random ids, real for `lengths` positions, padded (with random ids, which must not
  matter) to `total`."""
  rng = np.random.RandomState(seed)
  mask = (np.arange(total)[None, :] < np.array(lengths)[:, None]).astype(np.int32)
  ids = rng.randint(1, 50, size=[len(lengths), total]).astype(np.int32)
  return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
          "segment_ids": tf.constant(np.zeros_like(ids))}
