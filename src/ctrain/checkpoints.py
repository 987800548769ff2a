"""Import path kept for training scripts: the module lives in :mod:`ctrain.train.checkpoints`."""

from ctrain.train.checkpoints import *  # noqa: F403
from ctrain.train.checkpoints import REQUEUE_EXIT_CODE as REQUEUE_EXIT_CODE
