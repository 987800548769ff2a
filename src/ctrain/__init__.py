"""ctrain: GPU TensorFlow + Horovod training in containers on Slurm clusters."""

__version__ = "0.1.0"
