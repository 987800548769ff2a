"""Preparing one rank for training: job environment, hostlists, mode choice, the per-rank plan,
and the exec. Never imports TensorFlow."""
