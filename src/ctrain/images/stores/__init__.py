"""The image stores of ``ctrain pull``, one per kind of place an image goes, each a ``Store`` of
``base`` (the pull steps every store shares): ``sif`` (apptainer, singularity: a SIF file in the
cache), ``enroot`` (pyxis: a squashfs file), ``charliecloud`` (an image directory) and ``engine``
(docker, podman: the engine's own store). ``images.pull`` chooses one by runtime."""
