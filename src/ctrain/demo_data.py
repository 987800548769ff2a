"""Import path kept for training scripts and ``python -m ctrain.demo_data``: the module lives in
:mod:`ctrain.train.demo_data`."""

from ctrain.train.demo_data import *  # noqa: F403
from ctrain.train.demo_data import main

if __name__ == "__main__":
    main()
