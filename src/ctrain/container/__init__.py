"""Container runtimes (Apptainer, Singularity, Docker, Podman, host) behind one planner."""
