"""``ctrain bench``: the synthetic benchmark at several worker counts, and its report."""
