"""The jobs the scripts run: fine-tuning, pretraining, feature extraction."""
