"""Images on disk: the cache directory, pulls and SIF records, builds, overlays, cache upkeep."""
