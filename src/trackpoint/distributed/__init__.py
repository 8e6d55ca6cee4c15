"""Several processes saving one TensorFlow checkpoint (placeholder, filled below)."""
