"""Serving: SavedModels on raw text, the predictor, TensorFlow Lite."""
