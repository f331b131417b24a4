"""Text to token ids: the original's tokenizer, the same in TensorFlow ops, vocabularies and their learning."""
