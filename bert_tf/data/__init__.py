"""Task data: read each raw format, make features, post-process predictions, compute the metric."""
