"""The model: its config, the one encoder, activations, heads, objectives, and weights in and out."""
