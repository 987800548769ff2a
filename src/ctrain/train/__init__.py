"""What runs inside the training script: callbacks, checkpoints, preemption, datasets."""
