"""The interconnect, named: ``ctrain doctor --network``.

rdma (the host's RDMA devices from sysfs, and what this container sees of them), nccl (NCCL's
``NCCL_DEBUG=INFO`` lines parsed: version, network, transport per rank), advice (the pure
verdict: one line per check, each problem with its fix) and check (the one impure part: reads
the files, runs the small NCCL allreduce in a child process, hands the facts to advice).
Nothing here imports the CLI, doctor.py, container/ or images/.
"""
