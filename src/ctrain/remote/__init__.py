"""Clusters reached over SSH (``ctrain remote``, ``ctrain job ... --on NAME``): the named
clusters (``registry``), the OpenSSH and rsync commands through one master connection
(``commands``), and what a session does with them (``session``)."""
